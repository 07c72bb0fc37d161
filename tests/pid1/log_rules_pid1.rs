//! Issue 26 item 1 at PID 1: `--log-rules` on the real binary. A hang rule stops a silent child
//! and says why everywhere; the child's stdout still reaches rankvisor's byte for byte and at once;
//! a stdout nobody reads holds up neither signals nor the exit; without rules the child's stdout
//! is rankvisor's own descriptor; a bad rule is refused with 64.

use crate::common;
use common::*;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

const HANG: &str = r#"[{"name": "Step", "logPattern": ".*step.*", "expectedRecurringFrequencyInSeconds": 1}]"#;

fn base(dir: &TestDir) -> Rv {
    Rv::new(dir).args(["--node-health", "off", "--http-addr", "off", "--termination-log", &dir.file("termination-log")])
}

#[test]
fn a_child_silent_after_its_start_line_is_stopped_as_hanging_and_restarted_under_on_failure() {
    let dir = TestDir::new("lr-hang");
    let rules = dir.write("rules.json", HANG);
    let out = base(&dir)
        .args(["--log-rules".as_ref(), rules.as_os_str()])
        .args(["--restart-policy", "OnFailure", "--backoff-limit", "1", "--backoff-initial", "20ms"])
        .sh(&format!(
            "echo run >> {}; echo \"step 1 of run $RANKVISOR_RESTART_COUNT\"; exec sleep 30",
            q(&dir.file("runs"))
        ))
        .run();
    out.assert_code(143);
    assert_eq!(read(&dir.join("runs")).lines().count(), 2, "stopped, restarted once, stopped again");
    // The snapshot taken before the stop names the process, which is not Python (tests/pid1/stacks.rs).
    let msg = read(&dir.join("termination-log"));
    let (head, stacks) = msg.split_once("; stacks: pid ").unwrap_or_else(|| panic!("no stacks: {msg}"));
    assert_eq!(
        head,
        "log rule LogHang_Step (last matched line: \"step 1 of run 1\"), then child killed by signal 15 (SIGTERM)"
    );
    assert!(stacks.contains(" (sleep) S (sleeping)"), "{msg}");
    assert!(stacks.ends_with(": not a Python process; gave up after 1 restarts (backoff limit 1)\n"), "{msg}");
    assert_eq!(out.stdout, "step 1 of run 0\nstep 1 of run 1\n", "the child's lines reached rankvisor's stdout");
    let last = out.last_status();
    assert_eq!((last["state"].as_str(), last["last_exit_reason"].as_str()), (Some("Failed"), Some("LogRule")));
    assert_eq!(last["log_rule"]["reason"], "LogHang_Step");
    assert_eq!(last["log_rule"]["line"], "step 1 of run 1");
    assert!(
        out.statuses.iter().any(|s| s["log_rules"][0] == serde_json::json!({"rule": "Step", "state": "HANGING"})),
        "the per-rule state was published: {:?}",
        out.statuses
    );
    assert!(out.stderr.contains("LogHang_Step"), "{}", out.stderr);
}

#[test]
fn the_childs_stdout_is_relayed_unchanged_and_without_delay_with_rules_on() {
    let dir = TestDir::new("lr-relay");
    let rules = dir.write("rules.json", HANG);
    let go = dir.file("go");
    // A partial line, then (once the test saw it arrive) the rest, binary bytes, a last line
    // without its newline.
    let script = format!(
        "printf 'partial'; while [ ! -e {go} ]; do sleep 0.01; done; \
         printf ' rest\\nstep \\000\\377\\376 binary\\r\\n'; printf 'no newline'",
        go = q(&go)
    );
    let running = base(&dir)
        .args(["--log-rules".as_ref(), rules.as_os_str()])
        .args(["--restart-policy", "Never"])
        .sh(&script)
        .spawn();
    wait_until("the partial line on rankvisor's stdout", || {
        (std::fs::read(dir.join("stdout")).ok()? == b"partial").then_some(())
    });
    std::fs::write(&go, "").unwrap();
    let out = running.wait();
    out.assert_code(0);
    let bytes = std::fs::read(dir.join("stdout")).unwrap();
    assert_eq!(bytes, b"partial rest\nstep \x00\xff\xfe binary\r\nno newline".as_slice());
}

