//! `rankvisor dry-run`, the I/O part: one real launcher process per replica, its status lines,
//! fault injection, timers and signals, all turned into the `Controller`'s events; the
//! controller's actions carried out; every change printed as `kubectl get -w` would.
//!
//! One `tokio::select!` loop on a current-thread runtime owns the controller. Each launcher has a
//! task that owns its `tokio::process::Child` (the dry run is not PID 1, so `Child::wait` is the
//! only waiter), reads its `--status-fd` pipe line by line and reports to the loop; the task also
//! delivers signals to the launcher, so a signal never reaches a pid that was already reaped.
//!
//! What the dry run's injected faults do:
//! - `fail:REPLICA@T`: SIGKILL to the replica's training process group, as the OOM killer or a
//!   crash would end it. The child ends by signal 9 (status 137), which every policy but `Never`
//!   restarts (under `ExitCode`, 137 is one of the retryable codes). A child that is not running
//!   at T (still starting, or waiting for its restart) fails as soon as it runs; a replica whose
//!   launcher is gone or finished is left alone, and the dry run says so.
//! - `delete:REPLICA@T`: SIGKILL to the launcher and to its training process group (a pod lost
//!   with its node, or `kubectl delete --force --grace-period=0`), then the operator's view:
//!   Terminating, deleted, created anew with RESTARTS 0.
//! - `preempt:REPLICA@T`: the pod is deleted gracefully (a preemption, `kubectl delete pod`):
//!   Terminating, TERM to its launcher, which stops its child within its grace period, then the
//!   operator's view as for `delete:`.
//! - `label:REPLICA@T=VALUE`: the replica's node labels file is rewritten atomically (temp file,
//!   then rename, as the kubelet does), which the launcher's `--node-health file:` source reads.
//!
//! A launcher that ends while processes it started still run (killed outright from outside) is a
//! container whose PID 1 died: the dry run, a child subreaper, kills what the launcher left and
//! reports the launcher's exit only once those are collected, as the kernel tears a PID namespace
//! down before the kubelet sees the container end (see [`super::orphans`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Write;
use std::time::Duration;

use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use rankvisor_core::duration::format_duration;
use rankvisor_core::exit::{self, ExitHow};
use rankvisor_core::process::signal_group;
use rankvisor_core::signo::Signo;

use super::agents::Agents;
use super::injection::{Fault, Injection};
use super::launcher::{healthy_labels, labels_file_text, LauncherSettings, StatusTracker};
use super::launcher_process::{
    fail_child, launcher_pid, spawn_launcher, LauncherNews, LauncherReport, LauncherTask, DRAIN_LIMIT,
};
use super::orphans;
use super::output::{boxed, note, relay_output, write_timeline};
use super::run::{ChildNow, FailNow, Run, RunAction, TEARDOWN_LIMIT};
use super::setup::{Setup, SetupError};
use super::workdir::{write_atomically, WorkDir};
use crate::kubelet::cluster::{ClusterAction, ClusterEvent, ControllerConfig};
use crate::kubelet::replica::ReplicaId;
use crate::options::{DryRunOptions, OutputFormat, LAUNCHERS_READ_NODE_LABELS};
use crate::render::kubectl::{render_json, TextRenderer};
use crate::render::rows::Change;
use crate::render::timeline::{FaultMark, Recording};
use crate::workload::Workload;

/// While a launcher's exit waits for its orphans, they are looked for again this often, beside
/// each SIGCHLD (signals coalesce). Also the most often they are looked for at all: a look reads
/// every process's /proc/PID/stat, so a look per exit when 1,024 launchers end together reads /proc
/// a million times and holds the loop for minutes; the exits of a burst share one look instead,
/// reported at most this much later.
const TEARDOWN_POLL: Duration = Duration::from_millis(100);

