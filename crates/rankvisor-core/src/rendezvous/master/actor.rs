//! The master task: the one owner of every decision (the roster, the job view, the connections'
//! outboxes). It never awaits a peer: it only queues lines, and drops a peer whose outbox is full.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::super::admission::Refusal;
use super::super::conn::{log_refusal, ConnContext, Inbound, REFUSAL_WARN_WINDOW};
use super::super::frame::{Frame, Health, Hello, Order};
use super::super::io::{line, Line, OutboxTx};
use super::super::job::JobView;
use super::super::roster::{ConnId, Phase, Rejoin, Roster};
use crate::logging::{Throttle, Throttled};
use crate::untrusted::{escape, Escaped};

use super::{lock, now_ms, timeout_error, AbortOnDrop, Command, ControlEvent, StacksAnswers, FINISHED};
/// An admitted worker. Dropping `out` (the only sender) ends the connection's task once it has
/// written what was queued.
pub(super) struct Conn {
    index: u32,
    peer: SocketAddr,
    out: OutboxTx,
}

pub(super) struct Master {
    pub(super) roster: Roster,
    pub(super) conns: HashMap<ConnId, Conn>,
    /// Shared with the connection tasks: refused peers are logged once per window.
    pub(super) refusals: Arc<Mutex<Throttle>>,
    /// The connections' shared context (for the handshakes' gauge).
    pub(super) ctx: Arc<ConnContext>,
    pub(super) view: Arc<Mutex<JobView>>,
    pub(super) events: mpsc::Sender<ControlEvent>,
    pub(super) released: watch::Sender<Option<u64>>,
    pub(super) max_frame: usize,
    pub(super) replica_count: u32,
    pub(super) events_dropped: u64,
    pub(super) departures: Departures,
    /// Newcomers claiming an index a peer on another node holds, by index: each waits until the
    /// holder shows it is alive (any frame: then the newcomer is refused) or its connection ends
    /// (silent past the heartbeat limit, or closed: then the newcomer takes the slot).
    pub(super) contested: HashMap<u32, Newcomer>,
    /// The `stacks_ask`s waiting for answers, by id.
    pub(super) asks: HashMap<u64, Ask>,
}

/// One `stacks_ask`: who has not answered yet, the answers in, where they go once all are.
pub(super) struct Ask {
    waiting: std::collections::HashSet<u32>,
    got: StacksAnswers,
    reply: tokio::sync::oneshot::Sender<StacksAnswers>,
}

/// A newcomer waiting for the holder of its index to prove it is alive.
pub(super) struct Newcomer {
    conn: ConnId,
    peer: SocketAddr,
    hello: Hello,
    proof: Option<String>,
    out: OutboxTx,
}

