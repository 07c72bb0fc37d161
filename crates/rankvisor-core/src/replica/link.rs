//! The rendezvous link: this replica's side of the barrier and the control channel, as an actor.
//! It performs the machine's `LinkCommand`s (a barrier, a rejoin, a reconnect, an order to the
//! workers) and turns what happens on the wire into `LinkEvent`s; it decides nothing. It also
//! streams this replica's reports to the master, and on the master publishes the job view.
//! Long operations (a barrier, a rejoin) run beside the stream, never inside a `select!` arm.

use crate::health::Observation;
use crate::policy::RestartScope;
use crate::rank::Role;
use crate::rendezvous::checkpoint::Fanout;
use crate::rendezvous::straggler::Detector;
use crate::rendezvous::StacksAnswerer;
use crate::rendezvous::{
    self, ControlEvent, Health, JobView, MasterHandle, Member, NodeHealth, Order, RendezvousConfig, RendezvousError,
    WorkerSession,
};
use crate::replica::job_stacks;
use crate::stacks::{JobStacks, JobStacksAsker, Snapshotter};
use crate::status::{ReplicaState, Report};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// How long a finishing worker waits for its last frames (its final state) to reach the master.
const CLOSE_LIMIT: Duration = Duration::from_secs(2);

/// How often the master's job view is rebuilt while events arrive (O(replicas) per build).
const PUBLISH_EVERY: Duration = Duration::from_millis(200);

/// Where and how this replica meets the others.
#[derive(Debug, Clone)]
pub struct JobLinkConfig {
    /// Who this replica is.
    pub identity: Member,
    /// The master's rendezvous address (workers dial it).
    pub master: (String, u16),
    /// Where the master listens.
    pub listen: SocketAddr,
    /// Timeouts, token, frame limit.
    pub rendezvous: RendezvousConfig,
    /// `--checkpoint-grace` when `--checkpoint-signal` is set: the master's fan-out window.
    pub checkpoint: Option<Duration>,
    /// `--straggler-rule`'s detector settings (the master's), and whether a straggler is
    /// restarted (`--straggler-action restart`).
    pub straggler: Option<(crate::rendezvous::straggler::StragglerConfig, bool)>,
}

impl JobLinkConfig {
    /// Master for replica 0, else Worker.
    pub fn role(&self) -> Role {
        if self.identity.replica_index == 0 {
            Role::Master
        } else {
            Role::Worker
        }
    }
}

/// What the machine asks of the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkCommand {
    /// Master: gather every replica for `generation` (ordering the workers to restart), release.
    Barrier {
        /// The generation.
        generation: u64,
    },
    /// Worker: meet the others at the barrier of `generation`.
    Rejoin {
        /// The generation.
        generation: u64,
    },
    /// Worker: the master is gone; dial it again until it is back (or the timeout).
    Reconnect,
    /// Master: order every worker to stop for good.
    StopWorkers {
        /// Why, for their termination messages.
        reason: String,
    },
    /// A point of this replica's `--straggler-rule` metric: to the master (on the master, to its
    /// own detector).
    Metric {
        /// The value.
        value: crate::rendezvous::straggler::Point,
    },
}

/// What the link saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// A barrier released `generation` (the first one is the start gate).
    Released {
        /// The generation.
        generation: u64,
    },
    /// The link could not start, or a barrier or rejoin failed.
    Failed {
        /// Why, one line.
        message: String,
    },
    /// Master: a worker asks for a new generation.
    RejoinAsked {
        /// The generation asked for.
        generation: u64,
    },
    /// Master: whether every worker has finished or disconnected ([`JobView::workers_done`]),
    /// sent when it changes.
    WorkersDone(bool),
    /// Worker: the master orders a restart in `generation`.
    OrderRestart {
        /// The generation.
        generation: u64,
    },
    /// `--checkpoint-signal`: a replica is being stopped and the job saves (the master's fan-out,
    /// on the master too).
    Checkpoint {
        /// Why.
        reason: String,
    },
    /// The master named this replica a straggler under `--straggler-action restart`.
    Straggler {
        /// Why (the figures).
        reason: String,
    },
    /// Worker: the master orders a stop.
    OrderStop {
        /// Why.
        reason: String,
    },
    /// Worker: the master's launcher finished and closed the channel on purpose.
    MasterFinished {
        /// Why.
        reason: String,
    },
    /// Worker: the connection to the master is gone.
    MasterLost {
        /// Why.
        reason: String,
    },
    /// Worker: reconnected after `MasterLost`; the master's current generation.
    Reconnected {
        /// The generation.
        generation: u64,
    },
    /// Worker: could not reconnect.
    ReconnectFailed {
        /// Why.
        message: String,
    },
    /// Master: the job's stacks, gathered before a restart a hang caused (for the status).
    JobStacks(Box<JobStacks>),
    /// Master: a replica was named a straggler (for the status: the webhook, the Event).
    StragglerNamed(Box<crate::status::straggler::NamedStraggler>),
}

