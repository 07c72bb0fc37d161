//! examples/k8s/ against a real kube-apiserver 1.20.2 (scripts/k8s/start-apiserver.sh): a
//! server-side dry run (`?dryRun=All`) of every RBAC object and of each replica's pod template as
//! the Pod the training-operator would create (the PyTorchJob CRD is not installed there). The
//! server drops unknown fields silently in 1.20, so every field sent must also come back.
//!
//! Needs RANKVISOR_TEST_KUBE_APISERVER (scripts/test.sh builds it, cached): without it the test fails.

use crate::common;

use common::repo_file;
use serde_json::{json, Value};

use crate::apiserver;

use apiserver::ApiServer;

impl ApiServer {
    /// `method` `path` with a JSON body as the admin; returns the HTTP status and the answer.
    fn call(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let (code, text) = self.request(method, path, "application/json", Some(&body.to_string()));
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A real create (or replace, for an object the test server already has).
    fn apply(&self, obj: &Value) {
        let path = collection_path(obj);
        let (mut code, mut answer) = self.call("POST", &path, obj);
        if code == 409 {
            let name = obj["metadata"]["name"].as_str().unwrap();
            (code, answer) = self.call("PUT", &format!("{path}/{name}"), obj);
        }
        assert!(code == 200 || code == 201, "create {} refused: HTTP {code}: {answer:#}", obj["kind"]);
    }

    /// Whether the job's service account may `verb` `resource` (SubjectAccessReview).
    fn allowed(&self, verb: &str, resource: &str, subresource: &str, namespace: &str) -> bool {
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "system:serviceaccount:default:training",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"],
                "resourceAttributes": {"verb": verb, "resource": resource, "subresource": subresource, "namespace": namespace}
            }
        });
        let (code, answer) = self.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", &review);
        assert_eq!(code, 201, "SubjectAccessReview: HTTP {code}: {answer:#}");
        answer["status"]["allowed"] == json!(true)
    }

    /// A dry-run create (or, for an object the test server already has, a dry-run replace).
    fn dry_run(&self, obj: &Value) -> Value {
        let path = collection_path(obj);
        let (code, answer) = self.call("POST", &format!("{path}?dryRun=All"), obj);
        let (code, answer) = if code == 409 {
            let name = obj["metadata"]["name"].as_str().unwrap();
            self.call("PUT", &format!("{path}/{name}?dryRun=All"), obj)
        } else {
            (code, answer)
        };
        assert!(
            code == 200 || code == 201,
            "dry run of {} {} refused: HTTP {code}: {answer:#}",
            obj["kind"],
            obj["metadata"]["name"]
        );
        answer
    }
}

/// The REST collection of `obj` (the kinds examples/k8s/ uses).
fn collection_path(obj: &Value) -> String {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
    match obj["kind"].as_str().unwrap_or_default() {
        "ServiceAccount" => format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        "Pod" => format!("/api/v1/namespaces/{ns}/pods"),
        "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles".into(),
        "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
        "Role" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
        "RoleBinding" => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
        other => panic!("examples/k8s/: kind {other:?} not expected"),
    }
}

/// The first field of `sent` missing from `back` or changed there (None: nothing was dropped as unknown).
fn dropped(sent: &Value, back: &Value, at: &str) -> Option<String> {
    match (sent, back) {
        (Value::Object(s), Value::Object(b)) => s.iter().find_map(|(k, v)| match b.get(k) {
            None => Some(format!("{at}.{k} was dropped by the server (unknown field?)")),
            Some(inner) => dropped(v, inner, &format!("{at}.{k}")),
        }),
        (Value::Array(s), Value::Array(b)) if s.len() != b.len() => {
            Some(format!("{at}: {} items sent, {} back", s.len(), b.len()))
        }
        (Value::Array(s), Value::Array(b)) => {
            s.iter().zip(b).enumerate().find_map(|(i, (x, y))| dropped(x, y, &format!("{at}[{i}]")))
        }
        _ if sent == back => None,
        _ => Some(format!("{at}: sent {sent}, back {back}")),
    }
}

fn assert_kept(sent: &Value, back: &Value, at: &str) {
    if let Some(d) = dropped(sent, back, at) {
        panic!("{d}");
    }
}

