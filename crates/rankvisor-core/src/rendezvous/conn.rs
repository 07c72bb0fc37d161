//! The master's connections: accepting, the handshake (hello, job-token check), then one task per
//! admitted worker that reads its frames and writes its outbox. A silent or hostile peer only
//! ever holds its own task; every decision is the master task's (`master`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::admission::Refusal;
use super::auth;
use super::frame::{Frame, Hello};
use super::io::{heartbeat_line, line, outbox, FrameReader, Line, OutboxRx, OutboxTx, ReadError};
use super::roster::ConnId;
use crate::duration::format_duration;
use crate::logging::{Throttle, Throttled};
use crate::net::Acceptor;
use crate::rank::Role;
use crate::untrusted::escape;

/// What the connection tasks tell the master task.
pub(super) enum Inbound {
    /// A peer passed the handshake.
    Admit { conn: ConnId, peer: SocketAddr, hello: Hello, proof: Option<String>, out: OutboxTx },
    /// An admitted peer sent a frame.
    Frame { conn: ConnId, frame: Frame },
    /// An admitted peer's connection ended.
    Closed { conn: ConnId, reason: String },
}

/// What every connection task needs.
pub(super) struct ConnContext {
    pub(super) token: Option<Vec<u8>>,
    pub(super) hello_timeout: Duration,
    pub(super) heartbeat: Duration,
    pub(super) silence: Duration,
    pub(super) max_frame: usize,
    /// Shared with the master task: refused peers are logged once per window, then summed up.
    pub(super) refusals: Arc<Mutex<Throttle>>,
    /// Connections between accept and admission (or refusal), and the most there were at once:
    /// what the join burst holds beyond the admitted connections (the master logs the peak).
    pub(super) handshakes: Gauge,
}

/// A count and its peak.
#[derive(Debug, Default)]
pub(super) struct Gauge {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl Gauge {
    fn enter(&self) -> GaugeGuard<'_> {
        let now = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        GaugeGuard(self)
    }

    /// The most counted at once so far.
    pub(super) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

struct GaugeGuard<'a>(&'a Gauge);

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How often at most a refused or departed peer is logged at WARN (the rest go to DEBUG).
pub(super) const REFUSAL_WARN_WINDOW: Duration = Duration::from_secs(10);

/// Log a refusal: the first of each window at WARN (with how many were not), the rest at DEBUG.
pub(super) fn log_refusal(refusals: &Mutex<Throttle>, peer: SocketAddr, what: &str, detail: &str) {
    let decision = refusals.lock().unwrap_or_else(|p| p.into_inner()).hit(Instant::now());
    match decision {
        Throttled::Log { .. } => warn!(%peer, "{what}: {detail}{}", decision.note()),
        Throttled::Suppress => debug!(%peer, "{what}: {detail}"),
    }
}

pub(super) async fn accept_loop(listener: TcpListener, ctx: Arc<ConnContext>, inbound: mpsc::Sender<Inbound>) {
    let mut next: ConnId = 0;
    let mut acceptor = Acceptor::new("rendezvous listener cannot accept");
    // Lines go out whole: no Nagle delay. Linux copies TCP_NODELAY from the listener to the
    // connections it accepts (`listen` sets it), so it is set per connection only when the first
    // accepted one shows the listener did not have it: one system call less per connection.
    let mut inherits_nodelay = None;
    loop {
        let (stream, peer) = acceptor.accept(&listener).await;
        next += 1;
        if !*inherits_nodelay.get_or_insert_with(|| stream.nodelay().unwrap_or(false)) {
            let _ = stream.set_nodelay(true);
        }
        tokio::spawn(serve(stream, peer, next, Arc::clone(&ctx), inbound.clone()));
    }
}

enum HandshakeEnd {
    Refused(Refusal),
    Gone(String),
}

