//! The master's view of the whole job: every replica's latest state, and the job's phase as the
//! Kubeflow training-operator decides it (measured in seed 000): the job follows the master, and
//! fails early when every worker has failed while the master still lives.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use super::frame::Health;
use crate::status::{LastExit, ReplicaState, Report};

/// The job's phase, named as `kubectl get pytorchjob` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobPhase {
    /// Submitted; the master is not running its training process yet.
    Created,
    /// The master runs (workers may still be starting or restarting).
    Running,
    /// The master succeeded; final.
    Succeeded,
    /// The master gave up, or every worker failed while the master lived; final.
    Failed,
}

impl JobPhase {
    /// True once nothing can change the phase any more.
    pub fn is_final(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed)
    }
}

/// One replica's latest state as the master knows it: what the master itself saw (its node, its
/// connection, its health, when it last heard from it) and the replica's own latest [`Report`].
///
/// `/job` writes it with the keys it always had: `state`, `restart_count`, `generation` and
/// `last_exit` (the shell-style status) are read from the report, which follows whole as `report`
/// (`null` until the first one).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaView {
    /// Replica index: 0 is the master.
    pub index: u32,
    /// The node it runs on.
    pub node: String,
    /// True while its control connection is up (always true for the master itself).
    pub connected: bool,
    /// Why the connection was lost, once it was; None when it closed after the replica succeeded
    /// (its normal end: done, not lost).
    pub lost: Option<String>,
    /// Its node health, as its hello and health frames carried it.
    pub health: Health,
    /// When the master last heard from it, milliseconds since the Unix epoch.
    pub last_seen_unix_ms: u64,
    /// `--straggler-rule`: why the master named it a straggler (its figures), once it did.
    pub straggler: Option<String>,
    latest: Latest,
}

/// A replica's state: what the master assumes until the replica reports, then its report.
#[derive(Debug, Clone, PartialEq)]
enum Latest {
    /// Not reported yet: the master is `Pending`, a worker just admitted waits at the barrier of
    /// the master's current generation.
    Assumed { state: ReplicaState, generation: u64 },
    /// Its latest report.
    Reported(Box<Report>),
}

impl ReplicaView {
    fn new(index: u32, node: String, health: &Health, generation: u64, now_ms: u64) -> Self {
        let state = if index == 0 { ReplicaState::Pending } else { ReplicaState::Rendezvous };
        ReplicaView {
            index,
            node,
            connected: true,
            lost: None,
            health: health.clone(),
            last_seen_unix_ms: now_ms,
            straggler: None,
            latest: Latest::Assumed { state, generation },
        }
    }

    /// Its latest report, once it sent one.
    pub fn report(&self) -> Option<&Report> {
        match &self.latest {
            Latest::Reported(r) => Some(r),
            Latest::Assumed { .. } => None,
        }
    }

    /// Where it is: its report's state, else where the master assumes it is.
    pub fn state(&self) -> ReplicaState {
        match &self.latest {
            Latest::Reported(r) => r.state,
            Latest::Assumed { state, .. } => *state,
        }
    }

    /// The rendezvous generation it runs in.
    pub fn generation(&self) -> u64 {
        match &self.latest {
            Latest::Reported(r) => r.generation,
            Latest::Assumed { generation, .. } => *generation,
        }
    }

    /// Restarts of its training process (0 before its first report).
    pub fn restart_count(&self) -> u32 {
        self.report().map_or(0, |r| r.restart_count)
    }

    /// How its training process last ended, once it did.
    pub fn last_exit(&self) -> Option<&LastExit> {
        self.report()?.last_exit.as_ref()
    }
}

impl Serialize for ReplicaView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("ReplicaView", 13)?;
        m.serialize_field("index", &self.index)?;
        m.serialize_field("node", &self.node)?;
        m.serialize_field("connected", &self.connected)?;
        m.serialize_field("lost", &self.lost)?;
        m.serialize_field("healthy", &self.health.healthy)?;
        m.serialize_field("health", &self.health.verdict)?;
        m.serialize_field("state", &self.state())?;
        m.serialize_field("restart_count", &self.restart_count())?;
        m.serialize_field("generation", &self.generation())?;
        m.serialize_field("last_exit", &self.last_exit().map(|e| e.status))?;
        m.serialize_field("report", &self.report())?;
        m.serialize_field("last_seen_unix_ms", &self.last_seen_unix_ms)?;
        m.serialize_field("straggler", &self.straggler)?;
        m.end()
    }
}

