//! The job kinds the dry run runs, behind one face for the event loop: a PyTorchJob under the
//! training operator's controller, a TrainJob under the Trainer's, the JobSet's and the Job
//! controllers, or a HyperPodPyTorchJob under the HyperPod operator's. Both share the kubelet ([`crate::kubelet`]), the launchers and the rows.

use std::time::Duration;

use crate::hyperpodjob::controller::HyperPodController;
use crate::hyperpodjob::{HyperPodJob, OperatorSettings};
use crate::kubelet::cluster::{ClusterEvent, ControllerConfig, Step};
use crate::kubelet::launch::{LaunchSpec, DRY_RUN_MASTER_ADDR};
use crate::kubelet::replica::ReplicaId;
use crate::pytorchjob::controller::Controller;
use crate::pytorchjob::env::launch_spec;
use crate::pytorchjob::PyTorchJob;
use crate::render::kubectl::{TextRenderer, WatchKinds};
use crate::runner::launcher::{healthy_labels, labels_file_text};
use crate::runner::workdir::{write_atomically, WorkDir};
use crate::trainjob::controller::TrainJobController;
use crate::trainjob::{env as trainjob_env, TrainJob};

/// An admitted job of either kind.
#[derive(Debug, Clone)]
pub(crate) enum AdmittedJob {
    /// A `kubeflow.org/v1` PyTorchJob.
    PyTorch(Box<PyTorchJob>),
    /// A `trainer.kubeflow.org/v1alpha1` TrainJob, merged with its runtime.
    Train(Box<TrainJob>),
    /// A `sagemaker.amazonaws.com/v1` HyperPodPyTorchJob, with the operator's unknowns.
    HyperPod(Box<HyperPodJob>, OperatorSettings),
}

/// One job's controllers.
#[derive(Debug, Clone)]
pub(crate) enum Workload {
    /// The training operator's.
    PyTorch(Box<Controller>),
    /// The TrainJob's, JobSet's and Job's.
    Train(Box<TrainJobController>),
    /// The HyperPod training operator's.
    HyperPod(Box<HyperPodController>),
}

impl Workload {
    /// The controllers of `job`, whose master listens on `master_port`.
    pub(crate) fn new(job: AdmittedJob, config: ControllerConfig, master_port: u16) -> Self {
        match job {
            AdmittedJob::PyTorch(j) => Self::PyTorch(Box::new(Controller::new(*j, config))),
            AdmittedJob::Train(j) => Self::Train(Box::new(TrainJobController::new(*j, config))),
            AdmittedJob::HyperPod(j, settings) => {
                Self::HyperPod(Box::new(HyperPodController::new(*j, config, settings, master_port)))
            }
        }
    }

    /// The HyperPod operator, for what only it observes and asks for (agents, node labels).
    pub(crate) fn hyperpod(&mut self) -> Option<&mut HyperPodController> {
        match self {
            Self::HyperPod(c) => Some(c),
            _ => None,
        }
    }

