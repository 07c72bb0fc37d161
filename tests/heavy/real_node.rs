//! rankvisor where users run it: PID 1 of Pods that a real kubelet (v1.20.2, dockershim on the
//! local Docker engine) starts, probes, restarts and kills, on a one-node cluster started by
//! `tests/cluster` (scripts/k8s/kubelet/). The image is `images/build.sh`'s (FROM scratch,
//! `imagePullPolicy: Never`); assertions go through the build's own kubectl.
//!
//! One test function owns the cluster (about 20 s to a Ready node, so it is started once; nextest
//! runs every test function in its own process) and runs the scenarios below, two at a time: the
//! ones that read the Node's health label one after the other, the others beside them. Every
//! scenario runs even when an earlier one failed; the test fails naming each failed scenario, and
//! fails as well when the stopped cluster left anything behind (`check-clean.sh`).
//! `RANKVISOR_REAL_NODE_ONLY=delete,probes` runs a subset (by name prefix) while developing.
//!
//! No cluster DNS here; each scenario says what stands in for it (hostAliases with a pod IP, or
//! no name at all).

#[path = "cluster/mod.rs"]
mod cluster;
use crate::common;
use rankvisor_core::policy::RestartPolicy;

use cluster::{Cluster, PodEvent, PodSpec};
use std::path::Path;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// A kubelet's start, restart and status round trip takes seconds; its CrashLoopBackOff 10 s.
const POD_LIMIT: Duration = Duration::from_secs(90);

/// rankvisor's own settings in scenarios that need neither the API nor a rendezvous.
const ALONE: &[&str] = &["--node-health", "off", "--kube-events", "off", "--rendezvous", "off"];

