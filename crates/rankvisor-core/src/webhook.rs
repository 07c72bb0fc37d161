//! `--report-url`: the report POSTed as JSON on every state change and every `--report-interval`.
//!
//! Reports go through a bounded queue (the oldest is dropped when it is full, and counted) to one
//! sender task that POSTs them in order, with a per-request timeout and retries with backoff. The
//! supervisor only ever pushes onto the queue, so a slow or dead upstream cannot delay it.
//!
//! http:// and https:// (the system's CA bundle, or `ca_file`); `HTTPS_PROXY`/`HTTP_PROXY`/
//! `NO_PROXY` are honoured. The receiver's answer is read up to 64 KiB, never more. Credentials
//! in the URL (`http://user:pass@host/`) are sent as basic auth and never logged.

use crate::backoff::Backoff;
use crate::net::client::{redact_url, Body, ClientOptions, HttpClient, Method, ProxySettings, Roots};
use crate::status::Report;
use hyper::Uri;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};
use tracing::{info, warn};

/// Most of a receiver's answer read: what it says does not matter beyond its status.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Longest wait for a connection to the receiver (or the proxy).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the webhook behaves.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where to POST (`http://` or `https://`).
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
    /// The CA bundle an https receiver's certificate must chain to; None: the system's bundle
    /// (`SSL_CERT_FILE`, `SSL_CERT_DIR`, /etc/ssl/certs).
    pub ca_file: Option<PathBuf>,
    /// The proxies to go through.
    pub proxy: ProxySettings,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redact_url(&self.url.to_string()))
            .field("interval", &self.interval)
            .field("request_timeout", &self.request_timeout)
            .field("queue_capacity", &self.queue_capacity)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl WebhookConfig {
    /// The defaults for `url`: 30 s interval, 5 s per request, 64 reports, backoff 250 ms to 10 s,
    /// the system's CA bundle, no proxy (set `proxy`, e.g. `ProxySettings::from_env`).
    pub fn new(url: Uri) -> Self {
        Self {
            url,
            interval: Duration::from_secs(30),
            request_timeout: Duration::from_secs(5),
            queue_capacity: 64,
            backoff_initial: Duration::from_millis(250),
            backoff_max: Duration::from_secs(10),
            ca_file: None,
            proxy: ProxySettings::default(),
        }
    }

    /// The URL for logs: credentials replaced by `***`.
    pub fn url_for_logs(&self) -> String {
        redact_url(&self.url.to_string())
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

/// Read an `http(s)://[USER:PASS@]HOST[:PORT]/PATH` URL. The error shows the value with its
/// credentials redacted.
pub fn parse_url(s: &str) -> Result<Uri, ReportUrlError> {
    let err = |problem: &str| ReportUrlError { value: redact_url(s.trim()), problem: problem.to_string() };
    let uri: Uri =
        s.trim().parse().map_err(|_| err("expected an absolute URL such as http://collector:8080/reports"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(err("expected an http:// or https:// URL"));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(err("expected a host after the scheme"));
    }
    // The client must be able to request it too (it is stricter about some characters).
    if let Err(e) = reqwest::Url::parse(&uri.to_string()) {
        return Err(err(&format!("{e}: expected an absolute URL such as http://collector:8080/reports")));
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
    /// Start the sender task in `tasks`; its counters go to `stats`.
    pub fn spawn(cfg: WebhookConfig, stats: Arc<WebhookStats>, tasks: &mut JoinSet<()>) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(ReportQueue::new(cfg.queue_capacity)),
            stats,
            pushed: Notify::new(),
            flushing: AtomicBool::new(false),
            flush_started: Notify::new(),
        });
        tasks.spawn(send_loop(cfg, shared.clone()));
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

    /// No more reports: the sender delivers what is queued, at once (a backoff is cut short), and
    /// ends when the queue is empty or at the first failure: rankvisor is exiting, and a dead
    /// upstream must not hold the pod. Its task set waits for it, within the one deadline.
    pub fn finish(self) {
        self.shared.flushing.store(true, Ordering::Relaxed);
        self.shared.flush_started.notify_one();
        self.shared.pushed.notify_one();
    }
}

/// The client for `cfg`: the CA file or the system's roots, the proxies, the connect timeout.
fn client_for(cfg: &WebhookConfig) -> Result<HttpClient, String> {
    let roots = cfg.ca_file.clone().map_or(Roots::System, Roots::CaFile);
    let client = HttpClient::new(ClientOptions {
        roots,
        proxy: cfg.proxy.clone(),
        connect_timeout: CONNECT_TIMEOUT.min(cfg.request_timeout),
        bearer_token_file: None,
    })
    .map_err(|e| format!("cannot set up the client for {}: {e}", cfg.url_for_logs()))?;
    if cfg.url.scheme_str() == Some("https") && client.roots_loaded() == 0 {
        warn!(
            url = %cfg.url_for_logs(),
            "webhook: no CA certificate found (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs): https will fail; \
             mount a CA bundle and point SSL_CERT_FILE at it"
        );
    }
    Ok(client)
}

async fn send_loop(cfg: WebhookConfig, shared: Arc<Shared>) {
    let client = client_for(&cfg);
    let url = cfg.url_for_logs();
    let mut backoff = Backoff::new(cfg.backoff_initial, cfg.backoff_max);
    let mut failures = 0u32;
    loop {
        let head = shared.queue.lock().ok().and_then(|q| q.front().cloned());
        let Some(report) = head else {
            if shared.flushing.load(Ordering::Relaxed) {
                return;
            }
            // Notify keeps a permit: a push or a finish between the look and the wait is not lost.
            shared.pushed.notified().await;
            continue;
        };
        let result = match &client {
            Ok(c) => post(c, &cfg, &url, &report).await,
            Err(e) => Err(e.clone()),
        };
        match result {
            Ok(()) => {
                if let Ok(mut q) = shared.queue.lock() {
                    q.pop_sent(report.seq);
                }
                shared.stats.sent.fetch_add(1, Ordering::Relaxed);
                if failures > 0 {
                    info!(url = %url, failures, "webhook reachable again");
                }
                failures = 0;
                backoff.reset();
            }
            Err(problem) => {
                failures = failures.saturating_add(1);
                // One warning per outage, not one per retry.
                if failures == 1 {
                    warn!(url = %url, "webhook: {problem}; retrying with backoff");
                }
                shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                if shared.flushing.load(Ordering::Relaxed) {
                    let left = shared.queue.lock().map(|q| q.len()).unwrap_or(0);
                    warn!(left, "webhook: final reports not sent: the upstream failed during the final flush");
                    return;
                }
                tokio::select! {
                    () = sleep(backoff.next_delay()) => {}
                    () = shared.flush_started.notified() => {}
                }
            }
        }
    }
}

/// One POST; `url` is the redacted URL for messages. The answer is read up to
/// MAX_ANSWER_BYTES (so that a short one leaves the connection reusable), never more.
async fn post(client: &HttpClient, cfg: &WebhookConfig, url: &str, report: &Report) -> Result<(), String> {
    let body = serde_json::to_vec(report).map_err(|e| format!("cannot encode the report: {e}"))?;
    let body = Body { content_type: "application/json", bytes: body };
    let exchange = async {
        let resp = client
            .send(Method::POST, &cfg.url.to_string(), Some(body), cfg.request_timeout)
            .await
            .map_err(|e| format!("POST {url} failed: {e}"))?;
        let status = resp.status();
        // The status is the answer; the body only decides whether the connection can be reused.
        let _ = resp.collect(MAX_ANSWER_BYTES).await;
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(format!("POST {url} answered {status}: expected 2xx"))
        }
    };
    match timeout(cfg.request_timeout, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("POST {url} got no answer within {:?}", cfg.request_timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Identity, LocalStatus, ReplicaState, Timeline};
    use std::time::UNIX_EPOCH;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// Finish `hook` and wait (at most `limit`) for its sender to end.
    async fn finish(hook: Webhook, mut tasks: JoinSet<()>, limit: Duration) {
        hook.finish();
        let ended = timeout(limit, tasks.join_next()).await.expect("the sender ends once finished");
        ended.expect("a sender task").expect("the sender does not panic");
    }

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
    fn urls() {
        assert_eq!(parse_url("http://collector:8080/r").unwrap().port_u16(), Some(8080));
        assert!(parse_url("http://10.0.0.1/").is_ok());
        assert!(parse_url("https://collector.example/r").is_ok());
        // Host names are ASCII (no IDNA tables in the binary): an internationalized one goes in its xn-- form.
        assert!(parse_url("http://xn--bcher-kva.example/r").is_ok());
        assert!(parse_url("http://bücher.example/r").is_err());
        for (bad, why) in [
            ("ftp://x/", "expected an http:// or https:// URL"),
            ("collector:8080", "expected an http:// or https:// URL"),
            ("/reports", "expected an http:// or https:// URL"),
            ("not a url", "expected an absolute URL"),
        ] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_never_show() {
        let url = parse_url("http://user:s3cret@collector:8080/r").unwrap();
        let cfg = WebhookConfig::new(url);
        assert_eq!(cfg.url_for_logs(), "http://***@collector:8080/r");
        assert!(!format!("{cfg:?}").contains("s3cret"), "{cfg:?}");
        let e = parse_url("ftp://user:s3cret@collector/").unwrap_err().to_string();
        assert!(!e.contains("s3cret") && e.contains("ftp://***@collector/"), "{e}");
    }

    #[tokio::test]
    async fn credentials_go_as_basic_auth_and_not_into_messages() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let ok = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let _ = tx.send(crate::test_support::read_request(&mut s).await);
            let _ = s.write_all(&ok).await;
        });
        let cfg = WebhookConfig::new(parse_url(&format!("http://user:s3cret@{addr}/r")).unwrap());
        let client = client_for(&cfg).unwrap();
        let e = post(&client, &cfg, &cfg.url_for_logs(), &reports(1)[0]).await.unwrap_err();
        assert!(!e.contains("s3cret") && e.contains("answered 500"), "{e}");
        let head = rx.recv().await.unwrap();
        // base64("user:s3cret")
        assert!(head.contains("authorization: Basic dXNlcjpzM2NyZXQ=\r\n"), "{head}");
        assert!(head.starts_with("POST /r HTTP/1.1\r\n"), "{head}");
    }

    #[tokio::test]
    async fn https_receivers_work_with_their_ca() {
        use crate::test_support::{self_signed, tls_server};
        let (pem, config) = self_signed();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let addr = tls_server(config, tx).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), pem).unwrap();
        let url = parse_url(&format!("https://{addr}/hook")).unwrap();
        let cfg = WebhookConfig {
            ca_file: Some(dir.path().join("ca.crt")),
            proxy: ProxySettings::default(),
            ..WebhookConfig::new(url)
        };
        let stats = Arc::new(WebhookStats::default());
        let mut tasks = JoinSet::new();
        let hook = Webhook::spawn(cfg, stats.clone(), &mut tasks);
        hook.push(reports(1).remove(0));
        finish(hook, tasks, Duration::from_secs(10)).await;
        assert_eq!(stats.counts(), WebhookCounts { sent: 1, failed: 0, dropped: 0 });
        let request = rx.recv().await.unwrap();
        assert!(request.starts_with("POST /hook HTTP/1.1\r\n") && request.contains("\"schema_version\""), "{request}");
    }

    /// A receiver that accepts the report and answers with a body that never ends: the report
    /// counts as sent, and the answer is read no further than MAX_ANSWER_BYTES.
    #[tokio::test]
    async fn an_endless_answer_is_not_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let written = Arc::new(AtomicU64::new(0));
        let w = written.clone();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            crate::test_support::read_request(&mut s).await;
            let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n";
            s.write_all(head).await.unwrap();
            let block = vec![b'x'; 64 * 1024];
            while s.write_all(&block).await.is_ok() {
                w.fetch_add(block.len() as u64, Ordering::Relaxed);
            }
        });
        let url = parse_url(&format!("http://{addr}/")).unwrap();
        let cfg = WebhookConfig { request_timeout: Duration::from_secs(30), ..WebhookConfig::new(url) };
        let client = client_for(&cfg).unwrap();
        post(&client, &cfg, &cfg.url_for_logs(), &reports(1)[0]).await.unwrap();
        let total = written.load(Ordering::Relaxed);
        assert!(total < 64 * 1024 * 1024, "the receiver could write {total} bytes: the answer was read on");
    }

    /// A receiver that answers 500 `fail_first` times, then 204; it hands every body to `tx`.
    async fn receiver(fail_first: usize, tx: tokio::sync::mpsc::UnboundedSender<Report>) -> Uri {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let request = crate::test_support::read_request_or_eof(&mut s).await;
                // The body is all after the head: read_request stops at the announced length.
                let body = request.and_then(|t| t.split_once("\r\n\r\n").map(|(_, b)| b.to_string()));
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
        let mut tasks = JoinSet::new();
        let hook = Webhook::spawn(cfg, stats.clone(), &mut tasks);
        let mut tl = Timeline::new(UNIX_EPOCH);
        for state in [ReplicaState::Running, ReplicaState::Restarting, ReplicaState::Succeeded] {
            let st = LocalStatus { state, ..LocalStatus::default() };
            hook.push(tl.report(&Identity::default(), &st, UNIX_EPOCH));
        }
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(rx.recv().await.unwrap().state);
        }
        assert_eq!(got, [ReplicaState::Running, ReplicaState::Restarting, ReplicaState::Succeeded]);
        // The sender ends once the queue is empty: every answer is in, and counted.
        finish(hook, tasks, Duration::from_secs(5)).await;
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
        let mut tasks = JoinSet::new();
        let hook = Webhook::spawn(cfg, stats.clone(), &mut tasks);
        for r in reports(3) {
            hook.push(r);
        }
        // Let the first attempt fail and the sender enter its 60 s backoff.
        while stats.counts().failed == 0 {
            sleep(Duration::from_millis(5)).await;
        }
        let t = tokio::time::Instant::now();
        finish(hook, tasks, Duration::from_secs(2)).await;
        assert!(t.elapsed() < Duration::from_secs(1), "flush took {:?}", t.elapsed());
        let c = stats.counts();
        assert_eq!((c.sent, c.dropped), (0, 1));
        assert!(c.failed >= 2, "the flush retried once at once: {c:?}");
    }
}
