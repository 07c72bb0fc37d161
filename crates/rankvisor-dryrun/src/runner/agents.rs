//! The HyperPod operator's calls to each pod's agent (`rankvisor --agent hyperpod` on its own
//! loopback port): `POST /start`, `/stop`, `/shutdown`, each in a task of its own so the event
//! loop never waits on one. What each agent's state is comes back on its launcher's status pipe,
//! which carries the state its `/status` serves, at once (the operator polls `/status`; its
//! interval is not public: the dry run's detection is the pipe's).

use std::collections::BTreeMap;
use std::time::Duration;

use rankvisor_core::net::client::{ClientOptions, HttpClient, Method, ProxySettings, Roots};

use super::output::note;
use super::ports::free_loopback_port;
use crate::hyperpodjob::controller::AgentRequest;
use crate::hyperpodjob::HyperPodJob;
use crate::kubelet::launch::DRY_RUN_MASTER_ADDR;
use crate::kubelet::replica::ReplicaId;

/// How long one call may take (a `/stop` answers at once; the agent stops in the background).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer's body kept for a message.
const MAX_ANSWER: usize = 2048;

/// Every pod's agent port, and the client that calls them.
#[derive(Debug)]
pub(super) struct Agents {
    client: Option<HttpClient>,
    ports: BTreeMap<ReplicaId, u16>,
}

impl Agents {
    /// No agent yet (the client is made at the first call).
    pub(super) fn new() -> Self {
        Self { client: None, ports: BTreeMap::new() }
    }

    /// A fresh loopback port for `pod`'s agent (a recreated pod's agent gets a new one).
    pub(super) fn assign_port(&mut self, pod: ReplicaId) -> Option<u16> {
        let port = free_loopback_port()?;
        self.ports.insert(pod, port);
        Some(port)
    }

    /// Send `request` to its pod's agent (`name`), in a task; a failure is said, naming the pod.
    pub(super) fn call(&mut self, job: &HyperPodJob, request: AgentRequest, master_port: u16, name: String) {
        let Some(port) = self.ports.get(&request.pod).copied() else {
            return note(&format!("{name}: no agent port: cannot call its agent"));
        };
        let client = match &self.client {
            Some(c) => c.clone(),
            None => match HttpClient::new(ClientOptions {
                roots: Roots::System,
                proxy: ProxySettings::default(),
                connect_timeout: CALL_TIMEOUT,
                bearer_token_file: None,
            }) {
                Ok(c) => self.client.insert(c).clone(),
                Err(e) => return note(&format!("cannot call the agents: {e}")),
            },
        };
        let (path, body) = job.agent_request(request.call, master_port);
        let url = format!("http://{DRY_RUN_MASTER_ADDR}:{port}{path}");
        tokio::spawn(async move {
            let bytes = body.to_string().into_bytes();
            let body = rankvisor_core::net::client::Body { content_type: "application/json", bytes };
            match client.send(Method::POST, &url, Some(body), CALL_TIMEOUT).await {
                Ok(r) if r.status() == 200 => {}
                Ok(r) => {
                    let status = r.status();
                    let answer = r.collect(MAX_ANSWER).await.map(|c| c.bytes).unwrap_or_default();
                    let answer = rankvisor_core::untrusted::Escaped(&String::from_utf8_lossy(&answer)).to_string();
                    note(&format!("{name}'s agent answered POST {path} with {status}: {answer}"));
                }
                Err(e) => note(&format!("{name}'s agent: POST {path} failed: {e}")),
            }
        });
    }
}