/// Poll for a file's content until `pred` holds.
fn wait_file(path: &Path, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + POD_LIMIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if pred(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {}: {what} (content {text:?})", path.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pod's container status as kubectl shows it, for failure messages.
fn message_of(t: &serde_json::Value) -> &str {
    t["message"].as_str().unwrap_or("")
}

/// RFC 3339 seconds (the API's timestamps) to seconds since the epoch.
fn api_time(v: &serde_json::Value) -> i64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    let out = std::process::Command::new("date").args(["-u", "-d", s, "+%s"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("cannot parse {s}"))
}

// ---------------------------------------------------------------------------------------------
// 1. kubectl delete pod

/// The pod `rv-NAME`: rankvisor with `--grace-period GRACE` over a child that runs `on_term` on TERM
/// and loops, with the host directory `NAME` at /m. Once the child started and the pod runs,
/// `kubectl delete pod`; once the pod is gone, what the child wrote to /m/term and the pod's last
/// state with its container terminated.
fn delete_running_pod(c: &Cluster, name: &str, grace: &str, on_term: &str) -> (String, PodEvent) {
    let dir = c.host_dir(name);
    let pod = &format!("rv-{name}");
    c.create(
        &PodSpec::new(
            c,
            pod,
            &[ALONE, &["--grace-period", grace]].concat(),
            &format!("trap '{on_term}' TERM; echo started > /m/started; while :; do sleep 1; done"),
        )
        .host_path("m", &dir, "/m")
        .v,
    );
    wait_file(&dir.join("started"), "the child started", |t| t == "started\n");
    c.wait_pod(pod, "running", POD_LIMIT, |e| e.running());
    c.kubectl_ok(&["delete", "pod", pod, "--wait=false"]);
    let mut seen = Vec::new();
    c.watch_pod(pod, "deleted", POD_LIMIT, |e| e.kind == "DELETED", &mut seen);
    (std::fs::read_to_string(dir.join("term")).unwrap_or_default(), ended(&seen, pod))
}

/// `kubectl delete pod`: the kubelet stops the container (TERM to PID 1, rankvisor); rankvisor
/// forwards TERM to the child, whose trap writes a marker in a hostPath volume and exits 0; the
/// container ends with 0 before the pod's grace period is over (by the API's own timestamps).
fn delete_pod_terms_the_child(c: &Cluster) {
    let (term, last) = delete_running_pod(c, "delete-trap", "20s", "echo TERM > /m/term; exit 0");
    assert_eq!(term, "TERM\n", "the child's TERM trap ran");
    let t = last.terminated().unwrap();
    assert_eq!(t["exitCode"], 0, "the child's own status through rankvisor: {}", last.summary());
    ended_within_grace(&last);
}

/// The last state of a deleted pod that shows its container terminated (the kubelet reports the
/// end before it removes the pod).
fn ended(seen: &[PodEvent], pod: &str) -> PodEvent {
    seen.iter().rev().find(|e| e.terminated().is_some()).cloned().unwrap_or_else(|| {
        panic!(
            "pod {pod}: no state with the container terminated before DELETED; seen: {:#?}",
            seen.iter().map(|e| e.summary()).collect::<Vec<_>>()
        )
    })
}

/// The container ended before the pod's grace period did: `finishedAt` is at most the deletion
/// request plus `terminationGracePeriodSeconds`, when the kubelet would KILL. (The API server sets
/// `deletionTimestamp` to the request plus the grace, then moves it back by the grace when the
/// kubelet's final delete comes with grace 0; the request is `deletionTimestamp` minus
/// `deletionGracePeriodSeconds` in either state.)
fn ended_within_grace(e: &PodEvent) {
    let finished = api_time(&e.terminated().unwrap()["finishedAt"]);
    let meta = &e.pod["metadata"];
    let requested = api_time(&meta["deletionTimestamp"]) - meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
    let grace = e.pod["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert!(
        finished <= requested + grace,
        "the container ended at {finished}, after the grace period's end {}: {}",
        requested + grace,
        e.summary()
    );
}

/// A child that ignores TERM: rankvisor's `--grace-period 2s`, below the pod's 30 s, ends it with
/// KILL; the container's status is rankvisor's (the child's 128+9 = 137, and rankvisor's
/// termination message saying so), long before the kubelet's own KILL would come.
fn delete_pod_kills_a_term_ignoring_child_after_rankvisors_grace(c: &Cluster) {
    let (term, last) = delete_running_pod(c, "delete-ignore", "2s", "echo ignored >> /m/term");
    assert!(term.starts_with("ignored\n"), "the child saw TERM and ignored it");
    let t = last.terminated().unwrap();
    assert_eq!(t["exitCode"], 137, "rankvisor's status: its child's 128+9: {}", last.summary());
    assert_eq!(
        message_of(t),
        "stopped by SIGTERM: child killed by signal 9 (SIGKILL)\n",
        "rankvisor's termination message (the kubelet's KILL of PID 1 would leave none): {}",
        last.summary()
    );
    ended_within_grace(&last);
}

// ---------------------------------------------------------------------------------------------
// 3. termination messages

/// rankvisor's one-line reason reaches `lastState.terminated.message` (the container's
/// /dev/termination-log, `terminationMessagePolicy: File`): the backoff limit, and a rendezvous
/// that times out. (The node-health reason: `node_label_flip_stops_training_and_refuses_restarts`.)
fn termination_messages(c: &Cluster) {
    let backoff = "rv-msg-backoff";
    c.create(
        &PodSpec::new(
            c,
            backoff,
            &[ALONE, &["--backoff-limit", "1", "--backoff-initial", "100ms"]].concat(),
            "echo failing; exit 3",
        )
        .v,
    );
    // A worker whose master never comes: MASTER_ADDR resolves (hostAliases, the DNS stand-in) to
    // the pod's own loopback, where nothing listens.
    let rdzv = "rv-msg-rdzv-worker-0";
    c.create(
        &PodSpec::new(
            c,
            rdzv,
            &["--node-health", "off", "--kube-events", "off", "--rendezvous-timeout", "2s"],
            "echo never started",
        )
        .env("MASTER_ADDR", "rv-msg-rdzv-master-0")
        .env("MASTER_PORT", "23456")
        .env("WORLD_SIZE", "2")
        .env("RANK", "1")
        .env("PET_NNODES", "2")
        .host_alias("127.0.0.1", &["rv-msg-rdzv-master-0"])
        .v,
    );
    let e = c.wait_pod(backoff, "restarted after rankvisor gave up", POD_LIMIT, |e| e.last_terminated().is_some());
    let t = e.last_terminated().unwrap();
    assert_eq!(t["exitCode"], 3, "{}", e.summary());
    let m = message_of(t);
    assert_eq!(m.lines().count(), 1, "one line: {m:?}");
    assert!(m.contains("gave up after 1 restarts (backoff limit 1)"), "the backoff-limit reason: {m:?}");

    let e = c.wait_pod(rdzv, "restarted after the rendezvous timed out", POD_LIMIT, |e| e.last_terminated().is_some());
    let t = e.last_terminated().unwrap();
    assert_eq!(t["exitCode"], 138, "{}", e.summary());
    let m = message_of(t);
    assert_eq!(m.lines().count(), 1, "one line: {m:?}");
    assert!(m.contains("rendezvous") && m.contains("rv-msg-rdzv-master-0"), "the rendezvous reason: {m:?}");
    c.delete_pods(&[backoff, rdzv]);
}

// ---------------------------------------------------------------------------------------------
// 4. the node's health label, read through the API with the pod's own service account

/// `kubectl label node 127.0.0.1 ...=UnschedulablePendingReboot` while the child runs: rankvisor
/// (`--node-health kubernetes`: in-cluster config, the projected service-account token, NODE_NAME
/// from the downward API) stops the child and exits 138; the kubelet restarts the container
/// (restartPolicy OnFailure) and rankvisor refuses at once (the child does not start: a hostPath
/// file counts its starts) until the label is Schedulable again.
fn node_label_flip_stops_training_and_refuses_restarts(c: &Cluster) {
    let dir = c.host_dir("node-health");
    let pod = "rv-node-health";
    let [http] = cluster::free_ports::<1>();
    c.label_node("Schedulable");
    c.create(
        &PodSpec::new(
            c,
            pod,
            &["--node-health", "kubernetes", "--kube-events", "off", "--grace-period", "5s"],
            "echo start >> /m/starts; exec sleep 3600",
        )
        .in_cluster(c, "training", http)
        .host_path("m", &dir, "/m")
        .v,
    );
    wait_file(&dir.join("starts"), "the child started", |t| t == "start\n");
    c.wait_pod(pod, "running", POD_LIMIT, |e| e.running());
    c.label_node("UnschedulablePendingReboot");
    let e = c.wait_pod(pod, "stopped for the label and restarted", POD_LIMIT, |e| e.restarts() >= 1);
    let t = e.last_terminated().unwrap_or_else(|| panic!("no lastState: {}", e.summary()));
    assert_eq!(t["exitCode"], 138, "{}", e.summary());
    let m = message_of(t);
    assert_eq!(m.lines().count(), 1, "one line: {m:?}");
    assert!(m.contains("UnschedulablePendingReboot"), "the node-health reason names the label's value: {m:?}");
    // The restarted container refuses before starting the child; the kubelet backs off.
    let e = c.wait_pod(pod, "refused again (CrashLoopBackOff)", POD_LIMIT, |e| {
        e.restarts() >= 1 && e.waiting_reason() == Some("CrashLoopBackOff")
    });
    let t = e.last_terminated().unwrap();
    assert_eq!(t["exitCode"], 138, "{}", e.summary());
    assert!(message_of(t).contains("UnschedulablePendingReboot"), "{}", e.summary());
    assert_eq!(
        std::fs::read_to_string(dir.join("starts")).unwrap(),
        "start\n",
        "no child started on the unhealthy node"
    );
    c.label_node("Schedulable");
    wait_file(&dir.join("starts"), "the child started again once Schedulable", |t| t == "start\nstart\n");
    let e = c.wait_pod(pod, "running again", POD_LIMIT, |e| e.running());
    assert!(e.restarts() >= 2, "{}", e.summary());
    c.delete_pods(&[pod]);
}

// ---------------------------------------------------------------------------------------------
// 2. probes

/// Liveness `/healthz` and readiness `/readyz` on :9400, probed by the kubelet every second: a
/// 2-replica job's worker pod starts first, then the master's; both run but neither is Ready (the
/// kubelet's own `Unhealthy` events say `/readyz` answered 503) while the worker cannot reach the
/// master. Then the master's name resolves for the worker, the two meet at the rendezvous and
/// both become Ready; the liveness probe never failed (no restart). DNS stand-in: the master's
/// record is appended to the worker's kubelet-managed /etc/hosts once the master pod has an IP,
/// as the cluster DNS would serve it once the master's headless service has an endpoint.
fn probes_ready_only_after_the_rendezvous(c: &Cluster) {
    let master = "rv-probe-master-0";
    let worker = "rv-probe-worker-0";
    let job = |pod: PodSpec, rank: &str| {
        pod.env("MASTER_ADDR", master)
            .env("MASTER_PORT", "23456")
            .env("WORLD_SIZE", "2")
            .env("RANK", rank)
            .env("PET_NNODES", "2")
            .probes(9400)
    };
    let args = ["--node-health", "off", "--kube-events", "off", "--rendezvous-timeout", "5m"];
    let not_ready = |pod: &str| {
        let probed = wait_for(&format!("the kubelet's readiness probe of {pod} failing"), || {
            c.events_of(pod).into_iter().find(|e| e["reason"] == "Unhealthy")
        });
        let msg = probed["message"].as_str().unwrap_or("");
        assert!(msg.starts_with("Readiness probe failed") && msg.contains("503"), "{probed}");
        let e = c.wait_pod(pod, "running", POD_LIMIT, |e| e.running());
        assert!(!e.ready(), "{pod} runs but is not Ready before the rendezvous: {}", e.summary());
        e
    };
    c.create(&job(PodSpec::new(c, worker, &args, "exec sleep 3600"), "1").v);
    let w = not_ready(worker);
    c.create(&job(PodSpec::new(c, master, &args, "exec sleep 3600"), "0").v);
    not_ready(master);
    let ip = c.pod_ip(master);
    c.add_host_record(w.pod["metadata"]["uid"].as_str().unwrap(), &ip, master);
    let m = c.wait_pod(master, "Ready after the rendezvous", POD_LIMIT, |e| e.ready());
    let w = c.wait_pod(worker, "Ready after the rendezvous", POD_LIMIT, |e| e.ready());
    assert_eq!((m.restarts(), w.restarts()), (0, 0), "no liveness failure: {} / {}", m.summary(), w.summary());
    assert!(
        !c.events_of(master)
            .iter()
            .chain(c.events_of(worker).iter())
            .any(|e| e["message"].as_str().is_some_and(|m| m.starts_with("Liveness probe failed"))),
        "the liveness probe never failed"
    );
    c.delete_pods(&[master, worker]);
}

/// Poll (every 200 ms: each poll is a kubectl call) until `f` yields a value.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + POD_LIMIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {POD_LIMIT:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Events and the pod condition

/// rankvisor's Events and its `rankvisor.dev/ReplicaHealthy` condition, written with the pod's own
/// service account (`training`, with examples/k8s/rbac.yaml's Role: the pod holds no other
/// credential), as kubectl shows them: a child that fails twice and then succeeds leaves
/// `ChildFailed` (count 2), `ChildRestarted` (count 2) and `Succeeded` on the Pod, and the
/// condition False/Succeeded at the end. The same pod under the `default` service account (no
/// Role) writes neither, and says why in its log.
fn events_and_condition_with_the_pods_service_account(c: &Cluster) {
    let script = "[ \"$RANKVISOR_RESTART_COUNT\" -ge 2 ] && exit 0; exit 3";
    let args = ["--node-health", "kubernetes", "--kube-events", "on", "--backoff-initial", "100ms"];
    let pod = "rv-events";
    let [http, http_b] = cluster::free_ports::<2>();
    c.label_node("Schedulable"); // whatever an earlier scenario left
    c.create(&PodSpec::new(c, pod, &args, script).in_cluster(c, "training", http).v);
    let e = c.wait_pod(pod, "Succeeded", POD_LIMIT, |e| e.phase() == "Succeeded");
    assert_eq!(e.terminated().unwrap()["exitCode"], 0, "{}", e.summary());
    let cond = e.condition("rankvisor.dev/ReplicaHealthy").unwrap_or_else(|| panic!("no condition: {}", e.pod));
    assert_eq!((cond["status"].as_str(), cond["reason"].as_str()), (Some("False"), Some("Succeeded")), "{cond}");
    let mut seen = String::new();
    let deadline = Instant::now() + POD_LIMIT;
    let events = loop {
        let ev = c.events_of(pod);
        let count = |reason: &str| ev.iter().find(|e| e["reason"] == reason).and_then(|e| e["count"].as_u64());
        if count("ChildFailed") == Some(2) && count("ChildRestarted") == Some(2) && count("Succeeded") == Some(1) {
            break ev;
        }
        seen = ev
            .iter()
            .map(|e| format!("{} x{} ({})", e["reason"], e["count"], e["message"]))
            .collect::<Vec<_>>()
            .join("; ");
        assert!(
            Instant::now() < deadline,
            "timed out after {POD_LIMIT:?} waiting for rankvisor's three Events; seen: {seen}\nlog: {}",
            c.kubectl_ok(&["logs", pod])
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = seen;
    let uid = &e.pod["metadata"]["uid"];
    for ev in &events {
        if ["ChildFailed", "ChildRestarted", "Succeeded"].contains(&ev["reason"].as_str().unwrap_or("")) {
            assert_eq!(&ev["involvedObject"]["uid"], uid, "the Event is on this pod (kubectl describe lists it): {ev}");
            assert_eq!(ev["involvedObject"]["kind"], "Pod", "{ev}");
        }
    }
    let described = c.kubectl_ok(&["describe", "pod", pod]);
    assert!(described.contains("ChildFailed") && described.contains("rankvisor.dev/ReplicaHealthy"), "{described}");

    let refused = "rv-events-default-sa";
    // Node health off: the `default` account may not read Nodes either (rankvisor would refuse to
    // start, 138, after --node-health-timeout); what is shown here is the Events' and condition's RBAC.
    let args = ["--node-health", "off", "--kube-events", "on", "--backoff-initial", "100ms"];
    c.create(&PodSpec::new(c, refused, &args, script).in_cluster(c, "default", http_b).v);
    c.wait_pod(refused, "Succeeded", POD_LIMIT, |e| e.phase() == "Succeeded");
    let log = c.kubectl_ok(&["logs", refused]);
    assert!(log.contains("403") || log.contains("forbidden"), "a warning names the refusal: {log}");
    let ours: Vec<_> = c
        .events_of(refused)
        .into_iter()
        .filter(|e| ["ChildFailed", "ChildRestarted", "Succeeded"].contains(&e["reason"].as_str().unwrap_or("")))
        .collect();
    assert!(ours.is_empty(), "no rankvisor Event without the Role: {ours:?}");
    c.delete_pods(&[pod, refused]);
}

// ---------------------------------------------------------------------------------------------
// 6. a 3-replica job's pods as the operator makes them

/// The training operator's pod for `id`: the template's pod spec, the operator's env
/// (`rankvisor_dryrun::operator_env`, the dry run's own, with MASTER_ADDR the master's service
/// name as in a cluster, not the dry run's 127.0.0.1), its labels, and the replica's restart
/// policy. Added for this node: nodeName, dnsPolicy Default, the test image, the hostPath `/shared`,
/// and hostAliases with the master pod's IP (standing in for the cluster DNS that resolves the
/// master's headless service). Not added: the worker init container that waits for that DNS name
/// (rankvisor's own dialling retries do the waiting).
fn operator_pod(
    c: &Cluster,
    job: &rankvisor_dryrun::PyTorchJob,
    manifest: &serde_json::Value,
    id: rankvisor_dryrun::ReplicaId,
    shared: Option<&Path>,
    master_ip: Option<&str>,
) -> serde_json::Value {
    use rankvisor_dryrun::{operator_env, ReplicaType};
    let name = job.pod_name(id);
    let master = job.pod_name(rankvisor_dryrun::ReplicaId::MASTER);
    let spec = job.spec(id.rtype).unwrap();
    let mut template = manifest["spec"]["pytorchReplicaSpecs"][id.rtype.as_str()]["template"].clone();
    let mut labels = serde_json::json!({
        "training.kubeflow.org/job-name": job.name,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": id.rtype.lower(),
        "training.kubeflow.org/replica-index": id.index.to_string(),
    });
    if id.rtype == ReplicaType::Master {
        labels["training.kubeflow.org/job-role"] = "master".into();
    }
    let pod_spec = &mut template["spec"];
    // The operator's pods: ExitCode is the operator's own policy; the pod itself is Never.
    let restart = match spec.restart_policy {
        RestartPolicy::ExitCode => "Never".to_string(),
        p => p.to_string(),
    };
    pod_spec["restartPolicy"] = restart.into();
    pod_spec["nodeName"] = cluster::NODE.into();
    pod_spec["dnsPolicy"] = "Default".into();
    if let Some(shared) = shared {
        pod_spec["volumes"] =
            serde_json::json!([{"name": "shared", "hostPath": {"path": shared, "type": "Directory"}}]);
    }
    if let Some(ip) = master_ip {
        pod_spec["hostAliases"] = serde_json::json!([{"ip": ip, "hostnames": [master]}]);
    }
    let container = &mut pod_spec["containers"][0];
    container["image"] = c.image().into();
    if shared.is_some() {
        container["volumeMounts"] = serde_json::json!([{"name": "shared", "mountPath": "/shared"}]);
    }
    let env = container["env"].as_array().cloned().unwrap_or_default();
    let mut env: Vec<serde_json::Value> = env;
    for (k, v) in operator_env(job, id, job.master_port()) {
        let v = if k == "MASTER_ADDR" || k == "PET_MASTER_ADDR" { master.clone() } else { v };
        env.retain(|e| e["name"] != k.as_str());
        env.push(serde_json::json!({"name": k, "value": v}));
    }
    container["env"] = env.into();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": job.namespace, "labels": labels},
        "spec": template["spec"],
    })
}

/// Delete the pods of the replicas `ids` of `job` and their headless services: a job scenario's
/// clean-up.
fn delete_operator_objects(c: &Cluster, job: &rankvisor_dryrun::PyTorchJob, ids: &[rankvisor_dryrun::ReplicaId]) {
    let pods: Vec<String> = ids.iter().map(|id| job.pod_name(*id)).collect();
    let pods: Vec<&str> = pods.iter().map(String::as_str).collect();
    c.delete_pods(&pods);
    let mut args = vec!["delete", "service"];
    args.extend_from_slice(&pods);
    c.kubectl_ok(&args);
}

/// The operator's headless service for a replica: named like its pod, selecting it by labels.
fn operator_service(job: &rankvisor_dryrun::PyTorchJob, id: rankvisor_dryrun::ReplicaId) -> serde_json::Value {
    let selector = serde_json::json!({
        "training.kubeflow.org/job-name": job.name,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": id.rtype.lower(),
        "training.kubeflow.org/replica-index": id.index.to_string(),
    });
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": job.pod_name(id), "namespace": job.namespace, "labels": selector},
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            "ports": [{"name": "pytorchjob-port", "port": job.master_port(), "targetPort": job.master_port()}],
        }
    })
}