/// One task per connection: the handshake, then reading frames and writing the outbox until
/// the peer goes or the master drops it.
///
/// The task lives as long as the connection, so its size is what every connection costs the
/// master: the handshake, rare paths and waits are boxed (allocated only while they run), and an
/// async block (not an `async fn`, whose arguments take room twice) holds the rest.
#[expect(clippy::manual_async_fn, reason = "an async fn keeps its arguments twice in every connection's task")]
fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    ctx: Arc<ConnContext>,
    inbound: mpsc::Sender<Inbound>,
) -> impl Future<Output = ()> + Send {
    async move {
        let (read, mut write) = stream.split();
        let mut reader = FrameReader::new(read, ctx.max_frame);
        // Boxed: the handshake's state (the hello, the token exchange, a refusal, the admission
        // waiting for room in the master's queue) does not stay in every connection's task afterwards.
        let Some(mut outbox) = Box::pin(admission(&mut reader, &mut write, peer, conn, &ctx, &inbound)).await else {
            return;
        };
        // One timer per connection: it fires at the earlier of the two deadlines, which tell it
        // which one it was.
        let mut deadlines = Deadlines::new(tokio::time::Instant::now(), &ctx);
        let timer = tokio::time::sleep_until(deadlines.next());
        tokio::pin!(timer);
        let reason = loop {
            // Unbiased: a busy outbox must not starve reading, nor a chatty peer starve writing.
            // No arm awaits: what needs a wait comes out as a small `Step`, so the arms' values
            // (a decoded frame, a read error) never take room in the task while it waits.
            let step = tokio::select! {
                line = outbox.recv() => match line {
                    Some(line) => Step::Write(line),
                    None => return,
                },
                () = &mut timer => match deadlines.fired(tokio::time::Instant::now()) {
                    Fired::Silent => break format!("silent for {}", format_duration(ctx.silence)),
                    Fired::Early => {
                        timer.as_mut().reset(deadlines.next());
                        continue;
                    }
                    Fired::Heartbeat => Step::Write(heartbeat_line()),
                },
                read = reader.next() => match read {
                    Ok(Some(frame)) => {
                        // The timer is not re-armed here: it fires at the old limit, sees the new one
                        // and waits again (one timer update per silence window, not per frame).
                        deadlines.silent_at = tokio::time::Instant::now() + ctx.silence;
                        match tell(&inbound, Inbound::Frame { conn, frame }) {
                            Told::Sent(true) => continue,
                            Told::Sent(false) => return,
                            Told::Wait(send) => Step::Wait(send),
                        }
                    }
                    Ok(None) => break "connection closed".to_string(),
                    Err(ReadError::Frame(e)) => Step::Refuse(e.to_string()),
                    Err(e) => break e.to_string(),
                },
            };
            match step {
                Step::Write(line) => {
                    if let Err(reason) = write_line(&mut write, &line, ctx.silence).await {
                        break reason;
                    }
                    deadlines.idle_at = tokio::time::Instant::now() + ctx.heartbeat;
                    timer.as_mut().reset(deadlines.next());
                }
                Step::Wait(send) => {
                    if !send.await {
                        return;
                    }
                }
                Step::Refuse(reason) => {
                    Box::pin(write_error(&mut write, reason.clone(), &ctx)).await;
                    break reason;
                }
            }
        };
        if let Told::Wait(send) = tell(&inbound, Inbound::Closed { conn, reason }) {
            send.await;
        }
    }
}

/// An admitted connection's two deadlines, plain instants its one timer fires at the earlier of:
/// nothing read by `silent_at` (the silence limit) drops the peer; nothing written by `idle_at`
/// (a heartbeat) sends one.
struct Deadlines {
    silent_at: tokio::time::Instant,
    idle_at: tokio::time::Instant,
}

/// What the timer firing means.
#[derive(Debug, PartialEq, Eq)]
enum Fired {
    /// The peer said nothing within the silence limit.
    Silent,
    /// Woken for a silence limit that was pushed back since (a frame came): wait again.
    Early,
    /// Nothing written for a heartbeat: send one.
    Heartbeat,
}

impl Deadlines {
    fn new(now: tokio::time::Instant, ctx: &ConnContext) -> Self {
        Self { silent_at: now + ctx.silence, idle_at: now + ctx.heartbeat }
    }

    /// When the timer fires next.
    fn next(&self) -> tokio::time::Instant {
        self.silent_at.min(self.idle_at)
    }

    fn fired(&self, now: tokio::time::Instant) -> Fired {
        if now >= self.silent_at {
            Fired::Silent
        } else if now < self.idle_at {
            Fired::Early
        } else {
            Fired::Heartbeat
        }
    }
}