/// The job-wide view the master serves on `/job`.
///
/// Cloning it (a snapshot for `/job`) shares every replica's entry with the original: a snapshot
/// costs a map of pointers, and the master copies an entry only when it changes one a snapshot
/// still holds (copy on write), so the launcher never holds several deep copies of thousands of
/// replicas.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    job: String,
    replica_count: u32,
    generation: u64,
    phase: JobPhase,
    reason: Option<String>,
    #[serde(serialize_with = "shared_replicas")]
    replicas: BTreeMap<u32, Arc<ReplicaView>>,
}

fn shared_replicas<S: Serializer>(replicas: &BTreeMap<u32, Arc<ReplicaView>>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(replicas.iter().map(|(index, view)| (index, &**view)))
}

impl JobView {
    /// A view holding only the master itself, `Pending`.
    pub fn new(job: &str, replica_count: u32, master_node: &str, health: &Health, now_ms: u64) -> Self {
        let mut replicas = BTreeMap::new();
        replicas.insert(0, Arc::new(ReplicaView::new(0, master_node.to_string(), health, 0, now_ms)));
        JobView { job: job.to_string(), replica_count, generation: 0, phase: JobPhase::Created, reason: None, replicas }
    }

    /// The job's identity.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Replicas in the job, master included.
    pub fn replica_count(&self) -> u32 {
        self.replica_count
    }

    /// The current rendezvous generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The job's phase; final phases never change again.
    pub fn phase(&self) -> JobPhase {
        self.phase
    }

    /// Why the phase is final, once it is.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Every replica heard from, by index (0 is the master).
    pub fn replicas(&self) -> &BTreeMap<u32, Arc<ReplicaView>> {
        &self.replicas
    }

    /// Every worker heard from has finished or is gone: a master whose own child succeeded has no
    /// one left to wait for (workers never heard from do not hold it).
    pub fn workers_done(&self) -> bool {
        self.replicas.values().filter(|r| r.index != 0).all(|r| !r.connected || r.state().is_final())
    }

    fn replace(&mut self, view: ReplicaView) {
        self.replicas.insert(view.index, Arc::new(view));
    }

    /// A worker was admitted: a (re)joining replica starts afresh, as a recreated pod does.
    pub fn joined(&mut self, index: u32, node: &str, health: &Health, now_ms: u64) {
        self.replace(ReplicaView::new(index, node.to_string(), health, self.generation, now_ms));
        self.refresh_phase();
    }

    fn entry(&mut self, index: u32, now_ms: u64) -> &mut ReplicaView {
        let generation = self.generation;
        let view = Arc::make_mut(self.replicas.entry(index).or_insert_with(|| {
            Arc::new(ReplicaView::new(index, String::new(), &unknown_health(), generation, now_ms))
        }));
        view.last_seen_unix_ms = view.last_seen_unix_ms.max(now_ms);
        view
    }

    /// A replica's node health changed.
    pub fn health(&mut self, index: u32, health: &Health, now_ms: u64) {
        self.entry(index, now_ms).health = health.clone();
    }

    /// A replica reported a state change: its report replaces the last one.
    pub fn state(&mut self, index: u32, report: Box<Report>, now_ms: u64) {
        self.entry(index, now_ms).latest = Latest::Reported(report);
        self.refresh_phase();
    }

    /// A replica was heard from (a heartbeat).
    pub fn seen(&mut self, index: u32, now_ms: u64) {
        if let Some(view) = self.replicas.get_mut(&index) {
            if now_ms > view.last_seen_unix_ms {
                Arc::make_mut(view).last_seen_unix_ms = now_ms;
            }
        }
    }

    /// A replica's connection was lost; its last state is kept (a worker that failed and left
    /// still counts as failed). Closing after it succeeded is its end, not a loss.
    pub fn lost(&mut self, index: u32, reason: &str) {
        if let Some(view) = self.replicas.get_mut(&index) {
            let view = Arc::make_mut(view);
            view.connected = false;
            view.lost = (view.state() != ReplicaState::Succeeded).then(|| reason.to_string());
        }
    }

