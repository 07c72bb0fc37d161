//! Issue 15, "the right exit status, always": configuration found wrong is exit 64 at once, with
//! a message naming the option or variable and the value, and the child never starts; signals
//! other processes send reach the child instead of killing rankvisor.

use crate::common;
use common::*;
use std::os::unix::ffi::OsStrExt;

/// rankvisor with `args` and `env`, a child that marks that it ran; the run must be refused.
fn refused(name: &str, args: &[&str], env: &[(&str, &str)], parts: &[&str]) {
    let dir = TestDir::new(name);
    let mut rv = Rv::new(&dir).args(["--node-health", "off", "--http-addr", "off"]).args(args.iter().copied());
    for (k, v) in env {
        rv = rv.env(k, v);
    }
    let out = rv.sh(&format!("touch {}", q(&dir.file("ran")))).run();
    out.assert_code(64);
    assert!(!dir.join("ran").exists(), "the child must not start");
    for p in parts {
        assert!(out.stderr.contains(p), "stderr should name {p:?}:\n{}", out.stderr);
    }
}

#[test]
fn a_zero_report_interval_is_refused_not_a_panic_after_the_start() {
    refused(
        "cfg-interval",
        &["--report-url", "http://127.0.0.1:9/", "--report-interval", "0s"],
        &[],
        &["--report-interval", "0s"],
    );
}

#[test]
fn a_negative_duration_names_the_option_and_the_value() {
    refused("cfg-negative", &["--backoff-initial", "-1s"], &[], &["--backoff-initial", "-1s"]);
}

#[test]
fn an_empty_job_name_is_refused() {
    refused("cfg-jobname", &["--job-name", ""], &[], &["--job-name", "\"\""]);
}

#[test]
fn a_master_addr_that_is_no_host_is_refused_at_once() {
    for bad in ["http://m:1", "999.999.999.999"] {
        let env = [("MASTER_ADDR", bad), ("MASTER_PORT", "23456"), ("WORLD_SIZE", "2"), ("RANK", "1")];
        refused("cfg-addr", &[], &env, &["MASTER_ADDR", bad, "host name or IP address"]);
    }
}

#[test]
fn replica_counts_above_the_maximum_are_refused() {
    refused("cfg-world", &[], &[("WORLD_SIZE", "4294967295"), ("RANK", "0")], &["WORLD_SIZE", "4294967295"]);
    refused("cfg-nnodes", &[], &[("PET_NNODES", "999999999")], &["PET_NNODES", "999999999"]);
}

#[test]
fn a_non_utf8_variable_is_named_never_unset() {
    for var in ["RANKVISOR_JOB_TOKEN", "RANK", "RANKVISOR_RESTART_POLICY"] {
        let dir = TestDir::new("cfg-utf8");
        let out = std::process::Command::new(common::bin())
            .args(["--node-health", "off", "--http-addr", "off", "--", "touch"])
            .arg(dir.join("ran"))
            .env(var, std::ffi::OsStr::from_bytes(b"\xff1"))
            .env("WORLD_SIZE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{var}: {stderr}");
        assert!(stderr.contains(&format!("{var}=\"\\xff1\" is not valid UTF-8")), "{var}: {stderr}");
        assert!(!dir.join("ran").exists());
    }
}

/// Not as PID 1, `kill -ABRT rankvisor` (or another fatal signal, or SIGPIPE) sent by another
/// process used to kill rankvisor and orphan the child: now the child gets it.
#[test]
fn fatal_signals_sent_by_others_reach_the_child() {
    for (sig, name) in [(libc::SIGABRT, "ABRT"), (libc::SIGSEGV, "SEGV"), (libc::SIGPIPE, "PIPE")] {
        let dir = TestDir::new("cfg-fatal");
        let got = dir.file("got");
        let ready = dir.file("ready");
        let run = Rv::new(&dir)
            .args(["--node-health", "off", "--http-addr", "off", "--restart-policy", "Never"])
            .sh(&format!(
                "trap 'echo {name} > {g}; exit 7' {name}; touch {r}; while :; do sleep 0.05; done",
                g = q(&got),
                r = q(&ready)
            ))
            .spawn();
        wait_file(&dir.join("ready"));
        run.signal(sig);
        let out = run.wait();
        assert_eq!(out.code(), 7, "SIG{name}: rankvisor lives on and returns the child's status: {}", out.stderr);
        assert_eq!(read(&dir.join("got")).trim(), name);
    }
}

