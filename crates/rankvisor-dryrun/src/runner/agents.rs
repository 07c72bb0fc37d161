//! The HyperPod operator's calls to each pod's agent (`rankvisor --agent hyperpod` on its own
//! loopback port): `POST /start`, `/stop`, `/shutdown`, each in a task of its own so the event
//! loop never waits on one; and `GET /status`, the only way the operator learns an agent's state:
//! from every agent every `--hyperpod-poll` (the operator's own interval is not public), and from
//! one agent at once when its launcher's status pipe says its state changed
//! (`--hyperpod-read-on-change`, as an operator watching its pods would look). Each state read is
//! reported as its launcher's news; an answer older than one already applied is dropped.
//!
//! A call is one HTTP/1.1 request on a fresh loopback connection (`Connection: close`): one
//! write, then the answer read to its end, bounded. Not the core's `HttpClient` (reqwest, built
//! for the webhook and the Kubernetes API: TLS roots read from the system's bundle, a pool, a
//! proxy policy), none of which a plain loopback call needs. What a restart of 256 agents costs is
//! the agents' own work, not these calls (docs/hyperpod.md, the figures).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use rankvisor_core::status::AgentState;
use tokio::sync::mpsc;

use super::launcher_process::{LauncherNews, LauncherReport};
use super::output::note;
use super::ports::{free_listen_port, listen_port_start};
use crate::hyperpodjob::controller::AgentRequest;
use crate::hyperpodjob::HyperPodJob;
use crate::kubelet::launch::DRY_RUN_MASTER_ADDR;
use crate::kubelet::replica::ReplicaId;

/// How long one call may take (a `/stop` answers at once; the agent stops in the background).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read (its status line and headers, and enough body for a message).
const MAX_ANSWER: u64 = 8 * 1024;

/// Every pod's agent port.
#[derive(Debug)]
pub(super) struct Agents {
    ports: BTreeMap<ReplicaId, u16>,
    /// Where the search for the next agent's port goes on.
    next_port: u16,
    /// The master's port (and the rendezvous' after it): never an agent's.
    master_port: u16,
    /// `GET /status` reads asked so far: each read's number.
    reads: u64,
    /// Of them, those asked because a launcher said its agent's state changed.
    reads_on_change: u64,
    /// Each pod's newest read applied: an answer to an older read that arrives later is stale.
    applied: BTreeMap<ReplicaId, u64>,
}

impl Agents {
    /// No agent yet; the job's master listens on `master_port`.
    pub(super) fn new(master_port: u16) -> Self {
        Self {
            ports: BTreeMap::new(),
            next_port: listen_port_start(),
            master_port,
            reads: 0,
            reads_on_change: 0,
            applied: BTreeMap::new(),
        }
    }

    /// A fresh loopback port for `pod`'s agent, none of the other agents' (a recreated pod's
    /// agent gets a new one).
    pub(super) fn assign_port(&mut self, pod: ReplicaId) -> Option<u16> {
        self.ports.remove(&pod);
        let master = self.master_port;
        let ports = &self.ports;
        let taken = |p: u16| p == master || Some(p) == master.checked_add(1) || ports.values().any(|q| *q == p);
        let port = free_listen_port(&mut self.next_port, taken)?;
        self.ports.insert(pod, port);
        Some(port)
    }

    /// Send `request` to its pod's agent (`name`), in a task; a failure is said, naming the pod.
    pub(super) fn call(&self, job: &HyperPodJob, request: AgentRequest, master_port: u16, name: String) {
        let Some(port) = self.ports.get(&request.pod).copied() else {
            return note(&format!("{name}: no agent port: cannot call its agent"));
        };
        let (path, body) = job.agent_request(request.call, master_port);
        tokio::spawn(async move {
            match tokio::time::timeout(CALL_TIMEOUT, http("POST", port, path, body.to_string().as_bytes())).await {
                Ok(Ok((200, _))) => {}
                Ok(Ok((status, answer))) => {
                    let answer = rankvisor_core::untrusted::Escaped(&answer).to_string();
                    note(&format!("{name}'s agent answered POST {path} with {status}: {answer}"));
                }
                Ok(Err(e)) => note(&format!("{name}'s agent: POST {path} failed: {e}")),
                Err(_) => note(&format!("{name}'s agent: POST {path} got no answer within {CALL_TIMEOUT:?}")),
            }
        });
    }

