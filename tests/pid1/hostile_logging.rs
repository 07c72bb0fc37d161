//! Logging never blocks supervision (issue 15): rankvisor's stderr into a pipe that nobody reads
//! must not stop restarts or signal handling; lost lines are counted.

use crate::common;

use common::{kill_tree, read, wait_until_for, TestDir};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

/// Bytes waiting in the pipe behind `fd`.
fn queued(fd: i32) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD: {}", std::io::Error::last_os_error());
    usize::try_from(n).unwrap_or(0)
}

fn starts(path: &std::path::Path) -> usize {
    read(path).lines().count()
}

/// rankvisor restarting `sh -c script` every `backoff` (no limit reached), logging at debug level
/// into a stderr pipe nobody reads, once 60 KB wait in that pipe: rankvisor and the pipe's end.
fn with_stderr_pipe_full(backoff: &str, script: &str) -> (Child, ChildStderr) {
    let mut child = Command::new(common::bin())
        .args(["--backoff-initial", backoff, "--backoff-max", backoff, "--backoff-limit", "1000000"])
        .args(["--node-health", "off", "--http-addr", "off", "--log-level", "debug"])
        .args(["--", "sh", "-c", script])
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rankvisor");
    let pipe = child.stderr.take().expect("stderr pipe");
    wait_until_for("rankvisor's stderr pipe to fill", Duration::from_secs(60), || {
        (queued(pipe.as_raw_fd()) >= 60 * 1024).then_some(())
    });
    (child, pipe)
}

/// Regression: once 64 KB of logs piled up, the loop blocked in write(2): no restarts, TERM ignored.
#[test]
fn an_undrained_stderr_pipe_blocks_neither_restarts_nor_term() {
    let dir = TestDir::new("hostile-log-pipe");
    let starts_file = dir.join("starts");
    let script = format!("echo x >> {}; exit 1", common::q(&starts_file.to_string_lossy()));
    // Never read: the pipe stays full.
    let (mut child, pipe) = with_stderr_pipe_full("10ms", &script);
    let at_full = starts(&starts_file);
    let more = at_full + 20;
    let restarted = wait_until_for_opt(Duration::from_secs(20), || starts(&starts_file) >= more);
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break Some(s);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if status.is_none() {
        kill_tree(child.id() as i32);
        let _ = child.wait();
    }
    assert!(
        restarted,
        "restarts stopped once the stderr pipe was full ({} starts, {at_full} when full)",
        starts(&starts_file)
    );
    let status = status.expect("rankvisor did not exit within 20 s of TERM with its stderr pipe full");
    // TERM while the child runs: 143 (the child's end); during a backoff: the last child's exit, 1.
    assert!(matches!((status.code(), status.signal()), (Some(143 | 1), None)), "exit status after TERM: {status:?}");
    drop(pipe);
}

fn wait_until_for_opt(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// Lost lines are counted and reported once the pipe drains.
#[test]
fn dropped_lines_are_reported_once_stderr_drains() {
    use std::io::{BufRead, BufReader};
    let dir = TestDir::new("hostile-log-drain");
    let starts_file = dir.join("starts");
    let done = dir.join("done");
    // Fails, so rankvisor restarts it, until the test creates `done`.
    let script = format!(
        "echo x >> {s}; [ -e {d} ] && exit 0; exit 1",
        s = common::q(&starts_file.to_string_lossy()),
        d = common::q(&done.to_string_lossy())
    );
    let (mut child, pipe) = with_stderr_pipe_full("1ms", &script);
    // Let lines be dropped: wait for many more restarts while the pipe stays full.
    let full = starts(&starts_file);
    assert!(wait_until_for_opt(Duration::from_secs(60), || starts(&starts_file) >= full + 300), "restarts continue");
    // Drain the pipe, line by line, while the child still fails and restarts.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let report = loop {
        match rx.recv_timeout(common::HANG_GUARD) {
            Ok(l) if l.contains("log lines dropped: stderr was not being read") => break l,
            Ok(l) => seen.push(l),
            Err(e) => panic!("no dropped-lines report within {:?} ({e}); last lines:\n{}", common::HANG_GUARD, {
                let from = seen.len().saturating_sub(20);
                seen[from..].join("\n")
            }),
        }
    };
    // The report came while the child was still restarting; now let it succeed.
    std::fs::write(&done, "").expect("create the done file");
    let status = child.wait().expect("wait");
    drop(rx);
    reader.join().expect("the reader thread");
    assert_eq!(status.code(), Some(0), "the child finally succeeded");
    let n: u64 = report.split_whitespace().nth(2).and_then(|n| n.parse().ok()).expect("a count");
    assert!(n > 0, "{report}");
}

/// The threads of process `pid` (from /proc).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count()).unwrap_or(0)
}

/// A line goes straight to stderr when stderr takes it without waiting (a pipe with room, a file,
/// `/dev/null`): no writer thread is started, so rankvisor is one thread, like tini. Through a
/// pipe the lines arrive whole and in order. A pipe nobody drains still goes through the writer
/// thread (the two tests above), and so does a terminal (`tests/pid1/spawn_paths.rs` has a pty).
#[test]
fn a_pipe_with_room_or_a_file_is_written_without_a_writer_thread() {
    let dir = TestDir::new("log-direct");
    let file = std::fs::File::create(dir.join("stderr")).expect("stderr file");
    for (what, stderr) in [("a pipe", Stdio::piped()), ("a file", Stdio::from(file))] {
        let ready = dir.join(&format!("ready-{}", what.replace(' ', "-")));
        let mut child = Command::new(common::bin())
            .args(["--node-health", "off", "--http-addr", "off", "--log-level", "debug"])
            .args(["--", "sh", "-c", &format!("touch {}; exec sleep 30", common::q(&ready.to_string_lossy()))])
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn rankvisor");
        wait_until_for(&format!("the child to start ({what})"), Duration::from_secs(30), || {
            ready.exists().then_some(())
        });
        // The child runs: rankvisor logged its start-up lines (at debug level, a dozen) before it.
        assert_eq!(threads(child.id()), 1, "rankvisor with its stderr on {what} has one thread");
        // SAFETY: kill sends TERM to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let mut err = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            std::io::Read::read_to_string(&mut pipe, &mut err).expect("read stderr");
        } else {
            child.wait().expect("wait");
            err = read(&dir.join("stderr"));
        }
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(143), "TERM: the child's 128+15 ({what}):\n{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert!(lines.len() >= 5, "rankvisor's lines ({what}):\n{err}");
        assert!(lines.iter().all(|l| l.starts_with("[rankvisor] ")), "every line whole ({what}):\n{err}");
        let started = lines.iter().position(|l| l.contains("child started")).expect("child started");
        let exited = lines.iter().position(|l| l.contains("state from=Stopping")).expect("a final state");
        assert!(started < exited, "in order ({what}):\n{err}");
    }
}
