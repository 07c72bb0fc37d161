//! Kubernetes Events and the Pod condition end to end: the real rankvisor binary against a real
//! kube-apiserver 1.20.2 (+ etcd) on loopback, started by scripts/k8s/start-apiserver.sh, with a
//! Pod object created by the admin and a Role granting the `rankvisor` user what the README says.
//!
//! Needs RANKVISOR_TEST_KUBE_APISERVER (the binary; scripts/test.sh builds it, cached): without it
//! the test FAILS, on purpose, rather than skip.

mod common;

use common::{Rv, TestDir};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NS: &str = "team";
const CONDITION: &str = "rankvisor.dev/ReplicaHealthy";

/// etcd + kube-apiserver in their own directory and on their own ports; stopped on drop.
struct ApiServer {
    dir: PathBuf,
    env: HashMap<String, String>,
}

fn free_ports() -> [u16; 3] {
    let l: Vec<_> = (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    [0, 1, 2].map(|i| l[i].local_addr().unwrap().port())
}

impl ApiServer {
    fn start() -> Self {
        let bin = std::env::var("RANKVISOR_TEST_KUBE_APISERVER").unwrap_or_default();
        assert!(
            !bin.is_empty() && Path::new(&bin).is_file(),
            "RANKVISOR_TEST_KUBE_APISERVER={bin:?} is not a kube-apiserver binary: run the tests with \
             `bash scripts/test.sh`, or build it with `bash scripts/k8s/build-apiserver.sh` and export its path"
        );
        let dir = std::env::temp_dir().join(format!("rv-kube-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports = free_ports();
        let t = Instant::now();
        let out = Command::new("bash")
            .arg(format!("{ROOT}/scripts/k8s/start-apiserver.sh"))
            .arg(&bin)
            .arg(&dir)
            .env("API_PORT", ports[0].to_string())
            .env("ETCD_PORT", ports[1].to_string())
            .env("ETCD_PEER_PORT", ports[2].to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let mut s = Self { dir, env: HashMap::new() };
        assert!(out.status.success(), "start-apiserver.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("kube-apiserver ready in {:?}", t.elapsed());
        let text = std::fs::read_to_string(s.dir.join("env")).unwrap();
        s.env = text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
        s
    }

    fn get(&self, key: &str) -> &str {
        self.env.get(key).map(String::as_str).unwrap_or_else(|| panic!("{key} missing from the env file"))
    }

    /// curl with the admin token; returns (HTTP code, body).
    fn admin(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let mut c = Command::new("curl");
        c.args(["-sS", "--cacert", self.get("KUBE_CA"), "-X", method, "-w", "\n%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {}", self.get("KUBE_ADMIN_TOKEN"))]);
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/json", "-d", b]);
        }
        let out = c.arg(format!("{}{path}", self.get("KUBE_URL"))).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    fn create(&self, path: &str, body: &str) {
        let (code, answer) = self.admin("POST", path, Some(body));
        assert_eq!(code, 201, "POST {path}: {answer}");
    }

    fn get_json(&self, path: &str) -> Value {
        let (code, body) = self.admin("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// A Pod object, bound to a node (no scheduler or kubelet runs).
    fn create_pod(&self, name: &str) {
        self.create(
            &format!("/api/v1/namespaces/{NS}/pods"),
            &format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}"}},"spec":{{"nodeName":"n1","containers":[{{"name":"trainer","image":"trainer:1"}}]}}}}"#
            ),
        );
    }

    /// The Events about `pod`: reason -> (count, type, message).
    fn events(&self, pod: &str) -> HashMap<String, (u64, String, String)> {
        let list = self.get_json(&format!("/api/v1/namespaces/{NS}/events"));
        let mut out = HashMap::new();
        for e in list["items"].as_array().unwrap() {
            if e["involvedObject"]["name"] == pod {
                let reason = e["reason"].as_str().unwrap().to_string();
                let prev = out.insert(
                    reason.clone(),
                    (
                        e["count"].as_u64().unwrap_or(0),
                        e["type"].as_str().unwrap_or_default().to_string(),
                        e["message"].as_str().unwrap_or_default().to_string(),
                    ),
                );
                assert!(prev.is_none(), "one Event object per reason, but {reason} twice: {list:#}");
            }
        }
        out
    }

    fn condition(&self, pod: &str) -> Option<Value> {
        let p = self.get_json(&format!("/api/v1/namespaces/{NS}/pods/{pod}"));
        p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == CONDITION).cloned()
    }

    fn pod_uid(&self, pod: &str) -> String {
        self.get_json(&format!("/api/v1/namespaces/{NS}/pods/{pod}"))["metadata"]["uid"].as_str().unwrap().into()
    }

    fn token_file(&self, dir: &Path, key: &str) -> PathBuf {
        let p = dir.join(format!("token-{key}"));
        std::fs::write(&p, format!("{}\n", self.get(key))).unwrap();
        p
    }

    /// rankvisor reporting to this API server as `pod`, with the token named `key`.
    fn rankvisor(&self, dir: &TestDir, pod: &str, key: &str) -> Rv {
        let token = self.token_file(dir.path(), key);
        Rv::new(dir)
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", NS)
            .env("NODE_NAME", "n1")
            .env("DIR", &dir.path().to_string_lossy())
            .args(["--kube-events", "on", "--node-health", "off", "--http-addr", "off"])
            .args(["--kube-api-server", self.get("KUBE_URL"), "--kube-ca-file", self.get("KUBE_CA")])
            .args(["--kube-token-file".into(), token.to_string_lossy().into_owned()])
            .args(["--backoff-initial", "100ms", "--termination-log"])
            .args([dir.join("termination-log")])
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(format!("{ROOT}/scripts/k8s/stop-apiserver.sh")).arg(&self.dir).status();
        if std::thread::panicking() {
            eprintln!("keeping {} (logs/) for inspection", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Fails twice (after a moment, so every state is seen), then runs a second and succeeds.
const FLAKY: &str = r#"n=$(cat "$DIR/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$DIR/n"
sleep 0.3; [ "$n" -le 2 ] && exit 3; touch "$DIR/third"; sleep 1; exit 0"#;

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn events_and_condition_with_rbac_and_one_warning_without() {
    let api = ApiServer::start();
    api.create(
        "/api/v1/namespaces",
        &format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NS}"}}}}"#),
    );
    // What the README tells users to grant the pod's service account.
    api.create(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"rankvisor-reporter"},"rules":[{"apiGroups":[""],"resources":["events"],"verbs":["create","patch"]},{"apiGroups":[""],"resources":["pods/status"],"verbs":["get","patch"]}]}"#,
    );
    api.create(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"rankvisor-reporter"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"rankvisor-reporter"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"rankvisor"}]}"#,
    );

    // With RBAC: a child that fails twice, then succeeds.
    let pod = "kj-master-0";
    api.create_pod(pod);
    let dir = TestDir::new("kube-events-rbac");
    let run = api.rankvisor(&dir, pod, "KUBE_READER_TOKEN").sh(FLAKY).spawn();
    wait_for("the third start", Duration::from_secs(15), || dir.join("third").exists());
    wait_for("the condition True while the third child runs", Duration::from_secs(5), || {
        api.condition(pod).is_some_and(|c| c["status"] == "True" && c["reason"] == "Running")
    });
    let done = run.wait_for(Duration::from_secs(15));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(!done.stderr.contains("Forbidden"), "{}", done.stderr);
    let events = api.events(pod);
    assert_eq!(events.get("ChildFailed").map(|e| (e.0, e.1.as_str())), Some((2, "Warning")), "{events:#?}");
    assert!(events["ChildFailed"].2.contains("exited with code 3"), "{events:#?}");
    assert_eq!(events.get("ChildRestarted").map(|e| (e.0, e.1.as_str())), Some((2, "Normal")), "{events:#?}");
    assert_eq!(events.get("Succeeded").map(|e| (e.0, e.1.as_str())), Some((1, "Normal")), "{events:#?}");
    assert_eq!(events.len(), 3, "{events:#?}");
    // `kubectl describe pod` matches Events by the Pod's uid.
    let list = api
        .get_json(&format!("/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.uid%3D{}", api.pod_uid(pod)));
    assert_eq!(list["items"].as_array().unwrap().len(), 3, "{list:#}");
    let c = api.condition(pod).expect("the condition is on the Pod");
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("Succeeded")), "{c:#}");
    assert!(c["lastTransitionTime"].as_str().is_some_and(|t| t.ends_with('Z')), "{c:#}");

    // Without RBAC: exactly one warning, and supervision does not notice.
    let pod = "kj-worker-0";
    api.create_pod(pod);
    let dir = TestDir::new("kube-events-norbac");
    let done = api.rankvisor(&dir, pod, "KUBE_NOBODY_TOKEN").sh(FLAKY).run();
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let warnings: Vec<&str> = done.stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{}", done.stderr);
    assert!(warnings[0].contains("403 Forbidden") && warnings[0].contains("pods/status"), "{}", warnings[0]);
    assert!(warnings[0].contains("supervision continues"), "{}", warnings[0]);
    assert!(api.events(pod).is_empty());
    assert!(api.condition(pod).is_none());
}

#[test]
fn kube_events_on_needs_the_downward_api() {
    let dir = TestDir::new("kube-events-no-pod");
    let done = Rv::new(&dir)
        .args(["--kube-events", "on", "--node-health", "off", "--http-addr", "off"])
        .args(["--kube-api-server", "https://127.0.0.1:1", "--termination-log"])
        .args([dir.join("termination-log")])
        .env("POD_NAMESPACE", NS)
        .sh("exit 0")
        .run();
    assert_eq!(done.code(), 64, "{}", done.stderr);
    assert!(done.stderr.contains("POD_NAME") && done.stderr.contains("downward API"), "{}", done.stderr);
    // auto outside a cluster is off: nothing is tried, nothing is warned.
    let done = Rv::new(&dir)
        .args(["--node-health", "off", "--http-addr", "off"])
        .env("POD_NAME", "kj-master-0")
        .env("POD_NAMESPACE", NS)
        .sh("exit 0")
        .run();
    assert_eq!(done.code(), 0, "{}", done.stderr);
    assert!(!done.stderr.contains("WARN"), "{}", done.stderr);
}
