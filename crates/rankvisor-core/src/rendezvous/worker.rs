//! The worker's side: dial the master until it answers, introduce itself, prove the job token,
//! wait for the release, then keep the control channel: states up, orders down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::auth;
use super::config::{Member, Released, RendezvousConfig};
use super::error::RendezvousError;
use super::frame::{Frame, FrameError, Health, Hello, Order};
use super::io::{line, write_loop, FrameReader, Line, ReadError, OUTBOX};
use super::roster::MAX_GENERATION;
use crate::backoff::Backoff;
use crate::duration::format_duration;
use crate::rank::Role;
use crate::stacks::StacksSummary;
use crate::status::Report;

const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// This replica's answer to the master's `stacks_ask`: where its training process is.
pub type StacksAnswerer =
    Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = StacksSummary> + Send>> + Send + Sync>;

/// Where the session's reader sends what it answers by itself (heartbeats' health, stacks).
struct Answering {
    out: mpsc::Sender<Line>,
    max: usize,
    stacks: Arc<OnceLock<StacksAnswerer>>,
}

/// The control channel of a released worker. Dropping it closes the connection.
pub struct WorkerSession {
    master: String,
    generation: u64,
    out: mpsc::Sender<Line>,
    inbox: mpsc::Receiver<FromMaster>,
    lost: Option<String>,
    max_frame: usize,
    barrier_timeout: Duration,
    waited: Duration,
    reader: JoinHandle<()>,
    writer: Option<JoinHandle<()>>,
    stacks: Arc<OnceLock<StacksAnswerer>>,
}

#[derive(Debug)]
enum FromMaster {
    Frame(Frame),
    Lost(String),
}

enum Step {
    Retry(String),
    Fatal(RendezvousError),
}

/// Meet the master at the barrier: dial `master` (host, port), retrying with backoff while the
/// name does not resolve or the port refuses, until `cfg.barrier_timeout`; return once released.
pub async fn join(
    master: (String, u16),
    me: Member,
    health: watch::Receiver<Health>,
    cfg: RendezvousConfig,
) -> Result<WorkerSession, RendezvousError> {
    join_observed(master, me, health, cfg, None).await
}

/// `join`, reporting every failed attempt to `observer` (tests use it as a handshake).
pub(crate) async fn join_observed(
    (host, port): (String, u16),
    me: Member,
    mut health: watch::Receiver<Health>,
    cfg: RendezvousConfig,
    observer: Option<mpsc::UnboundedSender<String>>,
) -> Result<WorkerSession, RendezvousError> {
    me.check_worker()?;
    cfg.check()?;
    let master = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let started = Instant::now();
    let mut deadline = tokio::time::Instant::from_std(started) + cfg.barrier_timeout;
    let admitted = AtomicBool::new(false);
    let mut extended = false;
    let mut backoff = Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX);
    let mut progress = "no connection attempted yet".to_string();
    let mut health_live = true;
    loop {
        let outcome = {
            let attempt = async {
                let stream =
                    match tokio::time::timeout(cfg.hello_timeout, TcpStream::connect((host.as_str(), port))).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => return Err(Step::Retry(format!("cannot connect: {e}"))),
                        Err(_) => {
                            return Err(Step::Retry(format!(
                                "cannot connect: no answer within {}",
                                format_duration(cfg.hello_timeout)
                            )))
                        }
                    };
                backoff.reset();
                meet(stream, &me, &mut health, &mut health_live, &cfg, &master, started, &mut progress, &admitted).await
            };
            tokio::pin!(attempt);
            loop {
                tokio::select! {
                    r = &mut attempt => break Some(r),
                    () = tokio::time::sleep_until(deadline) => {
                        // Admitted, the master's own barrier timer runs: it started before it admitted
                        // us, so it answers (release, or a timeout naming the missing replicas) within
                        // one more barrier timeout. Waiting for that answer, rather than leaving at our
                        // own deadline, lets every worker report which replicas were missing.
                        if admitted.load(Ordering::Relaxed) && !extended {
                            extended = true;
                            deadline += cfg.barrier_timeout + cfg.hello_timeout;
                            continue;
                        }
                        break None;
                    }
                }
            }
        };
        let reason = match outcome {
            Some(Ok(session)) => return Ok(session),
            Some(Err(Step::Fatal(e))) => return Err(e),
            Some(Err(Step::Retry(reason))) => reason,
            None => return Err(timed_out(&master, &cfg, progress)),
        };
        debug!(%master, "rendezvous attempt failed, retrying: {reason}");
        if let Some(observer) = &observer {
            let _ = observer.send(reason.clone());
        }
        progress = reason;
        // Half to the full pause, so workers started together do not dial in lockstep.
        let pause = backoff.next_delay();
        if tokio::time::timeout_at(deadline, tokio::time::sleep(pause)).await.is_err() {
            return Err(timed_out(&master, &cfg, progress));
        }
    }
}

