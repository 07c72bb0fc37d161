//! The SageMaker HyperPod `HyperPodPyTorchJob` (`sagemaker.amazonaws.com/v1`): the admitted job
//! ([`HyperPodJob`]), its admission from a manifest ([`admission`], the CRD's fields from the
//! model generated in aws/sagemaker-hyperpod-cli), the `hyperpodrun` command line as rankvisor's
//! agent mode ([`hyperpodrun`]), and the emulated HyperPod training operator ([`controller`]: a
//! pure machine that drives every pod's agent through `/start`, `/stop` and `/shutdown`).
//!
//! The operator is closed source: what it does where nothing public says is a named default
//! with an option each ([`OperatorSettings`]), listed in docs/hyperpod.md as emulated, not verified.

pub(crate) mod admission;
pub(crate) mod controller;
pub(crate) mod hyperpodrun;
pub(crate) mod restart;

use std::time::Duration;

use crate::k8s::container::{Container, EnvSource};
use crate::kubelet::launch::{LaunchSpec, DRY_RUN_MASTER_ADDR, DRY_RUN_NODE};
use crate::kubelet::replica::ReplicaId;

/// The `apiVersion` of a HyperPodPyTorchJob.
pub(crate) const API_VERSION: &str = "sagemaker.amazonaws.com/v1";
/// Its `kind`.
pub(crate) const KIND: &str = "HyperPodPyTorchJob";

/// `runPolicy.cleanPodPolicy`: which pods are deleted once the job finished (CRD default `All`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CleanPodPolicy {
    /// Every pod.
    All,
    /// The pods still running.
    Running,
    /// None: kept.
    None,
}

/// `runPolicy.restartPolicy`: how process-level restarts (PLR) turn into full job restarts (JLR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RestartLimits {
    /// `evalPeriodSeconds`: the window the counters below count in.
    pub eval_period: Duration,
    /// `numRestartBeforeFullJobRestart`: PLRs in a window before a fault restarts the job whole.
    pub plr_before_jlr: Option<u32>,
    /// `maxFullJobRestarts`: JLRs in a window before a fault fails the job.
    pub max_full_job_restarts: Option<u32>,
}

/// `spec.runPolicy`, as admitted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HpRunPolicy {
    /// `activeDeadlineSeconds`.
    pub active_deadline: Option<Duration>,
    /// `cleanPodPolicy`.
    pub clean_pod_policy: CleanPodPolicy,
    /// `faultDeadlineSeconds`: how long the job may stay faulted (restarting) before it fails.
    pub fault_deadline: Option<Duration>,
    /// `jobMaxRetryCount`: restarts of any kind over the job's life.
    pub job_max_retry_count: Option<u32>,
    /// `logMonitoringConfiguration`, as written: it goes to every agent's `/start`.
    pub log_monitoring: Option<serde_json::Value>,
    /// `restartPolicy`.
    pub restart_limits: Option<RestartLimits>,
    /// `startupDeadlineSeconds`: how long the job may take to have every agent running.
    pub startup_deadline: Option<Duration>,
    /// `suspend`.
    pub suspend: bool,
    /// `ttlSecondsAfterFinished` (CRD default 0: deleted at once; None: -1, kept).
    pub ttl_after_finished: Option<Duration>,
}

impl Default for HpRunPolicy {
    fn default() -> Self {
        Self {
            active_deadline: None,
            clean_pod_policy: CleanPodPolicy::All,
            fault_deadline: None,
            job_max_retry_count: None,
            log_monitoring: None,
            restart_limits: None,
            startup_deadline: None,
            suspend: false,
            ttl_after_finished: Some(Duration::ZERO),
        }
    }
}

/// An admitted HyperPodPyTorchJob (one replicaSpec: see [`admission`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HyperPodJob {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (default `default`).
    pub namespace: String,
    /// `nprocPerNode` (CRD default `auto`).
    pub nproc_per_node: String,
    /// `replicaSpecs[0].name`: the pods are `<job>-<name>-<i>`.
    pub spec_name: String,
    /// `replicaSpecs[0].replicas`: the training pods, ranks 0..replicas.
    pub replicas: u32,
    /// `replicaSpecs[0].spares`: pods beyond the replicas whose agents wait READY, unranked.
    pub spares: u32,
    /// The training container (its command as rankvisor's agent mode runs it).
    pub container: Container,
    /// `spec.runPolicy`.
    pub run_policy: HpRunPolicy,
}

