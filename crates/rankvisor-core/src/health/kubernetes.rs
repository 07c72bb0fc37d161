//! The Kubernetes API source: GET this pod's Node, then watch it, and publish a new observation
//! whenever the verdict (or the error keeping it from us) changes.
//!
//! Before the first successful GET, failures are retried silently (logged, not published) until
//! the start timeout: a brief API hiccup at pod start must not cost a restart. After that, errors
//! are published; the driver keeps the last verdict during the run and refuses to start before it.

use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::source::{HealthError, Observation};
use super::verdict::verdict;
use crate::backoff::Backoff;
use crate::kube::{KubeClient, KubeError, WatchEvent};

/// How the watcher behaves; `new` gives the production settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeWatchOptions {
    /// This pod's node (`NODE_NAME`).
    pub node: String,
    /// `--require-health-label`.
    pub require: bool,
    /// `--node-health-timeout`: how long failures before the first GET stay unpublished.
    pub start_timeout: Duration,
    /// First retry delay; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// The watch's `timeoutSeconds`: the server ends each watch after about this long.
    pub watch_timeout_secs: u64,
    /// Silence on a watch longer than this (past `watch_timeout_secs`) counts as a dropped stream.
    pub idle_slack: Duration,
}

impl KubeWatchOptions {
    /// Production settings: retries from 500 ms up to 15 s, 5-minute watches.
    pub fn new(node: String, require: bool, start_timeout: Duration) -> Self {
        Self {
            node,
            require,
            start_timeout,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(15),
            watch_timeout_secs: 300,
            idle_slack: Duration::from_secs(30),
        }
    }
}

/// One GET of the Node, judged (for `rankvisor check-node`).
pub async fn read_kubernetes_verdict(client: &KubeClient, node: &str, require: bool) -> Observation {
    match client.get_node(node).await {
        Ok(n) => Ok(verdict(&n.snapshot(), require)),
        Err(error) => Err(HealthError::Kubernetes { node: node.to_string(), error }),
    }
}

/// Start the watcher; resolves once the first observation is known (the first successful GET, or
/// the error still standing when `start_timeout` ends). Needs a tokio runtime with IO and time.
/// The task ends when every receiver is dropped.
pub async fn spawn_kubernetes_watcher(client: KubeClient, opts: KubeWatchOptions) -> watch::Receiver<Observation> {
    let placeholder = Err(HealthError::Kubernetes {
        node: opts.node.clone(),
        error: KubeError::Unreachable { url: client.config().api_server.clone(), problem: "not contacted yet".into() },
    });
    let (tx, rx) = watch::channel(placeholder);
    let (first_tx, first_rx) = oneshot::channel();
    let done = tx.clone();
    tokio::spawn(async move {
        let mut w = Watcher { client, opts, tx, first: Some(first_tx), started: Instant::now() };
        tokio::select! {
            () = w.run() => {}
            () = done.closed() => {}
        }
    });
    let _ = first_rx.await;
    rx
}

struct Watcher {
    client: KubeClient,
    opts: KubeWatchOptions,
    tx: watch::Sender<Observation>,
    first: Option<oneshot::Sender<()>>,
    started: Instant,
}

impl Watcher {
    fn publish(&mut self, obs: Observation) {
        self.tx.send_if_modified(|current| {
            let changed = *current != obs;
            if changed {
                *current = obs;
            }
            changed
        });
        if let Some(first) = self.first.take() {
            let _ = first.send(());
        }
    }

    /// An error: published unless we are still inside the silent start window.
    fn fail(&mut self, error: KubeError) {
        let starting = self.first.is_some();
        let window_left = self.opts.start_timeout.saturating_sub(self.started.elapsed());
        if starting && !window_left.is_zero() {
            warn!(node = %self.opts.node, "Kubernetes API: {error}; retrying for up to {window_left:?} before giving up");
            return;
        }
        warn!(node = %self.opts.node, "Kubernetes API: {error}; retrying");
        self.publish(Err(HealthError::Kubernetes { node: self.opts.node.clone(), error }));
    }

    /// Sleep the next backoff delay, but never past the end of the start window while starting.
    async fn pause(&mut self, backoff: &mut Backoff) {
        let mut delay = backoff.next_delay();
        if self.first.is_some() {
            let window_left = self.opts.start_timeout.saturating_sub(self.started.elapsed());
            if !window_left.is_zero() {
                delay = delay.min(window_left);
            }
        }
        tokio::time::sleep(delay).await;
    }

