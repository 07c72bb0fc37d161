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
use tracing::{info, warn};

mod actor;

use super::admission::Expected;
use super::config::{Member, Released, RendezvousConfig};
use super::conn::{accept_loop, ConnContext, Gauge, REFUSAL_WARN_WINDOW};
use super::error::RendezvousError;
use super::frame::{Health, Order};
use super::job::JobView;
use super::roster::{Roster, Shortfall};
use crate::duration::format_duration;
use crate::logging::Throttle;
use crate::policy::RestartScope;
use crate::status::Report;
use actor::{Departures, Master};

/// Pending connections the kernel queues for `listen`: thousands of workers may dial at once.
const LISTEN_BACKLOG: u32 = 8192;
const EVENTS: usize = 4096;
const INBOUND: usize = 1024;

/// The reason of a `Lost` event for a replica that reported a final state before it closed.
pub const FINISHED: &str = "finished";

/// What the master's control channel reports to the supervisor loop. The job view is the
/// authoritative state; events are hints to look at it (they are dropped if never read).
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
        /// Its report.
        report: Box<Report>,
    },
    /// A worker asks for a new generation (a job-scope restart): call `barrier(generation)`.
    Rejoin {
        /// Its replica index.
        index: u32,
        /// The generation it asks for.
        generation: u64,
    },
    /// A worker sent a point of the `--straggler-rule` metric.
    Metric {
        /// Its replica index.
        index: u32,
        /// The value.
        value: f64,
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
    /// An order to one worker (replica `index`), when it is connected.
    Tell {
        index: u32,
        order: Order,
    },
    /// Broadcast `Finished`, then answer: the frames are queued on every connection.
    Finish {
        reason: String,
        reply: oneshot::Sender<()>,
    },
    /// Ask every connected worker for its stacks (`stacks_ask` `id`); answer once all have.
    AskStacks {
        id: u64,
        reply: oneshot::Sender<StacksAnswers>,
    },
    /// Stop waiting for the answers to `id`: answer with those in.
    EndAsk {
        id: u64,
        reply: oneshot::Sender<StacksAnswers>,
    },
}

/// The workers' answers to one `stacks_ask`, by replica index.
pub type StacksAnswers = Vec<(u32, crate::stacks::StacksSummary)>;

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
    view: Arc<Mutex<JobView>>,
    released: watch::Receiver<Option<u64>>,
    local_addr: SocketAddr,
    barrier_timeout: Duration,
    replica_count: u32,
    asks: std::sync::atomic::AtomicU64,
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
/// Returns the handle (barriers, orders, the job view) and the master's events (state updates,
/// health changes, rejoin requests, lost workers), which the caller must keep draining. Only
/// restart scope `job` lets a worker's `rejoin` start a new generation; under `replica` it is
/// refused.
pub fn start_master(
    listener: TcpListener,
    me: Member,
    health: watch::Receiver<Health>,
    cfg: RendezvousConfig,
    scope: RestartScope,
) -> Result<(MasterHandle, mpsc::Receiver<ControlEvent>), RendezvousError> {
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
            .allowing_new_generations(scope == RestartScope::Job),
        conns: HashMap::new(),
        contested: HashMap::new(),
        refusals,
        ctx,
        view: Arc::clone(&view),
        events: events_tx,
        released: released_tx,
        max_frame: cfg.max_frame,
        replica_count: me.replica_count,
        events_dropped: 0,
        departures: Departures::default(),
        asks: HashMap::new(),
    };
    let task = tokio::spawn(master.run(command_rx, inbound_rx, health, AbortOnDrop(accept)));
    info!(addr = %local_addr, job = %me.job, replicas = me.replica_count, "rendezvous master listening");
    let handle = MasterHandle {
        commands,
        view,
        released,
        local_addr,
        barrier_timeout: cfg.barrier_timeout,
        replica_count: me.replica_count,
        asks: std::sync::atomic::AtomicU64::new(0),
        _task: AbortOnDrop(task),
    };
    Ok((handle, events))
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

    /// Send an order to every connected worker (`Restart` also starts gathering its generation).
    pub async fn order(&self, order: Order) -> Result<(), RendezvousError> {
        self.command(Command::Order(order)).await
    }

    /// Send an order to worker `index` alone (dropped when it is not connected).
    pub async fn tell(&self, index: u32, order: Order) -> Result<(), RendezvousError> {
        self.command(Command::Tell { index, order }).await
    }

    /// Tell every worker the master is finished (their connections close next, and that is no
    /// loss), and return once the frame is queued on every connection, at most `limit`.
    pub async fn finish(&self, reason: String, limit: Duration) {
        let (reply, answer) = oneshot::channel();
        if self.command(Command::Finish { reason, reply }).await.is_ok() {
            let _ = tokio::time::timeout(limit, answer).await;
        }
    }

    /// Every connected worker's stacks summary (`stacks_ask`), as many as answer within `limit`.
    pub async fn ask_stacks(&self, limit: Duration) -> StacksAnswers {
        let id = self.asks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        if self.command(Command::AskStacks { id, reply }).await.is_err() {
            return Vec::new();
        }
        match tokio::time::timeout(limit, answer).await {
            Ok(answers) => answers.unwrap_or_default(),
            Err(_) => {
                let (reply, answer) = oneshot::channel();
                if self.command(Command::EndAsk { id, reply }).await.is_err() {
                    return Vec::new();
                }
                answer.await.unwrap_or_default()
            }
        }
    }

    /// A snapshot of the job view (for `/job` and the job-phase decision).
    pub fn job_view(&self) -> JobView {
        lock(&self.view).clone()
    }

    /// Mark a straggler in the job view; its node and pod.
    pub fn mark_straggler(&self, straggler: &super::straggler::Straggler) -> (String, Option<String>) {
        lock(&self.view).straggler(straggler.replica, straggler.to_string())
    }

    /// Record the master's own state in the job view (the job's phase follows it).
    pub fn publish_own_state(&self, report: Report) {
        lock(&self.view).state(0, Box::new(report), now_ms());
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
