//! The HTTP server: a pure router from (method, path, latest report) to a reply, and a hyper 1
//! accept loop that takes an already-bound listener and a shutdown future (so tests bind port 0).

use super::metrics::{render_job_metrics, render_metrics, CONTENT_TYPE as METRICS};
use crate::rendezvous::JobView;
use crate::status::{ReplicaState, Report};
use crate::webhook::{WebhookCounts, WebhookStats};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::logging::{Throttle, Throttled};
use crate::net::Acceptor;

const TEXT: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";
/// Every endpoint here is read-only: the `Allow` of a 405.
const ALLOW: &str = "GET, HEAD";
/// A client that has not sent its request headers by then is cut off, so idle sockets cannot pile up.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once (the port is unauthenticated): a newcomer beyond this closes the
/// oldest connection, so a flood of slow clients cannot lock out a well-behaved probe.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// Bytes of request head buffered per connection (hyper's floor is 8 KiB; its default ~400 KiB
/// let 1,000 connections hold 400 MiB).
pub(super) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The longest any one connection lives, keep-alive included: every request here is tiny.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// How long a closing server lets its connections finish the replies they are writing.
const DRAIN: Duration = Duration::from_millis(500);
/// At most one "accept failed" / "connection limit" warning per this window.
const WARN_WINDOW: Duration = Duration::from_secs(10);

/// What the handlers read: the latest report and the webhook's counters.
#[derive(Clone)]
pub struct HttpState {
    /// The latest report, published by the reporter on every change.
    pub reports: watch::Receiver<Report>,
    /// The webhook's counters (all zero without a webhook).
    pub webhook: Arc<WebhookStats>,
    /// The master's job view, once the rendezvous link is attached (never set on workers).
    pub job: Arc<OnceLock<watch::Receiver<Option<JobView>>>>,
    /// `GET /stacks`: snapshots of the child's tree.
    pub stacks: Arc<crate::stacks::Snapshotter>,
    /// `GET /job/stacks`: the master's gathering, once the rendezvous link is attached.
    pub job_stacks: Arc<OnceLock<crate::stacks::JobStacksAsker>>,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("reports", &self.reports)
            .field("webhook", &self.webhook)
            .finish_non_exhaustive()
    }
}

/// One response, before it becomes HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: StatusCode,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl Reply {
    fn new(status: StatusCode, content_type: &'static str, body: String) -> Self {
        Self { status, content_type, body }
    }
}

/// The reply to `method path` given the latest report and, on the master, the job view: the whole
/// routing table.
pub fn route(
    method: &Method,
    path: &str,
    report: &Report,
    webhook: &WebhookCounts,
    job: Option<&Option<JobView>>,
) -> Reply {
    if method != Method::GET && method != Method::HEAD {
        return Reply::new(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            format!("method {method} not allowed: expected GET\n"),
        );
    }
    match path {
        "/" => Reply::new(StatusCode::OK, super::page::CONTENT_TYPE, super::page::JOB_PAGE.to_string()),
        "/healthz" => Reply::new(StatusCode::OK, TEXT, "ok\n".into()),
        // Ready means the barrier was passed and the training process runs: a replica that waits,
        // backs off or is stopping takes no traffic and counts as not ready in `kubectl get pods`.
        "/readyz" if report.state == ReplicaState::Running => {
            Reply::new(StatusCode::OK, TEXT, "ready: Running\n".into())
        }
        "/readyz" => Reply::new(StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("not ready: {:?}\n", report.state)),
        "/metrics" => Reply::new(StatusCode::OK, METRICS, metrics_body(report, webhook, job)),
        "/status" => match serde_json::to_string_pretty(report) {
            Ok(mut json) => {
                json.push('\n');
                Reply::new(StatusCode::OK, JSON, json)
            }
            Err(e) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("cannot encode the report: {e}\n")),
        },
        "/job" => job_reply(report, job),
        other => Reply::new(
            StatusCode::NOT_FOUND,
            TEXT,
            format!("no endpoint {other:?}: expected / (the job page), /healthz, /readyz, /metrics, /status /stacks, /job or /job/stacks (master)\n"),
        ),
    }
}

/// `/metrics`: this replica's metrics, and on the master the job-wide ones from its view.
fn metrics_body(report: &Report, webhook: &WebhookCounts, job: Option<&Option<JobView>>) -> String {
    let mut body = render_metrics(report, webhook);
    if let Some(Some(view)) = job {
        body.push_str(&render_job_metrics(view));
    }
    body
}

