//! The master's connections: accepting, the handshake (hello, job-token check), then one task per
//! admitted worker that reads its frames and writes its outbox. A silent or hostile peer only
//! ever holds its own task; every decision is the master task's (`master`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::admission::Refusal;
use super::auth::{self, Role};
use super::frame::{Frame, Hello};
use super::io::{heartbeat_line, line, outbox, FrameReader, OutboxTx, ReadError};
use super::roster::ConnId;
use crate::duration::format_duration;
use crate::logging::{Throttle, Throttled};
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

const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

pub(super) async fn accept_loop(listener: TcpListener, ctx: Arc<ConnContext>, inbound: mpsc::Sender<Inbound>) {
    let mut next: ConnId = 0;
    let mut failed = Throttle::new(REFUSAL_WARN_WINDOW);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                next += 1;
                backoff = ACCEPT_BACKOFF_MIN;
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, peer, next, Arc::clone(&ctx), inbound.clone()));
            }
            Err(e) => {
                // Out of file descriptors and the like: back off (doubling) instead of spinning,
                // and say so once per window.
                if let t @ Throttled::Log { .. } = failed.hit(Instant::now()) {
                    warn!("rendezvous listener cannot accept: {e}; retrying in {backoff:?}{}", t.note());
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

enum HandshakeEnd {
    Refused(Refusal),
    Gone(String),
}

/// One task per connection: the handshake, then reading frames and writing the outbox until
/// the peer goes or the master drops it.
async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    conn: ConnId,
    ctx: Arc<ConnContext>,
    inbound: mpsc::Sender<Inbound>,
) {
    let (read, mut write) = stream.split();
    let mut reader = FrameReader::new(read, ctx.max_frame);
    // Boxed so the handshake's state does not stay in every connection's task afterwards.
    let handshake = Box::pin(tokio::time::timeout(ctx.hello_timeout, handshake(&mut reader, &mut write, &ctx)))
        .await
        .unwrap_or_else(|_| Err(HandshakeEnd::Refused(Refusal::Silent { waited: format_duration(ctx.hello_timeout) })));
    let (hello, proof) = match handshake {
        Ok(admitted) => admitted,
        Err(HandshakeEnd::Refused(refusal)) => {
            log_refusal(&ctx.refusals, peer, "refused a rendezvous peer", &refusal.to_string());
            // Nothing about the job: this peer is not authenticated.
            let error = Frame::Error { message: refusal.to_peer(false) };
            write_frame(&mut write, &error, &ctx).await;
            return;
        }
        Err(HandshakeEnd::Gone(reason)) => {
            log_refusal(&ctx.refusals, peer, "rendezvous peer left before admission", &reason);
            return;
        }
    };
    let (out, mut outbox) = outbox();
    let admit = Inbound::Admit { conn, peer, hello, proof, out };
    if inbound.send(admit).await.is_err() {
        return;
    }
    let silence = tokio::time::sleep(ctx.silence);
    let idle = tokio::time::sleep(ctx.heartbeat);
    tokio::pin!(silence, idle);
    let reason = loop {
        // Unbiased: a busy outbox must not starve reading, nor a chatty peer starve writing.
        let line = tokio::select! {
            line = outbox.recv() => match line {
                Some(line) => line,
                None => return,
            },
            () = &mut idle => heartbeat_line(),
            () = &mut silence => break format!("silent for {}", format_duration(ctx.silence)),
            read = reader.next() => match read {
                Ok(Some(frame)) => {
                    silence.as_mut().reset(tokio::time::Instant::now() + ctx.silence);
                    if inbound.send(Inbound::Frame { conn, frame }).await.is_err() {
                        return;
                    }
                    continue;
                }
                Ok(None) => break "connection closed".to_string(),
                Err(ReadError::Frame(e)) => {
                    let reason = e.to_string();
                    write_frame(&mut write, &Frame::Error { message: reason.clone() }, &ctx).await;
                    break reason;
                }
                Err(e) => break e.to_string(),
            },
        };
        match tokio::time::timeout(ctx.silence, write.write_all(&line)).await {
            Ok(Ok(())) => idle.as_mut().reset(tokio::time::Instant::now() + ctx.heartbeat),
            Ok(Err(e)) => break format!("cannot write to it: {e}"),
            Err(_) => break "not reading: a write stalled".to_string(),
        }
    };
    let _ = inbound.send(Inbound::Closed { conn, reason }).await;
}

/// Best effort: a frame for a peer about to be dropped, bounded by one heartbeat.
async fn write_frame(write: &mut WriteHalf<'_>, frame: &Frame, ctx: &ConnContext) {
    if let Ok(l) = line(frame, ctx.max_frame) {
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
