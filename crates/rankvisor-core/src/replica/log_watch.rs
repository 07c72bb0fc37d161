//! The log rules at PID 1, the event loop's side: one attempt's pipe, relay thread and evaluator.
//! The child's stdout is the pipe's write end; the attempt's relay thread owns the evaluator
//! outright: it copies every read to rankvisor's stdout at once, evaluates its lines, evaluates
//! the rules idle at their deadlines, and sends the loop its news over channels (the attempt's
//! first firing verdict, the rule states, "drained"). The loop never waits on the thread and
//! never takes a lock the evaluator holds: a slow pattern or a stdout nobody reads stalls the
//! relay thread only. The first firing verdict of the attempt becomes a `LogRuleHit` for the
//! machine, which decides what it means (a stop, a FAULTED agent).

use super::child::{escape_line, LogRuleHit};
use crate::logrules::relay::READ_BYTES;
use crate::logrules::{Evaluator, LogState, Relay, RuleSet, Step};
use crate::status::{LogRuleGauge, LogRuleReport};
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The relay thread's stack: it runs the splitter and the patterns, nothing deep.
const RELAY_STACK: usize = 256 * 1024;
/// When asked to drain, at most this much is relayed before the thread answers: what the pipe
/// holds (a dead child leaves at most the pipe's capacity, less than this), not what a live
/// writer (a grandchild holding the pipe) adds.
const DRAIN_BUDGET: usize = 1024 * 1024;
/// How long rankvisor's exit waits for the relay thread to write the last attempt's last output.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// What the relay thread tells the loop, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum News {
    /// The attempt's first firing verdict (one per attempt).
    Hit(LogRuleHit),
    /// Each rule's state changed.
    States(Vec<LogRuleGauge>),
    /// The `--straggler-rule` captured a value (a point for the master).
    Metric(f64),
    /// What the pipe held when the loop asked ([`LogWatch::drain`]) is relayed and evaluated.
    Drained,
    /// The output ended (EOF, or the pipe cannot be read): everything is relayed and evaluated,
    /// and no drain will be answered again. The loop sees it as `Drained`; the watch remembers it,
    /// so that a drain asked for later is answered at once, not by a thread that is gone.
    Ended,
}

/// One attempt's watch over the child's stdout.
pub(super) struct LogWatch {
    /// Hits and drain answers, in order.
    news: mpsc::UnboundedReceiver<News>,
    /// The latest rule states (only the latest matters: a flapping rule queues nothing).
    states: watch::Receiver<Vec<LogRuleGauge>>,
    /// The relay thread is gone (its senders dropped): nothing more will come.
    closed: bool,
    /// The thread said the output ended: a drain has nothing left to wait for.
    output_ended: bool,
    /// A byte asks the relay thread to drain what the pipe holds now; closing it, to do that and
    /// stop.
    wake: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    /// Says when the relay thread ended, for [`LogWatch::finish`]'s bounded wait.
    ended: std::sync::mpsc::Receiver<()>,
}

/// A pipe for the child's stdout: its read end (nonblocking, for the relay thread) and its write
/// end, both close-on-exec (the spawn dups the write end to the child's fd 1).
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(io::Error::from)?;
    Ok((read, write))
}

impl LogWatch {
    /// Watch the attempt whose child started at `started` with `rules`, reading `rx` (from
    /// [`pipe`]). The relay thread first waits for `previous`'s to finish relaying what the last
    /// attempt left in its pipe, so the output keeps its order.
    pub(super) fn start(
        rules: Arc<RuleSet>,
        rx: OwnedFd,
        started: Instant,
        previous: Option<Self>,
        metric_rule: Option<usize>,
    ) -> io::Result<Self> {
        // Nonblocking: the loop's write never waits (a full wake pipe already asks).
        let flags = nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK;
        let (wake_rx, wake) = nix::unistd::pipe2(flags).map_err(io::Error::from)?;
        let (news_tx, news) = mpsc::unbounded_channel();
        let (states_tx, states) = watch::channel(Vec::new());
        let (ended_tx, ended) = std::sync::mpsc::channel();
        let before = previous.and_then(Self::retire);
        let thread = std::thread::Builder::new().name("log-relay".into()).stack_size(RELAY_STACK).spawn(move || {
            if let Some(t) = before {
                let _ = t.join();
            }
            let mut thread = RelayThread {
                ev: Evaluator::new(rules, started),
                reported: false,
                child_gone: false,
                told: Vec::new(),
                metric: metric_rule.map(|i| (i, 0)),
                news: news_tx,
                states: states_tx,
            };
            thread.run(&rx, &wake_rx);
            let _ = ended_tx.send(());
        })?;
        Ok(Self { news, states, closed: false, output_ended: false, wake: Some(wake), thread: Some(thread), ended })
    }

