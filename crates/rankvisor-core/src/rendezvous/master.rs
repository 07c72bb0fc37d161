//! The master's side: accept workers, run the barrier, keep the control channel and the job view.
//!
//! One task per connection reads and checks its peer's frames and writes its outbox (so a silent
//! or hostile peer only ever holds its own task), and a single master task owns every decision:
//! the roster, the job view and the connections' outboxes. The master task never awaits a peer:
//! it only queues lines, and drops a peer whose outbox is full.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::admission::Expected;
use super::config::{Member, Released, RendezvousConfig};
use super::conn::{accept_loop, log_refusal, ConnContext, Gauge, Inbound, REFUSAL_WARN_WINDOW};
use super::error::RendezvousError;
use super::frame::{Frame, Health, Hello, Order, StateUpdate};
use super::io::{line, Line, OutboxTx};
use super::job::JobView;
use super::roster::{ConnId, Phase, Rejoin, Roster, Shortfall};
use crate::duration::format_duration;
use crate::logging::{Throttle, Throttled};
use crate::policy::RestartScope;
use crate::untrusted::{escape, Escaped};

/// Pending connections the kernel queues for `listen`: thousands of workers may dial at once.
const LISTEN_BACKLOG: u32 = 8192;
const EVENTS: usize = 4096;
const INBOUND: usize = 1024;

/// What the master's control channel reports to the supervisor loop. The job view is the
/// authoritative state; events are hints to look at it (they are dropped if never read).
/// The reason of a `Lost` event for a replica that reported a final state before it closed.
pub const FINISHED: &str = "finished";

#[derive(Debug, Clone, PartialEq)]
pub enum ControlEvent {
    /// A worker was admitted.
    Joined {
        /// Its replica index.
        index: u32,
        /// Its node.
        node: String,
        /// Its node-health decision (an unhealthy worker holds the barrier).
        healthy: bool,
    },
    /// A worker's node health changed.
    Health {
        /// Its replica index.
        index: u32,
        /// The new verdict.
        health: Health,
    },
    /// A worker reported a state change.
    State {
        /// Its replica index.
        index: u32,
        /// The update.
        update: StateUpdate,
    },
    /// A worker asks for a new generation (a job-scope restart): call `barrier(generation)`.
    Rejoin {
        /// Its replica index.
        index: u32,
        /// The generation it asks for.
        generation: u64,
    },
    /// A worker's connection is gone (closed, silent, or refused a frame).
    Lost {
        /// Its replica index.
        index: u32,
        /// Why.
        reason: String,
    },
}