    /// `GET /status` from each of `pods`' agents (pod, launcher instance), in a task each; each
    /// state read is reported as its launcher's news with its read's number (a failed read is
    /// skipped: the next poll).
    pub(super) fn poll(&mut self, pods: Vec<(ReplicaId, u64)>, reports: &mpsc::UnboundedSender<LauncherReport>) {
        for (pod, instance) in pods {
            let Some(port) = self.ports.get(&pod).copied() else { continue };
            self.reads += 1;
            let (reports, read_no) = (reports.clone(), self.reads);
            tokio::spawn(read_status(port, pod, instance, read_no, reports));
        }
    }

    /// `GET /status` from `pod`'s agent at once: its launcher said the agent's state changed.
    pub(super) fn read_changed(
        &mut self,
        pod: ReplicaId,
        instance: u64,
        reports: &mpsc::UnboundedSender<LauncherReport>,
    ) {
        let before = self.reads;
        self.poll(vec![(pod, instance)], reports);
        self.reads_on_change += self.reads - before;
    }

    /// The line said at the end: how the operator read the agents' states.
    pub(super) fn summary(&self) -> Option<String> {
        (self.reads > 0).then(|| {
            format!(
                "HyperPod operator reads: {} GET /status of the agents ({} on a state change, {} by the poll)",
                self.reads,
                self.reads_on_change,
                self.reads - self.reads_on_change
            )
        })
    }

    /// Whether the answer to read `read_no` of `pod`'s agent is newer than every answer applied
    /// for it (then it is the one applied now): two reads in flight may answer out of order.
    pub(super) fn fresh(&mut self, pod: ReplicaId, read_no: u64) -> bool {
        let newest = self.applied.entry(pod).or_insert(0);
        let fresh = read_no > *newest;
        *newest = (*newest).max(read_no);
        fresh
    }
}

/// One `GET /status` of the agent on `port` (`pod`'s, launcher `instance`): its state and reason
/// as that launcher's news, with the read's number; a failed read is skipped (the next poll).
async fn read_status(
    port: u16,
    pod: ReplicaId,
    instance: u64,
    read_no: u64,
    reports: mpsc::UnboundedSender<LauncherReport>,
) {
    let read = tokio::time::timeout(CALL_TIMEOUT, http("GET", port, "/status", b"")).await;
    if let Ok(Ok((200, body))) = read {
        if let Some((state, reason)) = parse_status(&body) {
            let what = LauncherNews::AgentStatus(state, reason, read_no);
            let _ = reports.send(LauncherReport { pod, instance, what });
        }
    }
}

/// The state and reason in an agent's `/status` body (`{"status":"faulted","reason":...}`).
fn parse_status(body: &str) -> Option<(AgentState, Option<String>)> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let state = serde_json::from_value(serde_json::Value::String(v["status"].as_str()?.to_uppercase())).ok()?;
    Some((state, v["reason"].as_str().map(String::from)))
}

/// `method path` with a JSON `body` to the agent on loopback `port`: its status code and body.
async fn http(method: &str, port: u16, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect((DRY_RUN_MASTER_ADDR, port)).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {DRY_RUN_MASTER_ADDR}:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(&[head.as_bytes(), body].concat()).await?;
    let mut answer = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut answer).await?;
    Ok(parse_answer(&answer))
}

/// An HTTP/1.1 answer's status code (0 if none can be read) and body.
fn parse_answer(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer);
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_older_than_one_applied_is_stale() {
        let mut a = Agents::new(30000);
        let (p0, p1) = (ReplicaId::worker(0), ReplicaId::worker(1));
        assert!(a.fresh(p0, 2), "the first answer");
        assert!(!a.fresh(p0, 1), "read before the one applied: its answer came late");
        assert!(!a.fresh(p0, 2), "the same read twice");
        assert!(a.fresh(p1, 1), "each pod on its own");
        assert!(a.fresh(p0, 3));
    }

    #[test]
    fn an_answer_gives_its_status_and_body() {
        let (status, body) =
            parse_answer(b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-length: 9\r\n\r\n{\"a\":\"b\"}");
        assert_eq!((status, body.as_str()), (422, "{\"a\":\"b\"}"));
        assert_eq!(parse_answer(b"garbage"), (0, String::new()));
    }

    #[test]
    fn a_status_body_gives_the_agents_state_and_reason() {
        let body = r#"{"status":"faulted","transitions":{},"reason":"WorkerCrash","message":"m"}"#;
        assert_eq!(parse_status(body), Some((AgentState::Faulted, Some("WorkerCrash".into()))));
        assert_eq!(parse_status(r#"{"status":"ready"}"#), Some((AgentState::Ready, None)));
        assert_eq!(parse_status(r#"{"status":"dancing"}"#), None);
    }
}