/// GET `path` on rankvisor's HTTP port of a pod (from the host, over docker0).
fn pod_http(ip: &str, path: &str) -> Option<(u16, String)> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-m", "5", "-w", "\n%{http_code}", &format!("http://{ip}:9400{path}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.parse().ok()?, body.to_string()))
}

/// examples/k8s/pytorchjob-real-node.yaml's three pods and headless services as the operator
/// makes them meet at the rendezvous across real pods; worker 1 crash-loops under the kubelet's
/// own backoff (CrashLoopBackOff, restartCount 2) while the master's `/job` shows it, then
/// succeeds, and all three pods end Succeeded.
fn operator_job_meets_and_finishes_across_pods(c: &Cluster) {
    use rankvisor_dryrun::{parse_job, ReplicaId};
    let path = format!("{ROOT}/examples/k8s/pytorchjob-real-node.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let job = parse_job(&text, &path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let manifest: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    let shared = c.host_dir("job");
    let ids = job.replicas();
    for id in &ids {
        c.create(&operator_service(&job, *id));
    }
    let master = job.pod_name(ReplicaId::MASTER);
    c.create(&operator_pod(c, &job, &manifest, ReplicaId::MASTER, Some(&shared), None));
    let ip = c.pod_ip(&master);
    for id in ids.iter().filter(|id| **id != ReplicaId::MASTER) {
        c.create(&operator_pod(c, &job, &manifest, *id, Some(&shared), Some(&ip)));
    }
    let crashing = job.pod_name(ReplicaId::worker(1));
    c.wait_pod(&crashing, "in CrashLoopBackOff", POD_LIMIT, |e| e.waiting_reason() == Some("CrashLoopBackOff"));
    let view = wait_for("the master's /job showing worker 1's failure", || {
        let (code, body) = pod_http(&ip, "/job")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let r = &v["replicas"]["2"];
        (code == 200 && (r["last_exit"] == 3 || r["connected"] == false)).then_some(v)
    });
    eprintln!("master's /job while worker 1 crash-loops: {}", view["replicas"]["2"]);
    for id in &ids {
        let pod = job.pod_name(*id);
        let e = c.wait_pod(&pod, "Succeeded", Duration::from_secs(120), |e| e.phase() == "Succeeded");
        if *id == ReplicaId::worker(1) {
            assert!(e.restarts() >= 2, "worker 1 crash-looped: {}", e.summary());
            assert_eq!(e.last_terminated().unwrap()["exitCode"], 3, "{}", e.summary());
        } else {
            assert_eq!(e.restarts(), 0, "{}", e.summary());
        }
    }
    delete_operator_objects(c, &job, &ids);
}

// ---------------------------------------------------------------------------------------------
// 6b. a Trainer v2 TrainJob's nodes as the JobSet and the Indexed Job make them

/// Node `k` of the TrainJob `rvtj` on 2 nodes as the Job controller makes its pod: hostname
/// `rvtj-node-0-<k>`, subdomain `rvtj` (the JobSet's headless Service), the completion index as an
/// annotation, the JobSet's labels, and the Torch plugin's five variables (`PET_NODE_RANK` a
/// `fieldRef` to the annotation) with `JOB_COMPLETION_INDEX`. Added for this node as for the
/// operator's pods: nodeName, dnsPolicy Default, the test image, a downward-API labels volume at
/// `/etc/podinfo`, and on node 1 hostAliases with node 0's IP for `rvtj-node-0-0.rvtj`.
fn train_job_node(c: &Cluster, k: u32, master_ip: Option<&str>) -> PodSpec {
    const TJ: &str = "rvtj";
    let master = format!("{TJ}-node-0-0.{TJ}");
    let pod = format!("{TJ}-node-0-{k}-{}", ["x7k2p", "b4n9q"][k as usize]);
    let script = "echo \"node $PET_NODE_RANK of $PET_NNODES at $PET_MASTER_ADDR\"; sleep 5";
    let args = ["--node-health", "off", "--kube-events", "off", "--backoff-limit", "0"];
    let mut p = PodSpec::new(c, &pod, &args, script)
        .env("PET_NNODES", "2")
        .env("PET_NPROC_PER_NODE", "1")
        .env_field("PET_NODE_RANK", "metadata.annotations['batch.kubernetes.io/job-completion-index']")
        .env("PET_MASTER_ADDR", &master)
        .env("PET_MASTER_PORT", "29500")
        .env("JOB_COMPLETION_INDEX", &k.to_string())
        .spec("hostname", format!("{TJ}-node-0-{k}").into())
        .spec("subdomain", TJ.into());
    p.v["metadata"]["annotations"] = serde_json::json!({"batch.kubernetes.io/job-completion-index": k.to_string()});
    p.v["metadata"]["labels"] = serde_json::json!({
        "app": "rankvisor-real-node",
        "jobset.sigs.k8s.io/jobset-name": TJ,
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "batch.kubernetes.io/job-completion-index": k.to_string(),
    });
    p.v["spec"]["volumes"].as_array_mut().unwrap().push(serde_json::json!({
        "name": "podinfo",
        "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
    }));
    p.v["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "podinfo", "mountPath": "/etc/podinfo"}));
    match master_ip {
        Some(ip) => p.host_alias(ip, &[&master]),
        None => p,
    }
}

/// Two pods of the v2 shape meet at node 0's barrier (on PET_MASTER_PORT+1) and succeed; each
/// one's `/status` names the TrainJob, the flavour `trainer-v2` and the JobSet's restart attempt 0.
fn train_job_nodes_meet_at_node_0_and_succeed(c: &Cluster) {
    c.create(&serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "rvtj", "namespace": "default"},
        "spec": {
            "clusterIP": "None",
            "selector": {"jobset.sigs.k8s.io/jobset-name": "rvtj"},
            "ports": [{"name": "node", "port": 29500, "targetPort": 29500}],
        },
    }));
    let node0 = train_job_node(c, 0, None);
    let name0 = node0.v["metadata"]["name"].as_str().unwrap().to_string();
    c.create(&node0.v);
    let ip = c.pod_ip(&name0);
    let node1 = train_job_node(c, 1, Some(&ip));
    let name1 = node1.v["metadata"]["name"].as_str().unwrap().to_string();
    c.create(&node1.v);
    let status = wait_for("node 0's /status with its child running", || {
        let (code, body) = pod_http(&ip, "/status")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (code == 200 && v["state"] == "Running").then_some(v)
    });
    assert_eq!(status["job"], "rvtj", "the TrainJob's name, from PET_MASTER_ADDR: {status}");
    assert_eq!(
        (status["flavour"].as_str(), status["restart_attempt"].as_u64()),
        (Some("trainer-v2"), Some(0)),
        "{status}"
    );
    assert_eq!((status["rank"].as_u64(), status["replica_type"].as_str()), (Some(0), Some("Master")), "{status}");
    for (pod, k) in [(&name0, 0), (&name1, 1)] {
        let e = c.wait_pod(pod, "Succeeded", Duration::from_secs(120), |e| e.phase() == "Succeeded");
        assert_eq!(e.restarts(), 0, "{}", e.summary());
        let logs = c.kubectl_ok(&["logs", pod.as_str()]);
        assert!(logs.contains(&format!("node {k} of 2 at rvtj-node-0-0.rvtj")), "{pod}: {logs}");
    }
    c.delete_pods(&[name0.as_str(), name1.as_str()]);
    c.kubectl_ok(&["delete", "service", "rvtj"]);
}