enum Command {
    Gather {
        generation: u64,
        reply: oneshot::Sender<Result<(), u64>>,
    },
    Fail {
        generation: u64,
        waited: Duration,
        reply: oneshot::Sender<Option<Shortfall>>,
    },
    Order(Order),
    /// Broadcast `Finished`, then answer: the frames are queued on every connection.
    Finish {
        reason: String,
        reply: oneshot::Sender<()>,
    },
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The running master: barrier, orders, events and the job view. Dropping it closes the port
/// and every worker connection.
pub struct MasterHandle {
    commands: mpsc::Sender<Command>,
    events: mpsc::Receiver<ControlEvent>,
    view: Arc<Mutex<JobView>>,
    released: watch::Receiver<Option<u64>>,
    local_addr: SocketAddr,
    barrier_timeout: Duration,
    replica_count: u32,
    _task: AbortOnDrop,
}

/// Open the rendezvous port with a backlog large enough for every worker dialling at once.
pub fn listen(addr: SocketAddr) -> Result<TcpListener, RendezvousError> {
    let failed = |source| RendezvousError::Listen { addr: addr.to_string(), source };
    let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(failed)?;
    socket.set_reuseaddr(true).map_err(failed)?;
    // Inherited by every accepted connection (see `conn::accept_loop`).
    socket.set_nodelay(true).map_err(failed)?;
    socket.bind(addr).map_err(failed)?;
    socket.listen(LISTEN_BACKLOG).map_err(failed)
}

/// Start the master (replica 0) on an already-bound listener; must run inside a tokio runtime.
pub fn start_master(
    listener: TcpListener,
    me: Member,
    health: watch::Receiver<Health>,
    cfg: RendezvousConfig,
) -> Result<MasterHandle, RendezvousError> {
    me.check_master()?;
    cfg.check()?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| RendezvousError::Listen { addr: "the given listener".to_string(), source })?;
    let own_health = health.borrow().clone();
    let view = Arc::new(Mutex::new(JobView::new(&me.job, me.replica_count, &me.node, &own_health, now_ms())));
    let (commands, command_rx) = mpsc::channel(64);
    let (events_tx, events) = mpsc::channel(EVENTS);
    let (released_tx, released) = watch::channel(None);
    let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND);
    let refusals = Arc::new(Mutex::new(Throttle::new(REFUSAL_WARN_WINDOW)));
    let ctx = Arc::new(ConnContext {
        token: cfg.token.clone(),
        hello_timeout: cfg.hello_timeout,
        heartbeat: cfg.heartbeat,
        silence: cfg.silence(),
        max_frame: cfg.max_frame,
        refusals: Arc::clone(&refusals),
        handshakes: Gauge::default(),
    });
    let accept = tokio::spawn(accept_loop(listener, Arc::clone(&ctx), inbound_tx));
    if !own_health.healthy {
        warn!(node = %me.node, "the master's node is unhealthy: the barrier waits for it");
    }
    let master = Master {
        roster: Roster::new(Expected { job: me.job.clone(), replica_count: me.replica_count }, own_health.healthy)
            .allowing_new_generations(cfg.scope == RestartScope::Job),
        conns: HashMap::new(),
        refusals,
        ctx,
        view: Arc::clone(&view),
        events: events_tx,
        released: released_tx,
        max_frame: cfg.max_frame,
        replica_count: me.replica_count,
        events_dropped: 0,
        departures: Departures::default(),
    };
    let task = tokio::spawn(master.run(command_rx, inbound_rx, health, AbortOnDrop(accept)));
    info!(addr = %local_addr, job = %me.job, replicas = me.replica_count, "rendezvous master listening");
    Ok(MasterHandle {
        commands,
        events,
        view,
        released,
        local_addr,
        barrier_timeout: cfg.barrier_timeout,
        replica_count: me.replica_count,
        _task: AbortOnDrop(task),
    })
}

impl MasterHandle {
    /// The address the master listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Wait until every replica is present, healthy and ready for `generation`, then release
    /// them all at once. A generation newer than the current one first orders every worker to
    /// `Restart{generation}`. On timeout, every waiting worker gets the error too.
    /// Cancel-safe: dropping the future leaves the barrier gathering.
    pub async fn barrier(&self, generation: u64) -> Result<Released, RendezvousError> {
        let started = Instant::now();
        let (reply, answer) = oneshot::channel();
        self.command(Command::Gather { generation, reply }).await?;
        answer
            .await
            .map_err(|_| RendezvousError::MasterStopped)?
            .map_err(|current| RendezvousError::StaleGeneration { requested: generation, current })?;
        let mut released = self.released.clone();
        // Copy the generation out at once: the watch guard must not live across an await (Send).
        let done =
            tokio::time::timeout(self.barrier_timeout, released.wait_for(|r| r.is_some_and(|g| g >= generation)))
                .await
                .map(|r| r.map(|g| *g));
        match done {
            Ok(Ok(g)) => Ok(Released { generation: g.unwrap_or(generation), waited: started.elapsed() }),
            Ok(Err(_)) => Err(RendezvousError::MasterStopped),
            Err(_) => {
                let (reply, answer) = oneshot::channel();
                let waited = self.barrier_timeout;
                self.command(Command::Fail { generation, waited, reply }).await?;
                match answer.await.map_err(|_| RendezvousError::MasterStopped)? {
                    Some(short) => Err(timeout_error(&short, waited, self.replica_count)),
                    None => Ok(Released { generation, waited: started.elapsed() }),
                }
            }
        }
    }

    /// State updates, health changes, rejoin requests and lost workers.
    pub fn events(&mut self) -> &mut mpsc::Receiver<ControlEvent> {
        &mut self.events
    }

    /// Send an order to every connected worker (`Restart` also starts gathering its generation).
    pub async fn order(&self, order: Order) -> Result<(), RendezvousError> {
        self.command(Command::Order(order)).await
    }

