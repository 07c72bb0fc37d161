//! What the dry run's event loop decides about the run itself, as a pure machine: when the run is
//! cut short (`--timeout`, a signal; a second signal kills) and with which exit status, when a
//! launcher asked to stop is killed for running late, when a launcher's exit is reported although
//! what it left is not gone yet, when to name the replicas a finished job still waits for, and
//! when the run is over. No I/O and no clock: the loop passes `now` and the facts it sees, asks
//! [`Run::next_wake`], and carries out the [`RunAction`]s.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nix::unistd::Pid;
use tokio::time::Instant;

use crate::kubelet::replica::ReplicaId;
use rankvisor_core::exit::ExitHow;
use rankvisor_core::signo::Signo;

/// A launcher asked to stop gets this long beyond its grace period before the dry run kills it.
pub(crate) const STOP_MARGIN: Duration = Duration::from_secs(2);
/// After the job's end, replicas still running this long later are named (they keep the run alive).
pub(crate) const STRAGGLER_NOTE_AFTER: Duration = Duration::from_secs(1);
/// How long a launcher's exit waits for the processes it left to be killed and collected before
/// it is reported anyway (a process stuck in the kernel does not die at once).
pub(crate) const TEARDOWN_LIMIT: Duration = Duration::from_secs(5);

/// Why the run ends before the job settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Abort {
    code: i32,
    /// A signal: a second one kills at once.
    by_signal: bool,
}

/// What the loop must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunAction {
    /// `--timeout` passed: say so (the job's state as given), then stop every launcher.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// A first INT/TERM: say so, then stop every launcher within its grace period.
    Interrupted {
        /// The signal.
        signal: Signo,
    },
    /// A second signal: kill every launcher and its training process at once.
    KillAll {
        /// The signal.
        signal: Signo,
    },
    /// SIGTERM this launcher (it forwards TERM to its child's group, waits its grace, kills).
    Term(ReplicaId),
    /// This launcher did not stop in time: SIGKILL it and its training process group.
    KillLate(ReplicaId),
    /// The processes a launcher left are still not gone: report its end anyway.
    ReportExitsAnyway,
    /// Name the replicas the finished job still waits for.
    NameStragglers,
}

/// Where a replica's training process is when a `fail:` injection is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildNow {
    /// Running, with this pid (its process group).
    Running(Pid),
    /// Its launcher runs and will start it (starting, or waiting for its restart).
    Coming,
    /// No launcher, or one that reported its end: no training process will run.
    Never,
}

/// What a `fail:` injection does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailNow {
    /// SIGKILL this process group.
    Kill(Pid),
    /// Nothing yet: the child fails as soon as its launcher says it runs.
    OnceRunning,
    /// Nothing: say the injection is skipped.
    Skip,
}

/// The run: its deadlines and whether it was cut short.
#[derive(Debug)]
pub(crate) struct Run {
    start: Instant,
    timeout: Option<Duration>,
    grace: Duration,
    abort: Option<Abort>,
    /// Launchers asked to stop, and when each is killed if still there.
    stopping: BTreeMap<ReplicaId, Instant>,
    straggler_note_at: Option<Instant>,
    /// Since when the oldest launcher exit waits for what it left.
    teardown_since: Option<Instant>,
    /// Replicas whose `fail:` injection waits for their training process to run.
    fails_waiting: BTreeSet<ReplicaId>,
    /// The controller asked to stop every launcher, also those it starts later.
    stop_all: bool,
}

impl Run {
    /// A run started at `start`, with `--timeout` and the launchers' grace period.
    pub(crate) fn new(start: Instant, timeout: Option<Duration>, grace: Duration) -> Self {
        Self {
            start,
            timeout,
            grace,
            abort: None,
            stopping: BTreeMap::new(),
            straggler_note_at: None,
            teardown_since: None,
            fails_waiting: BTreeSet::new(),
            stop_all: false,
        }
    }