fn timed_out(master: &str, cfg: &RendezvousConfig, last: String) -> RendezvousError {
    RendezvousError::Timeout { master: master.to_string(), waited: format_duration(cfg.barrier_timeout), last }
}

fn push(out: &mpsc::Sender<Line>, frame: &Frame, max: usize, master: &str) -> Result<(), Step> {
    let l = line(frame, max).map_err(|e| {
        Step::Fatal(RendezvousError::Protocol {
            master: master.to_string(),
            detail: format!("cannot send our {} frame: {e}", frame.kind()),
        })
    })?;
    out.try_send(l).map_err(|_| Step::Retry("the connection's outbox is full".to_string()))
}

/// Tell the master why we give up, so its log shows it too; best effort.
fn tell(out: &mpsc::Sender<Line>, max: usize, message: &str) {
    if let Ok(l) = line(&Frame::Error { message: message.to_string() }, max) {
        let _ = out.try_send(l);
    }
}

/// One connection to the master until it releases this replica: introduce ourselves, prove the
/// job token, check the master's proof, keep the master told of our health; the released
/// connection becomes the session.
#[allow(clippy::too_many_arguments)]
async fn meet(
    stream: TcpStream,
    me: &Member,
    health: &mut watch::Receiver<Health>,
    health_live: &mut bool,
    cfg: &RendezvousConfig,
    master: &str,
    started: Instant,
    progress: &mut String,
    admitted_flag: &AtomicBool,
) -> Result<WorkerSession, Step> {
    let _ = stream.set_nodelay(true);
    let (read, write) = stream.into_split();
    let (out, outbox) = mpsc::channel(OUTBOX);
    let writer = tokio::spawn(write_loop(write, outbox, cfg.heartbeat));
    let mut reader = FrameReader::new(read, cfg.max_frame);
    let nonce = auth::new_nonce().map_err(|e| Step::Fatal(RendezvousError::Random(e.to_string())))?;
    let sent = health.borrow_and_update().clone();
    let mut meeting = Meeting {
        cfg,
        master,
        out,
        health,
        health_live,
        sent,
        nonce,
        server_nonce: None,
        admitted: false,
        admitted_flag,
        progress,
    };
    meeting.hello(me)?;
    loop {
        let frame = meeting.next_frame(&mut reader).await?;
        if let Some(generation) = meeting.on_frame(frame)? {
            info!(%master, generation, "released by the rendezvous master");
            let Meeting { out, health, health_live, .. } = meeting;
            let mut session = WorkerSession::start(master, generation, out, reader, health.clone(), *health_live, cfg);
            session.waited = started.elapsed();
            session.writer = Some(writer);
            return Ok(session);
        }
    }
}