/// The handshake, then the admission handed to the master task; the admitted peer's outbox, or
/// None when it was refused, left, or the master is gone.
async fn admission(
    reader: &mut FrameReader<ReadHalf<'_>>,
    write: &mut WriteHalf<'_>,
    peer: SocketAddr,
    conn: ConnId,
    ctx: &ConnContext,
    inbound: &mpsc::Sender<Inbound>,
) -> Option<OutboxRx> {
    let _counted = ctx.handshakes.enter();
    let handshake = tokio::time::timeout(ctx.hello_timeout, handshake(reader, write, ctx))
        .await
        .unwrap_or_else(|_| Err(HandshakeEnd::Refused(Refusal::Silent { waited: format_duration(ctx.hello_timeout) })));
    let (hello, proof) = match handshake {
        Ok(admitted) => admitted,
        Err(HandshakeEnd::Refused(refusal)) => {
            log_refusal(&ctx.refusals, peer, "refused a rendezvous peer", &refusal.to_string());
            // Nothing about the job: this peer is not authenticated.
            write_error(write, refusal.to_peer(false), ctx).await;
            return None;
        }
        Err(HandshakeEnd::Gone(reason)) => {
            log_refusal(&ctx.refusals, peer, "rendezvous peer left before admission", &reason);
            return None;
        }
    };
    let (out, outbox) = outbox();
    inbound.send(Inbound::Admit { conn, peer, hello, proof, out }).await.ok()?;
    Some(outbox)
}

/// What an admitted connection does next, after its wait for the peer, the outbox or the timer.
enum Step<'a> {
    /// Write a line to the peer.
    Write(Line),
    /// Wait for room in the master task's queue.
    Wait(Pin<Box<dyn Future<Output = bool> + Send + 'a>>),
    /// The peer sent a bad frame: tell it why, then drop it.
    Refuse(String),
}

/// Whether a message reached the master task's queue, or the boxed wait for room in it.
enum Told<'a> {
    Sent(bool),
    Wait(Pin<Box<dyn Future<Output = bool> + Send + 'a>>),
}

/// Hand a message to the master task: at once when its queue has room; otherwise the message
/// waits in a boxed send, so the connection's task does not carry room for one all its life.
fn tell(inbound: &mpsc::Sender<Inbound>, msg: Inbound) -> Told<'_> {
    match inbound.try_send(msg) {
        Ok(()) => Told::Sent(true),
        Err(mpsc::error::TrySendError::Full(msg)) => {
            Told::Wait(Box::pin(async move { inbound.send(msg).await.is_ok() }))
        }
        Err(mpsc::error::TrySendError::Closed(_)) => Told::Sent(false),
    }
}

/// Write one line: at once when the socket takes it whole (no timer), otherwise the rest within
/// `limit` (a peer that does not read is dropped), in a boxed write.
async fn write_line(write: &mut WriteHalf<'_>, line: &[u8], limit: Duration) -> Result<(), String> {
    let written = match write.try_write(line) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(format!("cannot write to it: {e}")),
    };
    if written == line.len() {
        return Ok(());
    }
    match Box::pin(tokio::time::timeout(limit, write.write_all(&line[written..]))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot write to it: {e}")),
        Err(_) => Err("not reading: a write stalled".to_string()),
    }
}

/// Best effort: an error frame for a peer about to be dropped, bounded by one heartbeat.
async fn write_error(write: &mut WriteHalf<'_>, message: String, ctx: &ConnContext) {
    if let Ok(l) = line(&Frame::Error { message }, ctx.max_frame) {
        let _ = tokio::time::timeout(ctx.heartbeat, write.write_all(&l)).await;
    }
}

async fn next_frame(reader: &mut FrameReader<ReadHalf<'_>>) -> Result<Frame, HandshakeEnd> {
    loop {
        match reader.next().await {
            Ok(Some(Frame::Heartbeat)) => continue,
            Ok(Some(Frame::Error { message })) => {
                return Err(HandshakeEnd::Gone(format!("it gave up: {}", escape(&message))))
            }
            Ok(Some(frame)) => return Ok(frame),
            Ok(None) => return Err(HandshakeEnd::Gone("connection closed".to_string())),
            Err(ReadError::Frame(e)) => return Err(HandshakeEnd::Refused(Refusal::Frame(e))),
            Err(e) => return Err(HandshakeEnd::Gone(e.to_string())),
        }
    }
}

