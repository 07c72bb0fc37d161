//! The one status model: the replica's state, its typed last exit and why, node health, identity
//! and progress. `replica::event_loop` publishes one [`LocalStatus`] on a watch channel; every
//! sink subscribes to it and none keeps a copy of its own: the HTTP `/status` and `/metrics`, the
//! webhook and the Kubernetes Events (through [`report::Report`], built from it), `--status-fd`
//! ([`fd_sink`], one JSON line of [`LocalStatus`] that the dry run reads back as the same type),
//! and the rendezvous stream (every `state` frame is a [`report::Report`], which the master's job
//! view keeps typed).

pub mod fd_sink;
pub mod report;
pub mod straggler;

pub use report::{is_state_change, last_exit, rfc3339, LastExit, Report, Timeline, SCHEMA_VERSION};

use crate::exit::ExitHow;
use crate::health::NodeVerdict;
use serde::{Deserialize, Serialize};

/// Where a replica is in its life, as reported upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReplicaState {
    /// Launcher started; nothing checked yet.
    Pending,
    /// Waiting at the rendezvous barrier.
    Rendezvous,
    /// The training process runs.
    Running,
    /// The training process ended and will be started again after a backoff.
    Restarting,
    /// The training process is being stopped (signal forwarded, grace period running).
    Stopping,
    /// Finished: the training process succeeded and will not be restarted.
    Succeeded,
    /// Finished: rankvisor gave up (child failed, hang, rendezvous).
    Failed,
    /// The node's health labels mark it unhealthy.
    NodeUnhealthy,
}

impl ReplicaState {
    /// Every state, in the order of a replica's life.
    pub const ALL: [ReplicaState; 8] = [
        Self::Pending,
        Self::Rendezvous,
        Self::Running,
        Self::Restarting,
        Self::Stopping,
        Self::Succeeded,
        Self::Failed,
        Self::NodeUnhealthy,
    ];

    /// True for the states after which nothing more happens.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::NodeUnhealthy)
    }
}

/// This replica's supervision status, published by the driver on every change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalStatus {
    /// Where the replica is.
    pub state: ReplicaState,
    /// Restarts made by rankvisor.
    pub restart_count: u32,
    /// Rendezvous generation of the running child.
    pub generation: u64,
    /// How the last child ended.
    pub last_exit: Option<ExitHow>,
    /// Why rankvisor stopped the last child, when it did (`Hung`, `NewGeneration`).
    pub last_exit_reason: Option<ExitReason>,
    /// The running child's pid.
    pub child_pid: Option<i32>,
    /// Hangs detected so far.
    pub hang_detections: u32,
    /// The latest training progress from the heartbeat file.
    pub progress: Option<serde_json::Map<String, serde_json::Value>>,
    /// The node-health verdict; None when node-health checking is off (or before the first look).
    pub node_health: Option<NodeHealthReport>,
    /// The log rule that made rankvisor stop the last child, when one did.
    #[serde(default)]
    pub log_rule: Option<LogRuleReport>,
    /// Each log rule's state for the current attempt, in configuration order (empty without rules).
    #[serde(default)]
    pub log_rules: Vec<LogRuleGauge>,
    /// Agent mode: the agent's state, what the operator sees on `/status` (`state` is the last
    /// attempt's child's).
    #[serde(default)]
    pub agent: Option<AgentState>,
    /// The latest snapshot taken on a hang verdict, summarised (`stacks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<crate::stacks::StacksSummary>,
    /// Master: the job's stacks, grouped, gathered before the latest restart a hang caused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_stacks: Option<crate::stacks::JobStacks>,
    /// Master: the replicas named stragglers (`--straggler-rule`), newest last, at most
    /// [`STRAGGLERS_KEPT`](straggler::STRAGGLERS_KEPT).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stragglers: Vec<straggler::NamedStraggler>,
}