/// The running link.
pub struct Link {
    /// Where the machine's commands go.
    pub commands: mpsc::UnboundedSender<LinkCommand>,
    /// What the link saw, for the event loop.
    pub events: mpsc::UnboundedReceiver<LinkEvent>,
    /// The master's job view, kept current once the first barrier released (None on workers).
    pub job_view: Option<watch::Receiver<Option<JobView>>>,
    /// The master's gathering of the job's stacks (None on workers).
    pub job_stacks: Option<JobStacksAsker>,
    /// The actor; it ends once the replica's status channel closes and its last frames are out.
    pub task: tokio::task::JoinHandle<()>,
}

/// The node's health as the rendezvous carries it, following the node-health source.
pub fn rendezvous_health(source: Option<watch::Receiver<Observation>>) -> watch::Receiver<Health> {
    fn health_of(obs: &Observation) -> Health {
        match obs {
            Ok(v) => Health::from(NodeHealth::Verdict(Box::new(v.clone()))),
            Err(e) => Health::from(NodeHealth::Unreadable { error: e.to_string() }),
        }
    }
    let Some(mut source) = source else {
        return Health::from(NodeHealth::Off).fixed();
    };
    let (tx, rx) = watch::channel(health_of(&source.borrow_and_update()));
    tokio::spawn(async move {
        while source.changed().await.is_ok() {
            if tx.send(health_of(&source.borrow_and_update())).is_err() {
                return;
            }
        }
    });
    rx
}

/// This replica's reports, as they go to the master (each `state` frame is one). The reporter
/// rebuilds the report on every status change, and publishes the final one before its channel
/// closes: the newest report is the replica's newest state, and the channel's end is its last.
pub struct Upstream {
    reports: watch::Receiver<Report>,
    snapshots: Arc<Snapshotter>,
}

impl Upstream {
    /// Follow the reporter's `reports` (stacks asked for are the `/proc` facts alone).
    pub fn new(reports: watch::Receiver<Report>) -> Self {
        Self { reports, snapshots: Arc::default() }
    }

    /// Answer the master's `stacks_ask` with snapshots taken by `snapshots`.
    pub fn with_snapshots(mut self, snapshots: Arc<Snapshotter>) -> Self {
        self.snapshots = snapshots;
        self
    }

    /// This replica's answer to a `stacks_ask`.
    fn answerer(&self) -> StacksAnswerer {
        job_stacks::answerer(self.snapshots.clone(), self.reports.clone())
    }

    /// The next report; None once the reporter has published its final one and ended.
    async fn next(&mut self) -> Option<Report> {
        self.reports.changed().await.ok()?;
        Some(self.current())
    }

    /// The latest report.
    fn current(&mut self) -> Report {
        self.reports.borrow_and_update().clone()
    }
}