async fn handshake(
    reader: &mut FrameReader<ReadHalf<'_>>,
    write: &mut WriteHalf<'_>,
    ctx: &ConnContext,
) -> Result<(Hello, Option<String>), HandshakeEnd> {
    let hello = match next_frame(reader).await? {
        Frame::Hello(hello) => hello,
        other => return Err(HandshakeEnd::Refused(Refusal::Unexpected { expected: "hello", seen: other.kind() })),
    };
    let Some(token) = &ctx.token else {
        return Ok((hello, None));
    };
    let token_failed = |e| HandshakeEnd::Refused(Refusal::Token(e));
    let nonce = auth::new_nonce().map_err(token_failed)?;
    let challenge = line(&Frame::Challenge { nonce: nonce.clone() }, ctx.max_frame)
        .map_err(|e| HandshakeEnd::Gone(e.to_string()))?;
    write.write_all(&challenge).await.map_err(|e| HandshakeEnd::Gone(e.to_string()))?;
    let proof = match next_frame(reader).await? {
        Frame::Auth { proof } => proof,
        other => return Err(HandshakeEnd::Refused(Refusal::Unexpected { expected: "auth", seen: other.kind() })),
    };
    auth::verify(token, Role::Worker, &nonce, &hello.nonce, &proof).map_err(token_failed)?;
    let mine = auth::prove(token, Role::Master, &nonce, &hello.nonce).map_err(token_failed)?;
    Ok((hello, Some(mine)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connection task is what every one of thousands of connections costs the master for
    /// its whole life: it was 1,320 bytes of future (a 1,152-byte task) before the handshake and
    /// the rare paths were boxed and its two timers became one.
    #[tokio::test]
    async fn a_connection_task_stays_small() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let ctx = Arc::new(test_ctx());
        let (inbound, _rx) = mpsc::channel(1);
        let task = serve(stream, peer, 1, ctx, inbound);
        let size = std::mem::size_of_val(&task);
        // 408 bytes of future make a 512-byte task (tokio aligns a task to 128 bytes).
        assert!(size <= 408, "the connection task's future grew to {size} bytes");
    }

    /// A connection's context as the tests use it: no token, one-second hello and heartbeat.
    fn test_ctx() -> ConnContext {
        ConnContext {
            token: None,
            hello_timeout: Duration::from_secs(1),
            heartbeat: Duration::from_secs(1),
            silence: Duration::from_secs(3),
            max_frame: 65536,
            refusals: Arc::new(Mutex::new(Throttle::new(REFUSAL_WARN_WINDOW))),
            handshakes: Gauge::default(),
        }
    }

    #[test]
    fn the_timer_tells_silence_from_a_heartbeat_and_a_pushed_back_limit() {
        let ctx = test_ctx();
        let t0 = tokio::time::Instant::now();
        let mut d = Deadlines::new(t0, &ctx);
        assert_eq!(d.next(), t0 + ctx.heartbeat);
        assert_eq!(d.fired(t0 + ctx.heartbeat), Fired::Heartbeat);
        // Written just now: the next wake before the heartbeat is early; past the silence, silent.
        d.idle_at = t0 + Duration::from_secs(2);
        assert_eq!(d.fired(t0 + ctx.heartbeat), Fired::Early);
        assert_eq!(d.fired(t0 + ctx.silence), Fired::Silent);
        // A frame pushes the silence limit back; the timer wakes at the old one and waits again.
        d.silent_at = t0 + Duration::from_secs(5);
        d.idle_at = t0 + Duration::from_secs(6);
        assert_eq!(d.fired(t0 + ctx.silence), Fired::Early);
        assert_eq!(d.next(), t0 + Duration::from_secs(5));
    }

    #[test]
    fn the_gauge_keeps_its_peak() {
        let g = Gauge::default();
        {
            let _a = g.enter();
            let _b = g.enter();
        }
        let _c = g.enter();
        assert_eq!(g.peak(), 2);
        assert_eq!(g.now.load(Ordering::Relaxed), 1);
    }
}