    /// The master named replica `index` a straggler (`why`: its figures); its node ("unknown"
    /// when the replica is not in the view) and its pod (once it reported one), for the log line
    /// and the report.
    pub fn straggler(&mut self, index: u32, why: String) -> (String, Option<String>) {
        match self.replicas.get_mut(&index) {
            Some(view) => {
                let view = Arc::make_mut(view);
                view.straggler = Some(why);
                (view.node.clone(), view.report().and_then(|r| r.identity.pod.clone()))
            }
            None => ("unknown".to_string(), None),
        }
    }

    /// A new rendezvous generation was released or ordered.
    pub fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
    }

    /// Restarts summed over every replica (what the training-operator holds against backoffLimit).
    pub fn total_restarts(&self) -> u64 {
        self.replicas.values().map(|r| u64::from(r.restart_count())).sum()
    }

    fn refresh_phase(&mut self) {
        if self.phase.is_final() {
            return;
        }
        let master = self.replicas.get(&0).map(|r| r.state());
        let (phase, reason) = job_phase(master);
        self.phase = phase;
        self.reason = reason;
    }
}

fn unknown_health() -> Health {
    Health::from(crate::rendezvous::NodeHealth::Off)
}

fn gave_up(state: ReplicaState) -> bool {
    state.is_final() && state != ReplicaState::Succeeded
}