    /// Tell every worker the master is finished (their connections close next, and that is no
    /// loss), and return once the frame is queued on every connection, at most `limit`.
    pub async fn finish(&self, reason: String, limit: Duration) {
        let (reply, answer) = oneshot::channel();
        if self.command(Command::Finish { reason, reply }).await.is_ok() {
            let _ = tokio::time::timeout(limit, answer).await;
        }
    }

    /// A snapshot of the job view (for `/job` and the job-phase decision).
    pub fn job_view(&self) -> JobView {
        lock(&self.view).clone()
    }

    /// Record the master's own state in the job view (the job's phase follows it).
    pub fn publish_own_state(&self, update: StateUpdate) {
        lock(&self.view).state(0, &update, now_ms());
    }

    async fn command(&self, command: Command) -> Result<(), RendezvousError> {
        self.commands.send(command).await.map_err(|_| RendezvousError::MasterStopped)
    }
}

fn timeout_error(short: &Shortfall, waited: Duration, replica_count: u32) -> RendezvousError {
    RendezvousError::BarrierTimeout {
        generation: short.generation,
        waited: format_duration(waited),
        missing: short.missing.clone(),
        unhealthy: short.unhealthy.clone(),
        replica_count,
    }
}

fn lock(view: &Mutex<JobView>) -> MutexGuard<'_, JobView> {
    view.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An admitted worker. Dropping `out` (the only sender) ends the connection's task once it has
/// written what was queued.
struct Conn {
    index: u32,
    peer: SocketAddr,
    out: OutboxTx,
}

struct Master {
    roster: Roster,
    conns: HashMap<ConnId, Conn>,
    /// Shared with the connection tasks: refused peers are logged once per window.
    refusals: Arc<Mutex<Throttle>>,
    /// The connections' shared context (for the handshakes' gauge).
    ctx: Arc<ConnContext>,
    view: Arc<Mutex<JobView>>,
    events: mpsc::Sender<ControlEvent>,
    released: watch::Sender<Option<u64>>,
    max_frame: usize,
    replica_count: u32,
    events_dropped: u64,
    departures: Departures,
}

/// How often replicas that finished or were lost are logged at INFO / WARN (the rest at DEBUG).
struct Departures {
    finished: Throttle,
    lost: Throttle,
}

impl Default for Departures {
    fn default() -> Self {
        Departures { finished: Throttle::new(REFUSAL_WARN_WINDOW), lost: Throttle::new(REFUSAL_WARN_WINDOW) }
    }
}

impl Departures {
    /// The departures not logged one by one since the last line, in one line each: when the
    /// master's job is done (`finish`), or the master goes.
    fn summary(&mut self) {
        let finished = self.finished.take_suppressed();
        if finished > 0 {
            info!("{finished} more rendezvous peers finished and closed (logged one by one at DEBUG)");
        }
        let lost = self.lost.take_suppressed();
        if lost > 0 {
            warn!("{lost} more rendezvous peers were lost (logged one by one at DEBUG; /job has every replica)");
        }
    }
}

impl Drop for Departures {
    fn drop(&mut self) {
        self.summary();
    }
}