// ---------------------------------------------------------------------------------------------
// the harness itself

/// The message of the scenario that fails on purpose.
const ABANDONED: &str = "abandoned on purpose: the clean-up after a failed scenario is what is tested";

/// A scenario that fails with its pod running, its hostPath volume mounted and a kubectl watch
/// open: the suite expects exactly this failure, and the clean-up check after the stop must still
/// find the machine as it was (so a failing scenario cannot leave anything behind unnoticed).
fn abandoned_pod(c: &Cluster) {
    let dir = c.host_dir("abandoned");
    let pod = "rv-abandoned";
    c.create(&PodSpec::new(c, pod, ALONE, "echo started > /m/started; exec sleep 3600").host_path("m", &dir, "/m").v);
    wait_file(&dir.join("started"), "the child started", |t| t == "started\n");
    c.wait_pod(pod, "running", POD_LIMIT, |e| {
        assert!(!e.running(), "{ABANDONED}");
        false
    });
}

// ---------------------------------------------------------------------------------------------
// 7. seed 000's scenarios replayed (opt-in: scripts/k8s/kubelet/replay-seed.sh)

/// A pod's state as `kubectl get pods` prints it: STATUS and RESTARTS.
fn kubectl_status(pod: &serde_json::Value) -> (String, u64) {
    let cs = &pod["status"]["containerStatuses"][0];
    let restarts = cs["restartCount"].as_u64().unwrap_or(0);
    let status = if pod["status"]["phase"] == "Succeeded" {
        "Completed".to_string()
    } else if let Some(r) = pod["status"]["reason"].as_str() {
        r.to_string()
    } else if let Some(r) = cs["state"]["waiting"]["reason"].as_str() {
        r.to_string()
    } else if let Some(r) = cs["state"]["terminated"]["reason"].as_str() {
        r.to_string()
    } else if !cs["state"]["running"].is_null() {
        "Running".to_string()
    } else {
        pod["status"]["phase"].as_str().unwrap_or("Pending").to_string()
    };
    (status, restarts)
}