/// How often replicas that finished or were lost are logged at INFO / WARN (the rest at DEBUG).
pub(super) struct Departures {
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
    pub(super) async fn run(
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
            // A newcomer that gave up waiting for its index.
            self.contested.retain(|_, n| n.conn != conn);
            return;
        };
        self.roster.leave(c.index, conn);
        self.forget_asked(c.index);
        let mut view = self.view();
        // A replica that reported a final state and then closes has finished: no warning.
        let finished = view.replicas().get(&c.index).is_some_and(|r| r.state().is_final());
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
        // The holder is gone: the newcomer that waited for its index takes it.
        if let Some(n) = self.contested.remove(&c.index) {
            info!(peer = %n.peer, replica = c.index, node = %Escaped(&n.hello.node),
                "the holder of the index is gone: the waiting replica takes its place");
            self.admit(n.conn, n.peer, n.hello, n.proof, n.out);
        }
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
            Command::Tell { index, order } => {
                if let Some(conn) = self.conns.iter().find(|(_, c)| c.index == index).map(|(&id, _)| id) {
                    self.send(conn, &Frame::from(order));
                }
            }
            Command::Finish { reason, reply } => {
                self.departures.summary();
                self.broadcast(&Frame::Finished { reason });
                let _ = reply.send(());
            }
            Command::AskStacks { id, reply } => {
                let waiting: std::collections::HashSet<u32> = self.conns.values().map(|c| c.index).collect();
                if waiting.is_empty() {
                    let _ = reply.send(Vec::new());
                    return;
                }
                self.asks.insert(id, Ask { waiting, got: Vec::new(), reply });
                self.broadcast(&Frame::StacksAsk { id });
            }
            Command::EndAsk { id, reply } => {
                let _ = reply.send(self.asks.remove(&id).map(|a| a.got).unwrap_or_default());
            }
        }
    }

    /// Replica `index` is gone: no ask waits for it (one with every other answer in is answered).
    fn forget_asked(&mut self, index: u32) {
        let done: Vec<u64> = self
            .asks
            .iter_mut()
            .filter_map(|(id, a)| (a.waiting.remove(&index) && a.waiting.is_empty()).then_some(*id))
            .collect();
        for id in done {
            if let Some(ask) = self.asks.remove(&id) {
                let _ = ask.reply.send(ask.got);
            }
        }
    }

    /// Replica `index`'s answer to `stacks_ask` `id`; the ask is answered once all are in.
    fn stacks_answer(&mut self, index: u32, id: u64, summary: crate::stacks::StacksSummary) {
        let Some(ask) = self.asks.get_mut(&id) else { return };
        if ask.waiting.remove(&index) {
            ask.got.push((index, summary.from_peer()));
        }
        if ask.waiting.is_empty() {
            if let Some(ask) = self.asks.remove(&id) {
                let _ = ask.reply.send(ask.got);
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
            // Another node claims a held index: the pod was recreated elsewhere while the old
            // node died silently (its connection half-open), or two peers claim one index. The
            // holder decides: a frame from it refuses the newcomer; its end admits the newcomer.
            Err(Refusal::Duplicate { .. }) if self.conns.values().any(|c| c.index == index) => {
                debug!(%peer, replica = index, node = %Escaped(&hello.node),
                    "a replica claims a held index: waiting for the holder to prove it is alive");
                let newcomer = Newcomer { conn, peer, hello, proof, out };
                if let Some(earlier) = self.contested.insert(index, newcomer) {
                    self.refuse_newcomer(index, earlier);
                }
                return;
            }
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

    /// Refuse a newcomer whose index's holder is alive.
    fn refuse_newcomer(&mut self, index: u32, n: Newcomer) {
        let holder = self.roster.holder(index).unwrap_or_default();
        let refusal = Refusal::Duplicate { index, holder };
        let detail = format!("replica {index} on node {}: {refusal}", Escaped(&n.hello.node));
        log_refusal(&self.refusals, n.peer, "refused a rendezvous peer", &detail);
        if let Ok(l) = line(&Frame::Error { message: refusal.to_peer(n.proof.is_some()) }, self.max_frame) {
            n.out.push(l);
        }
    }

    fn frame(&mut self, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (index, peer) = (c.index, c.peer);
        // The holder of a contested index is alive: the newcomer is refused.
        if let Some(n) = self.contested.remove(&index) {
            self.refuse_newcomer(index, n);
        }
        match frame {
            Frame::Heartbeat => self.view().seen(index, now_ms()),
            Frame::State(report) => {
                self.view().state(index, report.clone(), now_ms());
                self.emit(ControlEvent::State { index, report });
            }
            Frame::Health(health) => {
                if !health.healthy {
                    warn!(%peer, replica = index, verdict = %health.verdict, "replica's node became unhealthy");
                }
                let held = self.roster.set_health(index, conn, health.healthy);
                // Every connection in `conns` holds its index in the roster (both change together).
                debug_assert!(held, "connection {conn:?} of replica {index} is not in the roster");
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
            Frame::Metric { value } => self.emit(ControlEvent::Metric { index, value }),
            Frame::Stacks { id, summary } => {
                self.view().seen(index, now_ms());
                self.stacks_answer(index, id, summary);
            }
            other => {
                let message = format!("unexpected {} frame from replica {index} after admission", other.kind());
                self.send(conn, &Frame::Error { message: message.clone() });
                self.drop_conn(conn, message);
            }
        }
    }
}
