//! What the controller shows: each object's row, emitted when more than its clock changed.

use std::time::Duration;

use super::Controller;
use crate::kubelet::cluster::Step;
use crate::kubelet::pod::PodPhase;
use crate::render::rows::{Change, JobRow, PodGroupRow, Row, WatchEventType};

impl Controller {
    pub(super) fn job_row(&self, now: Duration) -> Row {
        Row::Job(JobRow {
            name: self.job.name.clone(),
            state: self.state,
            age: now.saturating_sub(self.submitted_at.unwrap_or(now)),
        })
    }

    pub(super) fn podgroup_row(&self, now: Duration) -> Row {
        Row::PodGroup(PodGroupRow {
            name: self.job.name.clone(),
            status: self.podgroup_status,
            min_member: self.job.min_member(),
            runnings: self.kubelet.pods.iter().filter(|p| !p.gone && p.phase == PodPhase::Running).count() as u32,
            age: now.saturating_sub(self.submitted_at.unwrap_or(now)),
            queue: self.job.queue().to_string(),
        })
    }

    pub(super) fn sync_job(&mut self, now: Duration, event: WatchEventType, step: &mut Step) {
        let row = self.job_row(now);
        push_if_changed(&mut self.shown_job, row, now, event, step);
    }

    pub(super) fn sync_podgroup(&mut self, now: Duration, step: &mut Step) {
        self.sync_podgroup_as(now, WatchEventType::Modified, step);
    }

    pub(super) fn sync_podgroup_as(&mut self, now: Duration, event: WatchEventType, step: &mut Step) {
        if self.podgroup_deleted || !self.podgroup_created {
            return;
        }
        let row = self.podgroup_row(now);
        push_if_changed(&mut self.shown_podgroup, row, now, event, step);
    }
}

/// Record `row` as shown and emit it, unless only its clock-driven columns changed.
fn push_if_changed(shown: &mut Option<Row>, row: Row, now: Duration, event: WatchEventType, step: &mut Step) {
    if shown.as_ref().is_some_and(|s| s.same_content(&row)) {
        return;
    }
    *shown = Some(row.clone());
    step.changes.push(Change { at: now, event, row });
}