/// The HyperPod agent's state (agent mode), as the agent's `/status` reports it (lower-case
/// there; rankvisor's own status and report spell it as the agent's `AgentState.value`,
/// upper-case). Its transition table is `agent::state`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AgentState {
    /// Not ready yet (here: the node-health gate has not opened).
    Init,
    /// Waiting for `/start`.
    Ready,
    /// `/start` was received; the child runs (or is about to).
    Running,
    /// The child exited 0.
    Completed,
    /// The child failed; the operator decides what follows.
    Faulted,
    /// `/stop` was received; the child is being stopped, then READY.
    Stopping,
    /// `/shutdown` was received; rankvisor exits once the child is gone.
    Shutdown,
}

/// A log rule that fired (`--log-rules`, docs/log-rules.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRuleReport {
    /// `LogHang_<rule>`, `LogSlow_<rule>` or `LogFault_<rule>`.
    pub reason: String,
    /// The rule's name.
    pub rule: String,
    /// Its last matched line, escaped and bounded; None when no line matched.
    pub line: Option<String>,
}

/// One log rule's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRuleGauge {
    /// The rule's name.
    pub rule: String,
    /// The agent's spelling: `WAITING`, `HEALTHY`, `SLOW`, `HANGING`, `FAULTED`.
    pub state: String,
}

impl Default for LocalStatus {
    fn default() -> Self {
        Self {
            state: ReplicaState::Pending,
            restart_count: 0,
            generation: 0,
            last_exit: None,
            last_exit_reason: None,
            child_pid: None,
            hang_detections: 0,
            progress: None,
            node_health: None,
            log_rule: None,
            log_rules: Vec::new(),
            agent: None,
            stacks: None,
            job_stacks: None,
            stragglers: Vec::new(),
        }
    }
}

/// Who this replica is, from the rank contract and the downward API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The PyTorchJob's name, from `MASTER_ADDR` (`<job>-master-0`) or `POD_NAME`; a TrainJob's
    /// from `PET_MASTER_ADDR` (`<trainjob>-node-0-0.<trainjob>`) or the hostname `<trainjob>-node-0-<k>`.
    pub job: Option<String>,
    /// Kubeflow's replica type: `Master` or `Worker`.
    pub replica_type: Option<String>,
    /// Replica (node) index: `RANK` = `PET_NODE_RANK`.
    pub rank: Option<u32>,
    /// Replicas in the job (the most, for an elastic job).
    pub replica_count: Option<u32>,
    /// `WORLD_SIZE`: training processes in the job.
    pub world_size: Option<u32>,
    /// `POD_NAME`, else `HOSTNAME`.
    pub pod: Option<String>,
    /// `POD_NAMESPACE`.
    pub namespace: Option<String>,
    /// `NODE_NAME`.
    pub node: Option<String>,
    /// Which controller wrote the rank contract: `training-operator` or `trainer-v2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavour: Option<crate::rank::Flavour>,
    /// The JobSet's restart attempt (`jobset.sigs.k8s.io/restart-attempt`, a Trainer v2 pod's
    /// label, from the downward-API labels file when one is mounted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_attempt: Option<u32>,
}

/// Why the last child counts as ended: its own exit, or a verdict of rankvisor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitReason {
    /// It called exit.
    Exited,
    /// A signal killed it.
    Signaled,
    /// It stopped beating and rankvisor stopped it.
    Hung,
    /// The node became unhealthy and rankvisor stopped it.
    NodeUnhealthy,
    /// The job moved to a new rendezvous generation and rankvisor stopped it (job scope): not a
    /// failure of its own.
    NewGeneration,
    /// A log rule fired on its output and rankvisor stopped it.
    LogRule,
    /// The master named the replica a straggler and rankvisor restarted it
    /// (`--straggler-action restart`).
    Straggler,
}

/// The node-health part of a report: the source's verdict, or why the source cannot be read.
/// On the wire (reports, `/status`, `state` frames) it keeps its three fields `healthy`,
/// `verdict` and `error`; a combination no source gives is refused when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "NodeHealthWire", try_from = "NodeHealthWire")]
pub enum NodeHealthReport {
    /// The source's verdict, healthy or not.
    Verdict(Box<NodeVerdict>),
    /// The source cannot be read (why): the node's health is unknown.
    Unreadable(String),
}