#[test]
fn without_rules_the_child_has_rankvisors_own_stdout_and_with_rules_a_pipe() {
    let dir = TestDir::new("lr-fd");
    let link = dir.file("link");
    let out = base(&dir).sh(&format!("l=$(readlink /proc/$$/fd/1); echo \"$l\" > {}", q(&link))).run();
    out.assert_code(0);
    assert_eq!(read(&dir.join("link")).trim_end(), dir.file("stdout"), "the same open file as rankvisor's fd 1");
    let rules = dir.write("rules.json", HANG);
    let out = base(&dir)
        .args(["--log-rules".as_ref(), rules.as_os_str()])
        .sh(&format!("l=$(readlink /proc/$$/fd/1); echo \"$l\" > {}", q(&link)))
        .run();
    out.assert_code(0);
    assert!(read(&dir.join("link")).starts_with("pipe:["), "with rules: the relay's pipe");
}

#[test]
fn a_bad_rule_file_exits_64_naming_the_rule_and_field() {
    let dir = TestDir::new("lr-bad");
    let rules = dir.write(
        "rules.yaml",
        "- name: Step\n  logPattern: '.*step.*'\n- name: Loss\n  logPattern: 'loss (\\d+)'\n  metricThreshold: 2\n  operator: ge\n",
    );
    let out = base(&dir)
        .env("RANKVISOR_LOG_RULES", rules.to_str().unwrap())
        .sh(&format!("touch {}", q(&dir.file("ran"))))
        .run();
    out.assert_code(64);
    assert!(!dir.join("ran").exists(), "the child must not start");
    let want = "log rule #2 (\"Loss\"): field operator: \"ge\"";
    assert!(out.stderr.contains(want) && out.stderr.contains("RANKVISOR_LOG_RULES"), "{}", out.stderr);
    assert!(read(&dir.join("termination-log")).contains(want));
    let missing = base(&dir).args(["--log-rules", &dir.file("nope.json")]).sh("true").run();
    missing.assert_code(64);
    assert!(missing.stderr.contains("nope.json: cannot read it"), "{}", missing.stderr);
}