/// A worker's wait at the barrier on one connection: what it sent the master and learnt from it.
struct Meeting<'a> {
    cfg: &'a RendezvousConfig,
    master: &'a str,
    out: mpsc::Sender<Line>,
    health: &'a mut watch::Receiver<Health>,
    health_live: &'a mut bool,
    /// The health the master was last told.
    sent: Health,
    /// Our nonce, sent in the hello.
    nonce: String,
    /// The master's nonce, once it challenged us.
    server_nonce: Option<String>,
    admitted: bool,
    /// `admitted`, seen by `join_observed`'s deadline.
    admitted_flag: &'a AtomicBool,
    /// What `join_observed` reports if the barrier times out.
    progress: &'a mut String,
}

impl Meeting<'_> {
    fn hello(&mut self, me: &Member) -> Result<(), Step> {
        let hello = Hello {
            job: me.job.clone(),
            replica_index: me.replica_index,
            replica_count: me.replica_count,
            node: me.node.clone(),
            healthy: self.sent.healthy,
            health: self.sent.verdict.clone(),
            nonce: self.nonce.clone(),
        };
        push(&self.out, &Frame::Hello(hello), self.cfg.max_frame, self.master)?;
        *self.progress = "connected, waiting for the master to admit this replica".to_string();
        Ok(())
    }

    /// The master's next frame, its generation in bounds; once admitted, a change of this
    /// replica's health goes up meanwhile.
    async fn next_frame(&mut self, reader: &mut FrameReader<OwnedReadHalf>) -> Result<Frame, Step> {
        let silence = self.cfg.silence();
        loop {
            tokio::select! {
                read = tokio::time::timeout(silence, reader.next()) => return match read {
                    Err(_) => Err(Step::Retry(format!("master silent for {}", format_duration(silence)))),
                    Ok(Ok(None)) => Err(Step::Retry("master closed the connection".to_string())),
                    Ok(Ok(Some(frame))) => match generation_in_bounds(&frame) {
                        Ok(()) => Ok(frame),
                        Err(detail) => Err(self.protocol_error(detail)),
                    },
                    Ok(Err(ReadError::Frame(e))) => Err(self.protocol_error(format!("bad frame: {e}"))),
                    Ok(Err(e)) => Err(Step::Retry(e.to_string())),
                },
                changed = self.health.changed(), if *self.health_live && self.admitted => match changed {
                    Ok(()) => {
                        let now = self.health.borrow_and_update().clone();
                        self.send_health(now)?;
                    }
                    Err(_) => *self.health_live = false,
                },
            }
        }
    }

    /// Act on a frame of the master before the release; the generation released into, once.
    fn on_frame(&mut self, frame: Frame) -> Result<Option<u64>, Step> {
        match frame {
            Frame::Heartbeat => {}
            Frame::Challenge { nonce: theirs } => self.answer_challenge(theirs)?,
            Frame::Admitted { generation, proof } => self.admitted(generation, proof)?,
            Frame::Release { generation } if self.admitted => return Ok(Some(generation)),
            Frame::Error { message } => {
                return Err(Step::Fatal(RendezvousError::MasterError { master: self.master.to_string(), message }));
            }
            other => {
                let detail = format!("unexpected {} frame while waiting for the release", other.kind());
                return Err(self.protocol_error(detail));
            }
        }
        Ok(None)
    }

    /// Prove the job token against the master's nonce and ours.
    fn answer_challenge(&mut self, theirs: String) -> Result<(), Step> {
        let Some(token) = &self.cfg.token else {
            let detail =
                "the master requires a job token, but RANKVISOR_JOB_TOKEN is not set on this replica".to_string();
            return Err(self.token_error(detail));
        };
        let proof = auth::prove(token, Role::Worker, &theirs, &self.nonce).map_err(|e| {
            Step::Fatal(RendezvousError::Protocol {
                master: self.master.to_string(),
                detail: format!("bad challenge: {e}"),
            })
        })?;
        self.server_nonce = Some(theirs);
        push(&self.out, &Frame::Auth { proof }, self.cfg.max_frame, self.master)
    }

    /// Admitted: with a job token here, only by a master that proved it too; then tell the master
    /// of a health changed since the hello.
    fn admitted(&mut self, generation: u64, proof: Option<String>) -> Result<(), Step> {
        if let Some(token) = &self.cfg.token {
            let checked = match (&self.server_nonce, &proof) {
                (Some(theirs), Some(proof)) => {
                    auth::verify(token, Role::Master, theirs, &self.nonce, proof).map_err(|e| e.to_string())
                }
                _ => Err("the master admitted this replica without checking the job token, but RANKVISOR_JOB_TOKEN is set here".to_string()),
            };
            if let Err(detail) = checked {
                return Err(self.token_error(detail));
            }
        }
        self.admitted = true;
        self.admitted_flag.store(true, Ordering::Relaxed);
        *self.progress = format!("admitted, waiting at the barrier for generation {generation}");
        let now = self.health.borrow_and_update().clone();
        if now != self.sent {
            self.send_health(now)?;
        }
        Ok(())
    }

    fn send_health(&mut self, now: Health) -> Result<(), Step> {
        self.sent = now;
        push(&self.out, &Frame::Health(self.sent.clone()), self.cfg.max_frame, self.master)
    }

    /// Give up on a master that broke the protocol, telling it why.
    fn protocol_error(&self, detail: String) -> Step {
        tell(&self.out, self.cfg.max_frame, &detail);
        Step::Fatal(RendezvousError::Protocol { master: self.master.to_string(), detail })
    }

    /// Give up on a job token that does not match, telling the master why.
    fn token_error(&self, detail: String) -> Step {
        tell(&self.out, self.cfg.max_frame, &detail);
        Step::Fatal(RendezvousError::Token { master: self.master.to_string(), detail })
    }
}

