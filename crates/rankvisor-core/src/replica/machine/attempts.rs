//! Agent mode (`--agent hyperpod`): the operator's orders and each attempt's end, decided in the
//! replica machine. One `Supervisor` per attempt, configured with the restart policy Never (see
//! `config`), so the child's lifecycle (spawn, stop with grace, KILL, reap) is the one machine
//! every mode uses, and no restart happens unless the operator sends `/start` again.

use super::{Clearing, Effect, End, Event, Note, Replica};
use crate::agent::{AgentState, Assignment, Order, StatusView};
use crate::exit::ExitHow;
use crate::replica::child::{ChildAction, LogRuleHit, Supervisor};
use crate::signo::Signo;
use nix::unistd::Pid;
use std::time::SystemTime;
use tokio::time::Instant;

impl Replica {
    /// Agent mode: the assignment of the current (or next) attempt.
    pub fn assignment(&self) -> Option<&Assignment> {
        self.agent.as_ref()?.assignment.as_ref()
    }

    /// Agent mode: the agent's state.
    pub fn agent_state(&self) -> Option<AgentState> {
        self.agent.as_ref().map(|a| a.record.state())
    }

    /// Agent mode: what `/status` shows, with instants turned into wall-clock times by `wall`.
    pub fn agent_status(&self, wall: impl Fn(Instant) -> SystemTime) -> Option<StatusView> {
        let agent = self.agent.as_ref()?;
        let rec = &agent.record;
        Some(StatusView {
            state: rec.state(),
            reason: rec.reason().map(str::to_string),
            message: rec.message().map(str::to_string),
            transitions: rec.transitions().iter().map(|(s, t)| (*s, wall(*t))).collect(),
            assigned_rank: agent.assigned_rank,
            ip_version: agent.assignment.as_ref().and_then(|a| a.ip_version.clone()),
        })
    }

    /// The gates opened: INIT becomes READY (the agent's constructor does it at once).
    pub(super) fn agent_ready(&mut self, now: Instant) {
        if let Some(rec) = self.agent.as_mut().map(|a| &mut a.record).filter(|r| r.state() == AgentState::Init) {
            let _ = rec.set(AgentState::Ready, None, None, now);
        }
    }

    /// The node is unhealthy before READY: INIT says why.
    pub(super) fn explain_unhealthy(&mut self, why: &str) {
        if let Some(rec) = self.agent.as_mut().map(|a| &mut a.record).filter(|r| r.state() == AgentState::Init) {
            rec.explain(Some("NodeUnhealthy".into()), Some(why.to_string()));
        }
    }

    /// True while an attempt's end leaves rankvisor running (agent mode, no shutdown under way).
    pub(super) fn attempt_goes_on(&self) -> bool {
        let state = self.agent_state();
        self.shutdown_deadline.is_none()
            && matches!(state, Some(AgentState::Running | AgentState::Stopping | AgentState::Faulted))
    }

    /// A log rule fired on the running attempt: the agent is FAULTED with the rule's reason and
    /// message and, as `hyperpodrun` does, leaves the child running: the operator's `/stop`
    /// (SIGUSR1 when graceful: the training code's chance to save) or `/shutdown` stops it.
    pub(super) fn agent_log_fault(&mut self, hit: LogRuleHit, now: Instant, out: &mut Vec<Effect>) {
        let pid = self.sup.child_pid();
        let Some(rec) = self.agent.as_mut().map(|a| &mut a.record) else { return };
        let Some(pid) = pid.filter(|_| rec.state() == AgentState::Running) else { return };
        // A hang's FAULTED: where the child is, while it still is (the operator stops it later).
        if hit.is_hang() {
            out.push(Effect::Child(ChildAction::Snapshot { pid, why: hit.reason.clone() }));
        }
        let message = log_rule_message(&hit);
        out.push(Effect::Note(Note::Warn(format!(
            "agent: FAULTED ({}): {}; the child keeps running until /stop or /shutdown",
            hit.reason,
            hit.describe()
        ))));
        let _ = rec.set(AgentState::Faulted, Some(hit.reason), Some(message), now);
    }