/// Start this replica's side (inside the runtime): the master listens at once and runs the first
/// barrier; a worker starts dialling. The first `Released` (or `Failed`) is the start gate.
pub fn start(
    cfg: JobLinkConfig,
    scope: RestartScope,
    health: watch::Receiver<Health>,
    upstream: Upstream,
) -> Result<Link, RendezvousError> {
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let job_view = match cfg.role() {
        Role::Master => {
            let listener = rendezvous::listen(cfg.listen)?;
            let (master, control) =
                rendezvous::start_master(listener, cfg.identity.clone(), health, cfg.rendezvous.clone(), scope)?;
            let master = Arc::new(master);
            let asker = job_stacks_asker(Arc::downgrade(&master), upstream.answerer());
            let (view_tx, view_rx) = watch::channel(None);
            let link = MasterLink {
                master,
                events: ev_tx,
                view: view_tx,
                workers_done: false,
                released_once: false,
                fanout: cfg.checkpoint.map(Fanout::new),
                stragglers: cfg.straggler.map(|(s, _)| Detector::new(s, cfg.identity.replica_count)),
                restart_stragglers: cfg.straggler.is_some_and(|(_, restart)| restart),
                own: upstream.answerer(),
                hang: job_stacks::HangGather::default(),
            };
            (Some((view_rx, asker)), tokio::spawn(run_master(link, control, upstream, cmd_rx)))
        }
        Role::Worker => (None, tokio::spawn(run_worker(cfg, health, upstream, cmd_rx, ev_tx))),
    };
    let (master_side, task) = job_view;
    let (job_view, job_stacks) = master_side.map_or((None, None), |(v, a)| (Some(v), Some(a)));
    Ok(Link { commands: cmd_tx, events: ev_rx, job_view, job_stacks, task })
}

/// `GET /job/stacks`: the job's stacks while the master runs (None once it is gone).
fn job_stacks_asker(master: std::sync::Weak<MasterHandle>, own: StacksAnswerer) -> JobStacksAsker {
    Arc::new(move |why| {
        let (master, own) = (master.clone(), own.clone());
        Box::pin(async move {
            let master = master.upgrade()?;
            let job = job_stacks::gather(&master, &own, &why).await;
            info!(replicas = job.replicas.len(), ms = job.elapsed_ms, "job stacks ({why}): {}", job.summary);
            Some(job)
        })
    })
}

type Pending<T> = Option<Pin<Box<dyn Future<Output = T> + Send>>>;