    /// Tell the relay thread to stop after what the pipe holds now; its handle, to wait for it.
    fn retire(mut self) -> Option<JoinHandle<()>> {
        self.wake = None;
        self.thread.take()
    }

    /// The child exited: ask the relay thread, without waiting, to relay and evaluate what the
    /// pipe holds and then say [`News::Drained`]; its idle evaluations end (the child is gone).
    /// False when the thread is gone (its output ended): there is nothing left to drain.
    pub(super) fn drain(&self) -> bool {
        // The end already came (and was answered): a byte now would wait for a thread that has
        // returned or is returning, and the exit would wait for the machine's deadline.
        if self.output_ended {
            return false;
        }
        let Some(wake) = &self.wake else { return false };
        match nix::unistd::write(wake, &[1]) {
            // A full wake pipe already holds a request, which this one joins.
            Ok(_) | Err(nix::errno::Errno::EAGAIN) => true,
            Err(_) => false,
        }
    }

    /// The attempt is over and rankvisor exits: relay what the pipe holds and wait for that, at
    /// most [`FINISH_WAIT`] (a stdout nobody reads does not hold the exit up). The loop has
    /// ended: nothing else waits on this thread.
    pub(super) fn finish(self) {
        // Dropping the wake pipe's writer tells the thread to stop; its handle detaches.
        let Self { ended, .. } = self;
        if ended.recv_timeout(FINISH_WAIT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            tracing::warn!("log rules: the child's last output was not all written: stdout is not being read");
        }
    }

    /// The relay thread's next news; forever when there is no watch or its thread is gone.
    pub(super) async fn next(watch: &mut Option<Self>) -> News {
        let Some(w) = watch.as_mut().filter(|w| !w.closed) else { return std::future::pending().await };
        // States first: the thread sets them before it sends a hit or "drained", so the loop
        // publishes the rules as they were when the machine acts on the news (a news-first choice
        // let a restart replace this watch before a HANGING state was ever published).
        tokio::select! {
            biased;
            Ok(()) = w.states.changed() => News::States(w.states.borrow_and_update().clone()),
            news = w.news.recv() => match news {
                Some(News::Ended) => {
                    w.output_ended = true;
                    News::Drained
                }
                Some(news) => news,
                None => {
                    // The thread is gone: its last states were sent before its senders dropped.
                    w.closed = true;
                    News::States(w.states.borrow_and_update().clone())
                }
            },
        }
    }
}

/// The relay thread's own state: the evaluator is its alone.
struct RelayThread {
    ev: Evaluator,
    /// The attempt's firing verdict went to the loop: one per attempt.
    reported: bool,
    /// A drain was asked for: the child is gone, time no longer passes for its rules.
    child_gone: bool,
    /// The rule states last sent.
    told: Vec<LogState>,
    /// `--straggler-rule`: its index, and how many of its values were sent.
    metric: Option<(usize, u64)>,
    news: mpsc::UnboundedSender<News>,
    states: watch::Sender<Vec<LogRuleGauge>>,
}

impl RelayThread {
    /// Copy and evaluate until the pipe ends or the watch says stop; idle evaluations at the
    /// rules' deadlines while the child runs.
    fn run(&mut self, rx: &OwnedFd, wake: &OwnedFd) {
        let mut relay = Relay::teeing(io::stdout());
        // When asked to drain: the bytes still allowed before answering, and whether to stop then.
        let mut draining: Option<(usize, bool)> = None;
        loop {
            let step = match draining {
                Some((0, _)) => Ok(Step::Empty),
                Some(_) => relay.read_now(rx.as_fd()),
                None => match self.wait(rx, wake) {
                    Ok(true) => relay.step(rx.as_fd(), wake.as_fd()),
                    Ok(false) => {
                        self.idle(Instant::now());
                        continue;
                    }
                    Err(e) => Err(e),
                },
            };
            if let Some(e) = relay.take_write_error() {
                tracing::warn!("log rules: cannot write the child's output to stdout: {e}; still evaluating it");
            }
            let now = Instant::now();
            let mut ended = false;
            match step {
                Ok(Step::Read) => {
                    if let Some((left, _)) = draining.as_mut() {
                        *left = left.saturating_sub(READ_BYTES.min(*left));
                    }
                    relay.lines(&mut |line| self.line(line, now));
                }
                Ok(Step::Eof) => {
                    relay.finish(&mut |line| self.line(line, now));
                    self.tell_states();
                    // The end of the output is drained too (a drain asked for may be waiting).
                    let _ = self.news.send(News::Ended);
                    ended = true;
                }
                Ok(Step::Woken { closed }) => {
                    self.child_gone = true;
                    draining = Some((DRAIN_BUDGET, closed));
                }
                Ok(Step::Empty) => {
                    if let Some((_, closed)) = draining.take() {
                        self.tell_states();
                        let _ = self.news.send(News::Drained);
                        ended = closed;
                    }
                }
                Err(e) => {
                    tracing::warn!("log rules: cannot read the child's stdout: {e}; the rules no longer see it");
                    let _ = self.news.send(News::Ended);
                    ended = true;
                }
            }
            self.tell_states();
            if ended {
                return;
            }
        }
    }