/// Each pod's (STATUS, RESTARTS) changes with their time in ms, in pod-name order.
type Timeline = std::collections::BTreeMap<String, Vec<(u64, String, u64)>>;

fn record(timeline: &mut Timeline, pod: &str, ms: u64, status: String, restarts: u64) {
    let rows = timeline.entry(pod.to_string()).or_default();
    if !matches!(rows.last(), Some((_, s, r)) if *s == status && *r == restarts) {
        rows.push((ms, status, restarts));
    }
}

/// The dry run's pod rows for `example` (its `--output json`).
fn dry_run_timeline(example: &str, extra: &[&str]) -> Timeline {
    let bin = common::bin();
    let out = std::process::Command::new(bin)
        .args(["dry-run", "--output", "json", "--watch", "pods", "--timeout", "40s"])
        .args(extra)
        .arg(format!("{ROOT}/examples/{example}"))
        .stderr(std::process::Stdio::null())
        .output()
        .expect("run rankvisor dry-run");
    let mut timeline = Timeline::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v["kind"] == "Pod" && v["type"] != "DELETED" {
            let f = &v["fields"];
            let (Some(ms), Some(status)) = (v["time_ms"].as_u64(), f["status"].as_str()) else { continue };
            record(
                &mut timeline,
                v["name"].as_str().unwrap_or(""),
                ms,
                status.to_string(),
                f["restarts"].as_u64().unwrap_or(0),
            );
        }
    }
    timeline
}

