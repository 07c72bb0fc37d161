//! `rankvisor --agent hyperpod` driven over loopback as the HyperPod training operator drives the
//! agent: poll until ready, `/start`, a fault, `/stop`, ready, `/start` with faultCount 1,
//! completion, `/shutdown`. Every `/status` body is re-encoded by hyperpod-elastic-agent 1.1.3's own
//! `StatusResponseJSONEncoder` (tests/hyperpod/agent_api.py) and must come out byte for byte the
//! same; a bad `/start` gets the errors the agent's own `StartRequest` model gives.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The agent's source (scripts/setup-hyperpod.sh): `RANKVISOR_TEST_HYPERPOD_AGENT`, else the
/// script's cache directory. Fails loudly when absent.
fn agent_src() -> PathBuf {
    let dir = std::env::var_os("RANKVISOR_TEST_HYPERPOD_AGENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/rankvisor/hyperpod-elastic-agent-1.1.3/src"));
    let file = dir.join("hyperpod_elastic_agent/server/util.py");
    assert!(
        file.is_file(),
        "the HyperPod agent's server/util.py is not at {}: run `bash scripts/setup-hyperpod.sh` (scripts/test.sh \
         does) or set RANKVISOR_TEST_HYPERPOD_AGENT to the unpacked package's src/",
        file.display()
    );
    dir
}

/// pydantic for the agent's request models (scripts/setup-pydantic.sh): `RANKVISOR_TEST_PYDANTIC`,
/// else the script's cache directory. Fails loudly when absent.
fn pydantic_path() -> PathBuf {
    let dir = std::env::var_os("RANKVISOR_TEST_PYDANTIC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/rankvisor/pydantic-2.12.4"));
    assert!(
        dir.join("pydantic").is_dir(),
        "pydantic is not at {}: run `bash scripts/setup-pydantic.sh` (scripts/test.sh does) or set \
         RANKVISOR_TEST_PYDANTIC",
        dir.display()
    );
    dir
}