    /// The job's kind, as kubectl names it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::PyTorch(_) => "PyTorchJob",
            Self::Train(_) => "TrainJob",
            Self::HyperPod(_) => "HyperPodPyTorchJob",
        }
    }

    /// The job's name.
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::PyTorch(c) => &c.job().name,
            Self::Train(c) => &c.job().name,
            Self::HyperPod(c) => &c.job().name,
        }
    }

    /// The pod of `id` (a TrainJob's node k is `worker-k`), as named now.
    pub(crate) fn pod_name(&self, id: ReplicaId) -> String {
        match self {
            Self::PyTorch(c) => c.job().pod_name(id),
            Self::Train(c) => c.pod_name(id),
            Self::HyperPod(c) => c.job().pod_name(id),
        }
    }

    /// The renderer for this job's rows, wide enough for its names.
    pub(crate) fn renderer(&self, kinds: WatchKinds) -> TextRenderer {
        match self {
            Self::PyTorch(c) => TextRenderer::new(c.job(), kinds),
            Self::Train(c) => TextRenderer::sized(&c.job().name, c.job().hostname(c.job().num_nodes).len() + 6, kinds),
            Self::HyperPod(c) => TextRenderer::sized(&c.job().name, self.pod_width(), kinds),
        }
    }

    /// The longest pod name, for the output's prefixes.
    pub(crate) fn pod_width(&self) -> usize {
        match self {
            Self::PyTorch(c) => c.job().replicas().iter().map(|id| c.job().pod_name(*id).len()).max().unwrap_or(0),
            Self::Train(c) => c.job().hostname(c.job().num_nodes).len() + 6,
            Self::HyperPod(c) => c.job().pods().iter().map(|id| c.job().pod_name(*id).len()).max().unwrap_or(0),
        }
    }

    /// Where the replicas meet, for the first note.
    pub(crate) fn meets_at(&self, master_port: u16) -> String {
        match self {
            // Without a Master the operator injects no MASTER_ADDR: say where the replicas meet instead.
            Self::PyTorch(c) => match (&c.job().master, &c.job().elastic) {
                (Some(_), _) => format!("MASTER_ADDR={DRY_RUN_MASTER_ADDR}, MASTER_PORT={master_port}"),
                (None, Some(_)) => format!("torchrun's rendezvous at {DRY_RUN_MASTER_ADDR}"),
                (None, None) => format!("no Master: Worker 0 leads at {DRY_RUN_MASTER_ADDR}"),
            },
            Self::Train(_) => {
                format!("PET_MASTER_ADDR={DRY_RUN_MASTER_ADDR}, PET_MASTER_PORT={master_port}: node 0 leads")
            }
            Self::HyperPod(_) => format!(
                "each pod's container is rankvisor's HyperPod agent; the emulated operator's /start gives master_addr={DRY_RUN_MASTER_ADDR}, master_port={master_port}"
            ),
        }
    }

    /// The launch of `id`'s pod now; a TrainJob's pod gets its labels file (the downward API's
    /// `metadata.labels`, with the JobSet's restart attempt) written first.
    pub(crate) fn launch(
        &self,
        id: ReplicaId,
        master_port: u16,
        workdir: &WorkDir,
    ) -> Result<Option<LaunchSpec>, String> {
        match self {
            Self::PyTorch(c) => Ok(launch_spec(c.job(), id, master_port)),
            Self::Train(c) => {
                let Some(pod) = c.node_pod(id) else { return Ok(None) };
                let mut labels = healthy_labels();
                labels.insert(rankvisor_core::rank::RESTART_ATTEMPT_LABEL.into(), pod.restart_attempt.to_string());
                labels.insert(trainjob_env::COMPLETION_INDEX_ANNOTATION.into(), pod.index.to_string());
                let path = workdir.labels(&pod.name);
                write_atomically(&path, &labels_file_text(&labels))
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                Ok(Some(trainjob_env::launch_spec(c.job(), &pod, master_port)))
            }
            Self::HyperPod(c) => Ok(Some(c.job().launch_spec(id))),
        }
    }

    /// Apply one observation.
    pub(crate) fn handle(&mut self, now: Duration, event: ClusterEvent) -> Step {
        match self {
            Self::PyTorch(c) => c.handle(now, event),
            Self::Train(c) => c.handle(now, event),
            Self::HyperPod(c) => c.handle(now, event),
        }
    }

    /// When the next tick is due.
    pub(crate) fn next_tick(&self) -> Option<Duration> {
        match self {
            Self::PyTorch(c) => c.next_tick(),
            Self::Train(c) => c.next_tick(),
            Self::HyperPod(c) => c.next_tick(),
        }
    }

    /// The dry run's exit status.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Self::PyTorch(c) => c.exit_code(),
            Self::Train(c) => c.exit_code(),
            Self::HyperPod(c) => c.exit_code(),
        }
    }

    /// Nothing more will happen.
    pub(crate) fn is_settled(&self) -> bool {
        match self {
            Self::PyTorch(c) => c.is_settled(),
            Self::Train(c) => c.is_settled(),
            Self::HyperPod(c) => c.is_settled(),
        }
    }

    /// The job's STATE column, if it has one yet.
    pub(crate) fn state(&self) -> Option<&'static str> {
        match self {
            Self::PyTorch(c) => c.state().map(|s| s.as_str()),
            Self::Train(c) => c.state(),
            Self::HyperPod(c) => c.state(),
        }
    }

    /// What `resume:job@T` changes, for its note.
    pub(crate) fn resume_field(&self) -> &'static str {
        match self {
            Self::PyTorch(_) => "spec.runPolicy.suspend",
            Self::Train(_) => "spec.suspend",
            Self::HyperPod(_) => "spec.runPolicy.suspend",
        }
    }
}
