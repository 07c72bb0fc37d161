//! Who a replica is, how the rendezvous is tuned, and what a completed barrier returns.

use std::fmt;
use std::time::Duration;

use tokio::sync::watch;

use super::error::RendezvousError;
use super::frame::{Health, DEFAULT_MAX_FRAME};

/// The largest replica count accepted: far above any real job, low enough to bound the roster.
pub const MAX_REPLICAS: u32 = 1 << 20;

/// Who this replica is at the barrier: the part of its [`crate::status::Identity`] the
/// rendezvous needs, every field required and checked (the report's identity may lack any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The job's identity (the PyTorchJob's name); every replica must agree.
    pub job: String,
    /// This replica's index: 0 for the master, 1..replica_count for workers.
    pub replica_index: u32,
    /// How many replicas meet at the barrier (PET_NNODES, else WORLD_SIZE).
    pub replica_count: u32,
    /// The Kubernetes node this replica runs on.
    pub node: String,
}

impl Member {
    fn check_common(&self) -> Result<(), RendezvousError> {
        if self.job.is_empty() {
            return Err(config("job", "\"\"", "a non-empty job name"));
        }
        if self.replica_count == 0 || self.replica_count > MAX_REPLICAS {
            return Err(config("replica_count", &self.replica_count.to_string(), &format!("1..={MAX_REPLICAS}")));
        }
        Ok(())
    }

    pub(crate) fn check_master(&self) -> Result<(), RendezvousError> {
        self.check_common()?;
        if self.replica_index != 0 {
            return Err(config("replica_index", &self.replica_index.to_string(), "0 for the master"));
        }
        Ok(())
    }

    pub(crate) fn check_worker(&self) -> Result<(), RendezvousError> {
        self.check_common()?;
        if self.replica_index == 0 || self.replica_index >= self.replica_count {
            return Err(config(
                "replica_index",
                &self.replica_index.to_string(),
                &format!("a worker index in 1..{} (replica count {})", self.replica_count, self.replica_count),
            ));
        }
        Ok(())
    }
}

/// Timeouts, heartbeat, job token and frame bound of the rendezvous.
#[derive(Clone, PartialEq, Eq)]
pub struct RendezvousConfig {
    /// How long a new connection may take to introduce itself (and pass the token check).
    pub hello_timeout: Duration,
    /// How long a barrier may wait (`--rendezvous-timeout`); for a worker, this also bounds
    /// connecting, since pods start in any order.
    pub barrier_timeout: Duration,
    /// Heartbeat interval on the control channel; a peer silent for 3 intervals is lost.
    /// Every replica of a job should use the same interval.
    pub heartbeat: Duration,
    /// The job token (`RANKVISOR_JOB_TOKEN`); when set, both sides prove they know it.
    pub token: Option<Vec<u8>>,
    /// The largest frame accepted or sent, in bytes.
    pub max_frame: usize,
}

impl Default for RendezvousConfig {
    fn default() -> Self {
        RendezvousConfig {
            hello_timeout: Duration::from_secs(10),
            barrier_timeout: Duration::from_secs(600),
            heartbeat: Duration::from_secs(5),
            token: None,
            max_frame: DEFAULT_MAX_FRAME,
        }
    }
}

impl fmt::Debug for RendezvousConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RendezvousConfig")
            .field("hello_timeout", &self.hello_timeout)
            .field("barrier_timeout", &self.barrier_timeout)
            .field("heartbeat", &self.heartbeat)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("max_frame", &self.max_frame)
            .finish()
    }
}

/// The smallest frame bound that still holds a hello with room for a node-health verdict.
const MIN_FRAME: usize = 1024;

impl RendezvousConfig {
    pub(crate) fn check(&self) -> Result<(), RendezvousError> {
        for (field, value) in [
            ("hello_timeout", self.hello_timeout),
            ("barrier_timeout", self.barrier_timeout),
            ("heartbeat", self.heartbeat),
        ] {
            if value.is_zero() {
                return Err(config(field, "0s", "a duration above zero"));
            }
        }
        if self.token.as_ref().is_some_and(Vec::is_empty) {
            return Err(config("token", "\"\"", "a non-empty RANKVISOR_JOB_TOKEN, or none at all"));
        }
        if self.max_frame < MIN_FRAME {
            return Err(config("max_frame", &self.max_frame.to_string(), &format!("at least {MIN_FRAME} bytes")));
        }
        Ok(())
    }

    /// How long a peer may stay silent before it is lost.
    pub(crate) fn silence(&self) -> Duration {
        self.heartbeat.saturating_mul(3)
    }
}

fn config(field: &'static str, value: &str, expected: &str) -> RendezvousError {
    RendezvousError::Config { field, value: value.to_string(), expected: expected.to_string() }
}

impl Health {
    /// A health source that never changes, for replicas without a node-health watcher.
    pub fn fixed(self) -> watch::Receiver<Health> {
        watch::channel(self).1
    }
}

/// A completed barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The released generation.
    pub generation: u64,
    /// How long this replica waited (the `rendezvous seconds` metric).
    pub waited: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(index: u32, count: u32) -> Member {
        Member { job: "pytest".into(), replica_index: index, replica_count: count, node: "n".into() }
    }

    #[test]
    fn masters_and_workers_are_checked() {
        assert!(id(0, 4).check_master().is_ok());
        assert!(id(0, 1).check_master().is_ok());
        assert!(id(3, 4).check_worker().is_ok());
        let e = id(1, 4).check_master().unwrap_err().to_string();
        assert_eq!(e, "invalid rendezvous setting replica_index = 1: expected 0 for the master");
        let e = id(4, 4).check_worker().unwrap_err().to_string();
        assert!(e.contains("replica_index = 4: expected a worker index in 1..4"), "{e}");
        assert!(id(0, 4).check_worker().is_err());
        assert!(id(0, 0).check_master().unwrap_err().to_string().contains("replica_count = 0"));
        assert!(id(0, MAX_REPLICAS + 1).check_master().is_err());
        let mut nameless = id(0, 2);
        nameless.job.clear();
        assert!(nameless.check_master().unwrap_err().to_string().contains("non-empty job name"));
    }

    #[test]
    fn config_is_checked() {
        assert!(RendezvousConfig::default().check().is_ok());
        let bad = RendezvousConfig { heartbeat: Duration::ZERO, ..Default::default() };
        assert_eq!(
            bad.check().unwrap_err().to_string(),
            "invalid rendezvous setting heartbeat = 0s: expected a duration above zero"
        );
        let bad = RendezvousConfig { token: Some(vec![]), ..Default::default() };
        assert!(bad.check().unwrap_err().to_string().contains("token"));
        let bad = RendezvousConfig { max_frame: 10, ..Default::default() };
        assert!(bad.check().unwrap_err().to_string().contains("max_frame = 10"));
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let cfg = RendezvousConfig { token: Some(b"hunter2".to_vec()), ..Default::default() };
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("104"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn silence_is_three_heartbeats() {
        assert_eq!(RendezvousConfig::default().silence(), Duration::from_secs(15));
    }
}
