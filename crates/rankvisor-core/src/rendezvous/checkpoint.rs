//! `--checkpoint-signal`: the master's fan-out. When any replica is being stopped (a preempted
//! pod, an unhealthy node, a job-scope restart, the master's own stop), every replica's training
//! process is told to save at once, so that all ranks save the same step before any is stopped.
//!
//! A replica that is being stopped says so in its `state` frame (`Stopping`; its own stop is held
//! for `--checkpoint-grace` after its child got the signal, `replica::child`); the master's link
//! asks [`Fanout::on_state`] and, when it answers, sends a `checkpoint` frame to every worker and
//! the checkpoint to its own child. Pure: the caller passes the time.

use crate::status::ReplicaState;
use std::time::{Duration, Instant};

/// The master's fan-out: one job-wide checkpoint per window, however many replicas stop in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fanout {
    /// `--checkpoint-grace`: the replicas stopping within it save the checkpoint already asked for.
    window: Duration,
    /// When the last job-wide checkpoint was asked for.
    last: Option<Instant>,
}

impl Fanout {
    /// A fan-out that has asked for nothing yet.
    pub fn new(window: Duration) -> Self {
        Self { window, last: None }
    }

    /// Replica `index` reported `state` at `now`: the reason for a job-wide checkpoint when one
    /// is due (the first replica to stop; again once the window since the last has passed).
    pub fn on_state(&mut self, index: u32, state: ReplicaState, now: Instant) -> Option<String> {
        if state != ReplicaState::Stopping {
            return None;
        }
        if self.last.is_some_and(|last| now.saturating_duration_since(last) < self.window) {
            return None;
        }
        self.last = Some(now);
        let who = if index == 0 { "the master (replica 0)".to_string() } else { format!("replica {index}") };
        Some(format!("{who} is being stopped"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplicaState::*;

    #[test]
    fn the_first_stopping_replica_makes_the_job_save_once_per_window() {
        let t0 = Instant::now();
        let mut f = Fanout::new(Duration::from_secs(15));
        assert_eq!(f.on_state(2, Running, t0), None, "a running replica asks for nothing");
        assert_eq!(f.on_state(2, Restarting, t0), None);
        assert_eq!(f.on_state(2, Stopping, t0).as_deref(), Some("replica 2 is being stopped"));
        // Every replica stops in a job-scope restart: the checkpoint asked for covers them.
        for i in 0..1024 {
            assert_eq!(f.on_state(i, Stopping, t0 + Duration::from_secs(1)), None, "replica {i}");
        }
        assert_eq!(f.on_state(3, Stopping, t0 + Duration::from_secs(14)), None);
        let later = f.on_state(0, Stopping, t0 + Duration::from_secs(15));
        assert_eq!(later.as_deref(), Some("the master (replica 0) is being stopped"), "a new window, a new save");
    }

    #[test]
    fn final_states_are_not_stops() {
        let mut f = Fanout::new(Duration::from_secs(1));
        for s in [Pending, Rendezvous, Running, Restarting, Succeeded, Failed, NodeUnhealthy] {
            assert_eq!(f.on_state(1, s, Instant::now()), None, "{s:?}");
        }
    }
}
