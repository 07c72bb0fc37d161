//! What the TrainJob's controllers show: each object's row, emitted when more than its clock changed.

use std::time::Duration;

use super::TrainJobController;
use crate::kubelet::cluster::Step;
use crate::render::rows::{BatchJobRow, Change, JobSetRow, Row, TrainJobRow, WatchEventType};

impl TrainJobController {
    /// Every existing object's row at `now`.
    #[cfg(test)]
    pub(crate) fn rows(&self, now: Duration) -> Vec<Row> {
        let mut rows = Vec::new();
        if self.submitted_at.is_some() {
            rows.push(self.trainjob_row(now));
        }
        if self.jobset_created_at.is_some() && !self.jobset_deleted {
            rows.push(self.jobset_row(now));
            if self.batch.is_some() {
                rows.push(self.batch_row(now));
            }
        }
        rows.extend(self.kubelet.rows(now));
        rows
    }

    pub(super) fn trainjob_row(&self, now: Duration) -> Row {
        let last = self.conditions.last();
        Row::TrainJob(TrainJobRow {
            name: self.job.name.clone(),
            state: last.map(|c| c.kind.as_str()),
            reason: last.map(|c| c.reason.clone()),
            age: now.saturating_sub(self.submitted_at.unwrap_or(now)),
        })
    }

    pub(super) fn jobset_row(&self, now: Duration) -> Row {
        Row::JobSet(JobSetRow {
            name: self.job.name.clone(),
            terminal_state: self.terminal,
            restarts: self.restarts,
            completed: self.terminal == Some("Completed"),
            suspended: self.ever_suspended.then_some(self.suspended),
            age: now.saturating_sub(self.jobset_created_at.unwrap_or(now)),
        })
    }

    pub(super) fn batch_row(&self, now: Duration) -> Row {
        let b = self.batch.as_ref();
        let status = match b {
            _ if self.suspended => "Suspended",
            Some(b) if b.failure.is_some() => "Failed",
            Some(b) if b.complete_at.is_some() => "Complete",
            _ => "Running",
        };
        let created = b.map_or(now, |b| b.created_at);
        let end = b.and_then(|b| b.complete_at.or(b.failure.as_ref().map(|f| f.2))).unwrap_or(now);
        Row::BatchJob(BatchJobRow {
            name: self.job.job_name(),
            status,
            succeeded: b.map_or(0, |b| b.succeeded.len() as u32),
            completions: self.job.num_nodes,
            duration: (!self.suspended).then(|| end.saturating_sub(created)),
            age: now.saturating_sub(created),
        })
    }

    /// Emit the TrainJob's, the JobSet's and the Job's rows where more than their clocks changed.
    pub(super) fn sync(&mut self, now: Duration, step: &mut Step) {
        let rows = [
            self.submitted_at.map(|_| self.trainjob_row(now)),
            self.jobset_created_at.filter(|_| !self.jobset_deleted).map(|_| self.jobset_row(now)),
            self.batch.as_ref().filter(|_| !self.jobset_deleted).map(|_| self.batch_row(now)),
        ];
        for (slot, row) in rows.into_iter().enumerate() {
            let Some(row) = row else { continue };
            // A new Job (after a restart) is a new object: ADDED again.
            let added = match (&self.shown[slot], &row) {
                (None, _) => true,
                (Some(Row::BatchJob(old)), Row::BatchJob(new)) => new.age < old.age,
                _ => false,
            };
            if self.shown[slot].as_ref().is_some_and(|s| s.same_content(&row)) && !added {
                continue;
            }
            self.shown[slot] = Some(row.clone());
            let event = if added { WatchEventType::Added } else { WatchEventType::Modified };
            step.changes.push(Change { at: now, event, row });
        }
    }
}
