//! What the kubelet starts a pod's launcher with, whatever controller made the pod: the launch
//! spec, and the node and master address every pod of a dry run shares.

use super::replica::ReplicaId;
use rankvisor_core::policy::RestartPolicy;

/// Where every replica finds the master in a dry run.
pub(crate) const DRY_RUN_MASTER_ADDR: &str = "127.0.0.1";

/// The node every pod of the dry run is placed on (`spec.nodeName`, the NODE column).
pub(crate) const DRY_RUN_NODE: &str = "localhost";

/// Everything the event loop needs to start one replica's launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaunchSpec {
    /// The replica.
    pub replica: ReplicaId,
    /// The pod's name, `<job>-worker-1`.
    pub pod: String,
    /// The job's namespace (`POD_NAMESPACE`).
    pub namespace: String,
    /// The container's environment: its own `env`, then the operator's (a later duplicate
    /// replaces an earlier one in place, as the kubelet resolves duplicates).
    pub env: Vec<(String, String)>,
    /// The container's `command` followed by its `args`.
    pub command: Vec<String>,
    /// The container's `workingDir`, if it sets one.
    pub working_dir: Option<String>,
    /// The launcher's `--restart-policy`: the pod's own policy (`SetRestartPolicy`: ExitCode
    /// becomes Never), so the launcher restarts its child only where the kubelet would restart the
    /// container; an ExitCode replica's failed pod is the operator's to recreate.
    pub restart_policy: RestartPolicy,
    /// The job's `runPolicy.backoffLimit`, for the launcher's `--backoff-limit` (None: keep its default).
    pub backoff_limit: Option<u32>,
    /// The launchers' barrier leader when no env names it (a Worker-only job without an
    /// elasticPolicy meets at Worker 0, a cluster name): on this machine, at MASTER_PORT+1 as
    /// with a Master. For `--rendezvous-host` and `--rendezvous-port`.
    pub leader: Option<(String, u16)>,
    /// A HyperPod pod: its launcher is the agent (`--agent hyperpod`), serving its API on this
    /// loopback port (None for the other kinds).
    pub agent_port: Option<u16>,
}

/// Set `key` in `env`, replacing an earlier value where it stands (as the kubelet resolves a
/// duplicate name, and as the Trainer's plugins upsert theirs).
pub(crate) fn set<V>(env: &mut Vec<(String, V)>, key: String, value: V) {
    match env.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => env.push((key, value)),
    }
}
