//! Issue 3, items 2 and 4: the kubelet-style backoff measured from the children's own clocks (the
//! first restart after a crash at once, then the initial delay doubling; issue 12), its reset after
//! healthy running, and a TERM during a long backoff ending rankvisor at once.

mod common;
use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A child that stamps its start and end (CLOCK_REALTIME, as seconds) and exits with 1; the run
/// with restart count `long_run` first stays up for `long_secs`.
fn stamping_child(dir: &TestDir, long_run: Option<u32>, long_secs: &str) -> String {
    let stamps = q(&dir.file("stamps"));
    let stay = match long_run {
        Some(n) => format!("[ \"$RANKVISOR_RESTART_COUNT\" = {n} ] && sleep {long_secs}; "),
        None => String::new(),
    };
    format!("echo start $(date +%s.%N) >> {stamps}; {stay}echo end $(date +%s.%N) >> {stamps}; exit 1")
}

/// The gaps between each run's end and the next run's start, in seconds.
fn gaps(dir: &TestDir) -> Vec<f64> {
    let text = read(&dir.join("stamps"));
    let stamps: Vec<(String, f64)> = text
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    stamps.windows(2).filter(|w| w[0].0 == "end" && w[1].0 == "start").map(|w| w[1].1 - w[0].1).collect()
}

/// Seconds of the day of a JSON log line's RFC 3339 UTC timestamp.
fn log_time(line: &Value) -> Option<f64> {
    let ts = line["timestamp"].as_str()?;
    let time = ts.split_once('T')?.1.trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

/// The same gaps as rankvisor logged them (child exited -> next child started), for diagnosis.
fn logged_gaps(stderr: &str) -> Vec<f64> {
    let events: Vec<(bool, f64)> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            let msg = v["fields"]["message"].as_str()?.to_string();
            let t = log_time(&v)?;
            if msg == "child started" {
                Some((true, t))
            } else if msg.starts_with("child exited") || msg.starts_with("child killed") {
                Some((false, t))
            } else {
                None
            }
        })
        .collect();
    events.windows(2).filter(|w| !w[0].0 && w[1].0).map(|w| (w[1].1 - w[0].1 + 86400.0) % 86400.0).collect()
}

fn assert_delays(measured: &[f64], expected: &[f64], out: &Finished) {
    println!("expected delays {expected:?} s, measured by the children {measured:.3?} s");
    println!("rankvisor's own log: {:.3?} s", logged_gaps(&out.stderr));
    assert_eq!(measured.len(), expected.len(), "number of restarts");
    for (m, e) in measured.iter().zip(expected) {
        // The delay cannot be shorter than configured; the upper bound only catches a delay that
        // is clearly the wrong step (generous: a loaded 2-core machine delays process starts).
        assert!(
            *m >= 0.9 * e && *m <= e + 2.0,
            "delay {m:.3} s, expected about {e} s (all: {measured:.3?}; rankvisor logged {:.3?})",
            logged_gaps(&out.stderr)
        );
    }
}

#[test]
fn delays_double_from_initial_up_to_max() {
    let dir = TestDir::new("backoff-seq");
    let out = Rv::new(&dir)
        .args(["--backoff-initial", "200ms", "--backoff-max", "800ms", "--backoff-limit", "4"])
        .args(["--log-format", "json"])
        .sh(&stamping_child(&dir, None, "0"))
        .run();
    out.assert_code(1);
    assert_delays(&gaps(&dir), &[0.0, 0.2, 0.4, 0.8], &out);
}

#[test]
fn healthy_running_resets_the_delay() {
    // Runs 0..2 fail at once (restarts after 0, 0.2, 0.4 s); run 3 is up for 1.2 s, longer than
    // --backoff-reset, so the restart after it is immediate again instead of after 0.8 s, then 0.2 s.
    let dir = TestDir::new("backoff-reset");
    let out = Rv::new(&dir)
        .args([
            "--backoff-initial",
            "200ms",
            "--backoff-max",
            "1600ms",
            "--backoff-reset",
            "1s",
            "--backoff-limit",
            "5",
        ])
        .args(["--log-format", "json"])
        .sh(&stamping_child(&dir, Some(3), "1.2"))
        .run();
    out.assert_code(1);
    let g = gaps(&dir);
    assert_delays(&g, &[0.0, 0.2, 0.4, 0.0, 0.2], &out);
    assert!(g[3] < 0.9 * 0.8, "without the reset the delay would have been 0.8 s: {:.3}", g[3]);
}

#[test]
fn a_short_run_does_not_reset_the_delay() {
    // Negative control for the reset: run 3 stays up for 0.5 s, shorter than --backoff-reset, so the
    // delay after it keeps doubling (0.4 s, not an immediate restart).
    let dir = TestDir::new("backoff-noreset");
    let out = Rv::new(&dir)
        .args(["--backoff-initial", "100ms", "--backoff-max", "800ms", "--backoff-reset", "5s", "--backoff-limit", "4"])
        .args(["--log-format", "json"])
        .sh(&stamping_child(&dir, Some(3), "0.5"))
        .run();
    out.assert_code(1);
    assert_delays(&gaps(&dir), &[0.0, 0.1, 0.2, 0.4], &out);
}

#[test]
fn term_during_a_10s_backoff_exits_promptly_with_the_last_status() {
    let dir = TestDir::new("backoff-term");
    let run = Rv::new(&dir)
        .pid1()
        .args(["--backoff-initial", "10s", "--termination-log", &dir.file("termination-log")])
        .sh("exit 5")
        .spawn();
    run.wait_status("state Restarting", |s| s["state"] == "Restarting");
    let t0 = Instant::now();
    run.signal(libc::SIGTERM);
    let out = run.wait();
    let took = t0.elapsed();
    println!("TERM during a 10s backoff -> exit in {took:?} (target 100ms)");
    out.assert_code(5);
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let last = out.last_status();
    assert_eq!(last["state"], "Failed");
    assert_eq!(last["restart_count"], 2, "the first restart ran at once, the second was pending");
    assert_eq!(
        read(&dir.join("termination-log")),
        "stopped by SIGTERM while waiting to restart; last child exited with code 5\n"
    );
}

#[test]
fn zero_initial_backoff_restarts_at_once() {
    let dir = TestDir::new("backoff-zero");
    let out = Rv::new(&dir)
        .args(["--backoff-initial", "0s", "--backoff-max", "0s", "--backoff-limit", "3"])
        .sh(&format!("echo run >> {}; exit 2", q(&dir.file("runs"))))
        .run();
    out.assert_code(2);
    assert_eq!(read(&dir.join("runs")).lines().count(), 4);
}
