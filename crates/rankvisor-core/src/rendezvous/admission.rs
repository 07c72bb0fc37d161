//! Whether the master lets a worker's hello in, and why not.

use super::auth::AuthError;
use super::frame::{FrameError, Hello};

/// What the master expects of every hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The job's identity.
    pub job: String,
    /// How many replicas the job has, master included.
    pub replica_count: u32,
}

/// Why the master refused a peer; the message is sent to the peer and logged by the master.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The peer's frame could not be read (including an unknown protocol version).
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The peer belongs to another job.
    #[error("job {seen:?} does not match the master's job {expected:?}")]
    Job {
        /// The peer's job.
        seen: String,
        /// The master's job.
        expected: String,
    },
    /// The peer counts the replicas differently.
    #[error("replica_count {seen} does not match the master's replica count {expected}")]
    ReplicaCount {
        /// The peer's count.
        seen: u32,
        /// The master's count.
        expected: u32,
    },
    /// The peer claims an index no worker can have.
    #[error("replica_index {index} is out of range: expected a worker index in {}", worker_range(*count))]
    IndexOutOfRange {
        /// The peer's index.
        index: u32,
        /// The job's replica count.
        count: u32,
    },
    /// Another connected peer already holds the index.
    #[error("replica_index {index} is already held by a connected peer on node {holder:?}")]
    Duplicate {
        /// The index claimed twice.
        index: u32,
        /// The node of the peer holding it.
        holder: String,
    },
    /// The peer failed the job-token challenge.
    #[error("job token check failed: {0}")]
    Token(AuthError),
    /// The peer said nothing in time.
    #[error("no hello within {waited}: a peer must introduce itself first")]
    Silent {
        /// The hello time limit, formatted.
        waited: String,
    },
    /// The peer sent a valid frame out of turn.
    #[error("expected a frame of type {expected}, got {seen}")]
    Unexpected {
        /// The frame type expected.
        expected: &'static str,
        /// The frame type seen.
        seen: &'static str,
    },
}

impl Refusal {
    /// The refusal as told to the peer. A peer that did not prove it knows the job token (or any
    /// peer, when the job has none) learns nothing about the job: not its name, its replica count
    /// or who holds an index. The master's log keeps the whole message.
    pub fn to_peer(&self, authenticated: bool) -> String {
        if authenticated {
            return self.to_string();
        }
        match self {
            Refusal::Job { seen, .. } => format!("job {seen:?} does not match the master's job"),
            Refusal::ReplicaCount { seen, .. } => format!("replica_count {seen} does not match the master's"),
            Refusal::IndexOutOfRange { index, .. } => format!("replica_index {index} is out of range"),
            Refusal::Duplicate { index, .. } => format!("replica_index {index} is already held by a connected peer"),
            other => other.to_string(),
        }
    }
}

fn worker_range(count: u32) -> String {
    match count {
        0 | 1 => "none (the job has a single replica, the master, index 0)".to_string(),
        2 => "1..=1 (index 0 is the master)".to_string(),
        n => format!("1..={} (index 0 is the master)", n - 1),
    }
}