/// `/job`: the master's view of every replica; a clear 404 elsewhere, 503 before the first barrier.
fn job_reply(report: &Report, job: Option<&Option<JobView>>) -> Reply {
    match job {
        None => {
            let who = match (report.identity.replica_type.as_deref(), report.identity.rank) {
                (Some(t), Some(r)) => format!("this replica is {t} rank {r}"),
                (_, Some(r)) => format!("this replica is rank {r}"),
                _ => "this replica has no rendezvous".to_string(),
            };
            Reply::new(
                StatusCode::NOT_FOUND,
                TEXT,
                format!(
                    "no job view here: {who}; /job is served by the master (rank 0) of a job of several replicas \
                     with --rendezvous on\n"
                ),
            )
        }
        Some(None) => Reply::new(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "the job view is not ready: the replicas have not passed the first rendezvous barrier yet\n".into(),
        ),
        Some(Some(view)) => match serde_json::to_string_pretty(view) {
            Ok(mut json) => {
                json.push('\n');
                Reply::new(StatusCode::OK, JSON, json)
            }
            Err(e) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("cannot encode the job view: {e}\n")),
        },
    }
}

/// `GET /stacks`: a snapshot of the running child's tree (taken now, within `stacks::DEADLINE`).
async fn stacks_reply(state: &HttpState) -> Reply {
    let Some(pid) = state.reports.borrow().child_pid else {
        let st = state.reports.borrow().state;
        return Reply::new(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            format!("no training process runs ({st:?}): no stacks\n"),
        );
    };
    let snapshot = state.stacks.take(nix::unistd::Pid::from_raw(pid)).await;
    match serde_json::to_string_pretty(&snapshot) {
        Ok(mut json) => {
            json.push('\n');
            Reply::new(StatusCode::OK, JSON, json)
        }
        Err(e) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("cannot encode the stacks: {e}\n")),
    }
}

/// `GET /job/stacks`: the master gathers every replica's stacks now and groups them.
async fn job_stacks_reply(state: &HttpState) -> Reply {
    let Some(ask) = state.job_stacks.get().cloned() else {
        let text = "no job stacks here: /job/stacks is served by the master (rank 0) of a job of several replicas \
                    with --rendezvous on, once its link is up\n";
        return Reply::new(StatusCode::NOT_FOUND, TEXT, text.into());
    };
    match ask("asked".into()).await {
        Some(job) => match serde_json::to_string_pretty(&job) {
            Ok(mut json) => {
                json.push('\n');
                Reply::new(StatusCode::OK, JSON, json)
            }
            Err(e) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, TEXT, format!("cannot encode the stacks: {e}\n")),
        },
        None => Reply::new(StatusCode::SERVICE_UNAVAILABLE, TEXT, "the rendezvous master has stopped\n".into()),
    }
}

async fn respond(state: HttpState, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let readable = req.method() == Method::GET || req.method() == Method::HEAD;
    let reply = if req.uri().path() == "/stacks" && readable {
        stacks_reply(&state).await
    } else if req.uri().path() == "/job/stacks" && readable {
        job_stacks_reply(&state).await
    } else {
        let report = state.reports.borrow().clone();
        let job = state.job.get().map(|rx| rx.borrow().clone());
        route(req.method(), req.uri().path(), &report, &state.webhook.counts(), job.as_ref())
    };
    let mut resp = Response::new(Full::new(Bytes::from(reply.body)));
    *resp.status_mut() = reply.status;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(reply.content_type));
    if reply.status == StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static(ALLOW));
    }
    resp
}

/// The connections being served, oldest first.
struct Connections {
    live: VecDeque<JoinHandle<()>>,
    evicted: Throttle,
}

impl Connections {
    /// Room for one more: forget the finished, and close the oldest when at the cap.
    fn make_room(&mut self) {
        self.live.retain(|c| !c.is_finished());
        while self.live.len() >= MAX_CONNECTIONS {
            if let Some(oldest) = self.live.pop_front() {
                oldest.abort();
            }
            if let t @ Throttled::Log { .. } = self.evicted.hit(Instant::now()) {
                warn!("http: {MAX_CONNECTIONS} connections open: closing the oldest to serve a new one{}", t.note());
            }
        }
    }
}

