//! The log rules at PID 1, the event loop's side: one attempt's pipe, relay and evaluator. The
//! child's stdout is the pipe's write end; every read is copied to rankvisor's stdout at once and
//! its lines go to the attempt's `Evaluator`. The first firing verdict of the attempt becomes a
//! `LogRuleHit` for the machine, which decides what it means (a stop, a FAULTED agent).

use super::child::{escape_line, LogRuleHit};
use crate::logrules::{Evaluator, LogState, Pumped, Relay, RuleSet};
use crate::status::{LogRuleGauge, LogRuleReport};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tokio::net::unix::pipe::Receiver;
use tokio::time::Instant;

/// One attempt's watch over the child's stdout.
pub struct LogWatch {
    /// The pipe's read end, until the child's side is closed.
    rx: Option<Receiver>,
    relay: Relay<io::Stdout>,
    ev: Evaluator,
    /// The attempt's firing verdict went to the machine: one per attempt.
    reported: bool,
    /// The rule states last published.
    published: Vec<LogState>,
}

/// A pipe for the child's stdout: its read end, ready for the event loop, and its write end, both
/// close-on-exec (the spawn dups the write end to the child's fd 1).
pub fn pipe() -> io::Result<(Receiver, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((Receiver::from_owned_fd(read)?, write))
}

impl LogWatch {
    /// Watch the attempt whose child started at `started` with `rules`, reading `rx`.
    pub fn new(rules: Arc<RuleSet>, rx: Receiver, started: Instant) -> Self {
        Self {
            rx: Some(rx),
            relay: Relay::new(io::stdout()),
            ev: Evaluator::new(rules, started),
            reported: false,
            published: Vec::new(),
        }
    }

    /// True while the pipe is open.
    pub fn open(&self) -> bool {
        self.rx.is_some()
    }

    /// Wait until the pipe has something (or is closed); forever once it is gone.
    pub async fn readable(watch: &Option<Self>) -> io::Result<()> {
        match watch.as_ref().and_then(|w| w.rx.as_ref()) {
            Some(rx) => rx.readable().await,
            None => std::future::pending().await,
        }
    }

    /// Copy what the pipe holds and evaluate its lines; the attempt's first firing verdict.
    pub fn pump(&mut self) -> Option<LogRuleHit> {
        let rx = self.rx.as_ref()?;
        let (ev, reported) = (&mut self.ev, self.reported);
        let mut fired = None;
        let outcome = self.relay.pump(rx, &mut |line| {
            if ev.on_line(line, Instant::now()).state.firing() && !reported && fired.is_none() {
                fired = hit(ev);
            }
        });
        match outcome {
            Ok(Pumped::Again) => {}
            Ok(Pumped::Eof) => self.rx = None,
            Err(e) => {
                tracing::warn!("log rules: cannot read the child's stdout: {e}; the rules no longer see it");
                self.rx = None;
            }
        }
        if let Some(e) = self.relay.take_write_error() {
            tracing::warn!("log rules: cannot write the child's output to stdout: {e}; still evaluating it");
        }
        self.take(fired)
    }

    /// When the rules must be evaluated with no new line; None once the attempt's verdict fired.
    pub fn deadline(&self) -> Option<Instant> {
        if self.reported {
            return None;
        }
        self.ev.next_deadline()
    }

    /// The idle evaluation at `now`; the attempt's first firing verdict.
    pub fn idle(&mut self, now: Instant) -> Option<LogRuleHit> {
        if self.reported || self.ev.next_deadline().is_none_or(|d| d > now) {
            return None;
        }
        let fired = if self.ev.on_idle(now).state.firing() { hit(&self.ev) } else { None };
        self.take(fired)
    }

    fn take(&mut self, fired: Option<LogRuleHit>) -> Option<LogRuleHit> {
        self.reported |= fired.is_some();
        fired
    }

    /// Each rule's state when it changed since the last call.
    pub fn changed_states(&mut self) -> Option<Vec<LogRuleGauge>> {
        if self.ev.rule_states().eq(self.published.iter().copied()) {
            return None;
        }
        self.published = self.ev.rule_states().collect();
        Some(
            self.ev
                .rules()
                .iter()
                .zip(&self.published)
                .map(|(r, s)| LogRuleGauge { rule: r.name.clone(), state: s.as_str().into() })
                .collect(),
        )
    }
}

/// The verdict as the machine's input.
fn hit(ev: &Evaluator) -> Option<LogRuleHit> {
    let reason = ev.reason()?;
    let rules = ev.rules();
    let named = ev
        .verdict()
        .named
        .iter()
        .map(|(i, line)| (rules[*i].name.clone(), line.as_deref().map(str::to_string)))
        .collect();
    Some(LogRuleHit { reason, named })
}

/// The status's account of a hit: the line escaped and bounded.
pub fn report(hit: &LogRuleHit) -> LogRuleReport {
    LogRuleReport { reason: hit.reason.clone(), rule: hit.rule().to_string(), line: hit.line().map(escape_line) }
}
