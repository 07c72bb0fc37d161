//! Issue 3, item 3, and the child's environment contract: RANKVISOR_RESTART_COUNT and
//! TORCHELASTIC_RESTART_COUNT count 0, 1, 2, 3; LOCAL_RANK/LOCAL_WORLD_SIZE default only where unset;
//! RANKVISOR_HEARTBEAT_FILE where configured; everything else passes through.

use crate::common;
use common::*;

const SHOW: &str = "echo \"$RANKVISOR_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT $RANKVISOR_GENERATION $LOCAL_RANK $LOCAL_WORLD_SIZE ${RANKVISOR_HEARTBEAT_FILE-unset} ${FOO-unset}\"";

fn lines(dir: &TestDir) -> Vec<String> {
    read(&dir.join("env")).lines().map(str::to_string).collect()
}

#[test]
fn restart_counts_0_to_3_in_both_variables() {
    let dir = TestDir::new("env-counts");
    let out = Rv::new(&dir)
        .args(["--backoff-initial", "10ms", "--backoff-limit", "3"])
        .sh(&format!("{SHOW} >> {}; exit 1", q(&dir.file("env"))))
        .run();
    out.assert_code(1);
    assert_eq!(
        lines(&dir),
        ["0 0 0 0 1 unset unset", "1 1 0 0 1 unset unset", "2 2 0 0 1 unset unset", "3 3 0 0 1 unset unset"]
    );
}

#[test]
fn local_rank_set_by_the_caller_is_kept() {
    let dir = TestDir::new("env-local");
    let out = Rv::new(&dir)
        .args(["--restart-policy", "Never"])
        .env("LOCAL_RANK", "3")
        .env("LOCAL_WORLD_SIZE", "8")
        .env("FOO", "bar baz")
        .sh(&format!("{SHOW} >> {}", q(&dir.file("env"))))
        .run();
    out.assert_code(0);
    assert_eq!(lines(&dir), ["0 0 0 3 8 unset bar baz"]);
}

#[test]
fn heartbeat_file_is_exported_when_configured() {
    let dir = TestDir::new("env-hb");
    let hb = dir.file("hb");
    let out = Rv::new(&dir)
        .args(["--restart-policy", "Never", "--heartbeat-file", &hb])
        .sh(&format!("{SHOW} >> {}", q(&dir.file("env"))))
        .run();
    out.assert_code(0);
    assert_eq!(lines(&dir), [format!("0 0 0 0 1 {hb} unset")]);
}

#[test]
fn the_operators_rank_contract_reaches_the_child_unchanged() {
    let dir = TestDir::new("env-rank");
    // Only this replica runs here: no barrier to wait at.
    let mut rv = Rv::new(&dir).args(["--restart-policy", "Never", "--rendezvous", "off"]);
    for (k, v) in seed_000_master() {
        rv = rv.env(k, v);
    }
    let out =
        rv.sh(&format!("env | grep -E '^(RANK=|WORLD_SIZE=|MASTER_|PET_)' | sort > {}", q(&dir.file("env")))).run();
    out.assert_code(0);
    let mut want: Vec<String> = seed_000_master().iter().map(|(k, v)| format!("{k}={v}")).collect();
    want.sort();
    assert_eq!(lines(&dir), want);
}

/// What the training-operator injects into the master of seed 000's 4-replica job.
fn seed_000_master() -> Vec<(&'static str, &'static str)> {
    vec![
        ("MASTER_PORT", "23456"),
        ("PET_MASTER_PORT", "23456"),
        ("MASTER_ADDR", "pytest-master-0"),
        ("PET_MASTER_ADDR", "pytest-master-0"),
        ("WORLD_SIZE", "4"),
        ("RANK", "0"),
        ("PET_NODE_RANK", "0"),
        ("PET_NPROC_PER_NODE", "auto"),
        ("PET_NNODES", "4"),
    ]
}

#[test]
fn no_descriptor_of_rankvisor_leaks_into_the_child() {
    // rankvisor holds the status fd, a signalfd and the event loop's descriptors: none of them may
    // reach the child. (Descriptors the test process itself inherited without CLOEXEC pass through
    // rankvisor untouched, as they should, so compare against rankvisor's own open files.)
    let dir = TestDir::new("env-fds");
    let out = Rv::new(&dir)
        .args(["--restart-policy", "Never", "--heartbeat-file", &dir.file("hb")])
        .sh("ls -l /proc/$$/fd")
        .run();
    out.assert_code(0);
    let targets: Vec<&str> = out.stdout.lines().filter_map(|l| l.split_once(" -> ").map(|(_, t)| t)).collect();
    let status = dir.file("status.jsonl");
    assert!(targets.iter().all(|t| *t != status), "the status fd leaked: {targets:?}");
    assert!(
        targets.iter().all(|t| !t.contains("signalfd") && !t.contains("eventpoll") && !t.contains("eventfd")),
        "rankvisor's descriptors leaked: {targets:?}"
    );
}
