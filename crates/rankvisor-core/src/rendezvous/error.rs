//! Everything that can go wrong in the rendezvous, as the launcher reports it.

use std::fmt::Write as _;

/// A rendezvous failure; every message names the peer or setting at fault and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// A setting or identity is invalid.
    #[error("invalid rendezvous setting {field} = {value}: expected {expected}")]
    Config {
        /// The setting.
        field: &'static str,
        /// The value seen.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// The rendezvous port cannot be opened.
    #[error("cannot listen for the rendezvous on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A worker did not complete the rendezvous in time.
    #[error("rendezvous with master {master} did not complete within {waited} ({last})")]
    Timeout {
        /// The master's address.
        master: String,
        /// The time limit, formatted.
        waited: String,
        /// The last thing that happened (connect error, or waiting at the barrier).
        last: String,
    },
    /// The master sent an error frame: a refusal, or its barrier timed out.
    #[error("master {master} answered: {message}")]
    MasterError {
        /// The master's address.
        master: String,
        /// The master's message.
        message: String,
    },
    /// The job-token check with the master failed on this side.
    #[error("job token check with master {master} failed: {detail}")]
    Token {
        /// The master's address.
        master: String,
        /// What was wrong.
        detail: String,
    },
    /// The master sent something this protocol does not allow.
    #[error("master {master} broke the rendezvous protocol: {detail}")]
    Protocol {
        /// The master's address.
        master: String,
        /// What was wrong.
        detail: String,
    },
    /// The control connection to the master is gone.
    #[error("lost the control connection to master {master}: {reason}")]
    MasterLost {
        /// The master's address.
        master: String,
        /// Silence, EOF or an I/O error.
        reason: String,
    },
    /// The master ordered a stop while this worker was rejoining.
    #[error("master {master} ordered a stop: {reason}")]
    Stopped {
        /// The master's address.
        master: String,
        /// The master's reason.
        reason: String,
    },
    /// The master's barrier timed out.
    #[error(
        "rendezvous barrier for generation {generation} timed out after {waited}: {}",
        shortfall(missing, unhealthy, *replica_count)
    )]
    BarrierTimeout {
        /// The generation gathered.
        generation: u64,
        /// The time limit, formatted.
        waited: String,
        /// Worker indexes that never joined (or never acknowledged this generation).
        missing: Vec<u32>,
        /// Replica indexes (0 = the master) whose node is unhealthy.
        unhealthy: Vec<u32>,
        /// Replicas expected.
        replica_count: u32,
    },
    /// A barrier was asked for a generation older than the current one.
    #[error("rendezvous generation {requested} is older than the current generation {current}")]
    StaleGeneration {
        /// The generation asked for.
        requested: u64,
        /// The current generation.
        current: u64,
    },
    /// A state update does not fit in one frame.
    #[error("state update of {len} bytes exceeds the rendezvous frame limit of {max} bytes")]
    TooLarge {
        /// Bytes of the encoded update.
        len: usize,
        /// The frame limit.
        max: usize,
    },
    /// Frames to the master are not leaving (the connection is stuck).
    #[error("control channel to master {master} is backed up: {pending} frames unsent")]
    Backlog {
        /// The master's address.
        master: String,
        /// Frames waiting.
        pending: usize,
    },
    /// No random nonce could be drawn.
    #[error("cannot draw a random nonce for the job token check: {0}")]
    Random(String),
    /// The master's task ended (its handle was dropped or it failed).
    #[error("the rendezvous master task has stopped")]
    MasterStopped,
}

const LISTED: usize = 32;

fn list(indexes: &[u32]) -> String {
    let mut text = String::from("[");
    for (n, i) in indexes.iter().take(LISTED).enumerate() {
        if n > 0 {
            text.push_str(", ");
        }
        let _ = write!(text, "{i}");
    }
    if indexes.len() > LISTED {
        let _ = write!(text, ", ... and {} more", indexes.len() - LISTED);
    }
    text.push(']');
    text
}

fn shortfall(missing: &[u32], unhealthy: &[u32], count: u32) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("replica indexes {} missing", list(missing)));
    }
    if !unhealthy.is_empty() {
        parts.push(format!("replica indexes {} on unhealthy nodes", list(unhealthy)));
    }
    if parts.is_empty() {
        parts.push("every replica is present".to_string());
    }
    format!("{}; expected all {count} replicas present and healthy", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(missing: Vec<u32>, unhealthy: Vec<u32>) -> String {
        RendezvousError::BarrierTimeout { generation: 0, waited: "10m".into(), missing, unhealthy, replica_count: 4 }
            .to_string()
    }

    #[test]
    fn barrier_timeouts_name_the_missing_and_unhealthy() {
        assert_eq!(
            timeout(vec![2, 3], vec![]),
            "rendezvous barrier for generation 0 timed out after 10m: replica indexes [2, 3] missing; expected all 4 replicas present and healthy"
        );
        assert_eq!(
            timeout(vec![], vec![0, 1]),
            "rendezvous barrier for generation 0 timed out after 10m: replica indexes [0, 1] on unhealthy nodes; expected all 4 replicas present and healthy"
        );
        assert!(timeout(vec![1], vec![2]).contains("[1] missing, replica indexes [2] on unhealthy"));
    }

    #[test]
    fn long_lists_are_cut() {
        let e = timeout((1..10_000).collect(), vec![]);
        assert!(e.contains("30, 31, 32, ... and 9967 more]"), "{e}");
        assert!(e.len() < 300);
    }
}