/// The same job's pods on the kubelet, observed for `window` (or until every pod completed):
/// rankvisor (`--backoff-limit 0`) gives each child failure to the kubelet, whose restarts and
/// CrashLoopBackOff are the ones timed. The seed's `resources` stay only for the gang example:
/// elsewhere four 1-CPU pods would not fit this 2-CPU node (the kubelet rejects them OutOfcpu).
fn kubelet_timeline(c: &Cluster, example: &str, window: Duration) -> Timeline {
    use rankvisor_dryrun::{parse_job, ReplicaId};
    let path = format!("{ROOT}/examples/{example}");
    let text = std::fs::read_to_string(&path).unwrap();
    let job = parse_job(&text, &path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let manifest: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
    let keep_resources = example.contains("gang");
    let render = |id: ReplicaId, ip: Option<&str>| {
        let mut pod = operator_pod(c, &job, &manifest, id, None, ip);
        let container = &mut pod["spec"]["containers"][0];
        let mut command: Vec<serde_json::Value> =
            ["/rankvisor", "--node-health", "off", "--kube-events", "off", "--backoff-limit", "0", "--"]
                .iter()
                .map(|s| serde_json::json!(s))
                .collect();
        command.extend(container["command"].as_array().cloned().unwrap_or_default());
        container["command"] = command.into();
        if !keep_resources {
            container.as_object_mut().unwrap().remove("resources");
        }
        pod
    };
    let ids = job.replicas();
    let selector = format!("training.kubeflow.org/job-name={}", job.name);
    let t0 = Instant::now();
    let done = std::sync::atomic::AtomicBool::new(false);
    let timeline = std::thread::scope(|s| {
        // Sampled every 200 ms from the job's creation on, while the pods are being created.
        let sampler = s.spawn(|| {
            let mut timeline = Timeline::new();
            while t0.elapsed() < window && !done.load(std::sync::atomic::Ordering::SeqCst) {
                let out = c.kubectl_ok(&["get", "pods", "-l", &selector, "-o", "json"]);
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                let ms = t0.elapsed().as_millis() as u64;
                let items = v["items"].as_array().cloned().unwrap_or_default();
                for pod in &items {
                    let (status, restarts) = kubectl_status(pod);
                    record(&mut timeline, pod["metadata"]["name"].as_str().unwrap(), ms, status, restarts);
                }
                if items.len() == ids.len() && items.iter().all(|p| p["status"]["phase"] == "Succeeded") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            timeline
        });
        let created = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for id in &ids {
                c.create(&operator_service(&job, *id));
            }
            c.create(&render(ReplicaId::MASTER, None));
            let ip = c.pod_ip(&job.pod_name(ReplicaId::MASTER));
            for id in ids.iter().filter(|id| **id != ReplicaId::MASTER) {
                c.create(&render(*id, Some(&ip)));
            }
        }));
        if created.is_err() {
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let timeline = sampler.join().unwrap();
        if let Err(e) = created {
            std::panic::resume_unwind(e);
        }
        timeline
    });
    delete_operator_objects(c, &job, &ids);
    timeline
}

