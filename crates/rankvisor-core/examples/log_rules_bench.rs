//! Log-rule evaluation alone (scripts/bench-log-rules.sh runs it): 10 rules in the AWS examples'
//! style, 100-byte lines (one in four a training step that several rules match, the others
//! noise), fed to `Evaluator::on_line` on one core. Prints lines/s and bytes/s, by the thread's
//! CPU time (what one core does, whatever else the machine runs) and by the wall clock.

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
    let start = Instant::now();
    let mut ev = Evaluator::new(set.clone(), start);
    let mut now = start;
    // Warm the lazy DFA's cache.
    for l in &lines {
        ev.on_line(l, now);
    }
    let mut best = f64::INFINITY;
    let mut best_cpu = f64::INFINITY;
    let passes = 200;
    for _ in 0..5 {
        let mut ev = Evaluator::new(set.clone(), start);
        for l in &lines {
            ev.on_line(l, now);
        }
        let t = StdInstant::now();
        let c = thread_cpu();
        for _ in 0..passes {
            for l in &lines {
                now += Duration::from_micros(1);
                std::hint::black_box(ev.on_line(l, now));
            }
        }
        best_cpu = best_cpu.min(thread_cpu() - c);
        best = best.min(t.elapsed().as_secs_f64());
    }
    let lines_n = (passes * lines.len()) as f64;
    let bytes = (passes * bytes_per_pass) as f64;
    println!(
        "log rules: 10 rules, {} lines of 100 bytes, best of 5: {:.2} M lines/s, {:.0} MB/s per core of CPU time \
         ({:.0} ns per line); wall clock: {:.0} MB/s",
        passes * lines.len(),
        lines_n / best_cpu / 1e6,
        bytes / best_cpu / 1e6,
        best_cpu / lines_n * 1e9,
        bytes / best / 1e6,
    );
}

/// This thread's CPU time, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}