    /// The run was cut short: the job's emulation ends where it was.
    pub(crate) fn aborted(&self) -> bool {
        self.abort.is_some()
    }

    /// The dry run's exit status: the abort's, else the job's.
    pub(crate) fn exit_code(&self, job_exit_code: i32) -> i32 {
        self.abort.map_or(job_exit_code, |a| a.code)
    }

    /// Over once every launcher is gone and nothing waits for its leftovers, and the job settled
    /// or the run was cut short.
    pub(crate) fn done(&self, launchers_left: bool, job_settled: bool) -> bool {
        !launchers_left && self.teardown_since.is_none() && (self.aborted() || job_settled)
    }

    /// Ask `pod`'s launcher to stop (once: a second ask keeps the first deadline).
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn stop(&mut self, pod: ReplicaId, now: Instant) -> Option<RunAction> {
        if self.stopping.contains_key(&pod) {
            return None;
        }
        self.stopping.insert(pod, now + self.grace + STOP_MARGIN);
        Some(RunAction::Term(pod))
    }

    /// A `fail:` injection for `pod` is due, its training process being `child`: kill it now,
    /// once it runs (a child that is starting or waiting for its restart), or never.
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn fail_due(&mut self, pod: ReplicaId, child: ChildNow) -> FailNow {
        match child {
            ChildNow::Running(pid) => FailNow::Kill(pid),
            ChildNow::Coming => {
                self.fails_waiting.insert(pod);
                FailNow::OnceRunning
            }
            ChildNow::Never => FailNow::Skip,
        }
    }

    /// `pod`'s launcher says its training process `child` runs: the process group to kill now
    /// if a `fail:` injection waits for it (once).
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn child_runs(&mut self, pod: ReplicaId, child: Option<Pid>) -> Option<Pid> {
        let pid = child?;
        self.fails_waiting.remove(&pod).then_some(pid)
    }

    /// The controller asked to stop every launcher: each one running now is asked to stop (the
    /// returned actions), and each one started later as soon as it starts ([`Run::started`]).
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn stop_all(&mut self, running: impl IntoIterator<Item = ReplicaId>, now: Instant) -> Vec<RunAction> {
        self.stop_all = true;
        running.into_iter().filter_map(|pod| self.stop(pod, now)).collect()
    }

    /// `pod`'s launcher started: stopped at once after a [`Run::stop_all`].
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn started(&mut self, pod: ReplicaId, now: Instant) -> Option<RunAction> {
        if self.stop_all {
            return self.stop(pod, now);
        }
        None
    }

    /// `pod`'s launcher was killed or is gone: no deadline for it any more.
    pub(crate) fn forget(&mut self, pod: ReplicaId) {
        self.stopping.remove(&pod);
    }

    /// `pod`'s launcher exited: a `fail:` injection waiting for its child is dropped (a new
    /// launcher is a new container), and so is its stop's deadline (a recreated pod's launcher
    /// is neither killed by it nor kept from being asked to stop).
    pub(crate) fn launcher_exited(&mut self, pod: ReplicaId) {
        self.fails_waiting.remove(&pod);
        self.stopping.remove(&pod);
    }

    /// The job ended: its stragglers are named a moment later.
    pub(crate) fn job_finished(&mut self, now: Instant) {
        self.straggler_note_at = Some(now + STRAGGLER_NOTE_AFTER);
    }

    /// A launcher's exit waits for what it left since `since` (None: nothing waits any more).
    pub(crate) fn tearing_down(&mut self, since: Option<Instant>) {
        self.teardown_since = since;
    }

    /// INT or TERM reached the dry run.
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn on_signal(&mut self, signal: Signo) -> RunAction {
        match self.abort {
            Some(Abort { by_signal: true, .. }) => RunAction::KillAll { signal },
            _ => {
                self.abort = Some(Abort { code: ExitHow::Signaled(signal).code(), by_signal: true });
                RunAction::Interrupted { signal }
            }
        }
    }

