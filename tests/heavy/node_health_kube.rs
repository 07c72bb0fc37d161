//! The Kubernetes node-health source end to end: the real rankvisor binary against a real
//! kube-apiserver 1.20.2 (+ etcd) on loopback, started by scripts/k8s/start-apiserver.sh.
//!
//! Needs RANKVISOR_TEST_KUBE_APISERVER (the binary; scripts/test.sh builds it, cached): without it
//! every test here FAILS, on purpose, rather than skip.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::apiserver;
use crate::common;

use apiserver::ApiServer;
use common::{free_port, rankvisor, read, wait_file, Finished, Rv, TestDir};

const STATUS: &str = "sagemaker.amazonaws.com/node-health-status";

impl ApiServer {
    fn create_node(&self, name: &str, status: &str) {
        let node = format!(
            r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{name}","labels":{{"{STATUS}":"{status}"}}}}}}"#
        );
        let (code, body) = self.request("POST", "/api/v1/nodes", "application/json", Some(&node));
        assert_eq!(code, 201, "create node: {body}");
    }

    fn merge_patch(&self, name: &str, patch: &str) {
        let (code, body) =
            self.request("PATCH", &format!("/api/v1/nodes/{name}"), "application/merge-patch+json", Some(patch));
        assert_eq!(code, 200, "patch node: {body}");
    }

