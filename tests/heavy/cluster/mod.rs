//! A one-node Kubernetes v1.20.2 for the tests (`scripts/k8s/kubelet/`): etcd, the project's
//! kube-apiserver and a real kubelet whose dockershim runs pods on the local Docker engine, with
//! rankvisor's image (`images/build.sh`) as the pods' image. One cluster per test process, one
//! kubelet per machine (a lock file); stopped on drop, and [`Cluster::stop`] proves with
//! `check-clean.sh` that no container, mount, cgroup, iptables rule or sysctl is left changed.
//! A run killed before its drop is cleaned up by the next start (the directory is fixed).
//!
//! Needs, from `scripts/test.sh`: `RANKVISOR_TEST_KUBE_NODE_BIN` (kubelet, kubectl, pause from
//! `scripts/k8s/kubelet/build.sh`), `RANKVISOR_TEST_KUBE_APISERVER`, `RANKVISOR_TEST_IMAGE`, and a
//! Docker engine. Anything missing fails the test loudly.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The node's name (the kubelet registers under its loopback address, see start.sh).
pub const NODE: &str = "127.0.0.1";
/// The HyperPod health label rankvisor reads from the Node.
pub const HEALTH_LABEL: &str = "sagemaker.amazonaws.com/node-health-status";

fn script(name: &str) -> String {
    format!("{ROOT}/scripts/k8s/kubelet/{name}")
}

fn required_env(var: &str, what: &str) -> String {
    let v = std::env::var(var).unwrap_or_default();
    assert!(
        !v.is_empty() && Path::new(&v).exists(),
        "{var}={v:?} is not {what}: run the tests with `bash scripts/test.sh`, which builds and exports it"
    );
    v
}

/// The running cluster.
pub struct Cluster {
    /// Its directory: `env`, `kubeconfig`, `logs/`, `kubelet/`, `host/` (hostPath volumes).
    pub dir: PathBuf,
    env: HashMap<String, String>,
    kubectl: String,
    image: String,
    stopped: bool,
    _lock: std::fs::File,
}

