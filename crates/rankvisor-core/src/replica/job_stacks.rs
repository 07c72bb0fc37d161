//! This replica's answer to the master's `stacks_ask`, and on the master the whole job's stacks:
//! every replica's summary (its live snapshot, else the one its hang's stop took), grouped.

use crate::rendezvous::{JobView, MasterHandle, StacksAnswerer};
use crate::replica::child::SNAPSHOT_WAIT;
use crate::stacks::{group, render_groups, JobStacks, Snapshotter, StacksSummary};
use crate::status::{rfc3339, ReplicaState, Report};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// How long the master waits for the workers' answers: the snapshot's 2 s plus the network's.
pub const GATHER_LIMIT: Duration = Duration::from_secs(4);

/// The most groups a job summary keeps (the report, the webhook, the Event).
const KEPT_GROUPS: usize = 16;

/// Answers with this replica's summary: a snapshot of its running child, else the one taken at
/// its last hang's stop, else why there is none.
pub fn answerer(snapshots: Arc<Snapshotter>, reports: watch::Receiver<Report>) -> StacksAnswerer {
    Arc::new(move || {
        let (snapshots, reports) = (snapshots.clone(), reports.clone());
        Box::pin(async move { own_summary(&snapshots, &reports).await })
    })
}

async fn own_summary(snapshots: &Snapshotter, reports: &watch::Receiver<Report>) -> StacksSummary {
    let report = settled(reports.clone()).await;
    let now = || rfc3339(SystemTime::now());
    // A child being stopped after its hang's snapshot may be gone already: that snapshot says
    // where it was.
    let live = match report.child_pid {
        Some(pid) if report.state == ReplicaState::Running || report.stacks.is_none() => {
            Some(snapshots.take(nix::unistd::Pid::from_raw(pid)).await)
        }
        _ => None,
    };
    let live = live.map(|s| s.summary("asked", now()));
    match (live, report.stacks) {
        (Some(s), last) if !s.frames.is_empty() || last.is_none() => s,
        (_, Some(last)) => last,
        (_, None) => StacksSummary {
            taken_at: now(),
            why: "asked".into(),
            pid: None,
            frames: Vec::new(),
            top: format!("no training process runs ({:?})", report.state),
        },
    }
}

/// The latest report, once a stop's snapshot being taken is in it: a replica whose hang verdict
/// came with the master's ask answers with that snapshot, not with its child's exit (at most
/// [`SNAPSHOT_WAIT`], the stop's own wait).
async fn settled(mut reports: watch::Receiver<Report>) -> Report {
    let first = reports.borrow_and_update().clone();
    if first.state != ReplicaState::Stopping {
        return first;
    }
    let changed = |r: &Report| r.state != ReplicaState::Stopping || r.stacks != first.stacks;
    match tokio::time::timeout(SNAPSHOT_WAIT, reports.wait_for(changed)).await {
        Ok(Ok(r)) => r.clone(),
        _ => first,
    }
}

/// Every replica's summary, grouped: the master's own (`own`), the workers' answers within
/// [`GATHER_LIMIT`], and for a replica that did not answer the summary of its last report's
/// snapshot, or "no answer".
pub async fn gather(master: &MasterHandle, own: &StacksAnswerer, why: &str) -> JobStacks {
    let started = tokio::time::Instant::now();
    let taken_at = rfc3339(SystemTime::now());
    let (mine, answers) = tokio::join!(own(), master.ask_stacks(GATHER_LIMIT));
    let mut replicas = vec![(0, mine)];
    replicas.extend(answers);
    let view = master.job_view();
    fill_silent(&mut replicas, &view, &taken_at);
    let groups = group(&replicas);
    let summary = render_groups(&groups);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    JobStacks { taken_at, why: why.into(), elapsed_ms, groups, summary, replicas }
}

/// A replica that did not answer: its last report's snapshot, or "no answer".
fn fill_silent(replicas: &mut Vec<(u32, StacksSummary)>, view: &JobView, taken_at: &str) {
    for index in 1..view.replica_count() {
        if replicas.iter().any(|(i, _)| *i == index) {
            continue;
        }
        let last = view.replicas().get(&index).and_then(|r| r.report()).and_then(|r| r.stacks.clone());
        let summary = last.unwrap_or_else(|| StacksSummary {
            taken_at: taken_at.to_string(),
            why: "asked".into(),
            pid: None,
            frames: Vec::new(),
            top: format!("no answer within {GATHER_LIMIT:?}"),
        });
        replicas.push((index, summary));
    }
}

/// The job's stacks as a report carries them: the groups (at most [`KEPT_GROUPS`]) and the summary,
/// not every replica's.
pub fn note(mut job: JobStacks) -> JobStacks {
    job.replicas.clear();
    job.groups.truncate(KEPT_GROUPS);
    job
}

type Gathering = std::pin::Pin<Box<dyn std::future::Future<Output = JobStacks> + Send>>;

/// The master's gathering of the job's stacks on a hang: it starts when a replica's report brings
/// a new snapshot (taken before its hang's stop, so the others are still where the hang held
/// them); while it runs, the restart it leads to waits (a generation request, a barrier), so no
/// child is stopped before its stacks are read.
#[derive(Default)]
pub struct HangGather {
    running: Option<Gathering>,
    /// The latest snapshot seen of each replica (its time).
    seen: std::collections::HashMap<u32, String>,
    /// Generation requests held while the gathering runs.
    pub held_events: Vec<super::LinkEvent>,
    /// A barrier held while the gathering runs.
    pub held_barrier: Option<u64>,
}

impl HangGather {
    /// Replica `index`'s report: a new hang snapshot in it starts a gathering (unless one runs).
    pub fn on_report(&mut self, index: u32, report: &Report, master: &Arc<MasterHandle>, own: &StacksAnswerer) {
        let Some(s) = &report.stacks else { return };
        if self.seen.get(&index) == Some(&s.taken_at) {
            return;
        }
        self.seen.insert(index, s.taken_at.clone());
        if self.running.is_some() {
            return;
        }
        let why = format!("replica {index}: {}", s.why);
        let (master, own) = (master.clone(), own.clone());
        self.running = Some(Box::pin(async move { gather(&master, &own, &why).await }));
    }

    /// A gathering runs.
    pub fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// The running gathering's result; never ready without one.
    pub async fn next(&mut self) -> JobStacks {
        match &mut self.running {
            Some(f) => {
                let job = f.await;
                self.running = None;
                job
            }
            None => std::future::pending().await,
        }
    }
}
