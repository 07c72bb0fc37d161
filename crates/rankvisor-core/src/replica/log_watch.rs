//! The log rules at PID 1, the event loop's side: one attempt's pipe, relay thread and evaluator.
//! The child's stdout is the pipe's write end; the attempt's relay thread copies every read to
//! rankvisor's stdout at once and evaluates its lines (the event loop never waits on stdout), and
//! tells the loop when something changed. The first firing verdict of the attempt becomes a
//! `LogRuleHit` for the machine, which decides what it means (a stop, a FAULTED agent).

use super::child::{escape_line, LogRuleHit};
use crate::logrules::relay::READ_BYTES;
use crate::logrules::{Evaluator, LogState, Relay, RuleSet, Step};
use crate::status::{LogRuleGauge, LogRuleReport};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The relay thread's stack: it runs the splitter and the patterns, nothing deep.
const RELAY_STACK: usize = 256 * 1024;
/// When woken, at most this much is relayed before the thread answers: what the pipe holds (a
/// dead child leaves at most the pipe's capacity, less than this), not what a live writer adds.
const DRAIN_BUDGET: usize = 1024 * 1024;
/// How long the loop waits, at the child's exit, for the relay thread to have evaluated what the
/// child wrote (longer only when rankvisor's stdout is not being read).
const SYNC_WAIT: Duration = Duration::from_secs(1);
/// How long rankvisor's exit waits for the relay thread to write the last attempt's last output.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// One attempt's watch over the child's stdout.
pub struct LogWatch {
    watched: Arc<(Mutex<Watched>, Condvar)>,
    /// The relay thread says something changed (a hit, rule states, the end of the output).
    news: Arc<Notify>,
    /// A byte asks the relay thread to relay what the pipe holds now; closing it, to do that and
    /// stop.
    wake: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    /// The rule states last published.
    published: Vec<LogState>,
}

/// What the relay thread and the loop share: the evaluator and the attempt's hit.
struct Watched {
    ev: Evaluator,
    /// The attempt's firing verdict went to the machine (or is on its way): one per attempt.
    reported: bool,
    /// A hit from a line, for the loop to take.
    hit: Option<LogRuleHit>,
    /// The loop's requests to relay what the pipe holds (a count), and the last one answered
    /// (`u64::MAX` once the thread is gone).
    asked: u64,
    answered: u64,
}

impl Watched {
    /// One line at `now`; true when it made the attempt's hit.
    fn line(&mut self, line: &str, now: Instant) -> bool {
        if !self.ev.on_line(line, now).state.firing() || self.reported {
            return false;
        }
        self.hit = hit(&self.ev);
        self.reported = self.hit.is_some();
        self.reported
    }
}

/// A pipe for the child's stdout: its read end (nonblocking, for the relay thread) and its write
/// end, both close-on-exec (the spawn dups the write end to the child's fd 1).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    Ok((read, write))
}

impl LogWatch {
    /// Watch the attempt whose child started at `started` with `rules`, reading `rx` (from
    /// [`pipe`]). The relay thread first waits for `previous`'s to finish relaying what the last
    /// attempt left in its pipe, so the output keeps its order.
    pub fn start(rules: Arc<RuleSet>, rx: OwnedFd, started: Instant, previous: Option<Self>) -> io::Result<Self> {
        let (wake_rx, wake) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        let watched = Arc::new((
            Mutex::new(Watched {
                ev: Evaluator::new(rules, started),
                reported: false,
                hit: None,
                asked: 0,
                answered: 0,
            }),
            Condvar::new(),
        ));
        let news = Arc::new(Notify::new());
        let before = previous.and_then(Self::retire);
        let thread = std::thread::Builder::new().name("log-relay".into()).stack_size(RELAY_STACK).spawn({
            let (watched, news) = (watched.clone(), news.clone());
            move || {
                if let Some(t) = before {
                    let _ = t.join();
                }
                relay(&rx, &wake_rx, &watched, &news);
                let (lock, answered) = &*watched;
                lock.lock().unwrap_or_else(PoisonError::into_inner).answered = u64::MAX;
                answered.notify_all();
                news.notify_one();
            }
        })?;
        Ok(Self { watched, news, wake: Some(wake), thread: Some(thread), published: Vec::new() })
    }

    /// Tell the relay thread to stop after what the pipe holds now; its handle, to wait for it.
    fn retire(mut self) -> Option<JoinHandle<()>> {
        self.wake = None;
        self.thread.take()
    }

    /// The child exited: wait (at most [`SYNC_WAIT`]) until the relay thread has evaluated what
    /// the pipe holds, so the child's last lines come before its exit; false when it did not
    /// answer in time (rankvisor's stdout blocked: its hit, if any, comes after the exit).
    pub fn sync(&mut self) -> bool {
        let (lock, answered) = &*self.watched;
        let mut w = lock.lock().unwrap_or_else(PoisonError::into_inner);
        w.asked += 1;
        let ticket = w.asked;
        if let Some(wake) = &self.wake {
            let _ = nix::unistd::write(wake, &[1]);
        }
        let (w, timeout) =
            answered.wait_timeout_while(w, SYNC_WAIT, |w| w.answered < ticket).unwrap_or_else(PoisonError::into_inner);
        drop(w);
        !timeout.timed_out()
    }

