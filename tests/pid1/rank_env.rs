//! Issue 2, item 7: bad rank-contract input, flags and env end to end: exit 64, the child never
//! starts, and stderr names the variable, the value seen and what was expected. `rankvisor env`
//! prints the parsed contract.

use crate::common;
use common::*;
use serde_json::Value;

/// What the training-operator injects into replica `rank` of seed 000's 4-replica job.
fn seed_000(rank: &str) -> Vec<(&'static str, String)> {
    let master_addr = "pytest-master-0".to_string();
    vec![
        ("PYTHONUNBUFFERED", "1".into()),
        ("MASTER_PORT", "23456".into()),
        ("PET_MASTER_PORT", "23456".into()),
        ("MASTER_ADDR", master_addr.clone()),
        ("PET_MASTER_ADDR", master_addr),
        ("WORLD_SIZE", "4".into()),
        ("RANK", rank.into()),
        ("PET_NODE_RANK", rank.into()),
        ("PET_NPROC_PER_NODE", "auto".into()),
        ("PET_NNODES", "4".into()),
    ]
}

fn with_env(mut rv: Rv, env: &[(&str, String)], overrides: &[(&str, &str)]) -> Rv {
    for (k, v) in env {
        if !overrides.iter().any(|(o, _)| o == k) {
            rv = rv.env(k, v);
        }
    }
    for (k, v) in overrides {
        rv = rv.env(k, v);
    }
    rv
}

/// Run with seed 000's worker env plus `overrides`; the child must never start.
fn bad(name: &str, overrides: &[(&str, &str)], args: &[&str]) -> Finished {
    let dir = TestDir::new(name);
    let mut rv = Rv::new(&dir);
    if args.contains(&"--status-fd") {
        rv = rv.without_status_fd();
    }
    let rv = with_env(rv.args(args.iter().copied()), &seed_000("2"), overrides);
    let out = rv.sh(&format!("touch {}", q(&dir.file("ran")))).run();
    out.assert_code(64);
    assert!(!dir.join("ran").exists(), "the child must not start on bad configuration");
    out
}

fn assert_names(out: &Finished, parts: &[&str]) {
    for p in parts {
        assert!(out.stderr.contains(p), "stderr should contain {p:?}:\n{}", out.stderr);
    }
}

#[test]
fn rank_out_of_range() {
    let out = bad("rank-range", &[("RANK", "5"), ("PET_NODE_RANK", "5")], &[]);
    assert_names(&out, &["RANK=\"5\"", "expected", "0 to 3"]);
}

#[test]
fn rank_out_of_range_without_pet_variables() {
    let dir = TestDir::new("rank-range-bare");
    let out = Rv::new(&dir)
        .env("RANK", "5")
        .env("WORLD_SIZE", "4")
        .env("MASTER_ADDR", "m")
        .env("MASTER_PORT", "1234")
        .sh("true")
        .run();
    out.assert_code(64);
    assert_names(&out, &["RANK=\"5\"", "expected"]);
}

#[test]
fn rank_disagrees_with_pet_node_rank() {
    let out = bad("rank-disagree", &[("RANK", "1"), ("PET_NODE_RANK", "2")], &[]);
    assert_names(&out, &["RANK=\"1\"", "PET_NODE_RANK=\"2\"", "expected"]);
}

#[test]
fn master_port_out_of_range() {
    let out = bad("port", &[("MASTER_PORT", "70000"), ("PET_MASTER_PORT", "70000")], &[]);
    assert_names(&out, &["MASTER_PORT", "70000", "1 to 65535"]);
}

#[test]
fn master_addr_disagrees() {
    let out = bad("addr", &[("PET_MASTER_ADDR", "elsewhere")], &[]);
    assert_names(&out, &["MASTER_ADDR", "pytest-master-0", "PET_MASTER_ADDR", "elsewhere"]);
}

#[test]
fn world_size_not_a_number() {
    let out = bad("world", &[("WORLD_SIZE", "four")], &[]);
    assert_names(&out, &["WORLD_SIZE=\"four\"", "expected"]);
}

