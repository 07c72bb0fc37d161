//! The job's status as the CRD has it (conditions, `restartCount`, `restartStatus`,
//! `latestFaultyPodInstanceList`, `masterAddr`/`masterPort`), its watch row, and the operator's
//! two latency figures.

use std::time::Duration;

use super::HyperPodController;
use crate::kubelet::cluster::{ClusterAction, Step};
use crate::kubelet::launch::DRY_RUN_MASTER_ADDR;
use crate::render::rows::{Change, HyperPodJobRow, Row, WatchEventType};

/// The operator's latency figures, one pair per restart that completed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Fault detection: from a worker's end (as its launcher reported it) to the operator's
    /// decision (0 where the fault is the operator's own observation: a label, a pod gone).
    pub detection: Vec<Duration>,
    /// Restart: from the decision to every agent RUNNING again.
    pub restart: Vec<Duration>,
}

impl Figures {
    /// One restart done.
    pub(crate) fn record(&mut self, detection: Duration, restart: Duration) {
        self.detection.push(detection);
        self.restart.push(restart);
    }

    /// The line printed at the end.
    pub(crate) fn line(&self) -> String {
        if self.restart.is_empty() {
            return "HyperPod operator figures: no restart completed".into();
        }
        let stat = |v: &[Duration]| {
            let ms: Vec<u128> = v.iter().map(Duration::as_millis).collect();
            format!("last {} ms, max {} ms", ms[ms.len() - 1], ms.iter().max().copied().unwrap_or(0))
        };
        format!(
            "HyperPod operator figures over {} restart(s): fault detection (a worker's end to the operator's decision) {}; restart (the decision to every agent RUNNING) {}",
            self.restart.len(),
            stat(&self.detection),
            stat(&self.restart)
        )
    }
}

impl HyperPodController {
    /// A new newest condition (shown, and said once).
    pub(super) fn condition(
        &mut self,
        kind: &'static str,
        reason: &str,
        message: &str,
        now: Duration,
        step: &mut Step,
    ) {
        self.conditions.push((kind, reason.to_string(), message.to_string()));
        if kind == "Restarting" {
            let message = format!("HyperPodPyTorchJob {}: Restarting ({reason}): {message}", self.job.name);
            step.actions.push(ClusterAction::Note { message });
        }
        self.sync_job(now, step);
    }

    /// The job's row now.
    pub(crate) fn job_row(&self, now: Duration) -> Row {
        let c = &self.counters;
        let (restart_type, faulty_pods, faulty_ranks) = match &self.latest_faulty {
            Some((t, pods, ranks)) => (Some(t.as_str()), pods.clone(), ranks.clone()),
            None => (None, Vec::new(), Vec::new()),
        };
        Row::HyperPodJob(HyperPodJobRow {
            name: self.job.name.clone(),
            state: self.conditions.last().map(|c| c.0),
            reason: self.conditions.last().map(|c| c.1.clone()),
            restart_count: c.total,
            restart_status: c.window_start.map(|w| (w.as_secs(), c.jlr_in_window, c.plr_in_window)),
            restart_type,
            faulty_pods,
            faulty_ranks,
            master: self.started_at.map(|_| (DRY_RUN_MASTER_ADDR.to_string(), self.master_port)),
            age: now.saturating_sub(self.created_at),
        })
    }

    /// Emit the job's row if its content changed (ADDED the first time).
    pub(crate) fn sync_job(&mut self, now: Duration, step: &mut Step) {
        if self.job_deleted || self.conditions.is_empty() {
            return;
        }
        let row = self.job_row(now);
        let event = match &self.shown_job {
            None => WatchEventType::Added,
            Some(shown) if shown.same_content(&row) => return,
            Some(_) => WatchEventType::Modified,
        };
        self.shown_job = Some(row.clone());
        step.changes.push(Change { at: now, event, row });
    }
}