    /// The deadlines that passed by `now`, in order: a teardown given up, the stragglers named,
    /// the timeout (with the job's exit status, `job_exit_code`), the launchers running late.
    #[must_use = "the actions are the loop's to perform"]
    pub(crate) fn on_wake(&mut self, now: Instant, job_exit_code: i32) -> Vec<RunAction> {
        let mut out = Vec::new();
        if self.teardown_since.is_some_and(|since| since + TEARDOWN_LIMIT <= now) {
            out.push(RunAction::ReportExitsAnyway);
        }
        if self.straggler_note_at.is_some_and(|t| t <= now) {
            self.straggler_note_at = None;
            if !self.aborted() {
                out.push(RunAction::NameStragglers);
            }
        }
        if let Some(after) = self.timeout.filter(|t| !self.aborted() && self.start + *t <= now) {
            self.abort = Some(Abort { code: job_exit_code, by_signal: false });
            out.push(RunAction::TimedOut { after });
        }
        let late: Vec<ReplicaId> = self.stopping.iter().filter(|(_, k)| **k <= now).map(|(p, _)| *p).collect();
        for pod in late {
            self.stopping.remove(&pod);
            out.push(RunAction::KillLate(pod));
        }
        out
    }

    /// The earliest of the run's own deadlines (the loop adds the job's ticks and injections while
    /// the run is not cut short, and its teardown polls).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let live = !self.aborted();
        let timeout = self.timeout.filter(|_| live).map(|t| self.start + t);
        let stragglers = self.straggler_note_at.filter(|_| live);
        let teardown = self.teardown_since.map(|s| s + TEARDOWN_LIMIT);
        [timeout, stragglers, teardown].into_iter().flatten().chain(self.stopping.values().copied()).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn pod(i: u32) -> ReplicaId {
        ReplicaId::worker(i)
    }