impl Master {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
        mut health: watch::Receiver<Health>,
        _accept: AbortOnDrop,
    ) {
        let mut health_live = true;
        self.release(None);
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(c) => self.command(c),
                    None => break,
                },
                Some(msg) = inbound.recv() => self.inbound(msg),
                changed = health.changed(), if health_live => match changed {
                    Ok(()) => {
                        let h = health.borrow_and_update().clone();
                        self.own_health(h);
                    }
                    Err(_) => health_live = false,
                },
            }
        }
    }

    fn emit(&mut self, event: ControlEvent) {
        match self.events.try_send(event) {
            Ok(()) => self.events_dropped = 0,
            Err(_) => {
                // One warning per overflow, not one per event: thousands may join at once.
                if self.events_dropped == 0 {
                    warn!("rendezvous events are not being read: dropping them until they are (the job view stays current)");
                }
                self.events_dropped += 1;
            }
        }
    }

    fn view(&self) -> MutexGuard<'_, JobView> {
        lock(&self.view)
    }

    fn send(&mut self, conn: ConnId, frame: &Frame) {
        match line(frame, self.max_frame) {
            Ok(l) => self.send_line(conn, l),
            Err(e) => warn!("cannot encode a {} frame: {e}", frame.kind()),
        }
    }

    fn send_line(&mut self, conn: ConnId, line: Line) {
        let full = match self.conns.get(&conn) {
            Some(c) => !c.out.push(line),
            None => false,
        };
        if full {
            self.drop_conn(conn, "not reading: its outbox is full".to_string());
        }
    }

    fn broadcast(&mut self, frame: &Frame) {
        let l = match line(frame, self.max_frame) {
            Ok(l) => l,
            Err(e) => return warn!("cannot encode a {} frame: {e}", frame.kind()),
        };
        let stuck: Vec<ConnId> =
            self.conns.iter().filter(|(_, c)| !c.out.push(Line::clone(&l))).map(|(&id, _)| id).collect();
        for conn in stuck {
            self.drop_conn(conn, "not reading: its outbox is full".to_string());
        }
    }

    fn drop_conn(&mut self, conn: ConnId, reason: String) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.roster.leave(c.index, conn);
        let mut view = self.view();
        // A replica that reported a final state and then closes has finished: no warning.
        let finished = view.replicas().get(&c.index).is_some_and(|r| r.state.is_final());
        view.lost(c.index, &reason);
        drop(view);
        // Thousands of replicas may finish or go at once (a job's end, a network partition): one
        // line per window at INFO / WARN with how many were not logged, the rest at DEBUG. `/job`
        // and the events keep every replica's state.
        let now = Instant::now();
        let (peer, replica) = (c.peer, c.index);
        if finished {
            match self.departures.finished.hit(now) {
                t @ Throttled::Log { .. } => {
                    info!(%peer, replica, "rendezvous peer finished and closed: {reason}{}", t.note())
                }
                Throttled::Suppress => debug!(%peer, replica, "rendezvous peer finished and closed: {reason}"),
            }
        } else {
            match self.departures.lost.hit(now) {
                t @ Throttled::Log { .. } => warn!(%peer, replica, "rendezvous peer lost: {reason}{}", t.note()),
                Throttled::Suppress => debug!(%peer, replica, "rendezvous peer lost: {reason}"),
            }
        }
        self.emit(ControlEvent::Lost { index: c.index, reason: if finished { FINISHED.to_string() } else { reason } });
    }

    fn release(&mut self, changed: Option<u32>) {
        let Some(release) = self.roster.take_release(changed) else {
            return;
        };
        let g = release.generation;
        match line(&Frame::Release { generation: g }, self.max_frame) {
            Ok(l) => {
                for conn in release.conns {
                    self.send_line(conn, Line::clone(&l));
                }
            }
            Err(e) => warn!("cannot encode a release frame: {e}"),
        }
        if self.roster.phase() == Phase::Released(g) {
            let newly = self.released.send_if_modified(|r| {
                let new = *r != Some(g);
                *r = Some(g);
                new
            });
            if newly {
                self.view().set_generation(g);
                info!(
                    generation = g,
                    replicas = self.replica_count,
                    handshakes_peak = self.ctx.handshakes.peak(),
                    "rendezvous barrier released"
                );
            }
        }
    }

    fn gather(&mut self, generation: u64) -> Result<(), u64> {
        if self.roster.gather(generation)? {
            info!(generation, "gathering a new rendezvous generation");
            self.broadcast(&Frame::Restart { generation });
        }
        self.release(None);
        Ok(())
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Gather { generation, reply } => {
                let _ = reply.send(self.gather(generation));
            }
            Command::Fail { generation, waited, reply } => {
                if self.roster.phase() != Phase::Gathering(generation) {
                    let _ = reply.send(None);
                    return;
                }
                let short = self.roster.shortfall();
                let message = timeout_error(&short, waited, self.replica_count).to_string();
                warn!("{message}");
                let error = Frame::Error { message };
                for (_, conn) in self.roster.fail() {
                    self.send(conn, &error);
                    self.drop_conn(conn, "the barrier timed out".to_string());
                }
                let _ = reply.send(Some(short));
            }
            Command::Order(Order::Restart { generation }) => {
                if let Err(current) = self.gather(generation) {
                    warn!(generation, current, "restart order for an older generation ignored");
                }
            }
            Command::Order(order) => self.broadcast(&Frame::from(order)),
            Command::Finish { reason, reply } => {
                self.departures.summary();
                self.broadcast(&Frame::Finished { reason });
                let _ = reply.send(());
            }
        }
    }

    fn own_health(&mut self, health: Health) {
        if !health.healthy {
            warn!("the master's node became unhealthy");
        }
        self.roster.set_master_health(health.healthy);
        self.view().health(0, &health, now_ms());
        self.release(None);
    }

    fn inbound(&mut self, msg: Inbound) {
        match msg {
            Inbound::Admit { conn, peer, hello, proof, out } => self.admit(conn, peer, hello, proof, out),
            Inbound::Frame { conn, frame } => self.frame(conn, frame),
            Inbound::Closed { conn, reason } => self.drop_conn(conn, reason),
        }
    }

    fn admit(&mut self, conn: ConnId, peer: SocketAddr, hello: Hello, proof: Option<String>, out: OutboxTx) {
        let index = hello.replica_index;
        // With a job token, the peer proved it belongs to the job before reaching this point.
        let authenticated = proof.is_some();
        match self.roster.admit(conn, &hello) {
            Err(refusal) => {
                let detail = format!("replica {index} on node {}: {refusal}", Escaped(&hello.node));
                log_refusal(&self.refusals, peer, "refused a rendezvous peer", &detail);
                if let Ok(l) = line(&Frame::Error { message: refusal.to_peer(authenticated) }, self.max_frame) {
                    out.push(l);
                }
                return;
            }
            Ok(Some(stale)) => {
                // The same replica (job, index, node, token) dialled again: its old connection is
                // half-open (e.g. this master was stopped while the worker gave up on it). Dropping
                // the old outbox ends that connection's task.
                if let Some(old) = self.conns.remove(&stale) {
                    info!(%peer, old_peer = %old.peer, replica = index, node = %Escaped(&hello.node),
                        "replica reconnected: its stale connection is replaced");
                }
            }
            Ok(None) => {}
        }
        let health = Health { healthy: hello.healthy, verdict: hello.health };
        if health.healthy {
            debug!(%peer, replica = index, node = %Escaped(&hello.node), "replica joined the rendezvous");
        } else {
            warn!(%peer, replica = index, node = %Escaped(&hello.node), verdict = %health.verdict,
                "replica joined on an unhealthy node: the barrier waits for it");
        }
        self.conns.insert(conn, Conn { index, peer, out });
        let generation = self.roster.phase().generation();
        self.send(conn, &Frame::Admitted { generation, proof });
        self.view().joined(index, &hello.node, &health, now_ms());
        self.emit(ControlEvent::Joined { index, node: hello.node, healthy: health.healthy });
        self.release(Some(index));
    }

    fn frame(&mut self, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (index, peer) = (c.index, c.peer);
        match frame {
            Frame::Heartbeat => self.view().seen(index, now_ms()),
            Frame::State(update) => {
                self.view().state(index, &update, now_ms());
                self.emit(ControlEvent::State { index, update });
            }
            Frame::Health(health) => {
                if !health.healthy {
                    warn!(%peer, replica = index, verdict = %health.verdict, "replica's node became unhealthy");
                }
                self.roster.set_health(index, conn, health.healthy);
                self.view().health(index, &health, now_ms());
                self.emit(ControlEvent::Health { index, health });
                self.release(Some(index));
            }
            Frame::Rejoin { generation } => {
                self.view().seen(index, now_ms());
                match self.roster.rejoin(index, conn, generation) {
                    Some(Rejoin::Current) => self.release(Some(index)),
                    Some(Rejoin::Ahead) => self.emit(ControlEvent::Rejoin { index, generation }),
                    Some(Rejoin::Behind(current)) => self.send(conn, &Frame::Restart { generation: current }),
                    Some(Rejoin::Refused(why)) => {
                        let message = format!("rejoin of generation {generation} refused: {why}");
                        warn!(%peer, replica = index, "{message}");
                        self.send(conn, &Frame::Error { message });
                    }
                    None => {}
                }
            }
            Frame::Error { message } => {
                warn!(%peer, replica = index, "replica reported an error: {}", escape(&message));
            }
            other => {
                let message = format!("unexpected {} frame from replica {index} after admission", other.kind());
                self.send(conn, &Frame::Error { message: message.clone() });
                self.drop_conn(conn, message);
            }
        }
    }
}