fn print_timeline(name: &str, t: &Timeline) {
    for (pod, rows) in t {
        let row: Vec<String> = rows.iter().map(|(ms, s, r)| format!("{s}/{r}@{ms}")).collect();
        eprintln!("  {name:<8} {pod:<16} {}", row.join(" "));
    }
}

/// Seed 000's five scenarios (examples/*.yaml), each run by the dry run and then as pods on this
/// kubelet, printing both timelines (STATUS/RESTARTS@ms since the job's creation); no timing is
/// asserted. What the operator would decide (the job's phase, deleting pods on failure) and
/// Volcano's gang admission are not on this cluster: the kubelet shows its own part only.
fn seed_replay(c: &Cluster) {
    let scenarios: &[(&str, &[&str], u64)] = &[
        ("pytorchjob.yaml", &[], 30),
        ("pytorchjob-worker-fails.yaml", &[], 35),
        ("pytorchjob-all-workers-fail.yaml", &[], 35),
        ("pytorchjob-master-fails.yaml", &[], 45),
        ("pytorchjob-gang.yaml", &["--queue-capability", "cpu=2"], 20),
    ];
    for (example, extra, window) in scenarios {
        let dry = dry_run_timeline(example, extra);
        let real = kubelet_timeline(c, example, Duration::from_secs(*window));
        eprintln!("--- {example} (STATUS/RESTARTS@ms)");
        print_timeline("dry-run", &dry);
        print_timeline("kubelet", &real);
        assert!(!real.is_empty(), "{example}: no pod seen on the kubelet");
    }
}