/// The rendezvous secret is rankvisor's: the training program and its descendants never see it.
#[test]
fn the_job_token_is_removed_from_the_childs_environment() {
    let dir = TestDir::new("cfg-token");
    let out = Rv::new(&dir)
        .args(["--node-health", "off", "--http-addr", "off"])
        .env("RANKVISOR_JOB_TOKEN", "s3cret")
        .sh(&format!("env > {}", q(&dir.file("env"))))
        .run();
    out.assert_code(0);
    let env = read(&dir.join("env"));
    assert!(env.contains("RANKVISOR_RESTART_COUNT=0"), "the child's env was captured: {env}");
    assert!(!env.contains("s3cret") && !env.contains("RANKVISOR_JOB_TOKEN"), "{env}");
}

#[test]
fn numbers_are_plain_digits() {
    refused("cfg-plus", &["--backoff-limit", "+1"], &[], &["--backoff-limit", "+1", "plain decimal digits"]);
    refused("cfg-minus", &["--rendezvous-port", "-5"], &[], &["--rendezvous-port", "-5"]);
}

/// A FIFO as the heartbeat file would block the loop in open(2): refused before the start.
#[test]
fn a_fifo_heartbeat_file_is_refused() {
    let dir = TestDir::new("cfg-fifo");
    let fifo = dir.join("hb");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo takes a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(
        "cfg-fifo-run",
        &["--heartbeat-file", &fifo.to_string_lossy()],
        &[],
        &["--heartbeat-file", "FIFO", "regular file"],
    );
}

/// Run `rv` with the `panic-after-spawn` failpoint and a termination log in `dir`; it must fail,
/// and the log must say the hook ran: an internal error, and the child's group killed.
fn panic_after_spawn(dir: &TestDir, rv: Rv) -> Finished {
    let out = rv
        .args(["--node-health", "off", "--http-addr", "off", "--termination-log", &dir.file("termination-log")])
        .env("RANKVISOR_TEST_FAILPOINT", "panic-after-spawn")
        .run();
    assert_ne!(out.code, Some(0), "rankvisor did not fail: {out:?}");
    let log = read(&dir.join("termination-log"));
    assert!(log.starts_with("rankvisor failed: internal error"), "{log}");
    assert!(log.contains("failpoint panic-after-spawn"), "{log}");
    assert!(log.contains("the child's process group was killed"), "{log}");
    out
}

/// Whatever the path to a fatal end, the child is not left running unsupervised: a panic (here
/// forced by a debug-build failpoint right after the start) kills the child's group first and
/// writes why to the termination log.
#[test]
fn a_panic_kills_the_childs_group_and_says_why() {
    let dir = TestDir::new("cfg-panic");
    let pidfile = dir.file("child-pid");
    let out = panic_after_spawn(&dir, Rv::new(&dir).sh(&format!("echo $$ > {}; exec sleep 60", q(&pidfile))));
    // rankvisor logged the child's pid before it panicked: that process is gone.
    let pid: i32 = out
        .stderr
        .split("child started pid=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no child pid logged: {}", out.stderr));
    wait_until("the child is gone", || (!alive(pid)).then_some(()));
    let _ = pidfile;
}

