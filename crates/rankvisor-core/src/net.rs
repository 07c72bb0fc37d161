//! The network transport every part shares: accepting with a retry that never spins (the HTTP
//! probes, the agent's API, the rendezvous master), and `client`, the HTTP client of the
//! Kubernetes API and the webhook.

pub mod client;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

use crate::backoff::Backoff;
use crate::logging::{Throttle, Throttled};

/// The first pause after a failed accept; it doubles up to [`ACCEPT_BACKOFF_MAX`].
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause between two failed accepts.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one "cannot accept" warning per this window.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// Accepts on one listener. An accept error (out of file descriptors and the like) backs off,
/// doubling, instead of spinning, and is said once per window; a success resets the pause.
#[derive(Debug)]
pub struct Acceptor {
    what: &'static str,
    backoff: Backoff,
    failed: Throttle,
}

impl Acceptor {
    /// An acceptor whose warnings begin with `what` (e.g. "http accept failed").
    pub fn new(what: &'static str) -> Self {
        Self {
            what,
            backoff: Backoff::new(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX).with_jitter(0.0),
            failed: Throttle::new(WARN_WINDOW),
        }
    }

    /// The next connection; waits (and retries) as long as it takes.
    pub async fn accept(&mut self, listener: &TcpListener) -> (TcpStream, SocketAddr) {
        loop {
            match listener.accept().await {
                Ok(accepted) => {
                    self.backoff.reset();
                    return accepted;
                }
                Err(e) => {
                    let pause = self.backoff.next_delay();
                    if let t @ Throttled::Log { .. } = self.failed.hit(Instant::now()) {
                        warn!("{}: {e}; retrying in {pause:?}{}", self.what, t.note());
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}