fn yaml_docs(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            use serde::Deserialize;
            Value::deserialize(d).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The Pod the training-operator makes from `replica_type`'s template (its restartPolicy and the
/// env it injects, on top of the template).
fn pod_of(job: &Value, replica_type: &str) -> Value {
    let spec = &job["spec"]["pytorchReplicaSpecs"][replica_type];
    let name = format!("{}-{}-0", job["metadata"]["name"].as_str().unwrap(), replica_type.to_lowercase());
    let mut metadata = spec["template"]["metadata"].clone();
    if metadata.is_null() {
        metadata = json!({});
    }
    metadata["name"] = json!(name);
    metadata["namespace"] = job["metadata"]["namespace"].clone();
    let mut pod_spec = spec["template"]["spec"].clone();
    pod_spec["restartPolicy"] = spec["restartPolicy"].clone();
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec})
}

#[test]
fn examples_k8s_pass_a_server_side_dry_run() {
    let api = ApiServer::start("k8s-manifests");
    let rbac = yaml_docs("examples/k8s/rbac.yaml");
    let kinds: Vec<&str> = rbac.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(kinds, ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]);
    for obj in &rbac {
        let back = api.dry_run(obj);
        assert_kept(obj, &back, obj["kind"].as_str().unwrap());
    }
    let jobs = yaml_docs("examples/k8s/pytorchjob.yaml");
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job["kind"], "PyTorchJob");
    for rt in ["Master", "Worker"] {
        let pod = pod_of(job, rt);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["name"], "pytorch");
        assert_eq!(c["command"][0], "/rankvisor");
        assert_eq!(c["terminationMessagePolicy"], "FallbackToLogsOnError");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(pod["metadata"]["annotations"]["prometheus.io/port"], "9400");
        let env: Vec<&str> = c["env"].as_array().unwrap().iter().filter_map(|e| e["name"].as_str()).collect();
        for v in ["NODE_NAME", "POD_NAME", "POD_NAMESPACE"] {
            assert!(env.contains(&v), "{rt}: env {v} missing");
        }
        let back = api.dry_run(&pod);
        assert_kept(&pod, &back, &format!("{rt} pod"));
        eprintln!("{rt} pod template: accepted by kube-apiserver (dryRun=All), no field dropped");
    }

    // The check has teeth: a misspelt field is dropped (and caught), a bad value is refused.
    let mut typo = pod_of(job, "Worker");
    typo["spec"]["containers"][0]["terminationMessagePolicyy"] = json!("FallbackToLogsOnError");
    let back = api.dry_run(&typo);
    let typo_caught = dropped(&typo, &back, "typo pod").unwrap_or_default();
    assert!(typo_caught.contains("terminationMessagePolicyy was dropped"), "{typo_caught}");
    let mut bad = pod_of(job, "Worker");
    bad["spec"]["containers"][0]["terminationMessagePolicy"] = json!("FallbackToLogs");
    let (code, _) = api.call("POST", "/api/v1/namespaces/default/pods?dryRun=All", &bad);
    assert_eq!(code, 422, "a bad terminationMessagePolicy must be refused");

    // Created for real, the RBAC objects give the job's service account what rankvisor needs, and no more.
    for obj in &rbac {
        api.apply(obj);
    }
    for (verb, resource, sub, ns) in [
        ("get", "nodes", "", ""),
        ("watch", "nodes", "", ""),
        ("create", "events", "", "default"),
        ("patch", "events", "", "default"),
        ("get", "pods", "status", "default"),
        ("patch", "pods", "status", "default"),
    ] {
        assert!(api.allowed(verb, resource, sub, ns), "training may not {verb} {resource}/{sub}");
    }
    for (verb, resource, sub, ns) in [
        ("list", "nodes", "", ""),
        ("patch", "nodes", "", ""),
        ("delete", "pods", "", "default"),
        ("patch", "pods", "", "default"),
    ] {
        assert!(!api.allowed(verb, resource, sub, ns), "training may {verb} {resource}/{sub}: more than needed");
    }
    eprintln!("RBAC: service account default/training may get/watch nodes, create/patch events, get/patch pods/status");
}