// ---------------------------------------------------------------------------------------------

type Scenario = (&'static str, fn(&Cluster));

/// Scenarios that read or change the Node's health label, run one after the other.
const WITH_NODE_LABEL: &[Scenario] = &[
    ("node_label_flip", node_label_flip_stops_training_and_refuses_restarts),
    ("events", events_and_condition_with_the_pods_service_account),
];

/// The others, run beside them.
const WITHOUT_NODE_LABEL: &[Scenario] = &[
    ("delete_trap", delete_pod_terms_the_child),
    ("delete_ignore", delete_pod_kills_a_term_ignoring_child_after_rankvisors_grace),
    ("termination_messages", termination_messages),
    ("probes", probes_ready_only_after_the_rendezvous),
    ("operator_job", operator_job_meets_and_finishes_across_pods),
    ("trainjob", train_job_nodes_meet_at_node_0_and_succeed),
    ("abandoned_pod", abandoned_pod),
];

/// Not part of the suite: run only when named in RANKVISOR_REAL_NODE_ONLY (a figure, no assert
/// on it; about 3 minutes).
const ON_REQUEST: &[Scenario] = &[("seed_replay", seed_replay)];

fn run_group(c: &Cluster, group: &[Scenario], only: &[String]) -> Vec<(String, Result<Duration, String>)> {
    let mut results = Vec::new();
    for (name, f) in group {
        if !only.is_empty() && !only.iter().any(|o| name.starts_with(o.as_str())) {
            continue;
        }
        eprintln!("=== scenario {name}");
        let t = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c)));
        let r = match r {
            Ok(()) => Ok(t.elapsed()),
            Err(e) => Err(e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()),
        };
        eprintln!(
            "=== scenario {name}: {} in {:.1} s",
            if r.is_ok() { "ok" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        results.push((name.to_string(), r));
    }
    results
}

#[test]
fn pods_on_a_real_kubelet() {
    let only: Vec<String> = std::env::var("RANKVISOR_REAL_NODE_ONLY")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut c = Cluster::start();
    // The service account `training` with the Role and ClusterRole rankvisor needs, as shipped.
    c.kubectl_ok(&["apply", "-f", &format!("{ROOT}/examples/k8s/rbac.yaml")]);
    let results: Vec<_> = std::thread::scope(|s| {
        let a = s.spawn(|| run_group(&c, WITH_NODE_LABEL, &only));
        let b = s.spawn(|| run_group(&c, WITHOUT_NODE_LABEL, &only));
        let mut r = a.join().unwrap();
        r.extend(b.join().unwrap());
        let requested: Vec<Scenario> =
            ON_REQUEST.iter().copied().filter(|(n, _)| only.iter().any(|o| n.starts_with(o.as_str()))).collect();
        r.extend(run_group(&c, &requested, &only));
        r
    });
    let stopped = c.stop();
    eprintln!("--- scenarios:");
    for (name, r) in &results {
        match r {
            Ok(d) => eprintln!("ok      {name} ({:.1} s)", d.as_secs_f64()),
            Err(m) if name == "abandoned_pod" => eprintln!("failed  {name}, as it must: {m}"),
            Err(m) => eprintln!("FAILED  {name}: {m}"),
        }
    }
    match &stopped {
        Ok(r) => eprint!("{r}"),
        Err(r) => eprint!("{r}"),
    }
    assert!(!results.is_empty(), "RANKVISOR_REAL_NODE_ONLY={only:?} selects no scenario");
    let expected = |name: &str, r: &Result<Duration, String>| match r {
        Err(m) => name == "abandoned_pod" && m.contains(ABANDONED),
        Ok(_) => name != "abandoned_pod",
    };
    let failed: Vec<&str> = results.iter().filter(|(n, r)| !expected(n, r)).map(|(n, _)| n.as_str()).collect();
    assert!(failed.is_empty(), "failed scenarios: {failed:?} (abandoned_pod must fail, on purpose)");
    assert!(stopped.is_ok(), "the cluster left the machine changed (see check-clean above)");
}