impl WorkerSession {
    fn start(
        master: &str,
        generation: u64,
        out: mpsc::Sender<Line>,
        reader: FrameReader<OwnedReadHalf>,
        health: watch::Receiver<Health>,
        health_live: bool,
        cfg: &RendezvousConfig,
    ) -> Self {
        let (inbox_tx, inbox) = mpsc::channel(OUTBOX);
        let stacks: Arc<OnceLock<StacksAnswerer>> = Arc::default();
        let answering = Answering { out: out.clone(), max: cfg.max_frame, stacks: stacks.clone() };
        let task = tokio::spawn(session_reader(reader, inbox_tx, answering, health, health_live, cfg.silence()));
        WorkerSession {
            master: master.to_string(),
            generation,
            out,
            inbox,
            lost: None,
            max_frame: cfg.max_frame,
            barrier_timeout: cfg.barrier_timeout,
            waited: Duration::ZERO,
            reader: task,
            writer: None,
            stacks,
        }
    }

    /// Answer the master's `stacks_ask`s with `answerer` (each in a task of its own; an ask
    /// before this is answered "not ready").
    pub fn answer_stacks_with(&self, answerer: StacksAnswerer) {
        let _ = self.stacks.set(answerer);
    }

    /// The generation this worker was last released into.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How long `join` took, dialling included (the `rendezvous seconds` metric).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Why the master was lost, once `next_order` has returned None.
    pub fn lost_reason(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// Close the control channel after every queued frame went out (at most `limit`): a
    /// launcher that exits calls this so that its final state reaches the master.
    pub async fn close(mut self, limit: Duration) {
        let writer = self.writer.take();
        // Dropping the session closes the outbox; the writer drains it, then shuts the socket.
        drop(self);
        if let Some(w) = writer {
            let _ = tokio::time::timeout(limit, w).await;
        }
    }

    /// Stream this replica's report to the master; never waits (the frame is queued).
    pub fn send_state(&self, report: Report) -> Result<(), RendezvousError> {
        let l = line(&Frame::State(Box::new(report)), self.max_frame).map_err(|e| match e {
            FrameError::TooLarge { len, max } => RendezvousError::TooLarge { len, max },
            other => RendezvousError::Protocol { master: self.master.clone(), detail: other.to_string() },
        })?;
        self.push(l)
    }

    /// Send a point of the `--straggler-rule` metric to the master (a value that is not a
    /// finite number is not sent: JSON has no such number).
    pub fn send_metric(&self, value: f64) -> Result<(), RendezvousError> {
        if !value.is_finite() {
            return Ok(());
        }
        let l = line(&Frame::Metric { value }, self.max_frame)
            .map_err(|e| RendezvousError::Protocol { master: self.master.clone(), detail: e.to_string() })?;
        self.push(l)
    }

    fn push(&self, l: Line) -> Result<(), RendezvousError> {
        if self.lost.is_some() || self.reader.is_finished() {
            return Err(self.lost_error());
        }
        self.out.try_send(l).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                RendezvousError::Backlog { master: self.master.clone(), pending: OUTBOX }
            }
            mpsc::error::TrySendError::Closed(_) => self.lost_error(),
        })
    }

    fn lost_error(&self) -> RendezvousError {
        RendezvousError::MasterLost {
            master: self.master.clone(),
            reason: self.lost.clone().unwrap_or_else(|| "the control connection ended".to_string()),
        }
    }

    /// The master's next order, or None once the master is lost (silent for 3 heartbeats, or
    /// the connection closed).
    pub async fn next_order(&mut self) -> Option<Order> {
        loop {
            match self.inbox.recv().await {
                None => {
                    self.lost.get_or_insert_with(|| "the control connection ended".to_string());
                    return None;
                }
                Some(FromMaster::Lost(reason)) => {
                    warn!(master = %self.master, "lost the rendezvous master: {reason}");
                    self.lost = Some(reason);
                    return None;
                }
                Some(FromMaster::Frame(Frame::Stop { reason })) => return Some(Order::Stop { reason }),
                Some(FromMaster::Frame(Frame::Restart { generation })) => return Some(Order::Restart { generation }),
                Some(FromMaster::Frame(Frame::Finished { reason })) => return Some(Order::Finished { reason }),
                Some(FromMaster::Frame(Frame::Checkpoint { reason })) => return Some(Order::Checkpoint { reason }),
                Some(FromMaster::Frame(Frame::Straggler { reason })) => return Some(Order::Straggler { reason }),
                Some(FromMaster::Frame(Frame::Error { message })) => {
                    warn!(master = %self.master, "the rendezvous master sent an error: {}", crate::untrusted::escape(&message));
                    self.lost = Some(format!("the master sent an error: {message}"));
                }
                Some(FromMaster::Frame(other)) => {
                    debug!(master = %self.master, "ignored a {} frame on the control channel", other.kind());
                }
            }
        }
    }

    /// Meet the others again at the barrier of `generation` (after a `Restart` order, or to ask
    /// the master for a job-scope restart); returns once released.
    pub async fn rejoin(&mut self, generation: u64) -> Result<Released, RendezvousError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started) + self.barrier_timeout;
        let mut target = generation;
        self.push_frame(&Frame::Rejoin { generation: target })?;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.inbox.recv()).await {
                Err(_) => {
                    return Err(RendezvousError::Timeout {
                        master: self.master.clone(),
                        waited: format_duration(self.barrier_timeout),
                        last: format!("rejoined, waiting at the barrier for generation {target}"),
                    })
                }
                Ok(None) => return Err(self.lost_error()),
                Ok(Some(msg)) => msg,
            };
            match msg {
                FromMaster::Lost(reason) => {
                    self.lost = Some(reason);
                    return Err(self.lost_error());
                }
                FromMaster::Frame(Frame::Release { generation }) if generation >= target => {
                    self.generation = generation;
                    info!(master = %self.master, generation, "released by the rendezvous master");
                    return Ok(Released { generation, waited: started.elapsed() });
                }
                FromMaster::Frame(Frame::Restart { generation }) if generation > target => {
                    target = generation;
                    self.push_frame(&Frame::Rejoin { generation: target })?;
                }
                FromMaster::Frame(Frame::Stop { reason }) => {
                    return Err(RendezvousError::Stopped { master: self.master.clone(), reason })
                }
                FromMaster::Frame(Frame::Error { message }) => {
                    return Err(RendezvousError::MasterError { master: self.master.clone(), message })
                }
                FromMaster::Frame(_) => {}
            }
        }
    }

    fn push_frame(&self, frame: &Frame) -> Result<(), RendezvousError> {
        let l = line(frame, self.max_frame)
            .map_err(|e| RendezvousError::Protocol { master: self.master.clone(), detail: e.to_string() })?;
        self.push(l)
    }
}