/// The same in the image's lean build (release, panic = "abort", std rebuilt without the backtrace
/// symbolizer: `images/build.sh`), built with the `failpoints` feature by scripts/test.sh
/// (RANKVISOR_TEST_LEAN_FAILPOINTS_BIN), as PID 1 of a PID namespace: the hook kills the child's
/// group and writes the termination log, then the process aborts (no unwinding, no backtrace).
#[test]
fn a_panic_in_the_lean_build_runs_the_hook_and_aborts() {
    let bin = std::env::var("RANKVISOR_TEST_LEAN_FAILPOINTS_BIN").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| {
        panic!(
            "RANKVISOR_TEST_LEAN_FAILPOINTS_BIN is not set: scripts/test.sh builds it with \
             `RANKVISOR_FEATURES=failpoints bash images/build.sh --binary-only`"
        )
    });
    assert!(std::path::Path::new(&bin).is_file(), "RANKVISOR_TEST_LEAN_FAILPOINTS_BIN={bin}: no such file");
    let dir = TestDir::new("cfg-panic-lean");
    let lean = Rv::new(&dir).binary(&bin).pid1().env("RUST_BACKTRACE", "full").sh("exec sleep 60");
    let out = panic_after_spawn(&dir, lean);
    assert!(out.stderr.contains("[rankvisor] ERROR rankvisor failed: internal error"), "{}", out.stderr);
    // panic = "abort" without the symbolizer: no backtrace even when asked for one.
    assert!(!out.stderr.contains("stack backtrace:"), "a backtrace was printed:\n{}", out.stderr);
}

/// Issue 24 item 6: a bad value set through the environment (as a pod manifest sets it) names the
/// variable, for every option that has one, and the termination log says the same; a flag
/// given on the command line is named as the flag; when both hold the bad value, both are named.
#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let env_only: [(&str, &str, &str); 4] = [
        ("RANKVISOR_BACKOFF_LIMIT", "abc", "--backoff-limit"),
        ("RANKVISOR_RESTART_POLICY", "Sometimes", "--restart-policy"),
        ("RANKVISOR_GRACE_PERIOD", "soon", "--grace-period"),
        ("RANKVISOR_LOG_LEVEL", "loud", "--log-level"),
    ];
    for (var, value, flag) in env_only {
        let dir = TestDir::new("cfg-env-var");
        let out = Rv::new(&dir)
            .args(["--node-health", "off", "--http-addr", "off"])
            .env("RANKVISOR_TERMINATION_LOG", &dir.file("termination-log"))
            .env(var, value)
            .sh(&format!("touch {}", q(&dir.file("ran"))))
            .run();
        out.assert_code(64);
        assert!(!dir.join("ran").exists(), "the child must not start");
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(first.contains(var) && first.contains(&format!("'{value}'")), "{var}: {}", out.stderr);
        assert!(first.contains(flag), "the flag it stands for: {}", out.stderr);
        let log = read(&dir.join("termination-log"));
        assert!(log.contains(var), "the termination log names {var}: {log:?}");
    }
    // The flag alone: named as the flag, no variable.
    let dir = TestDir::new("cfg-flag");
    let out = Rv::new(&dir).args(["--node-health", "off", "--backoff-limit", "abc"]).sh("true").run();
    out.assert_code(64);
    assert!(out.stderr.contains("'--backoff-limit <BACKOFF_LIMIT>'"), "{}", out.stderr);
    assert!(!out.stderr.contains("RANKVISOR_BACKOFF_LIMIT"), "{}", out.stderr);
    // Both hold it: both are named.
    let out = Rv::new(&dir)
        .args(["--node-health", "off", "--backoff-limit", "abc"])
        .env("RANKVISOR_BACKOFF_LIMIT", "abc")
        .sh("true")
        .run();
    out.assert_code(64);
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(first.contains("--backoff-limit") && first.contains("RANKVISOR_BACKOFF_LIMIT"), "{}", out.stderr);
    // The dry run's options too.
    let out = std::process::Command::new(common::bin())
        .args(["dry-run", "/nonexistent/job.yaml"])
        .env("RANKVISOR_TIMEOUT", "soon")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("RANKVISOR_TIMEOUT") && stderr.contains("--timeout"), "{stderr}");
}
