//! The child machine's vocabulary: its configuration, its phases, the events it takes and the
//! steps it answers with.

use crate::backoff::BackoffConfig;
use crate::exit::ExitHow;
use crate::policy::{RestartPolicy, RestartScope};
use crate::signo::Signo;
use crate::status::ReplicaState;
use nix::unistd::Pid;
use std::time::Duration;
use tokio::time::Instant;

/// Hang detection from a heartbeat file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HangConfig {
    /// A running child that does not beat for this long is hung.
    pub timeout: Duration,
    /// The allowance for the first beat after a start (model loading is slow).
    pub startup: Duration,
}

/// `--checkpoint-signal` and `--checkpoint-grace`: the job saves before a replica is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// What the training process gets first (e.g. SIGUSR1).
    pub signal: Signo,
    /// How long a stop is held after it, unless the child exits first (within the grace period).
    pub grace: Duration,
}

/// What the machine needs to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupervisorConfig {
    /// When to restart.
    pub policy: RestartPolicy,
    /// The most restarts, under every policy.
    pub backoff_limit: u32,
    /// Delays between restarts.
    pub backoff: BackoffConfig,
    /// TERM -> KILL delay.
    pub grace: Duration,
    /// Hang detection, when a heartbeat file is configured.
    pub hang: Option<HangConfig>,
    /// Replica: restart this child after a backoff. Job: ask for a new generation of every
    /// replica's child instead, and restart only when it is released.
    pub scope: RestartScope,
    /// Save before a stop: the checkpoint signal first, the stop's own signal after its grace.
    pub checkpoint: Option<CheckpointConfig>,
}

/// A reason from outside the training program to stop for good (exit 138).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    /// The state to report (`NodeUnhealthy`, `Failed`).
    pub state: ReplicaState,
    /// One line for the termination log.
    pub message: String,
}

/// A log rule fired on the child's stdout (`--log-rules`, or the attempt's rules in agent mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRuleHit {
    /// `LogHang_<rule>`, `LogSlow_<rule>` or `LogFault_<rule>`.
    pub reason: String,
    /// The rules the verdict names, first rule first, each with its last matched line (as the
    /// child wrote it: escape before logging).
    pub named: Vec<(String, Option<String>)>,
}

impl LogRuleHit {
    /// The first rule named (the one in `reason`).
    pub fn rule(&self) -> &str {
        self.named.first().map_or("", |(r, _)| r.as_str())
    }

    /// A HANGING or SLOW verdict (not a FAULT's, whose line says what went wrong): where the
    /// child is matters, so a snapshot is taken before it is stopped.
    pub fn is_hang(&self) -> bool {
        self.reason.starts_with("LogHang_") || self.reason.starts_with("LogSlow_")
    }

    /// The first rule's last matched line, if any.
    pub fn line(&self) -> Option<&str> {
        self.named.first().and_then(|(_, l)| l.as_deref())
    }

    /// One line for the log and the termination message: the reason and the last matched line,
    /// escaped and bounded.
    pub fn describe(&self) -> String {
        match self.line() {
            Some(l) => format!("log rule {} (last matched line: \"{}\")", self.reason, escape_line(l)),
            None => format!("log rule {} (no line matched)", self.reason),
        }
    }
}

/// The most characters of a child's line quoted in a message.
pub const QUOTED_LINE_CHARS: usize = 200;

/// A line of the child's without its line end, escaped and cut at [`QUOTED_LINE_CHARS`] (`...`
/// marks the cut).
pub fn escape_line(line: &str) -> String {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let cut: String = line.chars().take(QUOTED_LINE_CHARS).collect();
    let more = if cut.len() < line.len() { "..." } else { "" };
    format!("{}{more}", crate::untrusted::escape(&cut))
}

/// Why a running child is being stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// TERM/INT reached rankvisor: stop, then exit with the child's status.
    Shutdown {
        /// The signal received.
        signal: Signo,
    },
    /// No heartbeat: a failure, handed to the restart policy.
    Hung,
    /// A log rule fired: a failure, handed to the restart policy.
    LogRule(LogRuleHit),
    /// An outside reason: exit 138.
    GiveUp(GiveUp),
    /// The job moves to a new generation: every replica's child stops and starts again together.
    NewGeneration {
        /// The generation to start once released.
        generation: u64,
    },
    /// The HyperPod agent's `/stop`: the attempt ends with the child's status.
    Ordered,
    /// `--straggler-action restart`: the master named this replica a straggler; its child starts
    /// again at once once stopped (a restart, counted against the backoff limit), whatever the
    /// policy and scope: only this replica restarts.
    Straggler {
        /// The master's words, for the log.
        reason: String,
    },
}

