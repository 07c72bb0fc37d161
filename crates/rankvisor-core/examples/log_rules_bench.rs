//! Log-rule evaluation alone (scripts/bench-log-rules.sh runs it): 10 rules in the AWS examples'
//! style, 100-byte lines (one in four a training step that several rules match, the others
//! noise), on one core, one by one to `Evaluator::on_line` (the relay thread's entry and the
//! replay's), then the same with scripts/bench-log-relay.sh's line only.
//! Prints lines/s and bytes/s of each, by the thread's CPU time (what one core does, whatever else
//! the machine runs) and by the wall clock. `--write-lines DIR` first writes the lines it evaluates
//! to DIR/mixed.log and DIR/relay.log (4,096 each), for the HyperPod agent's evaluator to run
//! beside it (scripts/bench/log_rules_agent.py).

use rankvisor_core::logrules::{rules_from_value, Evaluator};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};
use tokio::time::Instant;

fn main() {
    // The 10 rules scripts/bench-log-relay.sh uses too.
    let rules: serde_json::Value =
        serde_json::from_str(include_str!("../../../scripts/bench/log-rules-10.json")).expect("the rules file is JSON");
    let set = Arc::new(rules_from_value(&rules).expect("valid rules"));
    let pad = |s: String| {
        let mut s = s;
        while s.len() < 99 {
            s.push(' ');
        }
        s.truncate(99);
        s.push('\n');
        s
    };
    let lines: Vec<String> = (0..4096)
        .map(|i| match i % 4 {
            0 => pad(format!("[default0]:2025-06-17 05:51:29,300 [INFO] __main__: Train Epoch: 5 [{i}/60000] training_loss_step 1.{i}")),
            1 => pad(format!("[default0]:2025-06-17 05:51:29,301 [INFO] data: fetched shard {i} from s3://bucket/prefix/part-{i:05}.tar")),
            2 => pad(format!("[default0]:2025-06-17 05:51:29,302 [INFO] perf: step {i} speed: 1{:02} TFLOPs, mem 61.2 GiB", i % 100)),
            _ => pad(format!("[default0]:2025-06-17 05:51:29,303 [DEBUG] nccl: allreduce {i} bytes=16777216 algo=ring proto=simple")),
        })
        .collect();
    let bytes_per_pass: usize = lines.iter().map(String::len).sum();
    // scripts/bench-log-relay.sh's line, every line: three rules match it, two read a value, and
    // it has the case-insensitive rule's `loss`.
    let relay_line =
        pad("[default0] Train Epoch: 1 [640/60000 (1%)] training_loss_step 1.9001 'samples/sec': 812.5".into());
    let relay_lines = vec![relay_line; lines.len()];
    let mut args = std::env::args().skip(1);
    if let Some(arg) = args.next() {
        let dir = match (arg.as_str(), args.next()) {
            ("--write-lines", Some(dir)) => std::path::PathBuf::from(dir),
            _ => {
                eprintln!("log_rules_bench: {arg:?}: expected --write-lines DIR");
                std::process::exit(2);
            }
        };
        for (name, lines) in [("mixed.log", &lines), ("relay.log", &relay_lines)] {
            let path = dir.join(name);
            if let Err(e) = std::fs::write(&path, lines.concat()) {
                eprintln!("log_rules_bench: cannot write {}: {e}", path.display());
                std::process::exit(1);
            }
        }
    }
    let start = Instant::now();
    // RANKVISOR_BENCH_PASSES: fewer passes, for an instruction count under callgrind.
    let passes = std::env::var("RANKVISOR_BENCH_PASSES").ok().and_then(|p| p.parse().ok()).unwrap_or(200);
    let lines_n = (passes * lines.len()) as f64;
    let bytes = (passes * bytes_per_pass) as f64;
    let report = |entry: &str, (cpu, wall): (f64, f64)| {
        println!(
            "log rules, {entry}: 10 rules, {} lines of 100 bytes, best of 5: {:.2} M lines/s, {:.0} MB/s per core \
             of CPU time ({:.0} ns per line); wall clock: {:.0} MB/s",
            passes * lines.len(),
            lines_n / cpu / 1e6,
            bytes / cpu / 1e6,
            cpu / lines_n * 1e9,
            bytes / wall / 1e6,
        );
    };
    let by_line = |lines: &[String]| {
        best_of_5(|| {
            let mut ev = Evaluator::new(set.clone(), start);
            let mut now = start;
            // Warm the lazy DFA's cache.
            lines.iter().for_each(|l| _ = ev.on_line(l, now));
            measure(|| {
                for _ in 0..passes {
                    for l in lines {
                        now += Duration::from_micros(1);
                        std::hint::black_box(ev.on_line(std::hint::black_box(l), now));
                    }
                }
            })
        })
    };
    report("Evaluator::on_line, each line at its own time", by_line(&lines));
    report("Evaluator::on_line, the relay benchmark's line only", by_line(&relay_lines));
}

/// The smallest CPU time and wall clock of 5 runs of `run`.
fn best_of_5(mut run: impl FnMut() -> (f64, f64)) -> (f64, f64) {
    (0..5).map(|_| run()).fold((f64::INFINITY, f64::INFINITY), |(c, w), (c2, w2)| (c.min(c2), w.min(w2)))
}

/// The thread's CPU time and the wall clock `f` took, in seconds.
fn measure(f: impl FnOnce()) -> (f64, f64) {
    let t = StdInstant::now();
    let c = thread_cpu();
    f();
    (thread_cpu() - c, t.elapsed().as_secs_f64())
}

/// This thread's CPU time, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}