    async fn run(&mut self) {
        let mut backoff = Backoff::new(self.opts.backoff_initial, self.opts.backoff_max);
        let node = self.opts.node.clone();
        let idle = Duration::from_secs(self.opts.watch_timeout_secs) + self.opts.idle_slack;
        loop {
            // List: the current state, whatever was missed while not watching.
            let listed = match self.client.get_node(&node).await {
                Ok(n) => n,
                Err(e) => {
                    self.fail(e);
                    self.pause(&mut backoff).await;
                    continue;
                }
            };
            self.publish(Ok(verdict(&listed.snapshot(), self.opts.require)));
            let mut rv = listed.metadata.resource_version;
            // Watch from there until the stream expires or breaks.
            loop {
                let opened = Instant::now();
                let mut stream = match self.client.watch_node(&node, &rv, self.opts.watch_timeout_secs, idle).await {
                    Ok(s) => s,
                    Err(e) => {
                        self.fail(e);
                        self.pause(&mut backoff).await;
                        break;
                    }
                };
                debug!(node = %node, resource_version = %rv, "watching the node");
                let relist = loop {
                    match stream.next().await {
                        Ok(Some(WatchEvent::Added(n) | WatchEvent::Modified(n))) => {
                            backoff.reset();
                            rv = n.metadata.resource_version.clone();
                            self.publish(Ok(verdict(&n.snapshot(), self.opts.require)));
                        }
                        Ok(Some(WatchEvent::Bookmark(v))) => rv = v,
                        Ok(Some(WatchEvent::Deleted(_))) => {
                            self.fail_deleted();
                            break true;
                        }
                        Ok(Some(WatchEvent::Error(s))) if s.code == 410 => {
                            info!(node = %node, "watch expired ({}): re-listing", s.message);
                            break true;
                        }
                        Ok(Some(WatchEvent::Error(s))) => {
                            let error = KubeError::Watch {
                                node: node.clone(),
                                problem: format!("error event {} {}: {}", s.code, s.reason, s.message),
                            };
                            self.fail(error);
                            break true;
                        }
                        // The server ends every watch after timeoutSeconds: resume from rv.
                        Ok(None) => break false,
                        Err(e) => {
                            self.fail(e);
                            break true;
                        }
                    }
                };
                if relist || opened.elapsed() < Duration::from_secs(1) {
                    // Also when a watch ends cleanly at once: never spin on a server that does that.
                    self.pause(&mut backoff).await;
                }
                if relist {
                    break;
                }
            }
        }
    }

    fn fail_deleted(&mut self) {
        warn!(node = %self.opts.node, "the node was deleted from the Kubernetes API");
        self.publish(Err(HealthError::NodeDeleted { node: self.opts.node.clone() }));
    }
}