/// Where the supervised child is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Not started yet (gates, rendezvous).
    Pending,
    /// The child runs.
    Running {
        /// Its pid (also its process group).
        pid: Pid,
        /// When it started.
        started: Instant,
    },
    /// The child was signalled and has until `deadline` before SIGKILL (once `killed`, until
    /// `deadline` before rankvisor gives up waiting for it).
    Stopping {
        /// Its pid.
        pid: Pid,
        /// When it started.
        started: Instant,
        /// When SIGKILL goes out.
        deadline: Instant,
        /// True once SIGKILL went out.
        killed: bool,
        /// Why.
        cause: StopCause,
        /// `--checkpoint-signal`: the stop's own signal is held until then (or the child's exit),
        /// so the training process saves first; None once it went out.
        held: Option<Instant>,
    },
    /// Waiting to start the child again.
    Backoff {
        /// When to start it.
        until: Instant,
    },
    /// Job scope: the child is gone; waiting for the next generation's barrier to release us.
    AwaitingGeneration {
        /// The generation this replica is moving to, once known: the one its child was stopped
        /// for, or the one whose barrier the master runs (None: a worker waits for the job to
        /// tell it, after its own failure or a lost master).
        next: Option<u64>,
    },
    /// Done; rankvisor exits with `code`.
    Finished {
        /// rankvisor's exit status.
        code: i32,
        /// What to report.
        state: ReplicaState,
    },
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The gates passed: start the first child.
    Start,
    /// The child was started.
    Spawned {
        /// Its pid.
        pid: Pid,
    },
    /// The child could not be started (126 or 127).
    SpawnFailed {
        /// 126 or 127.
        code: i32,
        /// Why, for the log and termination message.
        message: String,
        /// The machine's fault (EMFILE, ENFILE, EAGAIN, ENOMEM), not the command's: a failed run
        /// for the restart policy instead of a permanent 126, and when the policy or the backoff
        /// limit ends the retries, 138 (a reason outside the training program), not 126.
        transient: bool,
    },
    /// A reaped process: the child or anyone else.
    Exited {
        /// Its pid.
        pid: Pid,
        /// How it ended.
        how: ExitHow,
    },
    /// TERM or INT reached rankvisor.
    Shutdown {
        /// Which.
        signal: Signo,
    },
    /// The heartbeat file was touched.
    Beat,
    /// A log rule fired on the running child's output.
    LogRule(LogRuleHit),
    /// A deadline may have passed.
    Tick,
    /// Stop for good for an outside reason.
    GiveUp(GiveUp),
    /// Job scope: the job moves to `generation`; stop the child and wait to be released.
    NewGeneration {
        /// The new generation.
        generation: u64,
    },
    /// The HyperPod agent's `/stop`: `signal` (TERM, or USR1 when graceful), SIGKILL after `grace`.
    #[allow(missing_docs)]
    Stop { signal: Signo, grace: Duration },
    /// Job scope: the barrier of `generation` passed; start the child.
    Released {
        /// The released generation.
        generation: u64,
    },
    /// The job saves: a replica is being stopped (the master's fan-out). The running child gets
    /// the checkpoint signal, once, and goes on.
    Checkpoint,
    /// The master named this replica a straggler (`--straggler-action restart`): stop the
    /// running child and start it again.
    Straggler {
        /// The master's words.
        reason: String,
    },
    /// The snapshot asked for by [`ChildAction::Snapshot`] is taken; its one line (`pid 42 in
    /// slow_here (hang.py:3)`, escaped), when it has one. The held signal goes out now.
    Snapshotted {
        /// The summary's top line.
        top: Option<String>,
    },
}

/// What the loop must do for the child, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildAction {
    /// Start the child; it is the `restart_count`th restart.
    Spawn {
        /// Restarts before this start.
        restart_count: u32,
        /// The rendezvous generation it belongs to.
        generation: u64,
    },
    /// Send `signal` to the child's process group.
    SignalGroup {
        /// Group leader's pid.
        pid: Pid,
        /// The signal.
        signal: Signo,
    },
    /// A shutdown (`signal`: TERM or INT): the child and the other programs below rankvisor get
    /// `signal` first, their forked helpers once their parent is gone (`replica::shutdown_order`).
    SignalPrograms {
        /// The child's pid.
        pid: Pid,
        /// The signal.
        signal: Signo,
    },
    /// Send `signal` (`--checkpoint-signal`) to the training process and the programs below it,
    /// never to its forked helpers (as a shutdown's first step, `replica::shutdown_order`).
    Checkpoint {
        /// The child's pid.
        pid: Pid,
        /// The checkpoint signal.
        signal: Signo,
    },
    /// SIGKILL whatever is left of a finished child's process group before the next start, as a
    /// container runtime does when a container's main process exits.
    KillLeftovers {
        /// Group leader's pid.
        pid: Pid,
    },
    /// Write this line to the termination log.
    TerminationMessage(String),
    /// Take a snapshot of the child's tree (`stacks`), then report `Event::Snapshotted`: a hang's
    /// stop holds its signal until then (or [`SNAPSHOT_WAIT`]).
    Snapshot {
        /// The child's pid.
        pid: Pid,
        /// Why (`hung`, `LogHang_<rule>`, `survived its stop`).
        why: String,
    },
}

/// How long a stop holds its signal for the snapshot: the snapshot's own deadline and a margin.
pub const SNAPSHOT_WAIT: Duration = Duration::from_millis(crate::stacks::DEADLINE.as_millis() as u64 + 500);

/// How long a child may take to die after SIGKILL before rankvisor stops waiting for it: one that
/// outlives it is in uninterruptible sleep or a frozen cgroup, and no signal will end it.
pub const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the child's lifecycle leaves to the replica to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildOutcome {
    /// Job scope: this replica's child failed; the job needs a new generation.
    RequestGeneration,
    /// The child is done for good; rankvisor's exit status would be `code`.
    Exit {
        /// rankvisor's exit status.
        code: i32,
    },
    /// The child outlived SIGKILL by [`KILL_WAIT`]: it is given up on, with the status its KILL
    /// gives (`code`); nothing will be started beside it.
    Unkillable {
        /// The child's pid.
        pid: Pid,
        /// rankvisor's exit status.
        code: i32,
    },
}

/// The supervisor's answer to one event: the actions for the loop, in order, then at most one
/// outcome for the replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "the actions are the loop's to perform and the outcome the replica's to decide"]
pub struct ChildSteps {
    /// What to do for the child, in order.
    pub actions: Vec<ChildAction>,
    /// What the replica must decide on, after the actions.
    pub outcome: Option<ChildOutcome>,
}

impl From<Vec<ChildAction>> for ChildSteps {
    fn from(actions: Vec<ChildAction>) -> Self {
        Self { actions, outcome: None }
    }
}