    pub(super) fn on_order(&mut self, order: Order, now: Instant, out: &mut Vec<Effect>) {
        let Some(agent) = self.agent.as_mut() else { return };
        if self.end != End::No {
            return;
        }
        let last_code = agent.last_code;
        match order {
            Order::Start(a) => {
                // The agent stores the assignment even when the transition is refused.
                agent.assigned_rank = Some(a.rank);
                let faults = a.fault_count;
                agent.assignment = Some(a);
                if agent.record.set(AgentState::Running, Some("Running".into()), None, now) {
                    out.push(Effect::Note(Note::Info(format!(
                        "agent: /start (faultCount {faults}): starting the child"
                    ))));
                    self.sup = Supervisor::new(self.cfg.supervisor);
                    self.feed(Event::Start, now, out);
                }
            }
            Order::Update(a) => agent.assignment = Some(a),
            Order::Stop(stop) => {
                if !agent.record.set(AgentState::Stopping, None, None, now) {
                    return;
                }
                if self.sup.child_pid().is_some() {
                    let signal = if stop.graceful { Signo::USR1 } else { Signo::TERM };
                    let grace = stop.timeout.unwrap_or(self.cfg.supervisor.grace);
                    out.push(Effect::Note(Note::Info(format!(
                        "agent: /stop: stopping the child with {} (SIGKILL after {grace:?})",
                        signal.name()
                    ))));
                    self.feed(Event::Stop { signal, grace }, now, out);
                } else {
                    self.clear_attempt(now, out);
                }
            }
            Order::Shutdown => {
                if !agent.record.set(AgentState::Shutdown, None, None, now) {
                    return;
                }
                out.push(Effect::Note(Note::Info("agent: /shutdown".into())));
                if self.sup.child_pid().is_some() {
                    self.shutdown_deadline.get_or_insert(now + self.cfg.supervisor.grace);
                    self.feed(Event::Shutdown { signal: Signo::TERM }, now, out);
                } else {
                    self.sweep(last_code.unwrap_or(0), now, out);
                }
            }
        }
    }

    /// TERM/INT with no attempt running: exit with the last attempt's status. False when the
    /// signal is the ordinary path's (not agent mode, or a child to stop first).
    pub(super) fn agent_idle_shutdown(&mut self, sig: Signo, now: Instant, out: &mut Vec<Effect>) -> bool {
        let idle = self.agent.is_some() && self.sup.child_pid().is_none() && self.end == End::No;
        if idle {
            out.push(Effect::Note(Note::Info(format!("{} received; no attempt running", sig.name()))));
            self.shutdown_deadline.get_or_insert(now + self.cfg.supervisor.grace);
            let last_code = self.agent.as_ref().and_then(|a| a.last_code);
            self.sweep(last_code.unwrap_or(ExitHow::Signaled(sig).code()), now, out);
        }
        idle
    }

    /// The attempt's child is gone with `code`: the agent's state follows; rankvisor exits only
    /// when shutting down (or when it never got past INIT: the node-health gate gave up).
    pub(super) fn attempt_done(&mut self, code: i32, pid: Option<Pid>, now: Instant, out: &mut Vec<Effect>) {
        if let Some(agent) = self.agent.as_mut() {
            agent.last_code = Some(code);
        }
        if !self.attempt_goes_on() {
            return self.child_done(code, now, out);
        }
        if let Some(pid) = pid {
            out.push(Effect::Child(ChildAction::KillLeftovers { pid }));
        }
        let (hung, how) = (self.sup.last_exit_hung(), self.sup.last_exit());
        let Some(rec) = self.agent.as_mut().map(|a| &mut a.record) else { return };
        match rec.state() {
            AgentState::Running if code == 0 && !hung => {
                let _ = rec.set(AgentState::Completed, None, None, now);
            }
            AgentState::Running => {
                let (reason, what) = if hung {
                    ("WorkerUnhealthy", "A training worker process entered into an unhealthy state:\n")
                } else {
                    ("WorkerCrash", "A training worker process has crashed:\n")
                };
                let message = format!("{what}{}", failure_line(how, pid));
                out.push(Effect::Note(Note::Warn(format!("agent: FAULTED ({reason}): child exited with {code}"))));
                let _ = rec.set(AgentState::Faulted, Some(reason.into()), Some(message), now);
            }
            _ => self.clear_attempt(now, out),
        }
    }

    /// STOPPING, the child gone: sweep what is left of the attempt (escapees outside its group),
    /// READY once nothing is.
    fn clear_attempt(&mut self, now: Instant, out: &mut Vec<Effect>) {
        self.clearing = Some(Clearing { deadline: now + self.cfg.supervisor.grace, killed: false });
        out.push(Effect::SweepTerm);
    }

    /// The attempt's tree is gone: READY.
    pub(super) fn attempt_cleared(&mut self, now: Instant) {
        self.clearing = None;
        if let Some(rec) = self.agent.as_mut().map(|a| &mut a.record).filter(|r| r.state() == AgentState::Stopping) {
            let _ = rec.set(AgentState::Ready, None, None, now);
        }
    }

