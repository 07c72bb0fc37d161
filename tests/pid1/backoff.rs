//! Issue 3, items 2 and 4: the kubelet-style backoff measured from the children's own clocks (the
//! first restart after a crash at once, then the initial delay doubling; issue 12), its reset after
//! healthy running, and a TERM during a long backoff ending rankvisor at once.

use crate::common;
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

/// Why `measured` (seconds between one run's end and the next run's start, as the children saw
/// them) is not the backoff schedule `expected` whose smallest non-zero step is `initial`, or Ok.
///
/// Each delay must lie in `[0.95 e, e + initial / 2)`: never shorter than configured, and at most
/// half a step longer, so the neighbouring schedule (the next step is at least `e + initial`) never
/// fits. An expected 0 (the kubelet's immediate first restart) must therefore be under
/// `initial / 2`. And each pair of consecutive non-zero delays must keep the schedule's ratio
/// (doubling: about 2) within 30%, so an off-by-one in the doubling (0.4, 0.4, 0.8) fails even if
/// a window were loose. The slack is for process start-up on a loaded 2-core machine.
fn check_delays(measured: &[f64], expected: &[f64], initial: f64) -> Result<(), String> {
    if measured.len() != expected.len() {
        return Err(format!("{} restarts, expected {}", measured.len(), expected.len()));
    }
    for (i, (m, e)) in measured.iter().zip(expected).enumerate() {
        let (lo, hi) = (0.95 * e, e + initial / 2.0);
        if !(lo..hi).contains(m) {
            return Err(format!("delay {i} is {m:.3} s, expected {e} s (within [{lo:.3}, {hi:.3}))"));
        }
    }
    for i in 1..expected.len() {
        let (e0, e1, m0, m1) = (expected[i - 1], expected[i], measured[i - 1], measured[i]);
        if e0 > 0.0 && e1 > 0.0 {
            let (want, got) = (e1 / e0, m1 / m0);
            if !(0.7 * want..1.3 * want).contains(&got) {
                return Err(format!("delays {} and {i}: ratio {got:.2}, expected about {want}", i - 1));
            }
        }
    }
    Ok(())
}

fn assert_delays(measured: &[f64], expected: &[f64], initial: f64, out: &Finished) {
    println!("expected delays {expected:?} s, measured by the children {measured:.3?} s");
    println!("rankvisor's own log: {:.3?} s", logged_gaps(&out.stderr));
    if let Err(why) = check_delays(measured, expected, initial) {
        panic!("{why} (all: {measured:.3?}; rankvisor logged {:.3?})", logged_gaps(&out.stderr));
    }
}

/// The bounds fail for the bugs the tests below are named after: a lost immediate first restart
/// (the schedule shifted by one), a doubling off by one, a delay shorter than configured, and a
/// step too many or too few; and they accept the schedule with a start-up overhead.
#[test]
fn the_delay_bounds_fail_for_a_shifted_or_miscounted_schedule() {
    let expected = [0.0, 0.4, 0.8, 1.6];
    let ok = |m: &[f64]| check_delays(m, &expected, 0.4);
    assert_eq!(ok(&[0.012, 0.43, 0.85, 1.62]), Ok(()));
    assert_eq!(ok(&[0.15, 0.55, 0.95, 1.75]), Ok(()), "150 ms of start-up on a loaded machine");
    // No immediate first restart: the kubelet's sequence shifted by one.
    let shifted = ok(&[0.4, 0.8, 1.6, 1.6]).unwrap_err();
    assert!(shifted.starts_with("delay 0 is 0.400 s"), "{shifted}");
    // The first doubling skipped (off by one): the ratio and the window both say so.
    let miscounted = ok(&[0.01, 0.4, 0.4, 0.8]).unwrap_err();
    assert!(miscounted.starts_with("delay 2 is 0.400 s"), "{miscounted}");
    assert!(check_delays(&[0.01, 0.4, 0.4], &[0.0, 0.4, 0.4], 0.4).is_ok(), "a constant schedule is its own");
    // With windows loosened (a step of 0.8 s), the ratio alone still catches a doubling that stalls.
    let ratio = check_delays(&[0.01, 0.7, 0.8], &[0.0, 0.4, 0.8], 0.8).unwrap_err();
    assert!(ratio.contains("ratio 1.14, expected about 2"), "{ratio}");
    assert!(ok(&[0.01, 0.3, 0.8, 1.6]).unwrap_err().starts_with("delay 1"), "shorter than configured");
    assert!(ok(&[0.01, 0.4, 0.8]).unwrap_err().contains("3 restarts, expected 4"));
    // The bound this replaced (`0.9 e <= m <= e + 2`) accepted the shifted sequence.
    let old = |m: &[f64]| m.iter().zip(&expected).all(|(m, e)| *m >= 0.9 * e && *m <= e + 2.0);
    assert!(old(&[0.4, 0.8, 1.6, 1.6]));
}

#[test]
fn delays_double_from_initial_up_to_max() {
    let dir = TestDir::new("backoff-seq");
    let out = Rv::new(&dir)
        .args(["--backoff-initial", "400ms", "--backoff-max", "1600ms", "--backoff-limit", "4"])
        .args(["--log-format", "json"])
        .sh(&stamping_child(&dir, None, "0"))
        .run();
    out.assert_code(1);
    assert_delays(&gaps(&dir), &[0.0, 0.4, 0.8, 1.6], 0.4, &out);
}

/// A run with the delay doubling from 400 ms up to 3.2 s, `--backoff-reset reset`, at most
/// `limit` restarts, whose run 3 stays up for `long_secs`.
fn run_with_a_long_run_3(name: &str, reset: &str, limit: &str, long_secs: &str) -> (TestDir, Finished) {
    let dir = TestDir::new(name);
    let out = Rv::new(&dir)
        .args(["--backoff-initial", "400ms", "--backoff-max", "3200ms", "--backoff-reset", reset])
        .args(["--backoff-limit", limit, "--log-format", "json"])
        .sh(&stamping_child(&dir, Some(3), long_secs))
        .run();
    out.assert_code(1);
    (dir, out)
}

#[test]
fn healthy_running_resets_the_delay() {
    // Runs 0..2 fail at once (restarts after 0, 0.4, 0.8 s); run 3 is up for 1.2 s, longer than
    // --backoff-reset, so the restart after it is immediate again instead of after 1.6 s, then 0.4 s.
    let (dir, out) = run_with_a_long_run_3("backoff-reset", "1s", "5", "1.2");
    assert_delays(&gaps(&dir), &[0.0, 0.4, 0.8, 0.0, 0.4], 0.4, &out);
}

#[test]
fn a_short_run_does_not_reset_the_delay() {
    // Negative control for the reset: run 3 stays up for 0.5 s, shorter than --backoff-reset, so the
    // delay after it keeps doubling (1.6 s, not an immediate restart).
    let (dir, out) = run_with_a_long_run_3("backoff-noreset", "5s", "4", "0.5");
    assert_delays(&gaps(&dir), &[0.0, 0.4, 0.8, 1.6], 0.4, &out);
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
