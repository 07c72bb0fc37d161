//! The HyperPod elastic agent's states and its process-level-restart (PLR) transition table, as
//! `hyperpod_elastic_agent/server/util.py` (1.1.3) has them: a transition the table does not hold
//! is ignored (the agent logs it and keeps its state). Pure: the caller passes `now`.

use tokio::time::Instant;

pub use crate::status::AgentState;

impl AgentState {
    /// Every state, in the agent's declaration order.
    pub const ALL: [AgentState; 7] = [
        AgentState::Init,
        AgentState::Ready,
        AgentState::Running,
        AgentState::Completed,
        AgentState::Faulted,
        AgentState::Stopping,
        AgentState::Shutdown,
    ];

    /// The agent's name for the state (`AgentState.value`), the key in `transitions`.
    pub fn name(self) -> &'static str {
        match self {
            AgentState::Init => "INIT",
            AgentState::Ready => "READY",
            AgentState::Running => "RUNNING",
            AgentState::Completed => "COMPLETED",
            AgentState::Faulted => "FAULTED",
            AgentState::Stopping => "STOPPING",
            AgentState::Shutdown => "SHUTDOWN",
        }
    }

    /// `PLR_VALID_TRANSITIONS`: may the agent go from `self` to `to`?
    #[must_use]
    pub fn may_become(self, to: AgentState) -> bool {
        use AgentState::*;
        matches!(
            (self, to),
            (Init, Ready | Shutdown)
                | (Ready, Running | Shutdown)
                | (Running, Completed | Faulted | Stopping | Shutdown)
                | (Faulted, Stopping | Shutdown)
                | (Stopping, Ready)
                | (Completed, Shutdown | Stopping)
        )
    }
}

/// The agent's record: state, why, and when each state was last entered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRecord {
    state: AgentState,
    reason: Option<String>,
    message: Option<String>,
    /// In first-entry order (a Python dict keeps a key's place when its value is replaced).
    transitions: Vec<(AgentState, Instant)>,
}

impl AgentRecord {
    /// A record in INIT, entered at `now`.
    pub fn new(now: Instant) -> Self {
        Self { state: AgentState::Init, reason: None, message: None, transitions: vec![(AgentState::Init, now)] }
    }

    /// The current state.
    pub fn state(&self) -> AgentState {
        self.state
    }

    /// The current state's reason (e.g. `WorkerCrash`).
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The current state's message.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// When each state was last entered, in first-entry order.
    pub fn transitions(&self) -> &[(AgentState, Instant)] {
        &self.transitions
    }

    /// `set_agent_state`: go to `to` with `reason` and `message` (both replaced, as the agent
    /// does) when the table allows it; false (nothing changes) when it does not.
    #[must_use = "a transition the table refuses changes nothing"]
    pub fn set(&mut self, to: AgentState, reason: Option<String>, message: Option<String>, now: Instant) -> bool {
        if !self.state.may_become(to) {
            return false;
        }
        self.state = to;
        self.reason = reason;
        self.message = message;
        match self.transitions.iter_mut().find(|(s, _)| *s == to) {
            Some(entry) => entry.1 = now,
            None => self.transitions.push((to, now)),
        }
        true
    }

    /// Say why the state stays as it is (INIT while the node is unhealthy), without a transition.
    pub fn explain(&mut self, reason: Option<String>, message: Option<String>) {
        self.reason = reason;
        self.message = message;
    }
}
