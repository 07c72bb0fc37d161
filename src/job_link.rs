//! The glue between the rendezvous and the supervisor: the first barrier as the driver's start
//! gate, then orders and generation changes as supervisor events, and this replica's status
//! streamed to the master. All policy stays in `supervise` (what a new generation does to the
//! child) and `rendezvous` (who may join, when everyone is released); this only connects them.

use crate::driver::{Links, StartGate};
use crate::health::Observation;
use crate::rendezvous::{
    self, ControlEvent, Health, Identity, MasterHandle, Order, RendezvousConfig, RendezvousError, StateUpdate,
    WorkerSession,
};
use crate::report::{LocalStatus, ReplicaState, Report};
use crate::supervise::{Event, GiveUp, RestartScope};
use std::net::SocketAddr;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

/// How often the master's job view (and `workers_done`) is rebuilt while events arrive.
const PUBLISH_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Where and how this replica meets the others.
#[derive(Debug, Clone)]
pub struct JobLinkConfig {
    /// Who this replica is.
    pub identity: Identity,
    /// The master's rendezvous address (workers dial it).
    pub master: (String, u16),
    /// Where the master listens.
    pub listen: SocketAddr,
    /// Timeouts, token, frame limit.
    pub rendezvous: RendezvousConfig,
    /// What a failure restarts.
    pub scope: RestartScope,
}

/// What the supervisor gets: its links, and where it asks for a new generation (job scope).
pub struct JobLink {
    /// The start gate and the control channel for `driver::supervise`.
    pub links: Links,
    /// The driver's `generation_requests`.
    pub generation_requests: mpsc::UnboundedSender<()>,
    /// The master's job view, kept current (None on workers).
    pub job_view: Option<watch::Receiver<serde_json::Value>>,
    /// Master only: true once every worker has finished or disconnected. Under job scope a
    /// worker that loses the master stops its child, so a master whose own child succeeded
    /// keeps the control channel open until this turns true (see `workers_finished`).
    pub workers_done: Option<watch::Receiver<bool>>,
}

/// Wait until every worker has finished or disconnected (true at once on a worker's launcher,
/// or when the master's rendezvous task is gone).
pub async fn workers_finished(done: Option<watch::Receiver<bool>>) {
    let Some(mut done) = done else { return };
    let _ = done.wait_for(|d| *d).await;
}

/// The node's health as the rendezvous carries it, following the node-health source.
pub fn rendezvous_health(source: Option<watch::Receiver<Observation>>) -> watch::Receiver<Health> {
    fn health_of(obs: &Observation) -> Health {
        match obs {
            Ok(v) => Health { healthy: v.healthy, verdict: serde_json::to_value(v).unwrap_or_default() },
            Err(e) => Health { healthy: false, verdict: serde_json::json!({ "error": e.to_string() }) },
        }
    }
    let Some(mut source) = source else {
        return Health { healthy: true, verdict: serde_json::Value::Null }.fixed();
    };
    let (tx, rx) = watch::channel(health_of(&source.borrow_and_update()));
    tokio::spawn(async move {
        while source.changed().await.is_ok() {
            let h = health_of(&source.borrow_and_update());
            if tx.send(h).is_err() {
                return;
            }
        }
    });
    rx
}

/// The update sent upstream: the state fields from the driver's status (always the newest), the
/// payload the whole report (the status itself before the reporter has built one).
fn update_of(s: &LocalStatus, report: Option<&Report>) -> StateUpdate {
    let payload = match report {
        Some(r) => serde_json::to_value(r),
        None => serde_json::to_value(s),
    };
    StateUpdate {
        state: s.state,
        restart_count: s.restart_count,
        generation: s.generation,
        last_exit: s.last_exit.map(|h| h.code()),
        report: payload.unwrap_or_default(),
    }
}

/// This replica's status and its reports, merged into one stream of updates for the master.
struct Upstream {
    status: watch::Receiver<LocalStatus>,
    reports: Option<watch::Receiver<Report>>,
}

