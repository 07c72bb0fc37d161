//! `--report-url`: the report POSTed as JSON on every state change and every `--report-interval`.
//!
//! Reports go through a bounded queue (the oldest is dropped when it is full, and counted) to one
//! sender task that POSTs them in order, with a per-request timeout and retries with backoff. The
//! supervisor only ever pushes onto the queue, so a slow or dead upstream cannot delay it.

use crate::report::Report;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{header, Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{sleep, timeout, Instant};
use tracing::{info, warn};

/// How the webhook behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where to POST (`http://` only for now).
    pub url: Uri,
    /// Re-send the current report this often even without a change.
    pub interval: Duration,
    /// The longest one request (connect, send, response) may take.
    pub request_timeout: Duration,
    /// Reports kept while the upstream is unreachable.
    pub queue_capacity: usize,
    /// First delay after a failed request; it doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest delay between retries.
    pub backoff_max: Duration,
}

impl WebhookConfig {
    /// The defaults for `url`: 30 s interval, 5 s per request, 64 reports, backoff 250 ms to 10 s.
    pub fn new(url: Uri) -> Self {
        Self {
            url,
            interval: Duration::from_secs(30),
            request_timeout: Duration::from_secs(5),
            queue_capacity: 64,
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(10),
        }
    }
}

/// The `--report-url` value is not a usable URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--report-url {value:?} (RANKVISOR_REPORT_URL) is invalid: {problem}")]
pub struct ReportUrlError {
    /// What was given.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Read an `http://HOST[:PORT]/PATH` URL.
pub fn parse_url(s: &str) -> Result<Uri, ReportUrlError> {
    let err = |problem: &str| ReportUrlError { value: s.to_string(), problem: problem.to_string() };
    let uri: Uri =
        s.trim().parse().map_err(|_| err("expected an absolute URL such as http://collector:8080/reports"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => return Err(err("https is not supported yet: expected an http:// URL")),
        _ => return Err(err("expected an http:// URL")),
    }
    if uri.host().map_or(true, str::is_empty) {
        return Err(err("expected a host after http://"));
    }
    Ok(uri)
}

/// A snapshot of the webhook's counters, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookCounts {
    /// Reports the upstream accepted (2xx).
    pub sent: u64,
    /// Requests that failed: refused, timed out, or a non-2xx answer.
    pub failed: u64,
    /// Reports dropped unsent because the queue was full.
    pub dropped: u64,
}

/// The webhook's counters, shared with the HTTP server.
#[derive(Debug, Default)]
pub struct WebhookStats {
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

impl WebhookStats {
    /// The counters now.
    pub fn counts(&self) -> WebhookCounts {
        WebhookCounts {
            sent: self.sent.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// Reports waiting to be sent, oldest first, at most `capacity`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportQueue {
    items: VecDeque<Report>,
    capacity: usize,
}

impl ReportQueue {
    /// An empty queue holding at most `capacity` reports (at least one).
    pub fn new(capacity: usize) -> Self {
        Self { items: VecDeque::new(), capacity: capacity.max(1) }
    }

    /// Append `report`, dropping the oldest ones to make room; returns how many were dropped.
    pub fn push(&mut self, report: Report) -> u64 {
        let mut dropped = 0;
        while self.items.len() >= self.capacity {
            self.items.pop_front();
            dropped += 1;
        }
        self.items.push_back(report);
        dropped
    }

    /// The oldest report.
    pub fn front(&self) -> Option<&Report> {
        self.items.front()
    }

    /// Remove the oldest report if it is still the one numbered `seq` (it may have been dropped
    /// while it was being sent).
    pub fn pop_sent(&mut self, seq: u64) {
        if self.items.front().is_some_and(|r| r.seq == seq) {
            self.items.pop_front();
        }
    }

    /// Reports waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The delay after `failures` consecutive failed requests: initial, doubling, capped at max.
pub fn retry_delay(failures: u32, initial: Duration, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(max)
}

struct Shared {
    queue: Mutex<ReportQueue>,
    stats: Arc<WebhookStats>,
    /// A report was pushed.
    pushed: Notify,
    /// The final flush began: stop waiting out a backoff.
    flushing: AtomicBool,
    flush_started: Notify,
}

/// The handle the reporter pushes reports through.
#[derive(Clone)]
pub struct Webhook {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook").field("stats", &self.shared.stats).finish_non_exhaustive()
    }
}

impl Webhook {
    /// Start the sender task on the current runtime; its counters go to `stats`.
    pub fn spawn(cfg: WebhookConfig, stats: Arc<WebhookStats>) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(ReportQueue::new(cfg.queue_capacity)),
            stats,
            pushed: Notify::new(),
            flushing: AtomicBool::new(false),
            flush_started: Notify::new(),
        });
        tokio::spawn(send_loop(cfg, shared.clone()));
        Self { shared }
    }