fn serve_connection<H, F>(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    handler: H,
    mut closing: watch::Receiver<bool>,
) -> JoinHandle<()>
where
    H: Fn(Request<hyper::body::Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    tokio::spawn(async move {
        let svc = service_fn(move |req| {
            let resp = handler(req);
            async move { Ok::<_, Infallible>(resp.await) }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_buf_size(MAX_HEAD_BYTES)
            .serve_connection(TokioIo::new(stream), svc);
        let conn = async move {
            tokio::pin!(conn);
            // Closing: a reply being written is finished, an idle keep-alive connection closes.
            tokio::select! {
                r = conn.as_mut() => r,
                () = async { drop(closing.wait_for(|c| *c).await) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            }
        };
        match tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
            Ok(Err(e)) => debug!(%peer, "http connection ended: {e}"),
            Err(_) => debug!(%peer, "http connection closed after {CONNECTION_LIFETIME:?}"),
            Ok(Ok(())) => {}
        }
    })
}

/// Serve `listener` until `shutdown` resolves; each connection runs in its own task, at most
/// [`MAX_CONNECTIONS`] at once.
pub async fn serve(listener: TcpListener, state: HttpState, shutdown: impl Future<Output = ()>) {
    let handler = move |req: Request<hyper::body::Incoming>| respond(state.clone(), req);
    serve_with(listener, handler, shutdown).await;
}

/// Serve `listener` with `handler` until `shutdown` resolves, with the probes' limits (connection
/// cap, header timeout, head size, lifetime): the one accept loop of every HTTP endpoint here.
pub async fn serve_with<H, F>(listener: TcpListener, handler: H, shutdown: impl Future<Output = ()>)
where
    H: Fn(Request<hyper::body::Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    tokio::pin!(shutdown);
    let mut conns = Connections { live: VecDeque::new(), evicted: Throttle::new(WARN_WINDOW) };
    let mut acceptor = Acceptor::new("http accept failed");
    let (closing, closing_rx) = watch::channel(false);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            (stream, peer) = acceptor.accept(&listener) => {
                conns.make_room();
                conns.live.push_back(serve_connection(stream, peer, handler.clone(), closing_rx.clone()));
            }
        }
    }
    drop(listener);
    // Replies already decided (the agent's /shutdown, say) reach their clients; then the rest go.
    closing.send_replace(true);
    let _ = tokio::time::timeout(DRAIN, async {
        for c in conns.live.iter_mut() {
            let _ = c.await;
        }
    })
    .await;
    for c in conns.live {
        c.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{Identity, LocalStatus, Timeline};
    use std::time::UNIX_EPOCH;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn report(state: ReplicaState) -> Report {
        let st = LocalStatus { state, ..LocalStatus::default() };
        Timeline::new(UNIX_EPOCH).report(&Identity::default(), &st, UNIX_EPOCH)
    }

    #[test]
    fn readiness_follows_the_state() {
        let none = WebhookCounts::default();
        for s in ReplicaState::ALL {
            let r = route(&Method::GET, "/readyz", &report(s), &none, None);
            let want = if s == ReplicaState::Running { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
            assert_eq!(r.status, want, "{s:?}");
            assert!(r.body.contains(&format!("{s:?}")), "{}", r.body);
            assert_eq!(route(&Method::GET, "/healthz", &report(s), &none, None).status, StatusCode::OK);
        }
    }

    #[test]
    fn routes_and_errors() {
        let none = WebhookCounts::default();
        let r = report(ReplicaState::Running);
        let status = route(&Method::GET, "/status", &r, &none, None);
        assert_eq!((status.status, status.content_type), (StatusCode::OK, JSON));
        let back: Report = serde_json::from_str(&status.body).unwrap();
        assert_eq!(back, r);
        let m = route(&Method::HEAD, "/metrics", &r, &none, None);
        assert_eq!((m.status, m.content_type), (StatusCode::OK, METRICS));
        let page = route(&Method::GET, "/", &r, &none, None);
        assert_eq!((page.status, page.content_type), (StatusCode::OK, "text/html; charset=utf-8"));
        assert!(page.body.contains("<title>rankvisor</title>"), "{}", page.body);
        let nf = route(&Method::GET, "/nope", &r, &none, None);
        assert_eq!(nf.status, StatusCode::NOT_FOUND);
        assert!(nf.body.contains("\"/nope\""), "{}", nf.body);
        let post = route(&Method::POST, "/status", &r, &none, None);
        assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(post.body.contains("POST"), "{}", post.body);
    }

    #[test]
    fn job_on_master_and_worker() {
        let none = WebhookCounts::default();
        let mut r = report(ReplicaState::Running);
        r.identity.replica_type = Some("Worker".into());
        r.identity.rank = Some(2);
        let w = route(&Method::GET, "/job", &r, &none, None);
        assert_eq!(w.status, StatusCode::NOT_FOUND);
        assert!(w.body.contains("Worker rank 2") && w.body.contains("served by the master"), "{}", w.body);
        let early = route(&Method::GET, "/job", &r, &none, Some(&None));
        assert_eq!(early.status, StatusCode::SERVICE_UNAVAILABLE);
        let health = crate::rendezvous::Health::from(crate::rendezvous::NodeHealth::Off);
        let view = JobView::new("j", 2, "n0", &health, 0);
        let m = route(&Method::GET, "/job", &r, &none, Some(&Some(view.clone())));
        assert_eq!((m.status, m.content_type), (StatusCode::OK, JSON));
        let body: serde_json::Value = serde_json::from_str(&m.body).unwrap();
        assert_eq!(body, serde_json::to_value(&view).unwrap());
        assert_eq!(body["job"], "j");
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_the_latest_report_and_shuts_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(report(ReplicaState::Rendezvous));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = HttpState {
            reports: rx,
            webhook: Arc::new(WebhookStats::default()),
            job: Arc::default(),
            stacks: Arc::default(),
            job_stacks: Arc::default(),
        };
        let server = tokio::spawn(serve(listener, state, async {
            let _ = stopped.await;
        }));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        tx.send_replace(report(ReplicaState::Running));
        let ready = get(addr, "/readyz").await;
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        assert!(ready.contains("content-type: text/plain"), "{ready}");
        assert!(get(addr, "/metrics?x=1").await.contains("rankvisor_training_process_up 0"));
        stop.send(()).unwrap();
        server.await.unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed after shutdown");
    }
}