/// Run the job in `opts.manifest` locally and return the dry run's exit status: 0 Succeeded,
/// 1 Failed (or `--timeout`), 64 invalid manifest or options, 128+N stopped by signal N.
/// Needs a tokio runtime with IO and time enabled, and the process's signal mask unblocked.
pub async fn run_dry_run(opts: DryRunOptions) -> i32 {
    let setup = match Setup::new(&opts) {
        Ok(s) => s,
        Err(SetupError { message, code }) => {
            eprintln!("{message}");
            return code;
        }
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let mut event_loop = DryRunLoop::new(opts, setup, tx);
    let code = event_loop.run(rx).await;
    if let Some(reads) = event_loop.agents.summary() {
        note(&reads);
    }
    event_loop.drain_output().await;
    match event_loop.opts.timeline.clone() {
        Some(path) => write_timeline(&path, event_loop.recording(), code),
        None => code,
    }
}

/// A running launcher, as the loop knows it.
#[derive(Debug)]
struct LiveLauncher {
    instance: u64,
    /// Its pid (None if the OS did not give one): never reaped here, only by its task.
    pid: Option<Pid>,
    tracker: StatusTracker,
    signals: mpsc::UnboundedSender<Signo>,
}

/// A launcher that exited, reported once what it left is gone.
#[derive(Debug)]
struct PendingExit {
    pod: ReplicaId,
    status: ExitHow,
    /// Its training process, as its status lines last named it.
    child: Option<Pid>,
    since: Instant,
}

/// One piece of the controller's work the loop carries out in order, between its other wake-ups.
#[derive(Debug)]
enum Work {
    /// One of the controller's actions.
    Act(ClusterAction),
    /// An observation made while carrying out an action (a launcher that could not start),
    /// fed once the actions before it are done.
    Feed(ClusterEvent),
}

struct DryRunLoop {
    opts: DryRunOptions,
    /// The job's controllers (a PyTorchJob's or a TrainJob's).
    workload: Workload,
    renderer: TextRenderer,
    settings: LauncherSettings,
    master_port: u16,
    workdir: WorkDir,
    /// Every replica's `RANKVISOR_JOB_TOKEN`.
    job_token: String,
    pod_width: usize,
    start: Instant,
    labels: BTreeMap<ReplicaId, BTreeMap<String, String>>,
    injections: VecDeque<Injection>,
    launchers: BTreeMap<ReplicaId, LiveLauncher>,
    /// Launchers that exited, while the processes they left are being killed.
    pending_exits: Vec<PendingExit>,
    /// When the orphans were last looked for (at most every [`TEARDOWN_POLL`]).
    last_sweep: Option<Instant>,
    /// Orphans already named in a note.
    orphans_noted: BTreeSet<Pid>,
    /// The controllers' work not yet carried out, oldest first: done one piece at a time, with
    /// INT and TERM looked at between two pieces, so creating many pods never holds a signal.
    work: VecDeque<Work>,
    next_instance: u64,
    tx: mpsc::UnboundedSender<LauncherReport>,
    output_tasks: Vec<JoinHandle<()>>,
    /// The run's own decisions: timeout, abort, stops running late, teardown, stragglers.
    run: Run,
    /// What `--timeline` draws: every change and fault (empty without `--timeline`).
    recorded: (Vec<Change>, Vec<FaultMark>),
    /// A HyperPod job's agents (their ports, the calls to them).
    agents: Agents,
    /// `--hyperpod-poll`: when the agents' `/status` is next read.
    next_poll: Option<Instant>,
}

impl DryRunLoop {
    fn new(opts: DryRunOptions, setup: Setup, tx: mpsc::UnboundedSender<LauncherReport>) -> Self {
        let Setup { job, injections, master_port, workdir, job_token } = setup;
        let config = ControllerConfig {
            capability: opts.queue_capability.clone(),
            backoff_initial: opts.backoff_initial,
            backoff_max: opts.backoff_max,
            ..ControllerConfig::default()
        };
        let settings = LauncherSettings {
            backoff_initial: opts.backoff_initial,
            backoff_max: opts.backoff_max,
            grace_period: opts.grace_period,
            log_level: opts.launcher_log_level.clone(),
            node_health: LAUNCHERS_READ_NODE_LABELS,
            restart_scope: opts.restart_scope,
        };
        let workload = Workload::new(job, config, master_port);
        let run = Run::new(Instant::now(), opts.timeout, opts.grace_period);
        Self {
            renderer: workload.renderer(opts.watch),
            pod_width: workload.pod_width(),
            workload,
            opts,
            settings,
            master_port,
            workdir,
            job_token,
            start: Instant::now(),
            labels: BTreeMap::new(),
            injections,
            launchers: BTreeMap::new(),
            pending_exits: Vec::new(),
            last_sweep: None,
            orphans_noted: BTreeSet::new(),
            work: VecDeque::new(),
            next_instance: 0,
            tx,
            output_tasks: Vec::new(),
            run,
            recorded: (Vec::new(), Vec::new()),
            agents: Agents::new(master_port),
            next_poll: None,
        }
    }

    async fn run(&mut self, mut reports: mpsc::UnboundedReceiver<LauncherReport>) -> i32 {
        let signals = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()), signal(SignalKind::child()));
        let (mut interrupt, mut terminate, mut child_ended) = match signals {
            (Ok(i), Ok(t), Ok(c)) => (i, t, c),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                eprintln!("dry-run: cannot handle INT, TERM and CHLD: {e}");
                return 1;
            }
        };
        if let Err(message) = orphans::become_subreaper() {
            note(&message);
        }
        let meet = self.workload.meets_at(self.master_port);
        note(&format!(
            "images are not pulled: each replica runs its container's command on this machine, under its own rankvisor launcher ({meet})"
        ));
        self.start = Instant::now();
        self.run = Run::new(self.start, self.opts.timeout, self.opts.grace_period);
        if matches!(self.workload, crate::workload::Workload::HyperPod(_)) {
            self.next_poll = self.opts.hyperpod_poll.map(|d| self.start + d);
        }
        self.feed(ClusterEvent::Submitted);
        while !self.done() {
            if let Some(work) = self.work.pop_front() {
                self.carry_out(work);
                // Let the runtime deliver signals and relay output, then look at INT and TERM
                // only: launcher reports and timers wait until the controller's work is done, so
                // they reach it in the order they would have without the pause.
                tokio::task::yield_now().await;
                tokio::select! {
                    biased;
                    _ = interrupt.recv() => self.on_signal(Signo::INT),
                    _ = terminate.recv() => self.on_signal(Signo::TERM),
                    () = std::future::ready(()) => {}
                }
                continue;
            }
            let wake = self.next_wake();
            tokio::select! {
                Some(report) = reports.recv() => self.on_report(report),
                _ = interrupt.recv() => self.on_signal(Signo::INT),
                _ = terminate.recv() => self.on_signal(Signo::TERM),
                _ = child_ended.recv() => self.tear_down(),
                () = sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => self.on_wake(),
            }
        }
        self.run.exit_code(self.workload.exit_code())
    }

    /// Every launcher is gone, the controllers' work is done, and the job is settled or the run
    /// was cut short.
    fn done(&self) -> bool {
        self.work.is_empty() && self.run.done(!self.launchers.is_empty(), self.workload.is_settled())
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The earliest of: a row due to change, an injection, a teardown poll, the run's deadlines.
    fn next_wake(&self) -> Option<Instant> {
        let live = !self.run.aborted();
        let tick = self.workload.next_tick().filter(|_| live).map(|d| self.start + d);
        let inject = self.injections.front().filter(|_| live).map(|i| self.start + i.at);
        let teardown = self.pending_exits.first().map(|_| self.next_sweep());
        let poll = self.next_poll.filter(|_| live);
        [tick, inject, teardown, poll, self.run.next_wake()].into_iter().flatten().min()
    }

    fn on_wake(&mut self) {
        let now = Instant::now();
        if !self.pending_exits.is_empty() && self.next_sweep() <= now {
            self.tear_down();
        }
        if let (Some(at), Some(every)) = (self.next_poll, self.opts.hyperpod_poll) {
            if at <= now && !self.run.aborted() {
                let pods = self.launchers.iter().map(|(pod, l)| (*pod, l.instance)).collect();
                self.agents.poll(pods, &self.tx);
                self.next_poll = Some(now + every);
            }
        }
        if !self.run.aborted() && self.workload.next_tick().is_some_and(|d| self.start + d <= now) {
            self.feed(ClusterEvent::Tick);
        }
        while !self.run.aborted() && self.injections.front().is_some_and(|i| self.start + i.at <= now) {
            if let Some(injection) = self.injections.pop_front() {
                self.inject(injection);
            }
        }
        for action in self.run.on_wake(now, self.workload.exit_code()) {
            self.act(action);
        }
    }

    fn on_signal(&mut self, sig: Signo) {
        let action = self.run.on_signal(sig);
        self.act(action);
    }

    /// Carry out one of the run's decisions.
    fn act(&mut self, action: RunAction) {
        match action {
            RunAction::ReportExitsAnyway => {
                note(&format!(
                    "processes left by a launcher that ended are still not gone {} after their SIGKILL: reporting the launcher's end anyway",
                    format_duration(TEARDOWN_LIMIT)
                ));
                self.report_exits();
            }
            RunAction::NameStragglers => {
                let running: Vec<String> = self
                    .launchers
                    .iter()
                    .filter(|(_, l)| !l.tracker.ended())
                    .map(|(id, _)| self.workload.pod_name(*id))
                    .collect();
                if !running.is_empty() {
                    note(&format!(
                        "the job {}; waiting for {} still running (cleanPodPolicy keeps them): {} (Ctrl-C stops them)",
                        self.workload.state().unwrap_or("finished"),
                        running.len(),
                        running.join(", ")
                    ));
                }
            }
            RunAction::TimedOut { after } => {
                let state = self.workload.state().unwrap_or("not created");
                note(&format!(
                    "timeout: the job did not settle within {} (job {state}); the dry run ends here, stopping every launcher",
                    format_duration(after)
                ));
                self.stop_every_launcher();
            }
            RunAction::Interrupted { signal } => {
                let state = self.workload.state().unwrap_or("not created");
                note(&format!(
                    "{}: the dry run ends here (job {state}); stopping {} launcher(s) within the {} grace period (send it again to kill them)",
                    signal.name(),
                    self.launchers.len(),
                    format_duration(self.opts.grace_period)
                ));
                self.stop_every_launcher();
            }
            RunAction::KillAll { signal } => {
                note(&format!("{} again: killing every launcher and training process", signal.name()));
                let pods: Vec<ReplicaId> = self.launchers.keys().copied().collect();
                for pod in pods {
                    self.kill(pod);
                }
            }
            RunAction::Term(pod) => {
                if let Some(l) = self.launchers.get(&pod) {
                    let _ = l.signals.send(Signo::TERM);
                }
            }
            RunAction::KillLate(pod) => {
                if self.launchers.contains_key(&pod) {
                    note(&format!("{} did not stop in time: killing it", self.workload.pod_name(pod)));
                    self.kill(pod);
                }
            }
        }
    }

    fn on_report(&mut self, report: LauncherReport) {
        let LauncherReport { pod, instance, what } = report;
        let Some(launcher) = self.launchers.get_mut(&pod).filter(|l| l.instance == instance) else {
            return;
        };
        if self.run.aborted() {
            // The run was cut short: what the stops do is not the job's doing, so the emulation
            // (and the watch) ends where it was; only the launchers' exits are awaited.
            if let LauncherNews::Exited(_) = what {
                self.launchers.remove(&pod);
                self.tear_down();
            }
            return;
        }
        match what {
            LauncherNews::Status(line) => {
                if let Some(stacks) = launcher.tracker.new_job_stacks(&line) {
                    note(&format!("{}: {stacks}", self.workload.pod_name(pod)));
                }
                for named in launcher.tracker.new_stragglers(&line) {
                    note(&format!("{}: straggler: {}", self.workload.pod_name(pod), named.line()));
                    if self.opts.timeline.is_some() {
                        self.recorded.1.push(FaultMark::straggler(self.start.elapsed(), &named));
                    }
                }
                let events = launcher.tracker.observe(pod, &line);
                // The agent's state changed: the operator reads its `/status` at once.
                let agent_changed = launcher.tracker.agent_changed(line.agent);
                if let Some(pid) = self.run.child_runs(pod, launcher.tracker.child_pid()) {
                    fail_child(&self.workload.pod_name(pod), pid);
                }
                for event in events {
                    self.feed(event);
                }
                if agent_changed && self.opts.hyperpod_read_on_change {
                    self.agents.read_changed(pod, instance, &self.tx);
                }
            }
            LauncherNews::AgentStatus(state, reason, read_no) => {
                if self.agents.fresh(pod, read_no) {
                    self.agent_seen(pod, state, reason);
                }
            }
            LauncherNews::Unreadable(message) => note(&format!("{}: {message}", self.workload.pod_name(pod))),
            LauncherNews::Exited(status) => {
                let child = self.launchers.remove(&pod).and_then(|l| l.tracker.child_pid());
                self.run.launcher_exited(pod);
                let since = Instant::now();
                self.pending_exits.push(PendingExit { pod, status, child, since });
                self.run.tearing_down(self.pending_exits.first().map(|p| p.since));
                if self.next_sweep() <= since {
                    self.tear_down();
                }
            }
        }
    }

    /// When the orphans may be looked for next: at once after a quiet spell, else one
    /// [`TEARDOWN_POLL`] after the last look.
    fn next_sweep(&self) -> Instant {
        self.last_sweep.map_or_else(Instant::now, |last| last + TEARDOWN_POLL)
    }

    /// Kill and collect what ended launchers left (any child of the dry run that is not a live
    /// launcher); once nothing is left, report the launchers' exits to the controller.
    fn tear_down(&mut self) {
        self.last_sweep = Some(Instant::now());
        let launchers: BTreeSet<Pid> = self.launchers.values().filter_map(|l| l.pid).collect();
        let sweep = orphans::sweep(&launchers);
        for &(pid, group) in &sweep.killed {
            if !self.orphans_noted.insert(pid) {
                continue;
            }
            // Whose: the launcher whose training process (and process group) it is, if known.
            let ours = |child: Option<Pid>| child.is_some_and(|c| c == pid || Some(c) == group);
            let pod = self
                .launchers
                .iter()
                .find(|(_, l)| ours(l.tracker.child_pid()))
                .map(|(pod, _)| *pod)
                .or_else(|| self.pending_exits.iter().find(|p| ours(p.child)).map(|p| p.pod));
            let whose =
                pod.map_or_else(|| "a launcher".to_string(), |p| format!("{}'s launcher", self.workload.pod_name(p)));
            note(&format!(
                "{whose} ended and left process {pid} running: killing it (and its process group), as a container's processes end with its PID 1"
            ));
        }
        for (pid, _) in &sweep.reaped {
            self.orphans_noted.remove(pid);
        }
        if sweep.clear() {
            self.report_exits();
        }
    }

    /// Report every launcher exit held for its orphans (nothing to report once the run is cut short).
    fn report_exits(&mut self) {
        let exits = std::mem::take(&mut self.pending_exits);
        self.run.tearing_down(None);
        for PendingExit { pod, status, .. } in exits {
            if !self.run.aborted() {
                self.feed(ClusterEvent::LauncherExited { pod, status });
            }
        }
    }

    /// A HyperPod pod's agent is in `state`: the operator's observation.
    fn agent_seen(&mut self, pod: ReplicaId, state: rankvisor_core::status::AgentState, reason: Option<String>) {
        let now = self.now();
        if let Some(step) = self.workload.hyperpod().map(|c| c.agent_seen(now, pod, state, reason)) {
            self.apply(step);
        }
    }

    /// Hand one observation to the controller; print its changes, queue its actions.
    fn feed(&mut self, event: ClusterEvent) {
        let step = self.workload.handle(self.now(), event);
        self.apply(step);
    }

    /// Print a step's changes, queue its actions, make a HyperPod operator's agent calls.
    fn apply(&mut self, step: crate::kubelet::cluster::Step) {
        let moved = self.workload.hyperpod().map(|c| c.take_moved()).unwrap_or_default();
        for pod in moved {
            // A replacement node: healthy labels, before its launcher starts.
            self.labels.remove(&pod);
            let path = self.workdir.labels(&self.workload.pod_name(pod));
            if let Err(e) = write_atomically(&path, &labels_file_text(&healthy_labels())) {
                note(&format!("cannot write {}: {e}", path.display()));
            }
        }
        let calls = self.workload.hyperpod().map(|c| c.take_calls()).unwrap_or_default();
        if let crate::workload::Workload::HyperPod(c) = &self.workload {
            for request in calls {
                let name = c.job().pod_name(request.pod);
                self.agents.call(c.job(), request, self.master_port, name);
            }
        }
        if self.opts.timeline.is_some() {
            self.recorded.0.extend(step.changes.iter().cloned());
        }
        for change in &step.changes {
            self.print(change);
        }
        self.work.extend(step.actions.into_iter().map(Work::Act));
    }

    /// Carry out one piece of the controllers' work (a cut-short run feeds nothing more).
    fn carry_out(&mut self, work: Work) {
        match work {
            Work::Act(action) => self.perform(action),
            Work::Feed(event) if !self.run.aborted() => self.feed(event),
            Work::Feed(_) => {}
        }
    }

    fn print(&mut self, change: &Change) {
        if !self.opts.watch.includes(&change.row) {
            return;
        }
        let lines = match self.opts.output {
            OutputFormat::Text => self.renderer.render(change),
            OutputFormat::Json => vec![render_json(change)],
        };
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }

    fn perform(&mut self, action: ClusterAction) {
        match action {
            ClusterAction::StartLauncher { pod } => {
                if self.run.aborted() {
                    return;
                }
                self.start_launcher(pod);
                if let Some(action) =
                    self.launchers.contains_key(&pod).then(|| self.run.started(pod, Instant::now())).flatten()
                {
                    self.act(action);
                }
            }
            ClusterAction::StopPod { pod } => self.stop(pod),
            ClusterAction::StopAll => {
                let running: Vec<ReplicaId> = self.launchers.keys().copied().collect();
                for action in self.run.stop_all(running, Instant::now()) {
                    self.act(action);
                }
            }
            ClusterAction::Unschedulable { message } | ClusterAction::Note { message } => note(&message),
            ClusterAction::Finish { outcome: _, reason } => {
                note(&reason);
                self.run.job_finished(Instant::now());
            }
        }
    }

    fn stop_every_launcher(&mut self) {
        let pods: Vec<ReplicaId> = self.launchers.keys().copied().collect();
        for pod in pods {
            self.stop(pod);
        }
    }

    /// TERM the launcher: it forwards TERM to its child's group, waits its grace period, kills.
    fn stop(&mut self, pod: ReplicaId) {
        if !self.launchers.contains_key(&pod) {
            return;
        }
        if let Some(action) = self.run.stop(pod, Instant::now()) {
            self.act(action);
        }
    }

    /// SIGKILL the launcher and its training process group.
    fn kill(&mut self, pod: ReplicaId) {
        if let Some(l) = self.launchers.get_mut(&pod) {
            if let Some(pid) = l.tracker.child_pid() {
                if let Err(e) = signal_group(pid, Signo::KILL) {
                    note(&format!(
                        "cannot SIGKILL {}'s training process group {pid}: {e}",
                        self.workload.pod_name(pod)
                    ));
                }
            }
            let _ = l.signals.send(Signo::KILL);
        }
        // Nothing ignores SIGKILL: no later deadline is needed.
        self.run.forget(pod);
    }

    fn inject(&mut self, injection: Injection) {
        let pod = injection.replica;
        let name = self.workload.pod_name(pod);
        if self.opts.timeline.is_some() {
            let target = if injection.fault == Fault::Resume { self.workload.name().to_string() } else { name.clone() };
            self.recorded.1.push(FaultMark::new(self.now(), target, &injection));
        }
        match injection.fault {
            Fault::Resume => {
                let (kind, field) = (self.workload.kind(), self.workload.resume_field());
                note(&format!("injected: {kind} {} gets {field}: false", self.workload.name()));
                self.feed(ClusterEvent::Resumed);
            }
            Fault::Fail => {
                let child = match self.launchers.get(&pod).map(|l| (l.tracker.child_pid(), l.tracker.ended())) {
                    Some((Some(pid), _)) => ChildNow::Running(pid),
                    Some((None, false)) => ChildNow::Coming,
                    Some((None, true)) | None => ChildNow::Never,
                };
                match self.run.fail_due(pod, child) {
                    FailNow::Kill(pid) => fail_child(&name, pid),
                    FailNow::OnceRunning => note(&format!(
                        "injection fail:{pod}: {name}'s training process is not running yet: it fails once it runs"
                    )),
                    FailNow::Skip => note(&format!(
                        "injection fail:{pod} skipped: {name} has no training process and will not start one"
                    )),
                }
            }
            Fault::Delete => {
                note(&format!("injected: {name} is deleted (its launcher and training process are killed)"));
                self.kill(pod);
                self.feed(ClusterEvent::PodDeleted { pod });
            }
            // The kubelet's graceful stop: TERM, the grace period, KILL; recreated once it ended.
            Fault::Preempt => {
                note(&format!("injected: {name} is preempted (deleted gracefully: TERM to its launcher)"));
                self.feed(ClusterEvent::PodDeleted { pod });
            }
            Fault::Label { key, value } => {
                let labels = self.labels.entry(pod).or_insert_with(healthy_labels);
                labels.insert(key.clone(), value.clone());
                let path = self.workdir.labels(&name);
                let (labels, now) = (labels.clone(), self.now());
                if let Some(step) = self.workload.hyperpod().map(|c| c.node_labelled(now, pod, &labels)) {
                    self.apply(step);
                }
                match write_atomically(&path, &labels_file_text(&labels)) {
                    Ok(()) if LAUNCHERS_READ_NODE_LABELS => {
                        note(&format!("injected: {name}'s node is labelled {key}={value}"));
                    }
                    Ok(()) => note(&format!(
                        "injected: {name}'s node is labelled {key}={value} (this launcher build does not read node labels)"
                    )),
                    Err(e) => note(&format!("injection label:{pod} failed: cannot write {}: {e}", path.display())),
                }
            }
        }
    }

    fn start_launcher(&mut self, pod: ReplicaId) {
        let mut spec = match self.workload.launch(pod, self.master_port, &self.workdir) {
            Ok(Some(spec)) => spec,
            Ok(None) => return,
            Err(message) => {
                note(&message);
                return self
                    .work
                    .push_back(Work::Feed(ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(1) }));
            }
        };
        let name = spec.pod.clone();
        if matches!(self.workload, crate::workload::Workload::HyperPod(_)) {
            spec.agent_port = self.agents.assign_port(pod);
        }
        let instance = self.next_instance;
        self.next_instance += 1;
        match spawn_launcher(&self.opts, &self.settings, &self.workdir, &self.job_token, &spec) {
            Ok((child, status_pipe)) => {
                let (signals, signal_rx) = mpsc::unbounded_channel();
                let pid = launcher_pid(&child);
                self.launchers.insert(pod, LiveLauncher { instance, pid, tracker: StatusTracker::default(), signals });
                let mut child = child;
                for out in [child.stdout.take().map(boxed), child.stderr.take().map(boxed)].into_iter().flatten() {
                    self.output_tasks.push(tokio::spawn(relay_output(out, name.clone(), self.pod_width)));
                }
                let task = LauncherTask { pod, instance, reports: self.tx.clone() };
                tokio::spawn(task.follow(child, status_pipe, signal_rx));
                self.feed(ClusterEvent::LauncherStarted { pod });
            }
            Err(e) => {
                note(&format!("cannot start the launcher of {name} ({}): {e}", self.opts.rankvisor.display()));
                let code =
                    if e.kind() == std::io::ErrorKind::NotFound { exit::NOT_FOUND } else { exit::NOT_EXECUTABLE };
                // The container could not start: the pod fails as one whose command ends at once
                // (the kubelet's backoff, the job's limits), reported after the work queued
                // before it, as the kubelet reports it after the pods created with it.
                self.work.push_back(Work::Feed(ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(code) }));
            }
        }
    }

    /// The run as `--timeline` draws it, ending now.
    fn recording(&mut self) -> Recording {
        let (changes, faults) = std::mem::take(&mut self.recorded);
        Recording { job: self.workload.name().to_string(), changes, faults, end: self.now() }
    }

    /// Give the replicas' last output lines a moment to arrive before the dry run exits.
    async fn drain_output(&mut self) {
        let deadline = Instant::now() + DRAIN_LIMIT;
        for task in self.output_tasks.drain(..) {
            let _ = tokio::time::timeout_at(deadline, task).await;
        }
    }
}