impl NodeHealthReport {
    /// From a health source's latest observation.
    pub fn from_observation(obs: &crate::health::Observation) -> Self {
        match obs {
            Ok(v) => Self::Verdict(Box::new(v.clone())),
            Err(e) => Self::Unreadable(e.to_string()),
        }
    }

    /// Whether the node may run the training process; None while the source cannot be read.
    pub fn healthy(&self) -> Option<bool> {
        self.verdict().map(|v| v.healthy)
    }

    /// The verdict with the labels, fault type and reason; None while the source cannot be read.
    pub fn verdict(&self) -> Option<&NodeVerdict> {
        match self {
            Self::Verdict(v) => Some(v),
            Self::Unreadable(_) => None,
        }
    }
}

/// [`NodeHealthReport`] as it is written.
#[derive(Serialize, Deserialize)]
struct NodeHealthWire {
    healthy: Option<bool>,
    verdict: Option<Box<NodeVerdict>>,
    error: Option<String>,
}

impl From<NodeHealthReport> for NodeHealthWire {
    fn from(r: NodeHealthReport) -> Self {
        match r {
            NodeHealthReport::Verdict(v) => Self { healthy: Some(v.healthy), verdict: Some(v), error: None },
            NodeHealthReport::Unreadable(e) => Self { healthy: None, verdict: None, error: Some(e) },
        }
    }
}

impl TryFrom<NodeHealthWire> for NodeHealthReport {
    type Error = String;

    fn try_from(w: NodeHealthWire) -> Result<Self, String> {
        match (w.healthy, w.verdict, w.error) {
            (Some(h), Some(v), None) if h == v.healthy => Ok(Self::Verdict(v)),
            (None, None, Some(e)) => Ok(Self::Unreadable(e)),
            (h, v, e) => Err(format!(
                "node_health with healthy={h:?}, a verdict {} and error={e:?}: expected healthy and the verdict \
                 (agreeing), or an error alone",
                if v.is_some() { "present" } else { "absent" }
            )),
        }
    }
}

/// A verdict of an unschedulable node, for tests.
#[cfg(test)]
pub(crate) fn unhealthy_node_for_tests() -> NodeHealthReport {
    let labels = [("sagemaker.amazonaws.com/node-health-status".to_string(), "Unschedulable".to_string())];
    let v = crate::health::verdict(&crate::kube::NodeSnapshot::from_labels(labels.into_iter().collect()), false);
    assert!(!v.healthy);
    NodeHealthReport::Verdict(Box::new(v))
}

#[cfg(test)]
mod node_health_tests {
    use super::*;

    #[test]
    fn the_wire_keeps_three_fields_and_refuses_what_no_source_gives() {
        let sick = unhealthy_node_for_tests();
        let wire = serde_json::to_value(&sick).unwrap();
        assert_eq!(wire["healthy"], false);
        assert_eq!(wire["verdict"]["node_health_status"], "Unschedulable");
        assert!(wire["error"].is_null());
        assert_eq!(serde_json::from_value::<NodeHealthReport>(wire.clone()).unwrap(), sick);
        let unreadable = NodeHealthReport::Unreadable("no labels file".into());
        let w = serde_json::to_value(&unreadable).unwrap();
        assert_eq!(w, serde_json::json!({"healthy": null, "verdict": null, "error": "no labels file"}));
        assert_eq!(serde_json::from_value::<NodeHealthReport>(w).unwrap(), unreadable);
        assert_eq!(unreadable.healthy(), None);
        // Healthy without a verdict, a verdict that says otherwise, nothing at all: refused.
        let mut lying = wire;
        lying["healthy"] = true.into();
        for bad in [serde_json::json!({"healthy": false, "verdict": null, "error": null}), lying] {
            let e = serde_json::from_value::<NodeHealthReport>(bad.clone()).unwrap_err().to_string();
            assert!(e.contains("expected healthy and the verdict"), "{bad}: {e}");
        }
    }
}
