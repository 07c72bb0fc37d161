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
use crate::kube::{Backoff, KubeClient, KubeError, WatchEvent};

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