/// Run the agent's own code on `input` (tests/hyperpod/agent_api.py `command`).
fn agent(command: &str, input: &str) -> String {
    let mut child = Command::new("python3")
        .arg(repo_file("tests/hyperpod/agent_api.py"))
        .arg(agent_src())
        .arg(command)
        .env("PYTHONPATH", pydantic_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup-hyperpod.sh installs it)");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "agent_api.py {command} on {input}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// One request on 127.0.0.1:`port`: (status code, body).
fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the agent's API listens");
    s.set_read_timeout(Some(HANG_GUARD)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP reply");
    (head.split(' ').nth(1).unwrap().parse().unwrap(), body.to_string())
}

/// The operator's view: every body it reads is checked against the agent's encoder.
struct Operator {
    port: u16,
    checked: usize,
}

impl Operator {
    fn check(&mut self, body: &str) -> Value {
        assert_eq!(agent("status", body), body, "the agent's encoder writes this status differently");
        self.checked += 1;
        serde_json::from_str(body).unwrap()
    }

    fn status(&mut self) -> Value {
        let (code, body) = request(self.port, "GET", "/status", "");
        assert_eq!(code, 200, "{body}");
        self.check(&body)
    }

    /// Poll `/status` (as the operator does) until it says `state`; the body as sent.
    fn until(&mut self, state: &str) -> String {
        let mut last = String::new();
        wait_until(&format!("agent status {state}"), || {
            let (_, body) = request(self.port, "GET", "/status", "");
            let done = serde_json::from_str::<Value>(&body).ok()?["status"] == state;
            if body != last {
                self.check(&body);
                last = body.clone();
            }
            done.then_some(body)
        })
    }

    fn post(&mut self, path: &str, body: &str) -> String {
        let (code, reply) = request(self.port, "POST", path, body);
        assert_eq!(code, 200, "POST {path} {body}: {reply}");
        reply
    }
}

/// The keys of `transitions` in the body's order (a parsed `Value` sorts them).
fn transition_order(body: &str) -> Vec<String> {
    let (_, rest) = body.split_once(r#""transitions":{"#).expect("transitions");
    let (inner, _) = rest.split_once('}').unwrap();
    inner.split(',').map(|kv| kv.split(':').next().unwrap().trim_matches('"').to_string()).collect()
}

fn start_body(fault_count: u32) -> String {
    format!(
        r#"{{"rank":1,"nnodes":2,"faultCount":{fault_count},"master_addr":"127.0.0.1","master_port":"23456","ipVersion":"IPv4"}}"#
    )
}

/// Each attempt records its assignment, says it started, and waits for the test's go; the first
/// attempt (faultCount 0) then fails, the second succeeds.
const TRAIN: &str = r#"echo "$PET_NNODES $PET_NODE_RANK $PET_MASTER_ADDR $PET_MASTER_PORT $TORCHELASTIC_RESTART_COUNT $JOB_RESTART_COUNT" >> env
touch "started.$TORCHELASTIC_RESTART_COUNT"
while [ ! -f "go.$TORCHELASTIC_RESTART_COUNT" ]; do sleep 0.01; done
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exit 1
exit 0"#;

fn agent_args(port: u16) -> Vec<String> {
    ["--agent", "hyperpod", "--agent-addr", &format!("127.0.0.1:{port}"), "--http-addr", "off"]
        .into_iter()
        .chain(["--rendezvous", "off"])
        .map(str::to_string)
        .collect()
}

#[test]
fn the_operators_sequence_matches_the_agents_own_encoder_and_models() {
    let dir = TestDir::new("hyperpod-sequence");
    let port = free_port();
    let rv = Rv::new(&dir).args(agent_args(port)).env("RANKVISOR_NODE_HEALTH", "off");
    let rv = rv.sh(&format!("cd {} && {TRAIN}", q(&dir.file(""))));
    let running = rv.spawn();
    let mut op = Operator { port, checked: 0 };
    wait_until("the agent's API", || std::net::TcpStream::connect(("127.0.0.1", port)).ok());
    assert_eq!(transition_order(&op.until("ready")), ["INIT", "READY"]);
    assert!(!dir.join("started.0").exists(), "the child waits for /start");

    // A bad /start: the agent's own model gives the same errors, and nothing starts.
    let bad = r#"{"rank":"one","nnodes":2,"faultCount":0,"master_addr":"","master_port":"8o"}"#;
    let (code, reply) = request(port, "POST", "/start", bad);
    assert_eq!(code, 422, "{reply}");
    let ours: Value = serde_json::from_str(&reply).unwrap();
    let theirs: Value = serde_json::from_str(&agent("start", bad)).unwrap();
    let strip = |v: &Value| -> Vec<(Value, Value, Value)> {
        v["detail"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["type"].clone(), e["loc"].clone(), e["msg"].clone()))
            .collect()
    };
    assert_eq!(strip(&ours), strip(&theirs), "ours: {reply}");
    assert_eq!(op.status()["status"], "ready");

    op.post("/start", &start_body(0));
    let run = op.status();
    assert_eq!((run["status"].as_str(), run["reason"].as_str()), (Some("running"), Some("Running")));
    assert_eq!((run["assigned_rank"].as_str(), run["ipversion"].as_str()), (Some("1"), Some("IPv4")));
    wait_file(&dir.join("started.0"));
    std::fs::write(dir.join("go.0"), "").unwrap();
    let fault: Value = serde_json::from_str(&op.until("faulted")).unwrap();
    assert_eq!(fault["reason"], "WorkerCrash");
    assert!(fault["message"].as_str().unwrap().contains("Local Rank 0 exited with code 1"), "{fault}");

    op.post("/stop", "");
    op.until("ready");
    op.post("/start", &start_body(1));
    wait_file(&dir.join("started.1"));
    assert_eq!(op.status()["status"], "running");
    std::fs::write(dir.join("go.1"), "").unwrap();
    assert_eq!(
        transition_order(&op.until("completed")),
        ["INIT", "READY", "RUNNING", "FAULTED", "STOPPING", "COMPLETED"]
    );
    let updated = op.post("/update", &start_body(1));
    op.check(&updated);

    op.post("/shutdown", "");
    running.wait().assert_code(0);
    assert_eq!(read(&dir.join("env")), "2 1 127.0.0.1 23456 0 0\n2 1 127.0.0.1 23456 1 1\n");
    assert!(op.checked >= 8, "{} bodies checked", op.checked);
}

/// The quick tier's checks of agent mode (no Python): a running rankvisor with `script` as its child.
fn agent_rv(dir: &TestDir, port: u16, extra: &[&str], script: &str) -> Running {
    // The node-health gate is off unless `extra` names a source (an option beats its variable).
    let rv = Rv::new(dir).args(agent_args(port)).args(extra.iter().copied()).env("RANKVISOR_NODE_HEALTH", "off");
    let running = rv.sh(&format!("cd {} && {script}", q(&dir.file(""))));
    let r = running.spawn();
    wait_until("the agent's API", || std::net::TcpStream::connect(("127.0.0.1", port)).ok());
    r
}

fn state_of(port: u16) -> Value {
    let (code, body) = request(port, "GET", "/status", "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn wait_state(port: u16, state: &str) -> Value {
    wait_until(&format!("agent status {state}"), || Some(state_of(port)).filter(|v| v["status"] == state))
}

#[test]
fn a_graceful_stop_sends_sigusr1_then_sigkill_after_its_timeout_then_ready() {
    let dir = TestDir::new("hyperpod-graceful");
    let port = free_port();
    // The child records USR1 and keeps running: only the KILL after the timeout ends it.
    let script = "trap 'echo usr1 >> got' USR1; touch started; while :; do sleep 0.01; done";
    let rv = agent_rv(&dir, port, &[], script);
    wait_state(port, "ready");
    assert_eq!(request(port, "POST", "/start", &start_body(0)).0, 200);
    wait_file(&dir.join("started"));
    let (code, _) = request(port, "POST", "/stop", r#"{"restart_mode":"plr","is_graceful":true,"timeout":1}"#);
    assert_eq!(code, 200);
    let ready = wait_state(port, "ready");
    assert!(read(&dir.join("got")).starts_with("usr1"), "the child saw SIGUSR1");
    assert!(ready.get("reason").is_none(), "{ready}");
    assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
    let out = rv.wait();
    assert!(out.stderr.contains("SIGKILL"), "{}", out.stderr);
    out.assert_code(128 + libc::SIGKILL);
}

#[test]
fn a_bad_log_rule_on_start_is_refused_naming_it_and_nothing_starts() {
    let dir = TestDir::new("hyperpod-rules");
    let port = free_port();
    let rv = agent_rv(&dir, port, &[], "touch started");
    wait_state(port, "ready");
    let body = r#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"127.0.0.1","master_port":23456,
        "log_monitoring_configuration":[{"name":"Loss","logPattern":"loss (\\d+)","metricThreshold":2,"operator":"ge"}]}"#;
    let (code, reply) = request(port, "POST", "/start", body);
    assert_eq!(code, 422, "{reply}");
    assert!(reply.contains("log_monitoring_configuration"), "{reply}");
    assert!(reply.contains(r#"log rule #1 (\"Loss\"): field operator"#), "{reply}");
    // A metric pattern whose automaton would take minutes over one 64 KiB line (issue 34).
    let slow = r#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"127.0.0.1","master_port":23456,
        "log_monitoring_configuration":[{"name":"Loss","logPattern":"(?:loss|[a-z]{1,6000}|\\s)*?loss (\\d+)",
        "metricThreshold":2,"operator":"gt","metricEvaluationDataPoints":3}]}"#;
    let (code, reply) = request(port, "POST", "/start", slow);
    assert_eq!(code, 422, "{reply}");
    assert!(reply.contains("too complex: its automaton has 12050 states, more than 2048"), "{reply}");
    assert_eq!(state_of(port)["status"], "ready");
    assert!(!dir.join("started").exists(), "no attempt without its rules");
    assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
    let out = rv.wait();
    out.assert_code(0);
    assert!(out.stderr.contains("/start refused (422)"), "{}", out.stderr);
}

#[test]
fn a_hang_rule_on_start_makes_the_agent_faulted_with_its_reason_and_stops_the_child() {
    let dir = TestDir::new("hyperpod-hang");
    let port = free_port();
    let rv = agent_rv(&dir, port, &[], "echo 'Epoch 1 step 1'; touch started; exec sleep 30");
    wait_state(port, "ready");
    let body = r#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"127.0.0.1","master_port":23456,
        "log_monitoring_configuration":[{"name":"Step","logPattern":".*step.*","expectedRecurringFrequencyInSeconds":1}]}"#;
    assert_eq!(request(port, "POST", "/start", body).0, 200);
    let faulted = wait_state(port, "faulted");
    assert_eq!(faulted["reason"], "LogHang_Step", "{faulted}");
    let message = faulted["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("The job is hanging (not receiving required logs)"), "{message}");
    assert!(message.ends_with("{'Step': 'Epoch 1 step 1\\n'}"), "{message}");
    assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
    let out = rv.wait();
    assert_eq!(out.stdout, "Epoch 1 step 1\n", "the child's output reached rankvisor's stdout");
    out.assert_code(128 + libc::SIGTERM);
}

/// A firing log verdict's `/status` reason and message against the agent's own
/// `set_agent_state_fault` (tests/hyperpod/agent_api.py `fault`), for each of HANGING, SLOW and
/// FAULTED: the message quotes the rules and their last lines as a Python dict, so quotes,
/// backslashes, tabs and characters Python's `repr` escapes (a no-break space, a zero-width joiner,
/// a line separator) must come out as Python writes them.
#[test]
fn log_verdicts_carry_the_agents_own_reason_and_message() {
    let odd = "RuntimeError: CUDA out of memory: 'it' said \"no\" \\ tab\there\u{a0}nbsp\u{200d}zwj\u{2028}é";
    // (the verdict, the child's output, the rules, the rules the verdict names with their last lines)
    type Case<'a> = (&'a str, &'a str, &'a str, Vec<(&'a str, Option<String>)>);
    let cases: [Case; 3] = [
        (
            "HANGING",
            "echo 'Epoch 1 step 1'",
            r#"[{"name":"Step","logPattern":".*step.*","expectedRecurringFrequencyInSeconds":1}]"#,
            vec![("Step", Some("Epoch 1 step 1\n".into()))],
        ),
        (
            "SLOW",
            "echo 'loss 5'; echo 'loss 7'",
            r#"[{"name":"Loss spike","logPattern":".*loss (\\d+)","metricThreshold":2,"operator":"gt","metricEvaluationDataPoints":2}]"#,
            vec![("Loss spike", Some("loss 7\n".into()))],
        ),
        (
            "FAULTED",
            "cat odd",
            r#"[{"name":"OOM","logPattern":".*out of memory","faultOnMatch":true},{"name":"Any 'Error'","logPattern":".*Error","faultOnMatch":true}]"#,
            vec![("OOM", Some(format!("{odd}\n"))), ("Any 'Error'", Some(format!("{odd}\n")))],
        ),
    ];
    for (state, script, rules, named) in cases {
        let dir = TestDir::new(&format!("hyperpod-verdict-{}", state.to_lowercase()));
        std::fs::write(dir.join("odd"), format!("{odd}\n")).unwrap();
        let port = free_port();
        let rv = agent_rv(&dir, port, &[], &format!("{script}; touch started; exec sleep 30"));
        wait_state(port, "ready");
        let body = format!(
            r#"{{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"127.0.0.1","master_port":23456,"log_monitoring_configuration":{rules}}}"#
        );
        assert_eq!(request(port, "POST", "/start", &body).0, 200, "{state}");
        let ours = wait_state(port, "faulted");
        let case = serde_json::json!({ "state": state, "rules": named });
        let theirs: Value = serde_json::from_str(&agent("fault", &case.to_string())).unwrap();
        assert_eq!(ours["reason"], theirs["reason"], "{state}: ours {ours}");
        assert_eq!(ours["message"], theirs["message"], "{state}: ours {ours}");
        assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
        rv.wait().assert_code(128 + libc::SIGTERM);
    }
}

#[test]
fn an_unhealthy_node_keeps_the_agent_in_init_and_status_says_why() {
    let dir = TestDir::new("hyperpod-unhealthy");
    let port = free_port();
    let labels = dir.join("labels");
    let label = |v: &str| format!("sagemaker.amazonaws.com/node-health-status=\"{v}\"\n");
    std::fs::write(&labels, label("Unschedulable")).unwrap();
    let source = format!("file:{}", labels.display());
    let rv = agent_rv(&dir, port, &["--node-health", &source, "--unhealthy-node", "wait"], "exit 0");
    let init = wait_until("the unhealthy verdict", || Some(state_of(port)).filter(|v| v.get("reason").is_some()));
    assert_eq!((init["status"].as_str(), init["reason"].as_str()), (Some("init"), Some("NodeUnhealthy")));
    assert!(init["message"].as_str().unwrap().contains("Unschedulable"), "{init}");
    assert_eq!(request(port, "POST", "/start", &start_body(0)).0, 200);
    assert_eq!(state_of(port)["status"], "init", "INIT -> RUNNING is not a transition");
    let tmp = dir.join("labels.tmp");
    std::fs::write(&tmp, label("Schedulable")).unwrap();
    std::fs::rename(&tmp, &labels).unwrap();
    wait_state(port, "ready");
    assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
    rv.wait().assert_code(0);
}

#[test]
fn an_agent_address_in_use_is_a_configuration_error() {
    let dir = TestDir::new("hyperpod-addr");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = Rv::new(&dir).args(agent_args(port)).sh("exit 0").run();
    out.assert_code(64);
    assert!(
        out.stderr.contains(&format!("--agent-addr (RANKVISOR_AGENT_ADDR) 127.0.0.1:{port}: cannot listen")),
        "{}",
        out.stderr
    );
}

/// The torch venv (scripts/setup-torch.sh, exported by scripts/test.sh as `RANKVISOR_TORCH_VENV`),
/// or a loud failure saying how to set it up.
fn torch_venv() -> PathBuf {
    let venv = std::env::var_os("RANKVISOR_TORCH_VENV").map(PathBuf::from).unwrap_or_else(|| {
        panic!("RANKVISOR_TORCH_VENV is not set: run `bash scripts/test.sh` (scripts/setup-torch.sh installs torch)")
    });
    assert!(venv.join("bin/torchrun").is_file(), "RANKVISOR_TORCH_VENV={}: no bin/torchrun", venv.display());
    venv
}

/// Two nodes, each `rankvisor --agent hyperpod -- torchrun --nproc-per-node 1 check.py` with no
/// flag naming the other: each `/start` carries the assignment (rank, nnodes, the master's address,
/// faultCount), torchrun reads it from `PET_*`, and the two workers all-reduce over gloo.
#[test]
fn torchrun_under_the_agent_meets_its_peer_from_the_assignment() {
    let venv = torch_venv();
    let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let dir = TestDir::new("hyperpod-torchrun");
    let check = dir.write(
        "check.py",
        r#"import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(t)
e = os.environ
with open(f"out.{e['RANK']}", "w") as f:
    f.write(f"{e['RANK']} {e['WORLD_SIZE']} {e['GROUP_RANK']} {e['JOB_RESTART_COUNT']} {t.item()}\n")
dist.destroy_process_group()
"#,
    );
    let master_port = free_port();
    let nodes: Vec<(u16, Running)> = (0..2)
        .map(|node| {
            let node_dir = TestDir::new(&format!("hyperpod-torchrun-{node}"));
            let port = free_port();
            let rv = Rv::new(&node_dir)
                .args(agent_args(port))
                .env("RANKVISOR_NODE_HEALTH", "off")
                .env("PATH", &path)
                .env("PYTHONWARNINGS", "ignore")
                .sh(&format!(
                    "cd {} && exec torchrun --nproc-per-node 1 {}",
                    q(&dir.file("")),
                    q(check.to_str().unwrap())
                ));
            let running = rv.spawn();
            wait_until("the agent's API", || std::net::TcpStream::connect(("127.0.0.1", port)).ok());
            wait_state(port, "ready");
            (port, running)
        })
        .collect();
    for (node, (port, _)) in nodes.iter().enumerate() {
        let body = format!(
            r#"{{"rank":{node},"nnodes":2,"faultCount":3,"master_addr":"127.0.0.1","master_port":"{master_port}"}}"#
        );
        assert_eq!(request(*port, "POST", "/start", &body).0, 200);
    }
    for (port, _) in &nodes {
        wait_until_for("the attempt to complete", std::time::Duration::from_secs(120), || {
            let v = state_of(*port);
            assert_ne!(v["status"], "faulted", "{v}");
            (v["status"] == "completed").then_some(())
        });
    }
    assert_eq!(read(&dir.join("out.0")), "0 2 0 3 3\n");
    assert_eq!(read(&dir.join("out.1")), "1 2 1 3 3\n");
    for (port, running) in nodes {
        assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
        running.wait().assert_code(0);
    }
}

/// Issue 34 item 3: rankvisor's own status (`--status-fd`, `/status`, the webhook) carries the
/// agent's state: after a faulted attempt the operator stopped, READY (the attempt's `state`
/// stays its child's, Failed).
#[test]
fn rankvisors_status_carries_the_agents_state() {
    let dir = TestDir::new("hyperpod-status-agent");
    let port = free_port();
    let running = agent_rv(&dir, port, &[], "exit 1");
    wait_state(port, "ready");
    let (code, _) = request(port, "POST", "/start", &start_body(0));
    assert_eq!(code, 200);
    wait_state(port, "faulted");
    let faulted = running.wait_status("agent FAULTED in the status", |s| s["agent"] == "FAULTED");
    assert_eq!(faulted["state"], "Failed");
    assert_eq!(request(port, "POST", "/stop", "").0, 200);
    wait_state(port, "ready");
    let after_fault =
        |all: Vec<Value>| -> Vec<Value> { all.into_iter().skip_while(|s| s["agent"] != "FAULTED").collect() };
    let ready = wait_until("agent READY in the status after the fault", || {
        after_fault(running.statuses()).into_iter().find(|s| s["agent"] == "READY")
    });
    assert_eq!(ready["state"], "Failed", "the last attempt's child failed");
    assert_eq!(running.statuses().last(), Some(&ready), "READY is the last word");
    assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
    running.wait().assert_code(1);
}

/// Issue 34 item 6: READY tells the operator the node is free; a `setsid` grandchild of the
/// stopped attempt (outside its process group) is swept before it.
#[test]
fn ready_comes_once_the_stopped_attempts_escapee_is_gone() {
    let dir = TestDir::new("hyperpod-escapee");
    let port = free_port();
    let running = agent_rv(&dir, port, &[], "{ setsid sleep 300 & echo $! > escapee; exec sleep 300; }");
    wait_state(port, "ready");
    assert_eq!(request(port, "POST", "/start", &start_body(0)).0, 200);
    let escapee: i32 = wait_until("the escapee's pid", || read(&dir.join("escapee")).trim().parse().ok());
    assert!(alive(escapee));
    assert_eq!(request(port, "POST", "/stop", "").0, 200);
    wait_state(port, "ready");
    assert!(!alive(escapee), "READY while the last attempt's escapee {escapee} runs");
    assert_eq!(request(port, "POST", "/shutdown", "").0, 200);
    running.wait();
}
