//! Kubernetes Events and the Pod condition end to end: the real rankvisor binary against a real
//! kube-apiserver 1.20.2 (+ etcd) on loopback, started by scripts/k8s/start-apiserver.sh, with a
//! Pod object created by the admin and a Role granting the `rankvisor` user what docs/reporting.md says.
//!
//! Needs RANKVISOR_TEST_KUBE_APISERVER (the binary; scripts/test.sh builds it, cached): without it
//! the test FAILS, on purpose, rather than skip.

use crate::common;

use common::{Rv, TestDir};
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::apiserver;

use apiserver::ApiServer;
const NS: &str = "team";
const CONDITION: &str = "rankvisor.dev/ReplicaHealthy";

impl ApiServer {
    fn create(&self, path: &str, body: &str) {
        let (code, answer) = self.request("POST", path, "application/json", Some(body));
        assert_eq!(code, 201, "POST {path}: {answer}");
    }

    fn get_json(&self, path: &str) -> Value {
        let (code, body) = self.request("GET", path, "application/json", None);
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

/// An API server with the namespace, and the Role and RoleBinding docs/reporting.md tells users to
/// grant the pod's service account (the `rankvisor` user here).
fn api_with_rbac(name: &str) -> ApiServer {
    let api = ApiServer::start(name);
    api.create(
        "/api/v1/namespaces",
        &format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NS}"}}}}"#),
    );
    api.create(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"rankvisor-reporter"},"rules":[{"apiGroups":[""],"resources":["events"],"verbs":["create","patch"]},{"apiGroups":[""],"resources":["pods/status"],"verbs":["get","patch"]}]}"#,
    );
    api.create(
        &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
        r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"rankvisor-reporter"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"rankvisor-reporter"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"rankvisor"}]}"#,
    );
    api
}

#[test]
fn events_and_condition_with_rbac_and_one_warning_without() {
    let api = api_with_rbac("kube-events");

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

/// Issue 26 item 1: a log rule that fires is a `LogRule` Warning Event on the pod naming the
/// reason and the last matched line (escaped), not a `ChildFailed`; the condition says Failed.
#[test]
fn a_fired_log_rule_is_a_log_rule_event_on_the_pod() {
    let api = api_with_rbac("kube-events-log-rule");
    let pod = "lr-master-0";
    api.create_pod(pod);
    let dir = TestDir::new("kube-events-log-rule");
    let rules =
        dir.write("rules.json", r#"[{"name": "Oom", "logPattern": ".*out of memory.*", "faultOnMatch": true}]"#);
    let done = api
        .rankvisor(&dir, pod, "KUBE_READER_TOKEN")
        .args(["--restart-policy", "Never", "--log-rules"])
        .args([&rules])
        .sh(r#"echo "step 1"; printf 'CUDA out of memory \033[31m(GPU 0)\n'; exec sleep 30"#)
        .run();
    assert_eq!(done.code(), 143, "{}", done.stderr);
    assert!(!done.stderr.contains("Forbidden"), "{}", done.stderr);
    let events = api.events(pod);
    let (count, kind, message) = events.get("LogRule").unwrap_or_else(|| panic!("a LogRule Event: {events:#?}"));
    assert_eq!((*count, kind.as_str()), (1, "Warning"), "{events:#?}");
    assert!(
        message.contains(r#"LogFault_Oom; last matched line: "CUDA out of memory \u{1b}[31m(GPU 0)""#),
        "{message}"
    );
    assert!(!events.contains_key("ChildFailed"), "a fired rule is not a child failure: {events:#?}");
    let c = api.condition(pod).expect("the condition is on the Pod");
    assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("Failed")), "{c:#}");
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