#[test]
fn a_rules_file_that_is_no_bounded_regular_file_exits_64_at_once() {
    let dir = TestDir::new("lr-bounds");
    // A FIFO nobody writes to (a blocking open would wait forever, every signal blocked), an
    // endless device, a file over 1 MiB, more rules than the limit.
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let many: Vec<String> = (0..101).map(|i| format!(r#"{{"name": "r{i}", "logPattern": ".*step"}}"#)).collect();
    let cases = [
        (fifo.to_str().unwrap().to_string(), "fifo: cannot read it: a FIFO (named pipe), expected a regular file"),
        ("/dev/zero".to_string(), "/dev/zero: cannot read it: a character device"),
        (dir.write("big.json", &" ".repeat(2 << 20)).to_str().unwrap().to_string(), "big.json: larger than 1 MiB"),
        (
            dir.write("many.json", &format!("[{}]", many.join(","))).to_str().unwrap().to_string(),
            "101 rules: more than 100",
        ),
        // A pattern whose automaton would take minutes over one 64 KiB line (issue 34).
        (
            dir.write("slow.json", r#"[{"name": "Loss", "logPattern": "(?:loss|[a-z]{1,6000}|\\s)*?loss (\\d+)"}]"#)
                .to_str()
                .unwrap()
                .to_string(),
            "too complex: its automaton has 12050 states, more than 2048",
        ),
    ];
    for (path, want) in cases {
        let out = base(&dir).args(["--log-rules", &path]).sh(&format!("touch {}", q(&dir.file("ran")))).run();
        out.assert_code(64);
        assert!(out.stderr.contains(want), "{path}: {}", out.stderr);
        assert!(!dir.join("ran").exists(), "the child must not start");
    }
}

#[test]
fn a_stdout_nobody_reads_holds_up_neither_signals_nor_the_exit() {
    let dir = TestDir::new("lr-blocked");
    // A rule that never fires: only the TERM below stops the child.
    let rules = dir.write("rules.json", r#"[{"name": "Err", "logPattern": ".*ERROR.*", "faultOnMatch": true}]"#);
    let termed = dir.file("termed");
    let trapped = dir.file("trapped");
    // rankvisor's stdout: a pipe that is never read, soon full.
    let (keep_open, stdout) = nix::unistd::pipe().unwrap();
    let mut rv = rankvisor()
        .args(["--node-health", "off", "--http-addr", "off", "--restart-policy", "Never", "--log-rules"])
        .arg(&rules)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "trap 'echo > {}; exit 7' TERM; touch {}; yes step & while :; do sleep 0.01; done",
            q(&termed),
            q(&trapped)
        ))
        .stdout(std::process::Stdio::from(stdout))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The shell's TERM handler is in place (a TERM before it would kill the shell outright), then
    // the relay thread is blocked on the full stdout pipe (64 KiB, less what a last line of `yes`
    // would not fit), the child (yes) on its own.
    wait_until("the child's TERM handler to be set", || dir.join("trapped").exists().then_some(()));
    wait_until("rankvisor's stdout pipe to fill", || {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int to the pointer given.
        let ok = unsafe { libc::ioctl(keep_open.as_raw_fd(), libc::FIONREAD, &mut queued) } == 0;
        (ok && queued >= 65536 - 16).then_some(())
    });
    let started = std::time::Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(rv.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_until("the child's TERM handler", || dir.join("termed").exists().then_some(()));
    let status = wait_until("rankvisor's exit", || rv.try_wait().unwrap());
    assert_eq!(status.code(), Some(7), "the child's own exit code");
    // The child's exit waits at most 1 s for the blocked relay, rankvisor's exit at most 5 s more.
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "exit held up: {:?}", started.elapsed());
}

/// Issue 34 item 2: at the child's exit its output is drained through the rules without the event
/// loop waiting. A grandchild keeps the child's stdout open and floods it into a stdout nobody
/// reads, so the relay thread is stuck; meanwhile `/healthz` answers before the exit is decided,
/// and a TERM is acted on (the status says Stopping: the child's group, grandchild included, gets
/// it) before the drain's deadline. The old loop waited on the relay thread for a second here:
/// the exit was decided before `/healthz` was served and the TERM came too late to stop anything.
#[test]
fn the_drain_after_a_childs_exit_holds_up_neither_healthz_nor_a_term() {
    let dir = TestDir::new("lr-drain");
    let rules = dir.write("rules.json", r#"[{"name": "Err", "logPattern": ".*ERROR.*", "faultOnMatch": true}]"#);
    let (pidfile, go, fifo) = (dir.file("child-pid"), dir.file("go"), dir.file("stdout-fifo"));
    nix::unistd::mkfifo(fifo.as_str(), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // rankvisor's stdout: a FIFO the test holds open and never reads, soon full.
    let reader =
        std::fs::File::options().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).expect("the FIFO's read end");
    let port = free_port();
    let running = Rv::new(&dir)
        .shell_wrapper(&format!("exec >{}", q(&fifo)))
        .args(["--node-health", "off", "--restart-policy", "Never", "--http-addr", &format!("127.0.0.1:{port}")])
        .args(["--log-rules".as_ref(), rules.as_os_str()])
        .sh(&format!("yes flood & echo $$ > {}; while [ ! -e {} ]; do sleep 0.01; done; exit 0", q(&pidfile), q(&go)))
        .spawn();
    wait_until("rankvisor's stdout to fill", || {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int to the pointer given.
        let ok = unsafe { libc::ioctl(reader.as_raw_fd(), libc::FIONREAD, &mut queued) } == 0;
        (ok && queued >= 65536 - 16).then_some(())
    });
    let child: i32 = wait_until("the child's pid", || read(&dir.join("child-pid")).trim().parse().ok());
    std::fs::write(&go, "").unwrap();
    // Reaped (a zombie keeps its /proc entry until then): the drain is under way.
    let proc_entry = std::path::PathBuf::from(format!("/proc/{child}"));
    wait_until("the child to be reaped", || (!proc_entry.exists()).then_some(()));
    let healthz = http_get(port, "/healthz");
    let before = running.statuses();
    let decided = before.last().map(|s| s["state"].clone());
    assert_eq!(healthz.map(|h| h.0), Some(200), "/healthz answers during the drain");
    assert_eq!(decided, Some("Running".into()), "answered before the exit was decided");
    let term = std::time::Instant::now();
    running.signal(libc::SIGTERM);
    let stopping = wait_until("the TERM acted on", || running.statuses().get(before.len()).cloned());
    let reaction = term.elapsed();
    eprintln!("TERM during the drain: status {} after {reaction:?}", stopping["state"]);
    assert_eq!(stopping["state"], "Stopping", "the TERM stopped the child's group before its exit was decided");
    let out = running.wait();
    out.assert_code(0);
    drop(reader);
}