/// Decide on a hello; `holder(i)` names the node of the connected peer holding index `i`, if any.
pub fn admit(hello: &Hello, expected: &Expected, holder: impl Fn(u32) -> Option<String>) -> Result<(), Refusal> {
    if hello.job != expected.job {
        return Err(Refusal::Job { seen: hello.job.clone(), expected: expected.job.clone() });
    }
    if hello.replica_count != expected.replica_count {
        return Err(Refusal::ReplicaCount { seen: hello.replica_count, expected: expected.replica_count });
    }
    if hello.replica_index == 0 || hello.replica_index >= expected.replica_count {
        return Err(Refusal::IndexOutOfRange { index: hello.replica_index, count: expected.replica_count });
    }
    if let Some(node) = holder(hello.replica_index) {
        return Err(Refusal::Duplicate { index: hello.replica_index, holder: node });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected() -> Expected {
        Expected { job: "pytest".into(), replica_count: 4 }
    }

    fn hello(index: u32) -> Hello {
        Hello {
            job: "pytest".into(),
            replica_index: index,
            replica_count: 4,
            node: "node-b".into(),
            healthy: true,
            health: crate::rendezvous::NodeHealth::Off,
            nonce: String::new(),
        }
    }

    fn nobody(_: u32) -> Option<String> {
        None
    }

    #[test]
    fn admits_every_worker_index() {
        for i in 1..4 {
            assert_eq!(admit(&hello(i), &expected(), nobody), Ok(()));
        }
    }

    #[test]
    fn admits_an_unhealthy_worker_the_barrier_waits_for_it() {
        let h = Hello { healthy: false, ..hello(1) };
        assert_eq!(admit(&h, &expected(), nobody), Ok(()));
    }

    #[test]
    fn refuses_another_job() {
        let h = Hello { job: "other".into(), ..hello(1) };
        let e = admit(&h, &expected(), nobody).unwrap_err();
        assert_eq!(e.to_string(), "job \"other\" does not match the master's job \"pytest\"");
    }

    #[test]
    fn refuses_another_replica_count() {
        let h = Hello { replica_count: 5, ..hello(1) };
        let e = admit(&h, &expected(), nobody).unwrap_err();
        assert_eq!(e.to_string(), "replica_count 5 does not match the master's replica count 4");
    }

    #[test]
    fn refuses_indexes_out_of_range() {
        for i in [0, 4, 5, u32::MAX] {
            let e = admit(&hello(i), &expected(), nobody).unwrap_err();
            assert_eq!(e, Refusal::IndexOutOfRange { index: i, count: 4 });
            assert_eq!(
                e.to_string(),
                format!("replica_index {i} is out of range: expected a worker index in 1..=3 (index 0 is the master)")
            );
        }
        let single = Expected { job: "pytest".into(), replica_count: 1 };
        let h = Hello { replica_count: 1, ..hello(1) };
        let e = admit(&h, &single, nobody).unwrap_err().to_string();
        assert!(e.contains("none (the job has a single replica"), "{e}");
    }

    #[test]
    fn refuses_a_duplicate_and_names_the_holder() {
        let holder = |i: u32| (i == 2).then(|| "node-a".to_string());
        assert_eq!(admit(&hello(1), &expected(), holder), Ok(()));
        let e = admit(&hello(2), &expected(), holder).unwrap_err();
        assert_eq!(e.to_string(), "replica_index 2 is already held by a connected peer on node \"node-a\"");
    }

    #[test]
    fn an_unauthenticated_peer_learns_nothing_about_the_job() {
        let holder = |_: u32| Some("node-a".to_string());
        let refusals = [
            admit(&Hello { job: "other".into(), ..hello(1) }, &expected(), nobody),
            admit(&Hello { replica_count: 9, ..hello(1) }, &expected(), nobody),
            admit(&hello(7), &expected(), nobody),
            admit(&hello(2), &expected(), holder),
        ];
        for r in refusals {
            let r = r.unwrap_err();
            let told = r.to_peer(false);
            for secret in ["pytest", "4", "node-a", "1..=3"] {
                assert!(!told.contains(secret), "{told:?} reveals {secret:?}");
            }
            assert_eq!(r.to_peer(true), r.to_string());
        }
        assert_eq!(
            admit(&hello(7), &expected(), nobody).unwrap_err().to_peer(false),
            "replica_index 7 is out of range"
        );
    }

    #[test]
    fn job_is_checked_before_count_and_index() {
        let h = Hello { job: "other".into(), replica_count: 9, replica_index: 99, ..hello(1) };
        assert!(matches!(admit(&h, &expected(), nobody), Err(Refusal::Job { .. })));
    }

    #[test]
    fn every_other_refusal_reads_well() {
        let cases = [
            (
                Refusal::Frame(FrameError::Version { seen: "2".into(), expected: 1 }),
                "unsupported protocol version 2: this rankvisor speaks version 1",
            ),
            (
                Refusal::Token(AuthError::Mismatch { role: "worker" }),
                "job token check failed: the worker's proof of the job token does not match",
            ),
            (Refusal::Silent { waited: "10s".into() }, "no hello within 10s"),
            (Refusal::Unexpected { expected: "hello", seen: "state" }, "expected a frame of type hello, got state"),
        ];
        for (refusal, want) in cases {
            assert!(refusal.to_string().starts_with(want), "{refusal}");
        }
    }
}