impl Drop for WorkerSession {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn session_reader(
    mut reader: FrameReader<OwnedReadHalf>,
    inbox: mpsc::Sender<FromMaster>,
    answering: Answering,
    mut health: watch::Receiver<Health>,
    mut health_live: bool,
    silence: Duration,
) {
    let (out, max) = (answering.out.clone(), answering.max);
    loop {
        let msg = tokio::select! {
            read = tokio::time::timeout(silence, reader.next()) => match read {
                Err(_) => FromMaster::Lost(format!("master silent for {}", format_duration(silence))),
                Ok(Ok(None)) => FromMaster::Lost("master closed the connection".to_string()),
                Ok(Ok(Some(Frame::Heartbeat))) => continue,
                // Answered here, whatever the session is doing (a rejoin waits at the barrier).
                Ok(Ok(Some(Frame::StacksAsk { id }))) => {
                    answering.stacks_ask(id);
                    continue;
                }
                Ok(Ok(Some(frame))) => match generation_in_bounds(&frame) {
                    Ok(()) => FromMaster::Frame(frame),
                    Err(detail) => FromMaster::Lost(format!("the master broke the protocol: {detail}")),
                },
                Ok(Err(e)) => {
                    if let ReadError::Frame(_) = e {
                        tell(&out, max, &format!("bad frame: {e}"));
                    }
                    FromMaster::Lost(e.to_string())
                }
            },
            changed = health.changed(), if health_live => {
                match changed {
                    Ok(()) => {
                        let now = health.borrow_and_update().clone();
                        if let Ok(l) = line(&Frame::Health(now), max) {
                            let _ = out.try_send(l);
                        }
                    }
                    Err(_) => health_live = false,
                }
                continue;
            }
        };
        let end = matches!(msg, FromMaster::Lost(_));
        if inbox.send(msg).await.is_err() || end {
            return;
        }
    }
}

impl Answering {
    /// Answer `stacks_ask` `id` from a task of its own (a snapshot takes up to 2 s).
    fn stacks_ask(&self, id: u64) {
        let answerer = self.stacks.get().cloned();
        let (out, max) = (self.out.clone(), self.max);
        tokio::spawn(async move {
            let summary = match answerer {
                Some(a) => a().await,
                None => StacksSummary {
                    taken_at: crate::status::rfc3339(std::time::SystemTime::now()),
                    why: "asked".into(),
                    pid: None,
                    frames: Vec::new(),
                    top: "not ready: this replica answers for its stacks once its link is up".into(),
                },
            };
            match line(&Frame::Stacks { id, summary }, max) {
                Ok(l) => {
                    let _ = out.try_send(l);
                }
                Err(e) => warn!("cannot send the stacks: {e}"),
            }
        });
    }
}

/// A generation from the master beyond the bound is a protocol error: taken as it is, the next
/// generation (`g + 1`) would wrap around.
fn generation_in_bounds(frame: &Frame) -> Result<(), String> {
    match frame {
        Frame::Admitted { generation, .. } | Frame::Release { generation } | Frame::Restart { generation }
            if *generation > MAX_GENERATION =>
        {
            Err(format!("{} frame with generation {generation}: expected at most {MAX_GENERATION}", frame.kind()))
        }
        _ => Ok(()),
    }
}
