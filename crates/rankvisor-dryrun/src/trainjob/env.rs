//! The env of a TrainJob's node k (the Torch plugin's `EnforceMLPolicy`, the Indexed Job's
//! completion index), with every cluster address pointed at this machine for the dry run.

use super::{TrainJob, NODE};
use crate::k8s::container::EnvSource;
use crate::kubelet::launch::{set, LaunchSpec, DRY_RUN_MASTER_ADDR, DRY_RUN_NODE};
use crate::kubelet::replica::ReplicaId;

/// The annotation (and label) the Job controller puts on each pod of an Indexed Job.
pub(crate) const COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
/// `PET_NODE_RANK`'s `fieldRef` (`constants.JobCompletionIndexFieldPath`).
pub(crate) const NODE_RANK_FIELD_PATH: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// Where node k's pod stands: its index, name and the JobSet's restart attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodePod {
    /// The completion index k.
    pub index: u32,
    /// The pod's name, `<trainjob>-node-0-<k>-<suffix>`.
    pub name: String,
    /// `jobset.sigs.k8s.io/restart-attempt`.
    pub restart_attempt: u32,
}

/// The five variables the Torch plugin upserts last, as a cluster pod gets them (`PET_NODE_RANK`
/// is a `fieldRef`; `PET_MASTER_ADDR` is `<trainjob>-node-0-0.<trainjob>`).
pub(crate) fn enforce_ml_policy(job: &TrainJob) -> Vec<(String, EnvSource)> {
    let v = |s: String| EnvSource::Value(s);
    vec![
        ("PET_NNODES".into(), v(job.num_nodes.to_string())),
        ("PET_NPROC_PER_NODE".into(), v(job.nproc_per_node.clone())),
        ("PET_NODE_RANK".into(), EnvSource::FieldRef(NODE_RANK_FIELD_PATH.into())),
        ("PET_MASTER_ADDR".into(), v(format!("{}-{NODE}-0-0.{}", job.name, job.name))),
        ("PET_MASTER_PORT".into(), v(super::TRAINER_PORT.to_string())),
    ]
}

/// The container's env in the cluster: the runtime's, the TrainJob's upserted by name, then the
/// Torch plugin's five.
pub(crate) fn container_env(job: &TrainJob) -> Vec<(String, EnvSource)> {
    let mut env = job.container.env.clone();
    for (k, v) in enforce_ml_policy(job) {
        set(&mut env, k, v);
    }
    env
}

/// What the downward API gives node `pod` on this machine.
fn resolve(job: &TrainJob, pod: &NodePod, source: &EnvSource) -> String {
    let path = match source {
        EnvSource::Value(v) => return v.clone(),
        EnvSource::FieldRef(p) => p.as_str(),
    };
    let keyed = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_prefix("['")?.strip_suffix("']"));
    match (keyed("metadata.annotations").or(keyed("metadata.labels")), path) {
        (Some(COMPLETION_INDEX_ANNOTATION), _) => pod.index.to_string(),
        (Some(rankvisor_core::rank::RESTART_ATTEMPT_LABEL), _) => pod.restart_attempt.to_string(),
        (Some("jobset.sigs.k8s.io/jobset-name"), _) => job.name.clone(),
        (Some(_), _) => String::new(),
        (None, "metadata.name") => pod.name.clone(),
        (None, "metadata.namespace") => job.namespace.clone(),
        (None, "metadata.uid") => format!("dry-run-{}-{}", job.namespace, pod.name),
        (None, "spec.nodeName") => DRY_RUN_NODE.into(),
        (None, "spec.serviceAccountName") => "default".into(),
        (None, "status.hostIP" | "status.hostIPs" | "status.podIP" | "status.podIPs") => DRY_RUN_MASTER_ADDR.into(),
        (None, _) => String::new(),
    }
}

/// Node `pod`'s launch: its container's env resolved, `PET_MASTER_ADDR` this machine and
/// `PET_MASTER_PORT` `master_port`, the Indexed Job's `JOB_COMPLETION_INDEX`, and `HOSTNAME`
/// `<trainjob>-node-0-<k>` (the pod's hostname, from which the launcher names the TrainJob).
pub(crate) fn launch_spec(job: &TrainJob, pod: &NodePod, master_port: u16) -> LaunchSpec {
    let mut env: Vec<(String, String)> =
        container_env(job).iter().map(|(k, s)| (k.clone(), resolve(job, pod, s))).collect();
    for (k, v) in [
        ("PET_MASTER_ADDR", DRY_RUN_MASTER_ADDR.to_string()),
        ("PET_MASTER_PORT", master_port.to_string()),
        ("JOB_COMPLETION_INDEX", pod.index.to_string()),
        ("HOSTNAME", job.hostname(pod.index)),
    ] {
        set(&mut env, k.to_string(), v);
    }
    LaunchSpec {
        replica: ReplicaId::worker(pod.index),
        pod: pod.name.clone(),
        namespace: job.namespace.clone(),
        env,
        command: job.container.argv(),
        working_dir: job.container.working_dir.clone(),
        restart_policy: job.restart_policy,
        backoff_limit: u32::try_from(job.backoff_limit).ok(),
        // PET_MASTER_ADDR names node 0, the barrier's leader.
        leader: None,
        agent_port: None,
    }
}