    /// Wait until the pipe or the wake descriptor has something (true), or the rules' next
    /// deadline passes (false).
    fn wait(&self, rx: &OwnedFd, wake: &OwnedFd) -> io::Result<bool> {
        loop {
            let timeout = match self.deadline() {
                None => PollTimeout::NONE,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    // Rounded up: waking a millisecond early would only come back here.
                    let ms = left.as_micros().div_ceil(1000);
                    PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = [PollFd::new(rx.as_fd(), PollFlags::POLLIN), PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => return Ok(false),
                Ok(_) => return Ok(true),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// When the rules must be evaluated with no new line: only while the child runs and the
    /// attempt's verdict has not fired.
    fn deadline(&self) -> Option<Instant> {
        if self.reported || self.child_gone {
            return None;
        }
        self.ev.next_deadline()
    }

    /// The idle evaluation at `now`, when a deadline passed.
    fn idle(&mut self, now: Instant) {
        if self.deadline().is_none_or(|d| d > now) {
            return;
        }
        if self.ev.on_idle(now).state.firing() {
            self.report();
        }
        self.tell_states();
    }

    /// One line at `now`: every line is evaluated, also after the attempt's verdict fired.
    fn line(&mut self, line: &str, now: Instant) {
        if self.ev.on_line(line, now).state.firing() {
            self.report();
        }
        if let Some((rule, sent)) = self.metric.as_mut() {
            if let Some((n, value)) = self.ev.metric(*rule).filter(|(n, _)| n > sent) {
                *sent = n;
                let _ = self.news.send(News::Metric(value));
            }
        }
    }

    /// The attempt's firing verdict, to the loop (once).
    fn report(&mut self) {
        if self.reported {
            return;
        }
        if let Some(h) = hit(&self.ev) {
            self.reported = true;
            // States first: the status shows the rule firing when the machine acts on it.
            self.tell_states();
            let _ = self.news.send(News::Hit(h));
        }
    }

    /// Each rule's state, to the loop, when it changed since last told.
    fn tell_states(&mut self) {
        if self.ev.rule_states().eq(self.told.iter().copied()) {
            return;
        }
        self.told.clear();
        self.told.extend(self.ev.rule_states());
        let gauges = self
            .ev
            .rules()
            .iter()
            .zip(&self.told)
            .map(|(r, s)| LogRuleGauge { rule: r.name.clone(), state: s.as_str().into() })
            .collect();
        self.states.send_replace(gauges);
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
pub(super) fn report(hit: &LogRuleHit) -> LogRuleReport {
    LogRuleReport { reason: hit.reason.clone(), rule: hit.rule().to_string(), line: hit.line().map(escape_line) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The output's end, once the loop has seen it, answers a later drain at once: the thread that
    /// would answer has returned (or is returning), and a byte on its wake pipe waited for the
    /// machine's 1 s deadline (the recovery bench's rare 1 s restarts after a log rule's stop).
    #[tokio::test]
    async fn a_drain_after_the_output_ended_is_answered_at_once() {
        let rules = Arc::new(crate::logrules::parse_rules(r#"[{"name": "E", "logPattern": ".*E.*"}]"#).unwrap());
        let (rx, tx) = pipe().unwrap();
        let mut watch = Some(LogWatch::start(rules, rx, Instant::now(), None, None).unwrap());
        drop(tx);
        loop {
            if LogWatch::next(&mut watch).await == News::Drained {
                break;
            }
        }
        assert!(!watch.as_ref().unwrap().drain(), "nothing is left to drain: no wait for an answer");
    }
}