    fn set_status(&self, name: &str, status: &str) {
        self.merge_patch(name, &format!(r#"{{"metadata":{{"labels":{{"{STATUS}":"{status}"}}}}}}"#));
    }

    /// rankvisor's Kubernetes flags.
    fn flags(&self, node: &str, token_file: &Path) -> Vec<String> {
        vec![
            "--node-health".into(),
            "kubernetes".into(),
            "--node-name".into(),
            node.into(),
            "--kube-api-server".into(),
            self.get("KUBE_URL").into(),
            "--kube-ca-file".into(),
            self.get("KUBE_CA").into(),
            "--kube-token-file".into(),
            token_file.to_string_lossy().into_owned(),
        ]
    }
}

/// The child: marks its start, and on TERM writes the time it got it (ns since the epoch).
const CHILD: &str = r#"touch "$DIR/started"; trap 'date +%s%N > "$DIR/term"; exit 0' TERM; sleep 1000 & wait"#;

/// The source's debug line once a watch of the node is open.
const WATCHING: &str = "watching the node";
/// The source's line for a failed request to the API (at start and mid-run alike).
const API_FAILED: &str = "Kubernetes API: ";

/// rankvisor (debug log) supervising [`CHILD`] in `dir` with these flags: restart policy Never,
/// a 5 s grace period, the termination log in `dir`.
fn supervise(dir: &TestDir, flags: &[String], extra: &[&str]) -> Rv {
    Rv::new(dir)
        .args(flags)
        .args(["--termination-log", &dir.file("termination-log")])
        .args(["--restart-policy", "Never", "--grace-period", "5s", "--log-level", "debug"])
        .args(extra)
        .env("DIR", &dir.path().to_string_lossy())
        .sh(CHILD)
}

fn check_node(flags: &[String]) -> Output {
    rankvisor().arg("check-node").args(flags).output().unwrap()
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

fn termination_log(dir: &TestDir) -> String {
    read(&dir.join("termination-log"))
}

/// Item 3 (healthy start; a label PATCH mid-run stops the child, exit 138) and item 5 (the figure:
/// label change -> child TERM through the API watch), plus `check-node` on labels and taints.
#[test]
fn label_patch_mid_run_stops_the_child_with_138() {
    let api = ApiServer::start("patch");
    let dir = TestDir::new("kube-patch");
    let token = api.token_file(dir.path(), "KUBE_READER_TOKEN");
    let mut samples = Vec::new();
    for i in 0..5 {
        let node = format!("node-{i}");
        api.create_node(&node, "Schedulable");
        let flags = api.flags(&node, &token);
        let run_dir = TestDir::new(&format!("kube-patch-run{i}"));
        let run = supervise(&run_dir, &flags, &[]).spawn();
        wait_file(&run_dir.join("started"));
        // The watch is open: the PATCHes below reach rankvisor through it, in order.
        run.wait_log(WATCHING, 1);
        // An unrelated label does not stop the child: it gets its TERM only after the unhealthy
        // value was sent (the watch delivers events in order), naming that value.
        api.merge_patch(&node, r#"{"metadata":{"labels":{"team":"a"}}}"#);
        let sent = now_ns();
        api.set_status(&node, "UnschedulablePendingReboot");
        let out = run.wait();
        out.assert_code(138);
        let term: u128 = read(&run_dir.join("term")).trim().parse().expect("the child recorded its TERM");
        assert!(term >= sent, "the child got its TERM before the unhealthy label was set:\n{}", out.stderr);
        samples.push(Duration::from_nanos((term - sent) as u64));
        let reason = termination_log(&run_dir);
        assert!(reason.contains("UnschedulablePendingReboot"), "termination log: {reason:?}");
    }
    samples.sort();
    eprintln!(
        "FIGURE label PATCH -> child SIGTERM via the API watch (real kube-apiserver, {} runs): median {:?}, max {:?}",
        samples.len(),
        samples[samples.len() / 2],
        samples[samples.len() - 1]
    );

    // check-node: one GET; the verdict reads labels and taints.
    api.create_node("checked", "Schedulable");
    let flags = api.flags("checked", &token);
    let out = check_node(&flags);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("node: healthy"));
    api.merge_patch(
        "checked",
        &format!(r#"{{"spec":{{"taints":[{{"key":"{STATUS}","value":"Unschedulable","effect":"NoSchedule"}}]}}}}"#),
    );
    let out = check_node(&[flags.clone(), vec!["--json".into()]].concat());
    assert_eq!(out.status.code(), Some(138));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"], false);
    assert!(v.to_string().contains("Unschedulable:NoSchedule"), "{v}");
    // Unhealthy before the start: the child never runs.
    let run = TestDir::new("kube-refused");
    let out = supervise(&run, &flags, &[]).run();
    out.assert_code(138);
    assert!(!run.join("started").exists());
    assert!(termination_log(&run).contains(STATUS), "{}", termination_log(&run));
}

/// Item 3: RBAC denial (403), a wrong CA, a rejected token, a missing node and an unreachable
/// server all give 138 before the start, after retrying for --node-health-timeout, with a
/// message naming the cause. And a token file fixed while rankvisor waits is picked up.
#[test]
fn refusals_name_the_cause_and_a_fixed_token_is_picked_up() {
    let api = ApiServer::start("refusals");
    api.create_node("n1", "Schedulable");
    let dir = TestDir::new("kube-refusals");
    let reader = api.token_file(dir.path(), "KUBE_READER_TOKEN");
    let nobody = api.token_file(dir.path(), "KUBE_NOBODY_TOKEN");
    let bogus = dir.write("bogus-token", "not-a-token\n");
    let closed_port = free_port();
    let with = |flags: Vec<String>, pairs: &[(&str, &str)]| {
        let mut f = flags;
        for (k, v) in pairs {
            let i = f.iter().position(|x| x == k).unwrap();
            f[i + 1] = v.to_string();
        }
        f
    };
    let cases: Vec<(&str, Vec<String>, Vec<&str>)> = vec![
        (
            "403",
            api.flags("n1", &nobody),
            vec!["403 Forbidden", "User \"nobody\" cannot get resource \"nodes\"", "get and watch on nodes"],
        ),
        (
            "wrong-ca",
            with(api.flags("n1", &reader), &[("--kube-ca-file", api.get("KUBE_OTHER_CA"))]),
            vec!["TLS with the Kubernetes API", "UnknownIssuer", api.get("KUBE_OTHER_CA")],
        ),
        ("401", api.flags("n1", &bogus), vec!["401 Unauthorized", bogus.to_str().unwrap()]),
        ("404", api.flags("nope", &reader), vec!["\"nope\" not found", "NODE_NAME"]),
        (
            "unreachable",
            with(api.flags("n1", &reader), &[("--kube-api-server", &format!("https://127.0.0.1:{closed_port}"))]),
            vec!["cannot reach the Kubernetes API", "Connection refused"],
        ),
    ];
    for (name, flags, expected) in cases {
        let run = TestDir::new(&format!("kube-refusal-{name}"));
        let out: Finished =
            supervise(&run, &flags, &["--node-health-timeout", "1500ms"]).spawn().wait_for(Duration::from_secs(30));
        assert_eq!(out.code, Some(138), "{name}: {}", out.stderr);
        assert!(
            out.elapsed >= Duration::from_millis(1500),
            "{name}: gave up after {:?}, before the timeout",
            out.elapsed
        );
        assert!(!run.join("started").exists(), "{name}: the child must not start");
        let reason = termination_log(&run);
        for e in &expected {
            assert!(reason.contains(e), "{name}: termination log {reason:?} must contain {e:?}");
        }
        assert!(out.stderr.contains("retrying"), "{name}: retries must be logged: {}", out.stderr);
        for secret in ["KUBE_READER_TOKEN", "KUBE_NOBODY_TOKEN", "KUBE_ADMIN_TOKEN"] {
            assert!(
                !out.stderr.contains(api.get(secret)) && !reason.contains(api.get(secret)),
                "{name}: a token was logged"
            );
        }
        eprintln!("{name}: {reason}");
        // check-node: one GET, the same message.
        let out = check_node(&flags);
        assert_eq!(out.status.code(), Some(138), "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(expected[0]), "{name}: check-node");
    }

    // A bad token at start with --unhealthy-node wait: rankvisor waits; fixing the file is enough.
    let run_dir = TestDir::new("kube-wait");
    let token = run_dir.write("token", "wrong\n");
    let run =
        supervise(&run_dir, &api.flags("n1", &token), &["--node-health-timeout", "500ms", "--unhealthy-node", "wait"])
            .spawn();
    // Past its start window the rejection is the verdict, and the replica waits for its node.
    run.wait_status("the replica to wait for its node", |s| s["state"] == "NodeUnhealthy");
    assert!(run.stderr().contains("401 Unauthorized"), "{}", run.stderr());
    assert!(!run_dir.join("started").exists(), "started with a rejected token");
    std::fs::write(&token, format!("{}\n", api.get("KUBE_READER_TOKEN"))).unwrap();
    wait_file(&run_dir.join("started"));
    api.set_status("n1", "Unschedulable");
    run.wait().assert_code(138);
}

/// Item 3: the API server restarted mid-run, with the token rotated meanwhile (the old token no
/// longer exists after the restart): the healthy run goes on, the watch recovers with the new
/// token read from the file, and a later label change still stops the child with 138.
#[test]
fn apiserver_restart_and_token_rotation_mid_run() {
    let api = ApiServer::start("restart");
    api.create_node("n1", "Schedulable");
    let dir = TestDir::new("kube-restart");
    let token = api.token_file(dir.path(), "KUBE_READER_TOKEN");
    let run = supervise(&dir, &api.flags("n1", &token), &["--node-health-timeout", "2s"]).spawn();
    wait_file(&dir.join("started"));
    run.wait_log(WATCHING, 1);
    let failures = run.log_lines(API_FAILED);

    // Rotate: the file now holds token B, and the restarted server no longer knows token A.
    std::fs::write(&token, format!("{}\n", api.get("KUBE_READER_TOKEN_B"))).unwrap();
    api.stop(true);
    let tokens = api.dir.join("pki/tokens.csv");
    let csv = std::fs::read_to_string(&tokens).unwrap();
    let kept: String =
        csv.lines().filter(|l| !l.starts_with(api.get("KUBE_READER_TOKEN"))).map(|l| format!("{l}\n")).collect();
    assert_eq!(kept.lines().count(), csv.lines().count() - 1);
    std::fs::write(&tokens, kept).unwrap();
    // rankvisor has seen the outage (its watch broke); the healthy run is not disturbed.
    run.wait_log(API_FAILED, failures + 1);
    let watches = run.log_lines(WATCHING);
    assert!(!dir.join("term").exists(), "the API outage stopped a healthy run");
    api.run_start();
    // A new watch after the restart: the token rotated in the file was read (token A is gone).
    run.wait_log(WATCHING, watches + 1);
    assert!(!dir.join("term").exists(), "the API outage stopped a healthy run");
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", api.get("KUBE_CA")])
        .args(["-H", &format!("Authorization: Bearer {}", api.get("KUBE_READER_TOKEN"))])
        .arg(format!("{}/api/v1/nodes/n1", api.get("KUBE_URL")))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401", "token A must be revoked by the restart");

    let sent = Instant::now();
    api.set_status("n1", "UnschedulablePendingReplacement");
    let out = run.wait();
    out.assert_code(138);
    eprintln!("after the restart: label change -> exit in {:?}", sent.elapsed());
    assert!(dir.join("term").exists(), "the child must get TERM");
    assert!(termination_log(&dir).contains("UnschedulablePendingReplacement"), "{}", termination_log(&dir));
    assert!(out.stderr.contains("Kubernetes API"), "the outage must be logged: {}", out.stderr);
    assert!(!out.stderr.contains(api.get("KUBE_READER_TOKEN_B")), "the token was logged");
}

/// While the API is retried at start (nothing runs yet), TERM still ends rankvisor at once (not
/// after its 60 s start window), with 128+15 and the reason in the termination log. Needs no API
/// server: nothing listens on the port.
#[test]
fn term_while_retrying_the_api_at_start_exits_promptly() {
    let dir = TestDir::new("kube-term-at-start");
    let token = dir.write("token", "t\n");
    let flags: Vec<String> = [
        "--node-health",
        "kubernetes",
        "--node-name",
        "n1",
        "--kube-api-server",
        &format!("http://127.0.0.1:{}", free_port()),
        "--kube-allow-insecure-http",
        "--kube-token-file",
        token.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = supervise(&dir, &flags, &["--node-health-timeout", "60s"]).spawn();
    run.wait_log("retrying", 1);
    let t = Instant::now();
    run.signal(libc::SIGTERM);
    let out = run.wait_for(Duration::from_secs(10));
    println!("TERM while retrying the API at start -> exit in {:?}", t.elapsed());
    out.assert_code(143);
    assert!(!dir.join("started").exists());
    assert_eq!(termination_log(&dir).trim_end(), "stopped by SIGTERM before the child started");
}

/// `--kube-api-server http://...` would send the bearer token in clear text: a configuration
/// error (64) naming the value and the opt-in, before the child starts; the same for check-node.
/// Needs no API server: nothing is contacted.
#[test]
fn a_plain_http_api_server_is_refused_without_the_opt_in() {
    let dir = TestDir::new("kube-insecure");
    let token = dir.write("token", "t\n");
    let url = format!("http://127.0.0.1:{}", free_port());
    let flags: Vec<String> =
        ["--node-health", "kubernetes", "--node-name", "n1", "--kube-api-server", &url, "--kube-token-file"]
            .iter()
            .map(|s| s.to_string())
            .chain([token.to_string_lossy().into_owned()])
            .collect();
    let out = supervise(&dir, &flags, &[]).spawn().wait_for(Duration::from_secs(10));
    out.assert_code(64);
    assert!(
        out.stderr.contains(&format!("{url:?}")) && out.stderr.contains("--kube-allow-insecure-http"),
        "{}",
        out.stderr
    );
    assert!(!dir.join("started").exists(), "the child must not start");
    let out = check_node(&flags);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("clear text"), "{stderr}");
}

/// A proxy set for the webhook (HTTPS_PROXY: here a port where nothing listens) never stands
/// between rankvisor and the in-cluster API server (KUBERNETES_SERVICE_HOST/PORT, reached
/// directly); an explicit --kube-api-server follows the proxy, as kubectl does, unless NO_PROXY
/// names it.
#[test]
fn a_proxy_set_for_the_webhook_does_not_cut_the_in_cluster_api() {
    let api = ApiServer::start("proxy");
    api.create_node("n1", "Schedulable");
    let dir = TestDir::new("kube-proxy");
    let token = api.token_file(dir.path(), "KUBE_READER_TOKEN");
    let dead_proxy = format!("http://127.0.0.1:{}", free_port());
    let url = api.get("KUBE_URL").to_string();
    let port = url.rsplit(':').next().unwrap().to_string();
    let run = |extra: &[&str], env: &[(&str, &str)]| -> Output {
        let mut c = rankvisor();
        c.args(["check-node", "--node-health", "kubernetes", "--node-name", "n1"])
            .args(["--kube-ca-file", api.get("KUBE_CA"), "--kube-token-file", token.to_str().unwrap()])
            .args(extra);
        // Only what each case sets: none of this process's proxies.
        for k in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY"] {
            c.env_remove(k);
        }
        c.env_remove("no_proxy");
        c.envs(env.iter().copied()).output().unwrap()
    };
    let proxied = ("HTTPS_PROXY", dead_proxy.as_str());
    let out = run(&[], &[("KUBERNETES_SERVICE_HOST", "127.0.0.1"), ("KUBERNETES_SERVICE_PORT", &port), proxied]);
    assert_eq!(out.status.code(), Some(0), "in-cluster: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("node: healthy"));
    let out = run(&["--kube-api-server", &url], &[proxied]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "through a dead proxy: {stderr}");
    assert!(stderr.contains("cannot reach the Kubernetes API"), "{stderr}");
    let out = run(&["--kube-api-server", &url], &[proxied, ("NO_PROXY", "127.0.0.1")]);
    assert_eq!(out.status.code(), Some(0), "NO_PROXY: {}", String::from_utf8_lossy(&out.stderr));
}