/// The job's phase from the master's state, as the training-operator's job status follows the
/// Master (`UpdateJobStatus`); the reason is set for final phases. There is no "every worker
/// failed" rule: the operator fails a job for its workers through `PastBackoffLimit` and failed
/// pods of restartPolicy Never, which a launcher cannot see (the dry run emulates both).
pub fn job_phase(master: Option<ReplicaState>) -> (JobPhase, Option<String>) {
    match master {
        Some(ReplicaState::Succeeded) => (JobPhase::Succeeded, Some("the master succeeded".to_string())),
        Some(s) if gave_up(s) => (JobPhase::Failed, Some(format!("the master gave up (state {s:?})"))),
        Some(ReplicaState::Running | ReplicaState::Restarting | ReplicaState::Stopping) => (JobPhase::Running, None),
        _ => (JobPhase::Created, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitHow;
    use crate::signo::Signo;
    use crate::status::{Identity, LocalStatus, Timeline};
    use serde_json::json;
    use serde_json::Value;
    use std::time::UNIX_EPOCH;
    use ReplicaState::*;

    fn healthy() -> Health {
        Health::from(crate::rendezvous::NodeHealth::labelled("Schedulable"))
    }

    fn report(status: LocalStatus) -> Box<Report> {
        Box::new(Timeline::new(UNIX_EPOCH).report(&Identity::default(), &status, UNIX_EPOCH))
    }

    fn update(state: ReplicaState, restarts: u32) -> Box<Report> {
        report(LocalStatus { state, restart_count: restarts, ..LocalStatus::default() })
    }

    fn view() -> JobView {
        let mut v = JobView::new("pytest", 4, "node-0", &healthy(), 1000);
        for i in 1..4 {
            v.joined(i, &format!("node-{i}"), &healthy(), 1000 + u64::from(i));
        }
        v
    }

    #[test]
    fn phase_follows_the_master() {
        assert_eq!(job_phase(None).0, JobPhase::Created);
        assert_eq!(job_phase(Some(Pending)).0, JobPhase::Created);
        assert_eq!(job_phase(Some(Rendezvous)).0, JobPhase::Created);
        for s in [Running, Restarting, Stopping] {
            assert_eq!(job_phase(Some(s)), (JobPhase::Running, None));
        }
    }

    #[test]
    fn master_success_is_job_success_whatever_the_workers_do() {
        let (p, why) = job_phase(Some(Succeeded));
        assert_eq!(p, JobPhase::Succeeded);
        assert_eq!(why.as_deref(), Some("the master succeeded"));
    }

    #[test]
    fn master_giving_up_fails_the_job() {
        for s in [Failed, NodeUnhealthy] {
            let (p, why) = job_phase(Some(s));
            assert_eq!(p, JobPhase::Failed);
            assert!(why.unwrap().contains(&format!("the master gave up (state {s:?})")));
        }
    }

    /// Removed with issue 12: workers that all gave up do not fail the job while the master lives.
    #[test]
    fn no_all_workers_failed_rule() {
        let mut v = JobView::new("pytest", 3, "node-0", &healthy(), 0);
        v.joined(1, "node-1", &healthy(), 0);
        v.joined(2, "node-2", &healthy(), 0);
        v.state(0, update(Running, 0), 1);
        v.state(1, update(Failed, 3), 2);
        v.state(2, update(NodeUnhealthy, 0), 3);
        assert_eq!(v.phase(), JobPhase::Running, "the job follows the master");
    }

    #[test]
    fn the_view_keeps_every_replica_and_latches_final_phases() {
        let mut v = view();
        assert_eq!(v.phase(), JobPhase::Created);
        assert_eq!(v.replicas().len(), 4);
        assert_eq!(v.replicas()[&2].state(), Rendezvous);
        v.state(0, update(Running, 0), 2000);
        assert_eq!(v.phase(), JobPhase::Running);
        v.state(1, update(Failed, 3), 2001);
        v.state(2, update(Failed, 3), 2002);
        v.lost(2, "connection closed");
        v.state(3, update(Failed, 1), 2003);
        assert_eq!(v.phase(), JobPhase::Running, "the job follows the master");
        assert_eq!(v.total_restarts(), 7);
        v.state(0, update(Succeeded, 0), 3000);
        assert_eq!(v.phase(), JobPhase::Succeeded);
        v.state(0, update(Failed, 0), 3001);
        assert_eq!(v.phase(), JobPhase::Succeeded, "final phases stay");
        v.joined(3, "node-9", &healthy(), 3002);
        assert_eq!(v.phase(), JobPhase::Succeeded);
    }

    #[test]
    fn workers_are_done_once_each_finished_or_is_gone() {
        let mut v = view();
        assert!(!v.workers_done(), "three workers connected and running");
        v.state(1, update(Succeeded, 0), 2000);
        v.state(2, update(Failed, 3), 2000);
        assert!(!v.workers_done(), "worker 3 still runs");
        v.state(0, update(Running, 0), 2000);
        v.lost(3, "connection closed");
        assert!(v.workers_done(), "the master's own state does not count");
        v.joined(3, "node-3b", &healthy(), 3000);
        assert!(!v.workers_done(), "a recreated worker is waited for again");
    }

    #[test]
    fn the_view_records_state_health_loss_and_time() {
        let mut v = view();
        v.set_generation(2);
        let u = report(LocalStatus {
            state: Restarting,
            restart_count: 1,
            generation: 2,
            last_exit: Some(ExitHow::Signaled(Signo::KILL)),
            progress: crate::heartbeat::parse_progress(r#"{"step": 5}"#),
            ..LocalStatus::default()
        });
        v.state(1, u.clone(), 5000);
        let sick = Health::from(crate::rendezvous::NodeHealth::Unreadable { error: "GpuError".into() });
        v.health(1, &sick, 4000);
        v.seen(1, 6000);
        v.lost(1, "silent for 15s");
        let r = &v.replicas()[&1];
        assert_eq!((r.state(), r.restart_count(), r.generation()), (Restarting, 1, 2));
        assert_eq!(r.last_exit().map(|e| (e.status, e.signal)), Some((137, Some(9))));
        assert_eq!(r.report(), Some(&*u));
        assert_eq!(r.health, sick);
        assert_eq!(r.last_seen_unix_ms, 6000, "time never goes back");
        assert!(!r.connected);
        assert_eq!(r.lost.as_deref(), Some("silent for 15s"));
        v.joined(1, "node-1b", &healthy(), 7000);
        let r = &v.replicas()[&1];
        assert!(r.connected && r.lost.is_none());
        assert_eq!((r.state(), r.restart_count(), r.generation()), (Rendezvous, 0, 2), "a recreated pod starts afresh");
        assert_eq!((r.report(), r.last_exit()), (None, None));
    }

    #[test]
    fn a_connection_closed_after_success_is_the_replicas_end_not_a_loss() {
        let mut v = view();
        v.state(1, update(Succeeded, 0), 2000);
        v.lost(1, "connection closed");
        let done = &v.replicas()[&1];
        assert!(!done.connected, "the connection is gone");
        assert_eq!(done.lost, None, "closing after success is the normal end, not a loss");
        v.state(2, update(Running, 0), 2000);
        v.lost(2, "connection closed");
        assert_eq!(v.replicas()[&2].lost.as_deref(), Some("connection closed"), "a running replica is lost");
        v.state(3, update(Failed, 6), 2000);
        v.lost(3, "connection closed");
        assert_eq!(v.replicas()[&3].lost.as_deref(), Some("connection closed"), "only success ends quietly");
    }

    #[test]
    fn the_view_serializes_for_the_job_endpoint() {
        let mut v = view();
        v.state(0, update(Running, 0), 2000);
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["job"], "pytest");
        assert_eq!(j["phase"], "Running");
        assert_eq!(j["replicas"]["0"]["state"], "Running");
        assert_eq!(j["replicas"]["3"]["node"], "node-3");
        assert_eq!(j["replicas"]["3"]["last_seen_unix_ms"], 1003);
        assert_eq!(j["replicas"]["3"]["health"]["node_health_status"], "Schedulable");
        assert_eq!(j["replicas"]["3"]["report"], Value::Null, "not reported yet");
        let keys = |r: &Value| r.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        let shape = [
            "connected",
            "generation",
            "health",
            "healthy",
            "index",
            "last_exit",
            "last_seen_unix_ms",
            "lost",
            "node",
            "report",
            "restart_count",
            "state",
            "straggler",
        ];
        assert_eq!(keys(&j["replicas"]["3"]), shape, "the keys /job always had, and straggler (null until named)");
        assert_eq!(j["replicas"]["3"]["straggler"], Value::Null);
        let failed = LocalStatus {
            state: Restarting,
            restart_count: 2,
            generation: 1,
            last_exit: Some(ExitHow::Exited(3)),
            ..LocalStatus::default()
        };
        v.state(2, report(failed), 2500);
        let r = &serde_json::to_value(&v).unwrap()["replicas"]["2"];
        assert_eq!(keys(r), shape);
        assert_eq!((&r["state"], &r["restart_count"], &r["generation"]), (&json!("Restarting"), &json!(2), &json!(1)));
        assert_eq!(r["last_exit"], 3, "the shell-style status");
        assert_eq!(r["report"]["last_exit"]["reason"], "Exited", "the report follows whole");
        assert_eq!(r["report"]["state"], "Restarting");
    }

    #[test]
    fn a_snapshot_shares_the_replicas_until_one_changes() {
        let mut v = view();
        let snapshot = v.clone();
        for i in 0..4 {
            assert!(Arc::ptr_eq(&v.replicas()[&i], &snapshot.replicas()[&i]), "replica {i} is shared");
        }
        v.state(2, update(Running, 1), 5000);
        v.seen(3, 5001);
        assert!(!Arc::ptr_eq(&v.replicas()[&2], &snapshot.replicas()[&2]), "a changed replica is copied");
        assert!(!Arc::ptr_eq(&v.replicas()[&3], &snapshot.replicas()[&3]));
        assert!(Arc::ptr_eq(&v.replicas()[&1], &snapshot.replicas()[&1]), "the others stay shared");
        assert_eq!(snapshot.replicas()[&2].state(), Rendezvous, "the snapshot keeps what it saw");
        assert_eq!(snapshot.replicas()[&3].last_seen_unix_ms, 1003);
        assert_eq!((v.replicas()[&2].state(), v.replicas()[&3].last_seen_unix_ms), (Running, 5001));
        v.seen(3, 4000);
        assert_eq!(v.replicas()[&3].last_seen_unix_ms, 5001, "time never goes back");
    }

    #[test]
    fn a_state_from_an_unknown_replica_is_kept() {
        let mut v = JobView::new("j", 2, "n0", &healthy(), 0);
        v.state(1, update(Running, 0), 10);
        assert_eq!(v.replicas()[&1].state(), Running);
        v.seen(7, 10);
        v.lost(7, "x");
        assert!(!v.replicas().contains_key(&7));
    }
}
