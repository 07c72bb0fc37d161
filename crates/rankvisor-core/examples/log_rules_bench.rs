//! Log-rule evaluation alone (scripts/bench-log-rules.sh runs it): 10 rules in the AWS examples'
//! style, 100-byte lines (one in four a training step that several rules match, the others
//! noise), fed to `Evaluator::on_line` on one core. Prints lines/s and bytes/s.

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
    let passes = 200;
    for _ in 0..5 {
        let mut ev = Evaluator::new(set.clone(), start);
        for l in &lines {
            ev.on_line(l, now);
        }
        let t = StdInstant::now();
        for _ in 0..passes {
            for l in &lines {
                now += Duration::from_micros(1);
                std::hint::black_box(ev.on_line(l, now));
            }
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let lines_n = (passes * lines.len()) as f64;
    let bytes = (passes * bytes_per_pass) as f64;
    println!(
        "log rules: 10 rules, {} lines of 100 bytes: {:.2} M lines/s, {:.0} MB/s per core ({:.0} ns per line; best of 5)",
        passes * lines.len(),
        lines_n / best / 1e6,
        bytes / best / 1e6,
        best / lines_n * 1e9
    );
}