    #[test]
    fn a_fail_injection_kills_a_running_child_waits_for_a_coming_one_and_skips_otherwise() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, None, 5 * S);
        let pid = Pid::from_raw(4242);
        assert_eq!(run.fail_due(pod(0), ChildNow::Running(pid)), FailNow::Kill(pid));
        assert_eq!(run.child_runs(pod(0), Some(pid)), None, "nothing waits for a child already killed");
        assert_eq!(run.fail_due(pod(1), ChildNow::Never), FailNow::Skip);
        assert_eq!(run.child_runs(pod(1), Some(pid)), None, "a skipped injection is not kept");
        assert_eq!(run.fail_due(pod(2), ChildNow::Coming), FailNow::OnceRunning);
        assert_eq!(run.child_runs(pod(2), None), None, "still not running: still waiting");
        assert_eq!(run.child_runs(pod(2), Some(pid)), Some(pid), "killed as soon as it runs");
        assert_eq!(run.child_runs(pod(2), Some(pid)), None, "once");
        assert_eq!(run.fail_due(pod(3), ChildNow::Coming), FailNow::OnceRunning);
        run.launcher_exited(pod(3));
        assert_eq!(run.child_runs(pod(3), Some(pid)), None, "a new launcher is a new container");
    }

    /// Regression: a pod recreated after its launcher was stopped could not be stopped again
    /// before the first stop's deadline, and that deadline killed the new launcher.
    #[test]
    fn a_launcher_that_exited_leaves_no_stop_deadline_behind() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, None, 5 * S);
        assert_eq!(run.stop(pod(1), t0), Some(RunAction::Term(pod(1))));
        run.launcher_exited(pod(1));
        assert_eq!(run.next_wake(), None, "no kill due for a launcher that is gone");
        assert_eq!(run.stop(pod(1), t0 + S), Some(RunAction::Term(pod(1))), "its successor can be stopped");
    }

    #[test]
    fn stop_all_stops_the_running_launchers_and_each_one_started_later() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, None, 5 * S);
        assert_eq!(run.started(pod(0), t0), None, "no stop asked yet");
        assert_eq!(run.stop_all([pod(0), pod(1)], t0), vec![RunAction::Term(pod(0)), RunAction::Term(pod(1))]);
        assert_eq!(run.started(pod(2), t0 + S), Some(RunAction::Term(pod(2))), "started after: stopped at once");
        assert_eq!(run.stop_all([pod(0), pod(2)], t0 + S), vec![], "each asked once");
    }

    #[test]
    fn the_timeout_cuts_the_run_short_with_the_jobs_status_once() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, Some(10 * S), 5 * S);
        assert_eq!(run.next_wake(), Some(t0 + 10 * S));
        assert_eq!(run.on_wake(t0 + 9 * S, 1), vec![]);
        assert_eq!(run.on_wake(t0 + 10 * S, 1), vec![RunAction::TimedOut { after: 10 * S }]);
        assert!(run.aborted());
        assert_eq!(run.exit_code(0), 1, "the job's status when the time ran out");
        assert_eq!(run.on_wake(t0 + 11 * S, 1), vec![], "once");
        assert_eq!(run.next_wake(), None);
        assert!(!run.done(true, false), "launchers are still stopping");
        assert!(run.done(false, false), "a cut-short run is over once its launchers are gone");
    }

    #[test]
    fn a_first_signal_stops_and_a_second_kills() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, Some(10 * S), 5 * S);
        assert_eq!(run.on_signal(Signo::INT), RunAction::Interrupted { signal: Signo::INT });
        assert_eq!(run.exit_code(0), 128 + Signo::INT.raw());
        assert_eq!(run.on_signal(Signo::TERM), RunAction::KillAll { signal: Signo::TERM });
        assert_eq!(run.exit_code(0), 128 + Signo::INT.raw(), "the first signal's status");
        assert_eq!(run.on_wake(t0 + 20 * S, 1), vec![], "no timeout after an interrupt");
    }

    #[test]
    fn a_launcher_asked_to_stop_is_killed_after_its_grace_and_margin() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, None, 5 * S);
        assert_eq!(run.stop(pod(1), t0), Some(RunAction::Term(pod(1))));
        assert_eq!(run.stop(pod(1), t0 + S), None, "a second ask keeps the first deadline");
        let due = t0 + 5 * S + STOP_MARGIN;
        assert_eq!(run.next_wake(), Some(due));
        assert_eq!(run.on_wake(due - S, 0), vec![]);
        assert_eq!(run.on_wake(due, 0), vec![RunAction::KillLate(pod(1))]);
        assert_eq!(run.next_wake(), None);
        assert_eq!(run.stop(pod(2), t0), Some(RunAction::Term(pod(2))));
        run.forget(pod(2));
        assert_eq!(run.on_wake(due, 0), vec![], "a launcher that is gone is not killed");
    }

    #[test]
    fn a_teardown_is_given_up_after_its_limit_and_holds_the_end() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, None, 5 * S);
        run.tearing_down(Some(t0));
        assert!(!run.done(false, true), "an exit waiting for its leftovers holds the end");
        assert_eq!(run.next_wake(), Some(t0 + TEARDOWN_LIMIT));
        assert_eq!(run.on_wake(t0 + TEARDOWN_LIMIT, 0), vec![RunAction::ReportExitsAnyway]);
        run.tearing_down(None);
        assert!(run.done(false, true));
    }

    #[test]
    fn stragglers_are_named_a_moment_after_the_jobs_end_unless_cut_short() {
        let t0 = Instant::now();
        let mut run = Run::new(t0, None, 5 * S);
        run.job_finished(t0);
        assert_eq!(run.on_wake(t0 + STRAGGLER_NOTE_AFTER, 0), vec![RunAction::NameStragglers]);
        assert_eq!(run.on_wake(t0 + 2 * STRAGGLER_NOTE_AFTER, 0), vec![], "once");
        let mut cut = Run::new(t0, None, 5 * S);
        cut.job_finished(t0);
        let _ = cut.on_signal(Signo::TERM);
        assert_eq!(cut.on_wake(t0 + STRAGGLER_NOTE_AFTER, 0), vec![]);
    }
}