#[test]
fn missing_master_addr_for_several_replicas() {
    let dir = TestDir::new("noaddr");
    let out = Rv::new(&dir).env("RANK", "1").env("WORLD_SIZE", "2").env("MASTER_PORT", "1234").sh("true").run();
    out.assert_code(64);
    assert_names(&out, &["MASTER_ADDR", "not set"]);
}

#[test]
fn unknown_restart_policy_from_env() {
    let out = bad("policy", &[("RANKVISOR_RESTART_POLICY", "sometimes")], &[]);
    assert_names(&out, &["sometimes", "Never", "OnFailure", "Always", "ExitCode"]);
}

#[test]
fn unknown_restart_policy_flag() {
    let out = bad("policy-flag", &[], &["--restart-policy", "sometimes"]);
    assert_names(&out, &["sometimes", "OnFailure"]);
}

#[test]
fn hang_timeout_without_heartbeat_file() {
    let out = bad("hang-no-hb", &[], &["--hang-timeout", "5s"]);
    assert_names(&out, &["--hang-timeout", "--heartbeat-file"]);
}

#[test]
fn bad_duration() {
    let out = bad("duration", &[("RANKVISOR_GRACE_PERIOD", "5 parsecs")], &[]);
    assert_names(&out, &["5 parsecs"]);
}

#[test]
fn backoff_max_below_initial() {
    let out = bad("backoff-order", &[], &["--backoff-initial", "10s", "--backoff-max", "1s"]);
    assert_names(&out, &["--backoff-max", "--backoff-initial"]);
}

#[test]
fn status_fd_not_open() {
    let out = bad("status-fd", &[], &["--status-fd", "97"]);
    assert_names(&out, &["--status-fd", "97"]);
}

#[test]
fn no_command() {
    let dir = TestDir::new("nocmd");
    let out = Rv::new(&dir).run();
    out.assert_code(64);
    assert_names(&out, &["no command"]);
}

#[test]
fn a_good_seed_000_worker_env_runs_the_child() {
    // The control for all of the above: the same env, unmodified, is accepted.
    let dir = TestDir::new("good");
    let rv = with_env(Rv::new(&dir).args(["--restart-policy", "Never", "--rendezvous", "off"]), &seed_000("2"), &[]);
    let out = rv.sh(&format!("touch {}", q(&dir.file("ran")))).run();
    out.assert_code(0);
    assert!(dir.join("ran").exists());
}

fn env_cmd(rank: &str, args: &[&str]) -> Finished {
    // `rankvisor env` takes no `--`: build it by hand on top of the harness.
    let mut c = rankvisor();
    c.args(args);
    for (k, v) in seed_000(rank) {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    Finished {
        code: o.status.code(),
        signal: None,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        statuses: vec![],
        elapsed: Default::default(),
    }
}

#[test]
fn env_json_prints_seed_000s_contract() {
    for rank in ["0", "3"] {
        let out = env_cmd(rank, &["env", "--json"]);
        out.assert_code(0);
        let v: Value = serde_json::from_str(&out.stdout).expect("JSON");
        assert_eq!(v["replica_index"], rank.parse::<u32>().unwrap());
        assert_eq!(v["world_size"], 4);
        assert_eq!(v["replica_count"]["count"], 4);
        assert_eq!(v["master_addr"], "pytest-master-0");
        assert_eq!(v["master_port"], 23456);
        assert_eq!(v["injected"], true);
        assert!(v["nproc_per_node"].to_string().contains("auto"), "{v}");
    }
}

#[test]
fn env_text_names_the_role() {
    let master = env_cmd("0", &["env"]);
    master.assert_code(0);
    assert!(master.stdout.contains("Master"), "{}", master.stdout);
    let worker = env_cmd("1", &["env"]);
    assert!(worker.stdout.contains("Worker"), "{}", worker.stdout);
}

#[test]
fn env_rejects_a_bad_contract_with_64() {
    let out = env_cmd("7", &["env", "--json"]);
    out.assert_code(64);
    assert!(out.stderr.contains("RANK"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}