/// A pending future's output; never ready without one.
async fn poll_pending<T>(p: &mut Pending<T>) -> T {
    match p {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// A barrier's generation and how it ended.
type BarrierDone = (u64, Result<rendezvous::Released, RendezvousError>);

async fn run_master(
    mut link: MasterLink,
    mut control: mpsc::Receiver<ControlEvent>,
    mut upstream: Upstream,
    mut commands: mpsc::UnboundedReceiver<LinkCommand>,
) {
    let mut pending = link.barrier(0);
    // Building the view is O(replicas): publish it at most every PUBLISH_EVERY, not per event
    // (per event is quadratic when thousands of workers join or leave at once).
    let mut publish = tokio::time::interval(PUBLISH_EVERY);
    publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut dirty, mut upstream_open) = (false, true);
    loop {
        tokio::select! {
            _ = publish.tick(), if dirty => {
                link.publish_view();
                dirty = false;
            }
            (g, result) = poll_pending(&mut pending) => {
                pending = None;
                link.barrier_ended(g, result);
            }
            report = upstream.next(), if upstream_open => match report {
                Some(report) => {
                    link.checkpoint_if_stopping(0, report.state);
                    link.hang.on_report(0, &report, &link.master, &link.own);
                    link.master.publish_own_state(report);
                    dirty = true;
                }
                None => upstream_open = false,
            },
            job = link.hang.next(), if link.hang.busy() => link.gathered(job, &mut pending),
            event = control.recv() => {
                let Some(event) = event else { return };
                dirty = true;
                link.on_control(event);
            }
            command = commands.recv() => match command {
                Some(command) => link.on_command(command, &mut pending),
                None => return link.finish().await,
            },
        }
    }
}

/// The master's side of the link, between the events of `run_master`'s loop.
struct MasterLink {
    /// Shared with the barrier, which runs beside the event stream.
    master: Arc<MasterHandle>,
    events: mpsc::UnboundedSender<LinkEvent>,
    view: watch::Sender<Option<JobView>>,
    /// The last `WorkersDone` sent.
    workers_done: bool,
    /// The view is published once a barrier has released.
    released_once: bool,
    /// `--checkpoint-signal`: the job saves when a replica is being stopped.
    fanout: Option<Fanout>,
    /// `--straggler-rule`: every replica's metric against the job's median.
    stragglers: Option<Detector>,
    /// `--straggler-action restart`.
    restart_stragglers: bool,
    /// The master replica's own answer to a `stacks_ask`.
    own: StacksAnswerer,
    /// The job's stacks gathered on a hang, and what waits for them.
    hang: job_stacks::HangGather,
}

impl MasterLink {
    fn barrier(&self, g: u64) -> Pending<BarrierDone> {
        let m = self.master.clone();
        Some(Box::pin(async move { (g, m.barrier(g).await) }))
    }

    /// The job's stacks on a hang are in: to the log and the status; then what waited for them.
    fn gathered(&mut self, job: JobStacks, pending: &mut Pending<BarrierDone>) {
        warn!(ms = job.elapsed_ms, "job stacks ({}): {}", crate::untrusted::escape(&job.why), job.summary);
        let _ = self.events.send(LinkEvent::JobStacks(Box::new(job_stacks::note(job))));
        for event in std::mem::take(&mut self.hang.held_events) {
            let _ = self.events.send(event);
        }
        if let Some(g) = self.hang.held_barrier.take() {
            *pending = self.barrier(g);
        }
    }

    /// Publish the job view (once released), and `WorkersDone` when it changes.
    fn publish_view(&mut self) {
        if !self.released_once {
            return;
        }
        let job = self.master.job_view();
        let finished = job.workers_done();
        if finished != self.workers_done {
            self.workers_done = finished;
            let _ = self.events.send(LinkEvent::WorkersDone(finished));
        }
        self.view.send_replace(Some(job));
    }

    fn barrier_ended(&mut self, g: u64, result: Result<rendezvous::Released, RendezvousError>) {
        let event = match result {
            Ok(r) => {
                info!(generation = r.generation, "rendezvous: released");
                self.released_once = true;
                LinkEvent::Released { generation: r.generation }
            }
            Err(e) if g == 0 => LinkEvent::Failed { message: format!("rendezvous failed: {e}") },
            Err(e) => LinkEvent::Failed { message: format!("rendezvous for generation {g} failed: {e}") },
        };
        let _ = self.events.send(event);
        self.publish_view();
    }

    /// A replica (0: the master) reported `state`: when it is being stopped, every replica's
    /// training process saves now (the master's own child too), once per window.
    fn checkpoint_if_stopping(&mut self, index: u32, state: ReplicaState) {
        let Some(fanout) = self.fanout.as_mut() else { return };
        let Some(reason) = fanout.on_state(index, state, std::time::Instant::now()) else { return };
        info!("checkpoint: {reason}: every replica saves");
        let _ = self.events.send(LinkEvent::Checkpoint { reason: reason.clone() });
        // Queued beside the loop: the master's command queue may be full for a moment.
        let master = Arc::clone(&self.master);
        tokio::spawn(async move {
            if let Err(e) = master.order(Order::Checkpoint { reason }).await {
                warn!("rendezvous: cannot ask the workers to checkpoint: {e}");
            }
        });
    }

    /// A point of replica `index`'s metric: a straggler it names is logged with its node and
    /// marked in the job view (`/job`, `/metrics`).
    fn metric(&mut self, index: u32, value: f64) {
        let Some(straggler) = self.stragglers.as_mut().and_then(|d| d.on_point(index, value)) else { return };
        let (node, pod) = self.master.mark_straggler(&straggler);
        let named = straggler.named(node, pod, crate::status::rfc3339(std::time::SystemTime::now()));
        warn!(replica = index, node = %crate::untrusted::escape(&named.node), "straggler: {}", named.line());
        let _ = self.events.send(LinkEvent::StragglerNamed(Box::new(named)));
        if !self.restart_stragglers {
            return;
        }
        // Judged afresh once restarted: its old points say nothing of its new child.
        if let Some(d) = self.stragglers.as_mut() {
            d.forget(index);
        }
        let reason = straggler.to_string();
        if index == 0 {
            let _ = self.events.send(LinkEvent::Straggler { reason });
            return;
        }
        let master = Arc::clone(&self.master);
        tokio::spawn(async move {
            if let Err(e) = master.tell(index, Order::Straggler { reason }).await {
                warn!("rendezvous: cannot tell replica {index} to restart: {e}");
            }
        });
    }

    fn on_control(&mut self, event: ControlEvent) {
        match event {
            ControlEvent::State { index, report } => {
                self.checkpoint_if_stopping(index, report.state);
                self.hang.on_report(index, &report, &self.master, &self.own);
            }
            ControlEvent::Metric { index, value } => self.metric(index, value),
            ControlEvent::Rejoin { index, generation } => {
                info!(replica = index, generation, "rendezvous: a replica asks for a new generation");
                let event = LinkEvent::RejoinAsked { generation };
                if self.hang.busy() {
                    self.hang.held_events.push(event);
                } else {
                    let _ = self.events.send(event);
                }
            }
            // The master logged it (one line per window when thousands go at once).
            ControlEvent::Lost { index, reason } => debug!(replica = index, "rendezvous: replica gone: {reason}"),
            // One line per replica costs ~0.1 s at 16K replicas: the barrier's own INFO summarises.
            ControlEvent::Joined { index, node, .. } => {
                debug!(replica = index, node = %crate::untrusted::escape(&node), "rendezvous: replica (re)joined")
            }
            _ => {}
        }
    }

    /// A barrier replaces `pending`; a stop order is queued beside the loop.
    fn on_command(&mut self, command: LinkCommand, pending: &mut Pending<BarrierDone>) {
        match command {
            LinkCommand::Metric { value } => self.metric(0, value.0),
            // Held while the job's stacks are gathered: no child is stopped before they are read.
            LinkCommand::Barrier { generation } if self.hang.busy() => self.hang.held_barrier = Some(generation),
            LinkCommand::Barrier { generation } => *pending = self.barrier(generation),
            // Queued beside the loop: the master's command queue may be full for a moment.
            LinkCommand::StopWorkers { reason } => {
                let master = Arc::clone(&self.master);
                tokio::spawn(async move {
                    if let Err(e) = master.order(Order::Stop { reason }).await {
                        warn!("rendezvous: cannot stop the workers: {e}");
                    }
                });
            }
            other => warn!("rendezvous: the master ignores {other:?}"),
        }
    }

    /// The machine is done: tell the workers, then the channel closes with the link.
    async fn finish(self) {
        self.master.finish("the master's launcher finished".to_string(), CLOSE_LIMIT).await;
        // The connections' writers send what is queued once the master is dropped.
        drop(self.master);
        tokio::task::yield_now().await;
    }
}

type Joined = Result<WorkerSession, RendezvousError>;

/// A join's outcome: the generation it rejoined (None for a first join or a reconnect), and the session.
type JoinDone = (Option<u64>, Joined);

async fn run_worker(
    cfg: JobLinkConfig,
    health: watch::Receiver<Health>,
    mut upstream: Upstream,
    mut commands: mpsc::UnboundedReceiver<LinkCommand>,
    events: mpsc::UnboundedSender<LinkEvent>,
) {
    let mut link = WorkerLink { cfg, health, events, session: None, first: true };
    let mut pending = link.join();
    loop {
        tokio::select! {
            (rejoined, result) = poll_pending(&mut pending) => {
                pending = None;
                link.joined(rejoined, result, &mut upstream);
            }
            report = upstream.next() => {
                // While a rejoin runs the latest status waits in the watch; it goes out after.
                let Some(report) = report else {
                    // The replica is done: its final state goes out before the channel closes.
                    if let Some(s) = link.session.take() {
                        s.close(CLOSE_LIMIT).await;
                    }
                    return;
                };
                if let Some(s) = &link.session {
                    let _ = s.send_state(report);
                }
            }
            order = next_order(&mut link.session) => link.on_order(order),
            command = commands.recv() => match command {
                Some(command) => link.on_command(command, &mut pending),
                None => return link.finish(&mut upstream).await,
            },
        }
    }
}

/// The master's next order on `session`, or why the master was lost; never ready without one.
async fn next_order(session: &mut Option<WorkerSession>) -> Result<Order, String> {
    match session.as_mut() {
        Some(s) => s.next_order().await.ok_or_else(|| s.lost_reason().unwrap_or("connection closed").to_string()),
        None => std::future::pending().await,
    }
}

/// A worker's side of the link, between the events of `run_worker`'s loop.
struct WorkerLink {
    cfg: JobLinkConfig,
    health: watch::Receiver<Health>,
    events: mpsc::UnboundedSender<LinkEvent>,
    /// The session while idle; it is inside the pending join or rejoin while one runs.
    session: Option<WorkerSession>,
    /// No join has ended yet: its outcome is the start gate.
    first: bool,
}

impl WorkerLink {
    fn join(&self) -> Pending<JoinDone> {
        let (master, me, health, rdzv) =
            (self.cfg.master.clone(), self.cfg.identity.clone(), self.health.clone(), self.cfg.rendezvous.clone());
        Some(Box::pin(async move { (None, rendezvous::join(master, me, health, rdzv).await) }))
    }

    fn rejoin(mut s: WorkerSession, g: u64) -> Pending<JoinDone> {
        Some(Box::pin(async move {
            let r = s.rejoin(g).await;
            (Some(g), r.map(|_| s))
        }))
    }

    /// A join, rejoin or reconnect ended: keep the session, send it our state, tell the machine.
    fn joined(&mut self, rejoined: Option<u64>, result: Joined, upstream: &mut Upstream) {
        let event = match (rejoined, result) {
            (_, Ok(s)) => {
                let generation = s.generation();
                s.answer_stacks_with(upstream.answerer());
                let _ = s.send_state(upstream.current());
                self.session = Some(s);
                if self.first || rejoined.is_some() {
                    LinkEvent::Released { generation }
                } else {
                    LinkEvent::Reconnected { generation }
                }
            }
            (Some(g), Err(e)) => LinkEvent::Failed { message: format!("rejoining generation {g} failed: {e}") },
            (None, Err(e)) if self.first => LinkEvent::Failed { message: format!("rendezvous failed: {e}") },
            (None, Err(e)) => LinkEvent::ReconnectFailed { message: e.to_string() },
        };
        self.first = false;
        let _ = self.events.send(event);
    }

    fn on_order(&mut self, order: Result<Order, String>) {
        let event = match order {
            Ok(Order::Restart { generation }) => LinkEvent::OrderRestart { generation },
            Ok(Order::Stop { reason }) => LinkEvent::OrderStop { reason },
            Ok(Order::Checkpoint { reason }) => LinkEvent::Checkpoint { reason },
            Ok(Order::Straggler { reason }) => LinkEvent::Straggler { reason },
            Ok(Order::Finished { reason }) => {
                // The close that follows is no loss: drop the session quietly.
                self.session = None;
                LinkEvent::MasterFinished { reason }
            }
            Err(reason) => {
                self.session = None;
                LinkEvent::MasterLost { reason }
            }
        };
        let _ = self.events.send(event);
    }

    /// A rejoin or a reconnect replaces `pending`.
    fn on_command(&mut self, command: LinkCommand, pending: &mut Pending<JoinDone>) {
        match command {
            LinkCommand::Rejoin { generation } => match self.session.take() {
                Some(s) => *pending = Self::rejoin(s, generation),
                None => {
                    let _ = self.events.send(LinkEvent::Failed {
                        message: format!("rejoining generation {generation} failed: not connected to the master"),
                    });
                }
            },
            LinkCommand::Reconnect => {
                self.session = None;
                *pending = self.join();
            }
            // Dropped while not connected (a rejoin or reconnect runs): one point of many.
            LinkCommand::Metric { value } => {
                if let Some(s) = &self.session {
                    let _ = s.send_metric(value.0);
                }
            }
            other => warn!("rendezvous: a worker ignores {other:?}"),
        }
    }

    /// The replica is done: its reports up to the final one go out before the channel closes
    /// (the reporter publishes it once the loop's status channel has closed).
    async fn finish(mut self, upstream: &mut Upstream) {
        if let Some(s) = self.session.take() {
            let _ = tokio::time::timeout(CLOSE_LIMIT, async {
                while let Some(report) = upstream.next().await {
                    let _ = s.send_state(report);
                }
            })
            .await;
            s.close(CLOSE_LIMIT).await;
        }
    }
}