impl HyperPodJob {
    /// Every pod's key: Worker 0.. (the replicas, then the spares).
    pub(crate) fn pods(&self) -> Vec<ReplicaId> {
        (0..self.replicas + self.spares).map(ReplicaId::worker).collect()
    }

    /// The pod's name, `<job>-<replicaSpec>-<i>` (the same after a full job restart).
    pub(crate) fn pod_name(&self, id: ReplicaId) -> String {
        format!("{}-{}-{}", self.name, self.spec_name, id.index)
    }

    /// Whether `id` is a spare (no rank, never started).
    pub(crate) fn is_spare(&self, id: ReplicaId) -> bool {
        id.index >= self.replicas
    }

    /// `id`'s launch: its container's command under the agent (the agent's port is the event
    /// loop's to choose), its env with the downward API resolved, the pod's restart policy Never
    /// (the operator, not the kubelet, restarts).
    pub(crate) fn launch_spec(&self, id: ReplicaId) -> LaunchSpec {
        let pod = self.pod_name(id);
        let resolve = |path: &str| match path {
            "metadata.name" => pod.clone(),
            "metadata.namespace" => self.namespace.clone(),
            "metadata.uid" => format!("dry-run-{}-{pod}", self.namespace),
            "spec.nodeName" => DRY_RUN_NODE.to_string(),
            "spec.serviceAccountName" => "default".to_string(),
            "status.hostIP" | "status.hostIPs" | "status.podIP" | "status.podIPs" => DRY_RUN_MASTER_ADDR.to_string(),
            _ => String::new(),
        };
        let env = self
            .container
            .env
            .iter()
            .map(|(k, v)| match v {
                EnvSource::Value(v) => (k.clone(), v.clone()),
                EnvSource::FieldRef(path) => (k.clone(), resolve(path)),
            })
            .collect();
        LaunchSpec {
            replica: id,
            pod: pod.clone(),
            namespace: self.namespace.clone(),
            env,
            command: self.container.argv(),
            working_dir: self.container.working_dir.clone(),
            restart_policy: rankvisor_core::policy::RestartPolicy::Never,
            backoff_limit: None,
            leader: None,
            agent_port: None,
        }
    }
}

/// What the HyperPod operator does that nothing public says: a named default and an option each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OperatorSettings {
    /// `--hyperpod-graceful-stop`: a PLR's `/stop` asks for a graceful stop (SIGUSR1).
    pub graceful_stop: bool,
    /// `--hyperpod-stop-timeout`: the `/stop`'s `timeout` before SIGKILL.
    pub stop_timeout: Duration,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        Self { graceful_stop: true, stop_timeout: Duration::from_secs(30) }
    }
}

impl HyperPodJob {
    /// The path and JSON body of `call`, as the operator sends it (the agent's API:
    /// docs/hyperpod.md); the master is rank 0's pod, on this machine at `master_port`.
    pub(crate) fn agent_request(
        &self,
        call: controller::AgentCall,
        master_port: u16,
    ) -> (&'static str, serde_json::Value) {
        use controller::AgentCall;
        match call {
            AgentCall::Start { rank, nnodes, fault_count } => {
                let mut body = serde_json::json!({
                    "rank": rank, "nnodes": nnodes, "faultCount": fault_count,
                    "master_addr": DRY_RUN_MASTER_ADDR, "master_port": master_port,
                });
                if let Some(rules) = &self.run_policy.log_monitoring {
                    body["log_monitoring_configuration"] = rules.clone();
                }
                ("/start", body)
            }
            AgentCall::Stop { graceful, timeout } => (
                "/stop",
                serde_json::json!({
                    "restart_mode": "process_level_restart", "is_graceful": graceful, "timeout": timeout.as_secs(),
                }),
            ),
            AgentCall::Shutdown => ("/shutdown", serde_json::json!({})),
        }
    }
}