impl Upstream {
    /// The next update, when either source changed; None once the status channel is closed.
    async fn next(&mut self) -> Option<StateUpdate> {
        tokio::select! {
            changed = self.status.changed() => changed.ok()?,
            changed = async {
                match self.reports.as_mut() {
                    Some(r) => r.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                if changed.is_err() {
                    // The reporter is gone (finishing): keep following the status alone.
                    self.reports = None;
                }
            }
        }
        let report = self.reports.as_mut().map(|r| r.borrow_and_update().clone());
        Some(update_of(&self.status.borrow_and_update(), report.as_ref()))
    }
}

fn rendezvous_failed(what: &str, e: &RendezvousError) -> GiveUp {
    GiveUp { state: ReplicaState::Failed, message: format!("{what}: {e}") }
}

/// Wait until the child is gone (stopped for a new generation, or finished).
async fn child_gone(status: &mut watch::Receiver<LocalStatus>) {
    loop {
        let gone = status.borrow_and_update().child_pid.is_none();
        if gone || status.changed().await.is_err() {
            return;
        }
    }
}

async fn gate_of(rx: oneshot::Receiver<Result<(), GiveUp>>) -> Result<(), GiveUp> {
    rx.await.unwrap_or_else(|_| {
        Err(GiveUp { state: ReplicaState::Failed, message: "the rendezvous task ended before the barrier".into() })
    })
}

/// Start this replica's side of the rendezvous (inside the runtime): the master listens at once;
/// a worker starts dialling. The driver's start gate passes when the first barrier releases.
/// Every change of `status` or `reports` goes to the master; the payload is the whole report.
pub fn start(
    cfg: JobLinkConfig,
    health: watch::Receiver<Health>,
    status: watch::Receiver<LocalStatus>,
    reports: Option<watch::Receiver<Report>>,
) -> Result<JobLink, RendezvousError> {
    let upstream = Upstream { status, reports };
    let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
    let (gen_tx, gen_rx) = mpsc::unbounded_channel();
    let (gate_tx, gate_rx) = oneshot::channel();
    let start_gate: StartGate = Box::pin(gate_of(gate_rx));
    let (job_view, workers_done) = if cfg.identity.replica_index == 0 {
        let listener = rendezvous::listen(cfg.listen)?;
        let master = rendezvous::start_master(listener, cfg.identity.clone(), health, cfg.rendezvous.clone())?;
        let (view_tx, view_rx) = watch::channel(serde_json::Value::Null);
        let (done_tx, done_rx) = watch::channel(false);
        tokio::spawn(run_master(master, upstream, ctl_tx, gen_rx, gate_tx, view_tx, done_tx));
        (Some(view_rx), Some(done_rx))
    } else {
        tokio::spawn(run_worker(cfg, health, upstream, ctl_tx, gen_rx, gate_tx));
        (None, None)
    };
    Ok(JobLink {
        links: Links { start_gate: Some(start_gate), control: Some(ctl_rx) },
        generation_requests: gen_tx,
        job_view,
        workers_done,
    })
}

async fn run_master(
    mut master: MasterHandle,
    mut upstream: Upstream,
    ctl: mpsc::UnboundedSender<Event>,
    mut gen_rx: mpsc::UnboundedReceiver<()>,
    gate: oneshot::Sender<Result<(), GiveUp>>,
    view: watch::Sender<serde_json::Value>,
    done: watch::Sender<bool>,
) {
    let mut generation = match master.barrier(0).await {
        Ok(r) => {
            let _ = gate.send(Ok(()));
            r.generation
        }
        Err(e) => {
            let _ = gate.send(Err(rendezvous_failed("rendezvous failed", &e)));
            return;
        }
    };
    let publish_view = |m: &MasterHandle| {
        let job = m.job_view();
        let finished = job.replicas().values().filter(|r| r.index != 0).all(|r| !r.connected || r.state.is_final());
        done.send_replace(finished);
        // Nobody serves the view yet (the launcher drops it): skip building its JSON.
        if view.receiver_count() > 0 {
            view.send_replace(serde_json::to_value(job).unwrap_or_default());
        }
    };
    publish_view(&master);
    // The driver drops its ends when it returns; the control channel stays up while the
    // launcher waits for the workers (`workers_finished`).
    let (mut upstream_open, mut requests_open) = (true, true);
    let mut own_final: Option<ReplicaState> = None;
    // Building the view is O(replicas): publish it at most every PUBLISH_EVERY, not per event
    // (per event is quadratic when thousands of workers join or leave at once).
    let mut publish = tokio::time::interval(PUBLISH_EVERY);
    publish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = false;
    loop {
        let next = tokio::select! {
            _ = publish.tick(), if dirty => {
                publish_view(&master);
                dirty = false;
                continue;
            }
            update = upstream.next(), if upstream_open => {
                let Some(update) = update else {
                    upstream_open = false;
                    continue;
                };
                if update.state.is_final() {
                    own_final = Some(update.state);
                }
                master.publish_own_state(update);
                None
            }
            event = master.events().recv() => match event {
                None => return,
                Some(ControlEvent::Rejoin { index, generation: g }) if g > generation => {
                    info!(replica = index, generation = g, "rendezvous: a replica asks for a new generation");
                    Some(g)
                }
                Some(ControlEvent::Lost { index, reason }) => {
                    warn!(replica = index, "rendezvous: replica lost: {reason}");
                    None
                }
                Some(ControlEvent::Joined { index, node, .. }) => {
                    info!(replica = index, node, "rendezvous: replica (re)joined");
                    None
                }
                Some(_) => None,
            },
            request = gen_rx.recv(), if requests_open => match request {
                Some(()) => Some(generation + 1),
                None => {
                    requests_open = false;
                    None
                }
            },
        };
        dirty = true;
        if let (Some(g), Some(state)) = (next, own_final) {
            // The master's training process is over, so is the job (it follows the master): a
            // new generation would start workers with no rank 0 to meet. Stop them instead.
            warn!(
                generation = g,
                "rendezvous: a new generation was asked for after the master finished; stopping the workers"
            );
            let reason = format!("the job is over (the master's training process {state:?}); no generation {g}");
            if let Err(e) = master.order(Order::Stop { reason }).await {
                warn!("rendezvous: cannot stop the workers: {e}");
            }
        } else if let Some(g) = next {
            // Every child stops; the barrier orders the workers to Restart{g} and waits for them.
            let _ = ctl.send(Event::NewGeneration { generation: g });
            match master.barrier(g).await {
                Ok(r) => {
                    generation = r.generation;
                    info!(generation, "rendezvous: released a new generation");
                    let _ = ctl.send(Event::Released { generation });
                }
                Err(e) => {
                    let _ = ctl
                        .send(Event::GiveUp(rendezvous_failed(&format!("rendezvous for generation {g} failed"), &e)));
                    return;
                }
            }
            publish_view(&master);
        }
    }
}

async fn run_worker(
    cfg: JobLinkConfig,
    health: watch::Receiver<Health>,
    mut upstream: Upstream,
    ctl: mpsc::UnboundedSender<Event>,
    mut gen_rx: mpsc::UnboundedReceiver<()>,
    gate: oneshot::Sender<Result<(), GiveUp>>,
) {
    let join = || rendezvous::join(cfg.master.clone(), cfg.identity.clone(), health.clone(), cfg.rendezvous.clone());
    let mut session: WorkerSession = match join().await {
        Ok(s) => {
            let _ = gate.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = gate.send(Err(rendezvous_failed("rendezvous failed", &e)));
            return;
        }
    };
    let mut waiter = upstream.status.clone();
    let mut generation = session.generation();
    let mut requests_open = true;
    loop {
        tokio::select! {
            update = upstream.next() => {
                let Some(update) = update else { return };
                let _ = session.send_state(update);
            }
            order = session.next_order() => match order {
                Some(Order::Restart { generation: g }) => {
                    let _ = ctl.send(Event::NewGeneration { generation: g });
                    child_gone(&mut waiter).await;
                    match session.rejoin(g).await {
                        Ok(r) => {
                            generation = r.generation;
                            let _ = ctl.send(Event::Released { generation });
                        }
                        Err(e) => {
                            let _ = ctl.send(Event::GiveUp(rendezvous_failed(&format!("rejoining generation {g} failed"), &e)));
                            return;
                        }
                    }
                }
                Some(Order::Stop { reason }) => {
                    let message = format!("stopped by the master: {reason}");
                    let _ = ctl.send(Event::GiveUp(GiveUp { state: ReplicaState::Failed, message }));
                    return;
                }
                None => {
                    let reason = session.lost_reason().unwrap_or("connection closed").to_string();
                    match cfg.scope {
                        RestartScope::Replica => {
                            // The seed's behaviour: workers outlive the master; keep training, and
                            // meet a recreated master when it comes back.
                            warn!("rendezvous: lost the master ({reason}); training continues; reconnecting");
                            match join().await {
                                Ok(s) => {
                                    info!("rendezvous: reconnected to the master");
                                    session = s;
                                }
                                Err(e) => {
                                    warn!("rendezvous: could not reconnect to the master: {e}; training continues");
                                    return;
                                }
                            }
                        }
                        RestartScope::Job => {
                            warn!("rendezvous: lost the master ({reason}); stopping the child and waiting for a new generation");
                            let _ = ctl.send(Event::NewGeneration { generation: generation + 1 });
                            child_gone(&mut waiter).await;
                            match join().await {
                                Ok(s) => {
                                    session = s;
                                    generation = session.generation();
                                    let _ = ctl.send(Event::Released { generation });
                                }
                                Err(e) => {
                                    let _ = ctl.send(Event::GiveUp(rendezvous_failed("lost the master and could not rejoin", &e)));
                                    return;
                                }
                            }
                        }
                    }
                }
            },
            request = gen_rx.recv(), if requests_open => match request {
                Some(()) => match session.rejoin(generation + 1).await {
                    Ok(r) => {
                        generation = r.generation;
                        let _ = ctl.send(Event::Released { generation });
                    }
                    Err(e) => {
                        let _ = ctl.send(Event::GiveUp(rendezvous_failed("asking for a new generation failed", &e)));
                        return;
                    }
                },
                None => requests_open = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitHow;
    use crate::report::{Identity, Timeline};
    use std::time::UNIX_EPOCH;

    #[test]
    fn updates_carry_the_whole_report() {
        let st = LocalStatus {
            state: ReplicaState::Running,
            restart_count: 2,
            last_exit: Some(ExitHow::Exited(3)),
            ..LocalStatus::default()
        };
        let id = Identity { pod: Some("j-worker-0".into()), ..Identity::default() };
        let report = Timeline::new(UNIX_EPOCH).report(&id, &st, None, UNIX_EPOCH);
        let u = update_of(&st, Some(&report));
        assert_eq!((u.state, u.restart_count, u.last_exit), (ReplicaState::Running, 2, Some(3)));
        assert_eq!(u.report["pod"], "j-worker-0");
        assert_eq!(u.report["schema_version"], 1);
        assert_eq!(u.report["last_exit"]["code"], 3);
        // Before the reporter built one: the status itself.
        let early = update_of(&st, None);
        assert_eq!(early.report["restart_count"], 2);
        assert!(early.report.get("schema_version").is_none());
    }

    #[tokio::test]
    async fn upstream_follows_both_channels() {
        let (status_tx, status) = watch::channel(LocalStatus::default());
        let mut tl = Timeline::new(UNIX_EPOCH);
        let first = tl.report(&Identity::default(), &LocalStatus::default(), None, UNIX_EPOCH);
        let (report_tx, reports) = watch::channel(first);
        let mut up = Upstream { status, reports: Some(reports) };
        let progress =
            LocalStatus { progress: crate::heartbeat::parse_progress(r#"{"step": 9}"#), ..LocalStatus::default() };
        report_tx.send_replace(tl.report(&Identity::default(), &progress, None, UNIX_EPOCH));
        let u = up.next().await.unwrap();
        assert_eq!(u.report["progress"]["step"], 9, "a report change alone is sent");
        drop(report_tx);
        status_tx.send_replace(LocalStatus { state: ReplicaState::Running, ..LocalStatus::default() });
        // The closed report channel is noticed first, then the status change still arrives.
        let mut got = up.next().await.unwrap();
        if got.state != ReplicaState::Running {
            got = up.next().await.unwrap();
        }
        assert_eq!(got.state, ReplicaState::Running);
        drop(status_tx);
        // At most the report channel's closing is still pending before the end.
        let mut ended = false;
        for _ in 0..2 {
            if up.next().await.is_none() {
                ended = true;
                break;
            }
        }
        assert!(ended, "a closed status channel ends the stream");
    }
}
