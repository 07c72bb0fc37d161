//! The controller driven on a fake clock as the event loop would feed it: seed 000's scenarios
//! ([`seed`]) and the operator's rules one by one ([`rules`]).

use std::time::Duration;

use super::admission::parse_job;
use super::controller::Controller;
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig, Outcome};
use crate::kubelet::replica::{ReplicaId, ReplicaType};
use crate::render::rows::{Change, JobState, PodGroupPhase, PodRow, PodStatus, Row, WatchEventType};
use rankvisor_core::exit::ExitHow;

pub(super) const NORMAL: &str = include_str!("../../../../examples/pytorchjob.yaml");
pub(super) const WORKER_FAILS: &str = include_str!("../../../../examples/pytorchjob-worker-fails.yaml");
pub(super) const ALL_WORKERS_FAIL: &str = include_str!("../../../../examples/pytorchjob-all-workers-fail.yaml");
pub(super) const MASTER_FAILS: &str = include_str!("../../../../examples/pytorchjob-master-fails.yaml");
pub(super) const GANG: &str = include_str!("../../../../examples/pytorchjob-gang.yaml");

pub(super) const MASTER: ReplicaId = ReplicaId::MASTER;
pub(super) const W0: ReplicaId = ReplicaId { rtype: ReplicaType::Worker, index: 0 };

pub(super) fn workers() -> Vec<ReplicaId> {
    (0..3).map(ReplicaId::worker).collect()
}

pub(super) fn all_pods() -> Vec<ReplicaId> {
    let mut v = vec![MASTER];
    v.extend(workers());
    v
}

/// A controller plus everything it said, driven on a fake clock.
pub(super) struct Run {
    pub(super) c: Controller,
    pub(super) now: Duration,
    pub(super) changes: Vec<Change>,
    pub(super) actions: Vec<ClusterAction>,
    pub(super) states: Vec<Option<JobState>>,
}

impl Run {
    pub(super) fn new(manifest: &str) -> Self {
        Self::with(manifest, ControllerConfig { node: "las1".into(), ..ControllerConfig::default() })
    }

    pub(super) fn with(manifest: &str, config: ControllerConfig) -> Self {
        let job = parse_job(manifest, "pytorchjob.yaml").unwrap();
        Self {
            c: Controller::new(job, config),
            now: Duration::ZERO,
            changes: Vec::new(),
            actions: Vec::new(),
            states: Vec::new(),
        }
    }

    /// Feed `event` at `secs` after submit; return the actions it caused.
    pub(super) fn at(&mut self, secs: f64, event: ClusterEvent) -> Vec<ClusterAction> {
        self.now = Duration::from_secs_f64(secs);
        let step = self.c.handle(self.now, event);
        self.changes.extend(step.changes);
        self.actions.extend(step.actions.clone());
        self.states.push(self.c.state());
        step.actions
    }

    /// Submit, start every launcher, run every training process.
    pub(super) fn start_all(&mut self) {
        let actions = self.at(0.0, ClusterEvent::Submitted);
        let started: Vec<ClusterAction> =
            all_pods().into_iter().map(|pod| ClusterAction::StartLauncher { pod }).collect();
        assert_eq!(actions, started);
        for pod in all_pods() {
            self.at(0.1, ClusterEvent::LauncherStarted { pod });
        }
        for pod in all_pods() {
            self.at(1.0, ClusterEvent::ChildRunning { pod, restart_count: 0 });
        }
    }

    /// Submit, start these launchers and run their training processes.
    pub(super) fn start_all_of(&mut self, pods: &[ReplicaId]) {
        self.at(0.0, ClusterEvent::Submitted);
        for pod in pods {
            self.at(0.1, ClusterEvent::LauncherStarted { pod: *pod });
        }
        for pod in pods {
            self.at(1.0, ClusterEvent::ChildRunning { pod: *pod, restart_count: 0 });
        }
    }

    pub(super) fn run(&mut self, secs: f64, pod: ReplicaId, restart_count: u32) {
        self.at(secs, ClusterEvent::ChildRunning { pod, restart_count });
    }

    pub(super) fn exit(
        &mut self,
        secs: f64,
        pod: ReplicaId,
        code: i32,
        will_restart: bool,
        restart_count: u32,
    ) -> Vec<ClusterAction> {
        self.at(secs, ClusterEvent::ChildExited { pod, exit: ExitHow::Exited(code), will_restart, restart_count })
    }

    /// The child exits and its launcher with it.
    pub(super) fn complete(&mut self, secs: f64, pod: ReplicaId, code: i32) {
        self.exit(secs, pod, code, false, 0);
        self.at(secs, ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(code) });
    }

    pub(super) fn pod(&self, id: ReplicaId) -> Option<PodRow> {
        self.c.rows(self.now).into_iter().find_map(|r| match r {
            Row::Pod(p) if p.replica == id => Some(p),
            _ => None,
        })
    }

    pub(super) fn pod_history(&self, id: ReplicaId) -> Vec<(WatchEventType, PodStatus, u32)> {
        self.changes
            .iter()
            .filter_map(|c| match &c.row {
                Row::Pod(p) if p.replica == id => Some((c.event, p.status, p.restarts)),
                _ => None,
            })
            .collect()
    }

    pub(super) fn podgroup_history(&self) -> Vec<(WatchEventType, Option<PodGroupPhase>, u32, u32)> {
        self.changes
            .iter()
            .filter_map(|c| match &c.row {
                Row::PodGroup(g) => Some((c.event, g.status, g.min_member, g.runnings)),
                _ => None,
            })
            .collect()
    }

    pub(super) fn job_history(&self) -> Vec<Option<JobState>> {
        self.changes
            .iter()
            .filter_map(|c| match &c.row {
                Row::Job(j) => Some(j.state),
                _ => None,
            })
            .collect()
    }

    pub(super) fn finishes(&self) -> Vec<(Outcome, String)> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                ClusterAction::Finish { outcome, reason } => Some((*outcome, reason.clone())),
                _ => None,
            })
            .collect()
    }

    pub(super) fn podgroup_exists(&self) -> bool {
        self.c.rows(self.now).iter().any(|r| matches!(r, Row::PodGroup(_)))
    }
}

mod rules;
mod seed;