    /// Queue `report` for sending; never waits.
    pub fn push(&self, report: Report) {
        let dropped = match self.shared.queue.lock() {
            Ok(mut q) => q.push(report),
            Err(_) => 1,
        };
        if dropped > 0 {
            self.shared.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        }
        self.shared.pushed.notify_one();
    }

    /// Wait until every queued report is sent, a request fails, or `limit` passes: rankvisor is
    /// exiting, and a dead upstream must not hold the pod.
    pub async fn flush(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let failed_before = self.shared.stats.failed.load(Ordering::Relaxed);
        self.shared.flushing.store(true, Ordering::Relaxed);
        self.shared.flush_started.notify_one();
        while Instant::now() < deadline {
            let empty = self.shared.queue.lock().map(|q| q.is_empty()).unwrap_or(true);
            if empty || self.shared.stats.failed.load(Ordering::Relaxed) > failed_before {
                return;
            }
            sleep(Duration::from_millis(5)).await;
        }
        let left = self.shared.queue.lock().map(|q| q.len()).unwrap_or(0);
        warn!(left, "webhook: final reports not sent within {limit:?}");
    }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

async fn send_loop(cfg: WebhookConfig, shared: Arc<Shared>) {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(cfg.request_timeout));
    connector.set_nodelay(true);
    let client: HttpClient =
        Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(connector);
    let mut failures = 0u32;
    loop {
        let head = shared.queue.lock().ok().and_then(|q| q.front().cloned());
        let Some(report) = head else {
            shared.pushed.notified().await;
            continue;
        };
        match post(&client, &cfg, &report).await {
            Ok(()) => {
                if let Ok(mut q) = shared.queue.lock() {
                    q.pop_sent(report.seq);
                }
                shared.stats.sent.fetch_add(1, Ordering::Relaxed);
                if failures > 0 {
                    info!(url = %cfg.url, failures, "webhook reachable again");
                }
                failures = 0;
            }
            Err(problem) => {
                shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                failures = failures.saturating_add(1);
                // One warning per outage, not one per retry.
                if failures == 1 {
                    warn!(url = %cfg.url, "webhook: {problem}; retrying with backoff");
                }
                if !shared.flushing.load(Ordering::Relaxed) {
                    let delay = retry_delay(failures, cfg.backoff_initial, cfg.backoff_max);
                    tokio::select! {
                        () = sleep(delay) => {}
                        () = shared.flush_started.notified() => {}
                    }
                }
            }
        }
    }
}

async fn post(client: &HttpClient, cfg: &WebhookConfig, report: &Report) -> Result<(), String> {
    let body = serde_json::to_vec(report).map_err(|e| format!("cannot encode the report: {e}"))?;
    let req = Request::builder()
        .method(Method::POST)
        .uri(cfg.url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::USER_AGENT, concat!("rankvisor/", env!("CARGO_PKG_VERSION")))
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("cannot build the request: {e}"))?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| format!("POST {} failed: {e}", cfg.url))?;
        let status = resp.status();
        // Read the answer to the end so the connection can be reused.
        let _ = resp.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("POST {} answered {status}: expected 2xx", cfg.url))
        }
    };
    match timeout(cfg.request_timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("POST {} got no answer within {:?}", cfg.url, cfg.request_timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Identity, LocalStatus, ReplicaState, Timeline};
    use std::time::UNIX_EPOCH;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn reports(n: usize) -> Vec<Report> {
        let mut tl = Timeline::new(UNIX_EPOCH);
        (0..n)
            .map(|i| {
                let st = LocalStatus { restart_count: i as u32, ..LocalStatus::default() };
                tl.report(&Identity::default(), &st, UNIX_EPOCH)
            })
            .collect()
    }

    #[test]
    fn queue_drops_the_oldest() {
        let mut q = ReportQueue::new(2);
        let r = reports(4);
        assert_eq!(q.push(r[0].clone()), 0);
        assert_eq!(q.push(r[1].clone()), 0);
        assert_eq!(q.push(r[2].clone()), 1);
        assert_eq!(q.front().map(|r| r.seq), Some(2));
        q.pop_sent(1);
        assert_eq!(q.len(), 2, "report 1 was dropped while in flight: nothing to pop");
        q.pop_sent(2);
        assert_eq!(q.front().map(|r| r.seq), Some(3));
        assert_eq!(q.push(r[3].clone()), 0);
        assert_eq!(ReportQueue::new(0).push(r[0].clone()), 0, "capacity 0 means 1");
    }

    #[test]
    fn retry_delays_double_up_to_the_cap() {
        let ms = Duration::from_millis;
        let got: Vec<Duration> = (1..=8).map(|n| retry_delay(n, ms(250), ms(10_000))).collect();
        assert_eq!(got, [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000].map(ms));
        assert_eq!(retry_delay(0, ms(250), ms(1000)), ms(250));
        assert_eq!(retry_delay(u32::MAX, ms(250), ms(1000)), ms(1000));
    }

    #[test]
    fn urls() {
        assert_eq!(parse_url("http://collector:8080/r").unwrap().port_u16(), Some(8080));
        assert!(parse_url("http://10.0.0.1/").is_ok());
        for (bad, why) in [
            ("https://x/", "https is not supported yet"),
            ("ftp://x/", "expected an http:// URL"),
            ("collector:8080", "expected an http:// URL"),
            ("/reports", "expected an http:// URL"),
            ("not a url", "expected an absolute URL"),
        ] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    /// A receiver that answers 500 `fail_first` times, then 204; it hands every body to `tx`.
    async fn receiver(fail_first: usize, tx: tokio::sync::mpsc::UnboundedSender<Report>) -> Uri {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = Vec::new();
                let body = loop {
                    let mut chunk = [0u8; 4096];
                    let k = s.read(&mut chunk).await.unwrap();
                    if k == 0 {
                        break None;
                    }
                    buf.extend_from_slice(&chunk[..k]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_string))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if body.len() >= len {
                            break Some(body[..len].to_string());
                        }
                    }
                };
                let Some(body) = body else { continue };
                n += 1;
                let answer = if n <= fail_first { "500 Internal Server Error" } else { "204 No Content" };
                if n > fail_first {
                    tx.send(serde_json::from_str(&body).unwrap()).unwrap();
                }
                let _ = s
                    .write_all(
                        format!("HTTP/1.1 {answer}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
                    )
                    .await;
            }
        });
        url
    }

    #[tokio::test]
    async fn retries_and_keeps_order() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let url = receiver(2, tx).await;
        let cfg = WebhookConfig { backoff_initial: Duration::from_millis(5), ..WebhookConfig::new(url) };
        let stats = Arc::new(WebhookStats::default());
        let hook = Webhook::spawn(cfg, stats.clone());
        let mut tl = Timeline::new(UNIX_EPOCH);
        for state in [ReplicaState::Running, ReplicaState::Restarting, ReplicaState::Succeeded] {
            let st = LocalStatus { state, ..LocalStatus::default() };
            hook.push(tl.report(&Identity::default(), &st, UNIX_EPOCH));
        }
        hook.flush(Duration::from_secs(5)).await;
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(rx.recv().await.unwrap().state);
        }
        assert_eq!(got, [ReplicaState::Running, ReplicaState::Restarting, ReplicaState::Succeeded]);
        assert_eq!(stats.counts(), WebhookCounts { sent: 3, failed: 2, dropped: 0 });
    }

    #[tokio::test]
    async fn flush_gives_up_at_the_first_failure_when_the_upstream_is_down() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}/").parse().unwrap();
        let cfg =
            WebhookConfig { queue_capacity: 2, backoff_initial: Duration::from_secs(60), ..WebhookConfig::new(url) };
        let stats = Arc::new(WebhookStats::default());
        let hook = Webhook::spawn(cfg, stats.clone());
        for r in reports(3) {
            hook.push(r);
        }
        // Let the first attempt fail and the sender enter its 60 s backoff.
        while stats.counts().failed == 0 {
            sleep(Duration::from_millis(5)).await;
        }
        let t = Instant::now();
        hook.flush(Duration::from_secs(2)).await;
        assert!(t.elapsed() < Duration::from_secs(1), "flush took {:?}", t.elapsed());
        let c = stats.counts();
        assert_eq!((c.sent, c.dropped), (0, 1));
        assert!(c.failed >= 2, "the flush retried once at once: {c:?}");
    }
}