    /// The escapees' deadlines: KILL at the grace, READY a second after it whatever is left.
    pub(super) fn on_clearing_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        match self.clearing {
            Some(Clearing { deadline, killed: false }) if now >= deadline => {
                out.push(Effect::SweepKill);
                let deadline = now + std::time::Duration::from_secs(1);
                self.clearing = Some(Clearing { deadline, killed: true });
            }
            Some(Clearing { deadline, killed: true }) if now >= deadline => {
                out.push(Effect::Note(Note::Warn(
                    "agent: processes of the last attempt survived SIGKILL; READY regardless".into(),
                )));
                self.attempt_cleared(now);
            }
            _ => {}
        }
    }
}

/// The FAULTED message of a firing log rule, as the agent writes it: its sentence, then the rules
/// and their last lines as a Python dict.
fn log_rule_message(hit: &LogRuleHit) -> String {
    let what = match hit.reason.split('_').next() {
        Some("LogHang") => {
            "The job is hanging (not receiving required logs) on the following log monitoring rules and corresponding last matched log lines"
        }
        Some("LogSlow") => {
            "The job is slowed (logs outside of acceptable thresholds) on the following log monitoring rules and corresponding log lines"
        }
        _ => "The job detected a fault indicating log message for the following log monitoring rules and corresponding log lines",
    };
    let entries: Vec<String> = hit
        .named
        .iter()
        .map(|(rule, line)| format!("{}: {}", py_repr(rule), line.as_deref().map_or_else(|| "None".into(), py_repr)))
        .collect();
    format!("{what}: {{{}}}", entries.join(", "))
}

/// Python's `repr` of a string, as the agent's f-string writes a dict's keys and values (bounded:
/// a line of the child's is cut at `QUOTED_LINE_CHARS` characters).
fn py_repr(s: &str) -> String {
    let s: String = s.chars().take(crate::replica::child::QUOTED_LINE_CHARS).collect();
    // Python quotes with `"` when the text has a `'` and no `"`.
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::from(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if !py_printable(c) => match u32::from(c) {
                n @ 0..=0xff => out.push_str(&format!("\\x{n:02x}")),
                n @ 0x100..=0xffff => out.push_str(&format!("\\u{n:04x}")),
                n => out.push_str(&format!("\\U{n:08x}")),
            },
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for one character: not a control, format, private-use, unassigned,
/// line or paragraph separator, nor a space other than ' ' (what `repr` escapes).
fn py_printable(c: char) -> bool {
    static NOT_PRINTABLE: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    if c.is_ascii() {
        return !c.is_ascii_control();
    }
    let re = NOT_PRINTABLE.get_or_init(|| regex::Regex::new(r"[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]").ok());
    re.as_ref().is_none_or(|re| !re.is_match(c.encode_utf8(&mut [0; 4])))
}

/// One line of the FAULTED message, as the agent writes a torch `ProcessFailure` (one child: local
/// rank 0; a signal is a negative exit code).
fn failure_line(how: Option<ExitHow>, pid: Option<Pid>) -> String {
    let pid = pid.map_or(0, Pid::as_raw);
    match how {
        Some(ExitHow::Signaled(sig)) => format!(
            "    Local Rank 0 exited with code -{sig} due to: Signal {sig} ({}) received by PID {pid}\n",
            sig.name()
        ),
        Some(ExitHow::Exited(c)) => format!(
            "    Local Rank 0 exited with code {c} due to: To enable traceback see: \
             https://pytorch.org/docs/stable/elastic/errors.html\n"
        ),
        None => "    Local Rank 0 could not be started\n".into(),
    }
}

#[cfg(test)]
mod tests {
    /// Python's own `repr` gave these (`python3 -c "print(repr(...))"`).
    #[test]
    fn py_repr_quotes_and_escapes_as_python_does() {
        assert_eq!(super::py_repr("it's\n"), r#""it's\n""#);
        assert_eq!(super::py_repr("a\"b'c\u{1b}\u{85}é"), r#"'a"b\'c\x1b\x85é'"#);
        assert_eq!(super::py_repr("back\\slash\t"), r"'back\\slash\t'");
        // Not printable for Python: a no-break space, a line separator, a zero-width joiner, private
        // use, a tag, an unassigned code point; an emoji is printable.
        let odd = "\u{a0}\u{2028}\u{200d}\u{e000}\u{1f600}\u{e0001}\u{378}";
        let python = concat!(r"'\xa0\u2028\u200d\ue000", "\u{1f600}", r"\U000e0001\u0378'");
        assert_eq!(super::py_repr(odd), python);
    }
}