/// A fake API server for what a real one cannot do on demand: a 410 in mid-stream, a connection
/// cut mid-event, failures at start. It speaks the wire format recorded from kube-apiserver
/// 1.20.2 over HTTP/1.1: `200 OK`, `Cache-Control: no-cache, private`, `Content-Type:
/// application/json`, `Transfer-Encoding: chunked`, one event per chunk, each ending in `\n`.
#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::time::timeout;

    use super::*;
    use crate::health::NODE_HEALTH_STATUS;
    use crate::kube::{KubeConfig, KubeOverrides};

    const GUARD: Duration = Duration::from_secs(10);

    /// What the fake does with the next watch request.
    #[derive(Debug, Clone)]
    enum Plan {
        /// Send these lines (one chunk each), then end the stream cleanly.
        Events(Vec<String>),
        /// Send these lines, then half of an event, then close the connection.
        Cut(Vec<String>),
        /// Send nothing and keep the stream open.
        Hold,
    }

    #[derive(Default)]
    struct State {
        status: String,
        rv: u64,
        /// GETs answered 503 before the first success.
        get_failures: u32,
        watches: VecDeque<Plan>,
        requests: Vec<String>,
        /// Applied just before a planned watch's last line is sent (a change the watch misses).
        change_during_watch: Option<String>,
        /// The token's directory, removed when the server (and so the state) goes with the runtime.
        _dir: Option<tempfile::TempDir>,
    }

    type Shared = Arc<Mutex<State>>;

    fn node_json(status: &str, rv: u64) -> String {
        format!(
            r#"{{"kind":"Node","apiVersion":"v1","metadata":{{"name":"n1","uid":"f44da681","resourceVersion":"{rv}","creationTimestamp":"2026-11-29T14:58:05Z","labels":{{"{NODE_HEALTH_STATUS}":"{status}"}}}},"spec":{{"taints":[{{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"}}]}},"status":{{"daemonEndpoints":{{"kubeletEndpoint":{{"Port":0}}}},"nodeInfo":{{"machineID":""}}}}}}"#
        )
    }

    fn event(kind: &str, status: &str, rv: u64) -> String {
        format!(r#"{{"type":"{kind}","object":{}}}"#, node_json(status, rv))
    }

    fn bookmark(rv: u64) -> String {
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"Node","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","creationTimestamp":null}},"spec":{{}},"status":{{"daemonEndpoints":{{"kubeletEndpoint":{{"Port":0}}}},"nodeInfo":{{}}}}}}}}"#
        )
    }

    fn expired(rv: u64) -> String {
        format!(
            r#"{{"type":"ERROR","object":{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"too old resource version: {rv} ({})","reason":"Expired","code":410}}}}"#,
            rv + 100
        )
    }

    const HEAD_200: &str = "HTTP/1.1 200 OK\r\nCache-Control: no-cache, private\r\nContent-Type: application/json\r\nDate: Sun, 29 Nov 2026 14:58:16 GMT\r\n";

    fn chunk(line: &str) -> String {
        format!("{:x}\r\n{line}\n\r\n", line.len() + 1)
    }

    async fn serve(listener: TcpListener, state: Shared) {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            tokio::spawn(connection(sock, state.clone()));
        }
    }

    /// One keep-alive connection: requests in sequence until a plan closes it.
    async fn connection(mut sock: TcpStream, state: Shared) {
        let mut buf = Vec::new();
        loop {
            let head = loop {
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    break head;
                }
                let mut tmp = [0u8; 4096];
                match sock.read(&mut tmp).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&tmp[..n]),
                }
            };
            let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
            let (reply, plan) = {
                let mut s = state.lock().unwrap();
                s.requests.push(path.clone());
                if path.contains("watch=true") {
                    (None, Some(s.watches.pop_front().unwrap_or(Plan::Hold)))
                } else if s.get_failures > 0 {
                    s.get_failures -= 1;
                    let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"etcdserver: leader changed","reason":"ServiceUnavailable","code":503}"#;
                    (Some(format!("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())), None)
                } else {
                    let body = node_json(&s.status, s.rv);
                    (Some(format!("{HEAD_200}Content-Length: {}\r\n\r\n{body}", body.len())), None)
                }
            };
            if let Some(r) = reply {
                if sock.write_all(r.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            if sock.write_all(format!("{HEAD_200}Transfer-Encoding: chunked\r\n\r\n").as_bytes()).await.is_err() {
                return;
            }
            match plan.unwrap_or(Plan::Hold) {
                Plan::Events(lines) => {
                    send_lines(&mut sock, &state, &lines).await;
                    if sock.write_all(b"0\r\n\r\n").await.is_err() {
                        return;
                    }
                }
                Plan::Cut(lines) => {
                    send_lines(&mut sock, &state, &lines).await;
                    let half = event("MODIFIED", "Schedulable", 999);
                    let half = &half[..half.len() / 2];
                    let _ = sock.write_all(format!("{:x}\r\n{half}\r\n", half.len()).as_bytes()).await;
                    let _ = sock.flush().await;
                    return;
                }
                Plan::Hold => {
                    let _ = sock.flush().await;
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    async fn send_lines(sock: &mut TcpStream, state: &Shared, lines: &[String]) {
        for (i, line) in lines.iter().enumerate() {
            if i + 1 == lines.len() {
                let mut s = state.lock().unwrap();
                if let Some(status) = s.change_during_watch.take() {
                    s.status = status;
                    s.rv += 10;
                }
            }
            let _ = sock.write_all(chunk(line).as_bytes()).await;
            let _ = sock.flush().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn fake(state: State) -> (KubeClient, Shared) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "fake-token\n").unwrap();
        let shared = Arc::new(Mutex::new(State { _dir: Some(dir), ..state }));
        tokio::spawn(serve(listener, shared.clone()));
        let overrides = KubeOverrides {
            api_server: Some(format!("http://{addr}")),
            token_file: Some(token_file),
            allow_insecure_http: true,
            ..Default::default()
        };
        let cfg = KubeConfig::resolve(&overrides, |_| None).unwrap();
        (KubeClient::new(cfg).unwrap(), shared)
    }

    fn fast(start_timeout: Duration) -> KubeWatchOptions {
        KubeWatchOptions {
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
            ..KubeWatchOptions::new("n1".into(), false, start_timeout)
        }
    }

    fn status_of(obs: &Observation) -> Option<String> {
        obs.as_ref().ok().and_then(|v| v.node_health_status.clone())
    }

    async fn next(rx: &mut watch::Receiver<Observation>) -> Observation {
        timeout(GUARD, rx.changed()).await.expect("no new observation").expect("watcher ended");
        rx.borrow_and_update().clone()
    }

    /// The requests, once there are at least `n`.
    async fn wait_requests(s: &Shared, n: usize) -> Vec<String> {
        let start = Instant::now();
        while requests(s).len() < n && start.elapsed() < GUARD {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        requests(s)
    }

    fn requests(s: &Shared) -> Vec<String> {
        s.lock().unwrap().requests.clone()
    }

    #[tokio::test]
    async fn expired_watch_mid_stream_relists() {
        let state = State {
            status: "Schedulable".into(),
            rv: 10,
            watches: [Plan::Events(vec![bookmark(11), expired(11)])].into(),
            change_during_watch: Some("UnschedulablePendingReboot".into()),
            ..Default::default()
        };
        let (client, shared) = fake(state).await;
        let mut rx = spawn_kubernetes_watcher(client, fast(GUARD)).await;
        assert_eq!(status_of(&rx.borrow_and_update()).as_deref(), Some("Schedulable"));
        let obs = next(&mut rx).await;
        assert_eq!(status_of(&obs).as_deref(), Some("UnschedulablePendingReboot"), "{obs:?}");
        let reqs = wait_requests(&shared, 4).await;
        assert_eq!(reqs[0], "/api/v1/nodes/n1");
        assert!(
            reqs[1].starts_with(
                "/api/v1/nodes?watch=true&fieldSelector=metadata.name%3Dn1&allowWatchBookmarks=true&resourceVersion=10&timeoutSeconds=300"
            ),
            "{reqs:?}"
        );
        assert_eq!(reqs[2], "/api/v1/nodes/n1", "a 410 must re-list: {reqs:?}");
        assert!(reqs[3].contains("resourceVersion=20"), "watch again from the new list: {reqs:?}");
    }

    #[tokio::test]
    async fn connection_cut_mid_event_relists() {
        let state = State {
            status: "Schedulable".into(),
            rv: 10,
            watches: [Plan::Cut(vec![event("MODIFIED", "Schedulable", 11)])].into(),
            change_during_watch: Some("Unschedulable".into()),
            ..Default::default()
        };
        let (client, shared) = fake(state).await;
        let mut rx = spawn_kubernetes_watcher(client, fast(GUARD)).await;
        assert_eq!(status_of(&rx.borrow_and_update()).as_deref(), Some("Schedulable"));
        // The cut is published as an error (the driver keeps the last verdict), then the re-list's verdict.
        let mut seen = Vec::new();
        loop {
            let obs = next(&mut rx).await;
            seen.push(obs.clone());
            if status_of(&obs).as_deref() == Some("Unschedulable") {
                break;
            }
            let Err(HealthError::Kubernetes { error: KubeError::Watch { problem, .. }, .. }) = &obs else {
                panic!("{obs:?}")
            };
            assert!(problem.contains("connection lost") || problem.contains("middle of an event"), "{problem}");
        }
        let reqs = requests(&shared);
        assert_eq!(reqs.iter().filter(|r| r.as_str() == "/api/v1/nodes/n1").count(), 2, "{reqs:?}");
    }

    #[tokio::test]
    async fn clean_end_resumes_from_the_bookmark_without_relisting() {
        let state = State {
            status: "Schedulable".into(),
            rv: 10,
            watches: [
                Plan::Events(vec![bookmark(15)]),
                Plan::Events(vec![event("MODIFIED", "UnschedulablePendingReplacement", 16)]),
            ]
            .into(),
            ..Default::default()
        };
        let (client, shared) = fake(state).await;
        let mut rx = spawn_kubernetes_watcher(client, fast(GUARD)).await;
        assert_eq!(status_of(&rx.borrow_and_update()).as_deref(), Some("Schedulable"));
        let obs = next(&mut rx).await;
        assert_eq!(status_of(&obs).as_deref(), Some("UnschedulablePendingReplacement"));
        let reqs = requests(&shared);
        assert_eq!(reqs.len(), 3, "{reqs:?}");
        assert!(reqs[1].contains("resourceVersion=10") && reqs[2].contains("resourceVersion=15"), "{reqs:?}");
    }

    #[tokio::test]
    async fn failures_inside_the_start_window_are_not_published() {
        let state = State { status: "Schedulable".into(), rv: 10, get_failures: 3, ..Default::default() };
        let (client, shared) = fake(state).await;
        let mut rx = spawn_kubernetes_watcher(client, fast(GUARD)).await;
        let first = rx.borrow_and_update().clone();
        assert!(first.as_ref().is_ok_and(|v| v.healthy), "{first:?}");
        assert_eq!(requests(&shared).iter().filter(|r| !r.contains("watch")).count(), 4);
        assert!(!rx.has_changed().unwrap());
    }

    #[tokio::test]
    async fn failures_past_the_start_window_are_published_then_recovery() {
        let state = State { status: "Schedulable".into(), rv: 10, get_failures: u32::MAX, ..Default::default() };
        let (client, shared) = fake(state).await;
        let start = Instant::now();
        let mut rx = spawn_kubernetes_watcher(client, fast(Duration::from_millis(300))).await;
        let waited = start.elapsed();
        // Not before the start window ends (the behaviour); the upper bound only catches a hang.
        assert!(waited >= Duration::from_millis(300) && waited < GUARD, "{waited:?}");
        let first = rx.borrow_and_update().clone();
        match &first {
            Err(HealthError::Kubernetes { node, error: KubeError::Http { code: 503, message, .. } }) => {
                assert_eq!(node, "n1");
                assert_eq!(message, "etcdserver: leader changed");
            }
            other => panic!("{other:?}"),
        }
        // The watcher keeps trying (for --unhealthy-node wait) and publishes the first success.
        shared.lock().unwrap().get_failures = 0;
        assert!(next(&mut rx).await.is_ok_and(|v| v.healthy));
    }

    #[tokio::test]
    async fn deleted_node_and_other_error_events_are_published_and_relisted() {
        let state = State {
            status: "Schedulable".into(),
            rv: 10,
            watches: [
                Plan::Events(vec![event("DELETED", "Schedulable", 11)]),
                Plan::Events(vec![
                    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"internal error","reason":"InternalError","code":500}}"#.into(),
                ]),
            ]
            .into(),
            ..Default::default()
        };
        let (client, shared) = fake(state).await;
        let mut rx = spawn_kubernetes_watcher(client, fast(GUARD)).await;
        assert!(rx.borrow_and_update().is_ok());
        assert_eq!(next(&mut rx).await, Err(HealthError::NodeDeleted { node: "n1".into() }));
        // The re-list finds the node again (re-created), then the 500 error event is published.
        assert!(next(&mut rx).await.is_ok());
        match next(&mut rx).await {
            Err(HealthError::Kubernetes { error: KubeError::Watch { problem, .. }, .. }) => {
                assert_eq!(problem, "error event 500 InternalError: internal error")
            }
            other => panic!("{other:?}"),
        }
        let reqs = wait_requests(&shared, 5).await;
        assert_eq!(reqs.iter().filter(|r| r.as_str() == "/api/v1/nodes/n1").count(), 3, "{reqs:?}");
    }

    #[tokio::test]
    async fn task_ends_when_receivers_dropped() {
        let state = State { status: "Schedulable".into(), rv: 10, ..Default::default() };
        let (client, shared) = fake(state).await;
        let rx = spawn_kubernetes_watcher(client, fast(GUARD)).await;
        drop(rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The held watch was dropped with the task: the fake sees no further request.
        let n = requests(&shared).len();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(requests(&shared).len(), n);
        assert!(n <= 2, "{:?}", requests(&shared));
    }

    #[tokio::test]
    async fn check_node_reads_once() {
        let state = State { status: "Unschedulable".into(), rv: 10, ..Default::default() };
        let (client, shared) = fake(state).await;
        let obs = read_kubernetes_verdict(&client, "n1", false).await;
        assert_eq!(status_of(&obs).as_deref(), Some("Unschedulable"));
        assert!(!obs.unwrap().healthy);
        assert_eq!(requests(&shared), ["/api/v1/nodes/n1"]);
    }
}
