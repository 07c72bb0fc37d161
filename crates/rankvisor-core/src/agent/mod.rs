//! `--agent hyperpod`: rankvisor serves the HyperPod elastic agent's HTTP API (1.1.3) so the
//! HyperPod training operator drives it as it drives `hyperpodrun`. `state` is the agent's state
//! table, `api` the requests and the `/status` body as values, `rules` the seam for the log-rules
//! engine, `server` the HTTP edge. The decisions (when an attempt starts, stops, faults) are the
//! replica machine's (`replica::machine`, agent mode): the child's lifecycle stays in
//! `replica::child::Supervisor`, one per attempt, with the restart policy Never.

pub mod api;
pub mod rules;
pub mod server;
pub mod state;

pub use api::{Assignment, StatusView, StopOrder};
pub use state::{AgentRecord, AgentState};
use tokio::sync::oneshot;

impl StatusView {
    /// The first `/status` view, before the event loop's first step: INIT, entered `now`. The
    /// one place that builds it (the loop publishes every later view from the machine).
    pub fn initial(now: std::time::SystemTime) -> Self {
        Self {
            state: AgentState::Init,
            reason: None,
            message: None,
            transitions: vec![(AgentState::Init, now)],
            assigned_rank: None,
            ip_version: None,
        }
    }
}

/// Which agent's API rankvisor serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentKind {
    /// The SageMaker HyperPod elastic agent (`hyperpodrun`).
    Hyperpod,
}

/// An order from the operator, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum Order {
    /// `/start`: run an attempt with this assignment.
    Start(Assignment),
    /// `/update`: a new assignment for the next attempt.
    Update(Assignment),
    /// `/stop`: stop the attempt, then READY.
    Stop(StopOrder),
    /// `/shutdown`: stop the attempt and exit with its status.
    Shutdown,
}

/// An order on its way to the event loop; `done` fires once the machine has taken it.
#[derive(Debug)]
pub struct Request {
    /// The order.
    pub order: Order,
    /// Answered after the machine's step, so the next `/status` shows its effect.
    pub done: oneshot::Sender<()>,
}

#[cfg(test)]
mod tests;