    /// The attempt is over and rankvisor exits: relay what the pipe holds and wait for that, at
    /// most [`FINISH_WAIT`] (a stdout nobody reads does not hold the exit up).
    pub fn finish(self) {
        let watched = self.watched.clone();
        if self.retire().is_none() {
            return;
        }
        let (lock, answered) = &*watched;
        let w = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let (_w, timeout) = answered
            .wait_timeout_while(w, FINISH_WAIT, |w| w.answered != u64::MAX)
            .unwrap_or_else(PoisonError::into_inner);
        if timeout.timed_out() {
            tracing::warn!("log rules: the child's last output was not all written: stdout is not being read");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Watched> {
        self.watched.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait until the relay thread has news; forever when there is no watch.
    pub async fn news(watch: &Option<Self>) {
        match watch {
            Some(w) => w.news.notified().await,
            None => std::future::pending().await,
        }
    }

    /// The attempt's first firing verdict, if a line made it since the last call.
    pub fn take_hit(&mut self) -> Option<LogRuleHit> {
        self.lock().hit.take()
    }

    /// When the rules must be evaluated with no new line; None once the attempt's verdict fired.
    pub fn deadline(&self) -> Option<Instant> {
        let w = self.lock();
        if w.reported {
            return None;
        }
        w.ev.next_deadline()
    }

    /// The idle evaluation at `now`; the attempt's first firing verdict.
    pub fn idle(&mut self, now: Instant) -> Option<LogRuleHit> {
        let mut w = self.lock();
        if w.reported || w.ev.next_deadline().is_none_or(|d| d > now) {
            return None;
        }
        let fired = if w.ev.on_idle(now).state.firing() { hit(&w.ev) } else { None };
        w.reported |= fired.is_some();
        fired
    }

    /// Each rule's state when it changed since the last call.
    pub fn changed_states(&mut self) -> Option<Vec<LogRuleGauge>> {
        let w = self.watched.0.lock().unwrap_or_else(PoisonError::into_inner);
        if w.ev.rule_states().eq(self.published.iter().copied()) {
            return None;
        }
        self.published = w.ev.rule_states().collect();
        Some(
            w.ev.rules()
                .iter()
                .zip(&self.published)
                .map(|(r, s)| LogRuleGauge { rule: r.name.clone(), state: s.as_str().into() })
                .collect(),
        )
    }
}

/// The relay thread: copy and evaluate until the pipe ends or the watch says stop; news to the
/// loop when a read made a hit or changed a rule's state, and at the end. The lock is never held
/// across a write to stdout.
fn relay(rx: &OwnedFd, wake: &OwnedFd, watched: &(Mutex<Watched>, Condvar), news: &Notify) {
    let (lock, answered) = watched;
    let mut relay = Relay::teeing(io::stdout());
    let mut told: Vec<LogState> = Vec::new();
    // When woken: the request being answered and the bytes still allowed before answering.
    let mut draining: Option<(u64, usize, bool)> = None;
    loop {
        let step = match draining {
            Some((_, 0, _)) => Ok(Step::Empty),
            Some(_) => relay.read_now(rx.as_fd()),
            None => relay.step(rx.as_fd(), wake.as_fd()),
        };
        if let Some(e) = relay.take_write_error() {
            tracing::warn!("log rules: cannot write the child's output to stdout: {e}; still evaluating it");
        }
        let mut w = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut new = false;
        let mut ended = false;
        match step {
            Ok(Step::Read) => {
                if let Some((_, left, _)) = draining.as_mut() {
                    *left = left.saturating_sub(READ_BYTES.min(*left));
                }
                relay.lines(&mut |line| new |= w.line(line, now));
            }
            Ok(Step::Eof) => {
                relay.finish(&mut |line| new |= w.line(line, now));
                ended = true;
            }
            Ok(Step::Woken { closed }) => draining = Some((w.asked, DRAIN_BUDGET, closed)),
            Ok(Step::Empty) => {
                if let Some((ticket, _, closed)) = draining.take() {
                    w.answered = w.answered.max(ticket);
                    answered.notify_all();
                    ended = closed;
                }
            }
            Err(e) => {
                tracing::warn!("log rules: cannot read the child's stdout: {e}; the rules no longer see it");
                ended = true;
            }
        }
        if !w.ev.rule_states().eq(told.iter().copied()) {
            told.clear();
            told.extend(w.ev.rule_states());
            new = true;
        }
        drop(w);
        if new {
            news.notify_one();
        }
        if ended {
            return;
        }
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