/// Run a script, returning its combined output and success.
fn run_script(args: &[&str], env: &[(&str, String)]) -> (bool, String) {
    let mut c = Command::new("bash");
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run bash");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

impl Cluster {
    /// Start the cluster; panics (the test fails) when a part is missing or the node is not Ready.
    pub fn start() -> Self {
        let bin = required_env("RANKVISOR_TEST_KUBE_NODE_BIN", "the directory of scripts/k8s/kubelet/build.sh");
        let apiserver = required_env("RANKVISOR_TEST_KUBE_APISERVER", "a kube-apiserver binary");
        let image = std::env::var("RANKVISOR_TEST_IMAGE").unwrap_or_default();
        let docker = Command::new("docker").args(["image", "inspect", "-f", "{{.Id}}", &image]).output();
        assert!(
            matches!(&docker, Ok(o) if o.status.success()),
            "RANKVISOR_TEST_IMAGE={image:?} is not an image of a Docker engine that answers ({docker:?}): \
             run the tests with `bash scripts/test.sh` (images/build.sh)"
        );
        // One kubelet per machine: a second test process waits here.
        let lock_path = std::env::temp_dir().join("rankvisor-real-node.lock");
        let lock = std::fs::File::create(&lock_path).expect("create the lock file");
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            eprintln!("cluster: another test process holds {}; waiting", lock_path.display());
            // SAFETY: as above.
            assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0, "flock");
        }
        let dir = std::env::temp_dir().join("rankvisor-real-node");
        if dir.exists() {
            // An earlier run died before its drop: undo what it left, and prove it.
            let d = dir.to_string_lossy().into_owned();
            let (_, out) = run_script(&[&script("stop.sh"), &d], &[]);
            let (clean, check) = run_script(&[&script("check-clean.sh"), &d], &[]);
            eprintln!("cluster: cleaned up after an earlier run:\n{out}{check}");
            assert!(clean, "an earlier run's cluster in {d} could not be cleaned up:\n{check}");
            std::fs::remove_dir_all(&dir).expect("remove the earlier run's directory");
        }
        std::fs::create_dir_all(dir.join("host")).unwrap();
        let ports = free_ports::<4>();
        let t = Instant::now();
        let d = dir.to_string_lossy().into_owned();
        let (ok, out) = run_script(
            &[&script("start.sh"), &bin, &apiserver, &d],
            &[
                ("API_PORT", ports[0].to_string()),
                ("ETCD_PORT", ports[1].to_string()),
                ("ETCD_PEER_PORT", ports[2].to_string()),
                ("KUBELET_PORT", ports[3].to_string()),
                ("KUBELET_HEALTHZ_PORT", free_ports::<1>()[0].to_string()),
            ],
        );
        eprint!("{out}");
        if !ok {
            let (_, stop) = run_script(&[&script("stop.sh"), &d], &[]);
            panic!("the cluster did not start ({:?}):\n{out}\nstop.sh:\n{stop}", t.elapsed());
        }
        eprintln!("cluster: node {NODE} Ready {:.1} s after start.sh began", t.elapsed().as_secs_f64());
        let text = std::fs::read_to_string(dir.join("env")).unwrap();
        let env: HashMap<String, String> =
            text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
        let kubectl = format!("{bin}/kubectl");
        Self { dir, env, kubectl, image, stopped: false, _lock: lock }
    }

    /// A value of the cluster's `env` file (`KUBECONFIG`, `KUBE_URL`, `API_PORT`, ...).
    pub fn get(&self, key: &str) -> &str {
        self.env.get(key).unwrap_or_else(|| panic!("{key} missing from the cluster's env"))
    }

    /// The API server's port on loopback.
    pub fn api_port(&self) -> u16 {
        self.get("API_PORT").parse().unwrap()
    }

    /// The image every pod runs (rankvisor as PID 1, busybox applets for the children).
    pub fn image(&self) -> &str {
        &self.image
    }

    /// A fresh directory on the host for a hostPath volume (world-writable: pods may run as anyone).
    pub fn host_dir(&self, name: &str) -> PathBuf {
        let p = self.dir.join("host").join(name);
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        p
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        // Its discovery cache in the cluster's directory, not the user's ~/.kube.
        c.env("KUBECONFIG", self.get("KUBECONFIG"))
            .arg("--request-timeout=20s")
            .arg(format!("--cache-dir={}", self.dir.join("kubectl-cache").display()));
        c
    }

    /// Run kubectl (the build's own, v1.20.2) with `args`.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run kubectl")
    }

    /// Run kubectl; panics with its stderr when it fails. Returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl create -f -` of one object (JSON).
    pub fn create(&self, obj: &Value) {
        let mut child = self
            .command()
            .args(["create", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child.stdin.take().unwrap().write_all(obj.to_string().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl create of {} failed: {}",
            obj["metadata"]["name"],
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The object as JSON, or None when it does not exist.
    pub fn get_json(&self, kind: &str, name: &str) -> Option<Value> {
        let out = self.kubectl(&["get", kind, name, "-o", "json"]);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("kubectl -o json"))
    }

    /// Set the node's HyperPod health label.
    pub fn label_node(&self, value: &str) {
        self.kubectl_ok(&["label", "node", NODE, &format!("{HEALTH_LABEL}={value}"), "--overwrite"]);
    }

    /// Watch the pod (`kubectl get -w`) until `pred` holds for a state of it; returns that state.
    /// Every state seen goes to `seen` (for timings). Panics after `limit`, naming `what` and
    /// showing the last state seen.
    pub fn wait_pod(&self, pod: &str, what: &str, limit: Duration, pred: impl FnMut(&PodEvent) -> bool) -> PodEvent {
        self.watch_pod(pod, what, limit, pred, &mut Vec::new())
    }

    /// As [`Cluster::wait_pod`], recording every state seen into `seen`.
    pub fn watch_pod(
        &self,
        pod: &str,
        what: &str,
        limit: Duration,
        mut pred: impl FnMut(&PodEvent) -> bool,
        seen: &mut Vec<PodEvent>,
    ) -> PodEvent {
        let mut watch = Watch::pod(self, pod);
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match watch.rx.recv_timeout(left) {
                Ok(ev) => {
                    seen.push(ev.clone());
                    if pred(&ev) {
                        return ev;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                    "timed out after {limit:?} waiting for pod {pod}: {what}; last seen: {}",
                    seen.last().map(|e| e.summary()).unwrap_or_else(|| "nothing".into())
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // kubectl's watch ended (its server-side timeout): watch again.
                    watch = Watch::pod(self, pod);
                }
            }
        }
    }

    /// The DNS stand-in for a pod started before its peer: append `ip name` to the /etc/hosts the
    /// kubelet manages for the pod (`<root-dir>/pods/<uid>/etc-hosts`, bind-mounted into each of
    /// its containers; appended in place, so the mount sees it), as a DNS record appears once the
    /// peer's headless service has an endpoint.
    pub fn add_host_record(&self, pod_uid: &str, ip: &str, name: &str) {
        let path = self.dir.join("kubelet/pods").join(pod_uid).join("etc-hosts");
        let mut f =
            std::fs::OpenOptions::new().append(true).open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        writeln!(f, "{ip}\t{name}\t# added by tests/cluster (no cluster DNS)").unwrap();
    }

    /// The pod's IP once it has one.
    pub fn pod_ip(&self, pod: &str) -> String {
        let ev = self.wait_pod(pod, "a pod IP", Duration::from_secs(120), |e| e.pod_ip().is_some());
        ev.pod_ip().unwrap()
    }

    /// Delete pods (grace 1 s) and wait until they are gone (a generous bound: a kubelet on a loaded
    /// 2-core machine took over 60 s to finish a delete).
    pub fn delete_pods(&self, pods: &[&str]) {
        if pods.is_empty() {
            return;
        }
        let mut args = vec!["delete", "pod", "--grace-period=1", "--wait=true", "--ignore-not-found", "--timeout=180s"];
        args.extend_from_slice(pods);
        self.kubectl_ok(&args);
    }

    /// The Events whose involved object is `name`, as JSON items.
    pub fn events_of(&self, name: &str) -> Vec<Value> {
        let out = self.kubectl_ok(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "json",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// Stop the cluster and prove the machine is as it was; Err lists what was left.
    pub fn stop(&mut self) -> Result<String, String> {
        self.stopped = true;
        let d = self.dir.to_string_lossy().into_owned();
        let t = Instant::now();
        let (_, stop) = run_script(&[&script("stop.sh"), &d], &[]);
        let (clean, check) = run_script(&[&script("check-clean.sh"), &d], &[]);
        let report = format!("{stop}{check}cluster: stopped in {:.1} s\n", t.elapsed().as_secs_f64());
        if clean {
            if !std::thread::panicking() {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
            Ok(report)
        } else {
            Err(report)
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            match self.stop() {
                Ok(r) => eprint!("{r}"),
                Err(r) => eprint!("cluster: NOT CLEAN after the stop:\n{r}"),
            }
            eprintln!("cluster: logs kept in {}/logs", self.dir.display());
        }
    }
}

/// `N` ports free on loopback right now.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let l: Vec<_> = (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| l[i].local_addr().unwrap().port())
}

/// One state of a pod from a watch: the event type (`ADDED`, `MODIFIED`, `DELETED`), the object,
/// and when this process received it.
#[derive(Debug, Clone)]
pub struct PodEvent {
    /// ADDED, MODIFIED or DELETED.
    pub kind: String,
    /// The Pod.
    pub pod: Value,
    /// When it arrived.
    pub at: Instant,
}

impl PodEvent {
    /// The first container's status.
    pub fn container(&self) -> &Value {
        &self.pod["status"]["containerStatuses"][0]
    }

    /// Its restart count (0 before the first status).
    pub fn restarts(&self) -> u64 {
        self.container()["restartCount"].as_u64().unwrap_or(0)
    }

    /// `state.terminated` of the first container, if terminated.
    pub fn terminated(&self) -> Option<&Value> {
        let t = &self.container()["state"]["terminated"];
        (!t.is_null()).then_some(t)
    }

    /// `lastState.terminated` of the first container.
    pub fn last_terminated(&self) -> Option<&Value> {
        let t = &self.container()["lastState"]["terminated"];
        (!t.is_null()).then_some(t)
    }

    /// True while the first container runs.
    pub fn running(&self) -> bool {
        !self.container()["state"]["running"].is_null()
    }

    /// `state.waiting.reason` of the first container.
    pub fn waiting_reason(&self) -> Option<&str> {
        self.container()["state"]["waiting"]["reason"].as_str()
    }

    /// The pod condition `ty`'s status (`True`, `False`, `Unknown`).
    pub fn condition(&self, ty: &str) -> Option<&Value> {
        self.pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ty)
    }

    /// True when the pod's Ready condition is True.
    pub fn ready(&self) -> bool {
        self.condition("Ready").is_some_and(|c| c["status"] == "True")
    }

    /// The pod's phase.
    pub fn phase(&self) -> &str {
        self.pod["status"]["phase"].as_str().unwrap_or("")
    }

    /// The pod's IP.
    pub fn pod_ip(&self) -> Option<String> {
        self.pod["status"]["podIP"].as_str().filter(|s| !s.is_empty()).map(String::from)
    }

    /// One line for failure messages.
    pub fn summary(&self) -> String {
        format!(
            "{} phase={} ready={} restarts={} state={} lastState={}",
            self.kind,
            self.phase(),
            self.ready(),
            self.restarts(),
            self.container()["state"],
            self.container()["lastState"]
        )
    }
}

/// `kubectl get pod NAME -o json -w --output-watch-events`, parsed in a thread.
struct Watch {
    child: Child,
    rx: mpsc::Receiver<PodEvent>,
}

impl Watch {
    fn pod(c: &Cluster, pod: &str) -> Self {
        let mut child = c
            .command()
            .args(["get", "pod", pod, "-o", "json", "--watch", "--output-watch-events"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run kubectl --watch");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let stream = serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>();
            for v in stream {
                let Ok(v) = v else { break };
                let ev = PodEvent {
                    kind: v["type"].as_str().unwrap_or("").to_string(),
                    pod: v["object"].clone(),
                    at: Instant::now(),
                };
                if tx.send(ev).is_err() {
                    break;
                }
            }
        });
        Self { child, rx }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Pod for the node, built the way the tests need it: rankvisor as the container's PID 1 (the
/// image's entrypoint, given explicitly), the image never pulled, bound to the node by
/// `spec.nodeName` (no scheduler), `dnsPolicy: Default` (no cluster DNS).
pub struct PodSpec {
    /// The Pod object.
    pub v: Value,
}

impl PodSpec {
    /// A pod `name` whose container `pytorch` runs `/rankvisor RANKVISOR_ARGS -- sh -c SCRIPT`.
    pub fn new(c: &Cluster, name: &str, rankvisor_args: &[&str], script: &str) -> Self {
        let mut command: Vec<String> = vec!["/rankvisor".into()];
        command.extend(rankvisor_args.iter().map(|s| s.to_string()));
        command.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
        let v = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "rankvisor-real-node"}},
            "spec": {
                "nodeName": NODE,
                "dnsPolicy": "Default",
                "restartPolicy": "OnFailure",
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "pytorch",
                    "image": c.image(),
                    "imagePullPolicy": "Never",
                    "command": command,
                    "env": [],
                    "volumeMounts": [],
                }],
                "volumes": [],
            }
        });
        Self { v }
    }

    fn container(&mut self) -> &mut Value {
        &mut self.v["spec"]["containers"][0]
    }

    /// Add an env variable.
    pub fn env(mut self, k: &str, val: &str) -> Self {
        self.container()["env"].as_array_mut().unwrap().push(json!({"name": k, "value": val}));
        self
    }

    /// Add an env variable from the downward API (`metadata.name`, `spec.nodeName`, ...).
    pub fn env_field(mut self, k: &str, field: &str) -> Self {
        self.container()["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": k, "valueFrom": {"fieldRef": {"fieldPath": field}}}));
        self
    }

    /// Set a field of the pod spec.
    pub fn spec(mut self, k: &str, val: Value) -> Self {
        self.v["spec"][k] = val;
        self
    }

    /// Set a field of the container.
    pub fn container_field(mut self, k: &str, val: Value) -> Self {
        self.container()[k] = val;
        self
    }

    /// Mount the host directory `dir` at `at`.
    pub fn host_path(mut self, name: &str, dir: &Path, at: &str) -> Self {
        self.v["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "hostPath": {"path": dir, "type": "Directory"}}));
        self.container()["volumeMounts"].as_array_mut().unwrap().push(json!({"name": name, "mountPath": at}));
        self
    }

    /// Map `names` to `ip` in the pod's /etc/hosts: the stand-in for the cluster DNS.
    pub fn host_alias(mut self, ip: &str, names: &[&str]) -> Self {
        if self.v["spec"]["hostAliases"].is_null() {
            self.v["spec"]["hostAliases"] = json!([]);
        }
        self.v["spec"]["hostAliases"].as_array_mut().unwrap().push(json!({"ip": ip, "hostnames": names}));
        self
    }

    /// A pod that talks to the API server as the service account `sa`: there is no kube-proxy to
    /// route the `kubernetes` Service's cluster IP, so the pod shares the host's network and
    /// KUBERNETES_SERVICE_HOST/PORT name the API server's loopback address (its certificate's SAN);
    /// the token and CA are the projected service-account volume the API server's admission adds.
    /// rankvisor's HTTP endpoint moves to `127.0.0.1:http_port` (the host's network is shared).
    pub fn in_cluster(self, c: &Cluster, sa: &str, http_port: u16) -> Self {
        self.spec("hostNetwork", json!(true))
            .spec("serviceAccountName", json!(sa))
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", &c.api_port().to_string())
            .env("RANKVISOR_HTTP_ADDR", &format!("127.0.0.1:{http_port}"))
            .env_field("NODE_NAME", "spec.nodeName")
            .env_field("POD_NAME", "metadata.name")
            .env_field("POD_NAMESPACE", "metadata.namespace")
    }

    /// Liveness `/healthz` and readiness `/readyz` probes on `port`, every second.
    pub fn probes(self, port: u16) -> Self {
        self.container_field(
            "readinessProbe",
            json!({"httpGet": {"path": "/readyz", "port": port}, "periodSeconds": 1, "failureThreshold": 1}),
        )
        .container_field(
            "livenessProbe",
            json!({"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 2, "failureThreshold": 3}),
        )
    }
}
