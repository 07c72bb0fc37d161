//! The HyperPod operator's calls to each pod's agent (`rankvisor --agent hyperpod` on its own
//! loopback port): `POST /start`, `/stop`, `/shutdown`, each in a task of its own so the event
//! loop never waits on one; and with `--hyperpod-poll`, `GET /status` from every agent that often,
//! its state reported as its launcher's news. Without it, each agent's state comes on its
//! launcher's status pipe, which carries the state its `/status` serves, at once (the operator's
//! own poll interval is not public).
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
}

impl Agents {
    /// No agent yet; the job's master listens on `master_port`.
    pub(super) fn new(master_port: u16) -> Self {
        Self { ports: BTreeMap::new(), next_port: listen_port_start(), master_port }
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
    /// state read is reported as its launcher's news (a failed read is skipped: the next poll).
    pub(super) fn poll(&self, pods: Vec<(ReplicaId, u64)>, reports: &mpsc::UnboundedSender<LauncherReport>) {
        for (pod, instance) in pods {
            let Some(port) = self.ports.get(&pod).copied() else { continue };
            let reports = reports.clone();
            tokio::spawn(async move {
                let read = tokio::time::timeout(CALL_TIMEOUT, http("GET", port, "/status", b"")).await;
                if let Ok(Ok((200, body))) = read {
                    if let Some((state, reason)) = parse_status(&body) {
                        let what = LauncherNews::AgentStatus(state, reason);
                        let _ = reports.send(LauncherReport { pod, instance, what });
                    }
                }
            });
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
