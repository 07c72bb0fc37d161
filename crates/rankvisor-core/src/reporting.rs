//! The reporter: turns the driver's `LocalStatus` (and the node verdict) into `Report`s, keeps the
//! latest one for the HTTP server, and feeds the webhook on every state change and every interval.
//! It runs as tasks on the supervisor's runtime and only ever reads from the status channel, so
//! reporting can neither block nor slow supervision.

use crate::http::{serve, HttpAddr, HttpState};
use crate::status::{is_state_change, Identity, LocalStatus, Report, Timeline};
use crate::webhook::{Webhook, WebhookConfig, WebhookStats};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

/// What to report to, from the command line.
#[derive(Debug, Clone)]
pub struct ReportingConfig {
    /// `--http-addr`.
    pub http: HttpAddr,
    /// `--report-url` and friends, when a webhook is configured.
    pub webhook: Option<WebhookConfig>,
}

/// Builds reports: the identity, the timeline and the last report sent upstream.
struct Builder {
    identity: Identity,
    timeline: Timeline,
    status: watch::Receiver<LocalStatus>,
    last_pushed: Option<Report>,
}

impl Builder {
    fn build(&mut self) -> Report {
        let status = self.status.borrow_and_update().clone();
        self.timeline.report(&self.identity, &status, SystemTime::now())
    }

    /// The report is a state change worth a POST of its own (and becomes the last one pushed).
    fn take_change(&mut self, report: &Report) -> bool {
        let changed = is_state_change(self.last_pushed.as_ref(), report);
        if changed {
            self.last_pushed = Some(report.clone());
        }
        changed
    }
}

/// The running reporters; [`Reporting::finish`] flushes them when rankvisor exits.
pub struct Reporting {
    builder: Arc<Mutex<Builder>>,
    reports: watch::Sender<Report>,
    webhook: Option<Webhook>,
    stop_server: Option<oneshot::Sender<()>>,
    stop_reporter: Option<oneshot::Sender<()>>,
    http_addr: Option<SocketAddr>,
    job: Arc<OnceLock<watch::Receiver<Option<crate::rendezvous::JobView>>>>,
}

impl std::fmt::Debug for Reporting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporting").field("http_addr", &self.http_addr).finish_non_exhaustive()
    }
}

/// Start the HTTP server and the webhook on the current runtime, fed by the replica's `status`.
///
/// An address that cannot be bound is logged and the endpoint is skipped: reporting is never a
/// reason to stop (or not start) training.
pub async fn start(cfg: ReportingConfig, identity: Identity, status: watch::Receiver<LocalStatus>) -> Reporting {
    let mut builder = Builder { identity, timeline: Timeline::new(SystemTime::now()), status, last_pushed: None };
    let first = builder.build();
    let (reports, reports_rx) = watch::channel(first.clone());
    let stats = Arc::new(WebhookStats::default());
    let webhook = cfg.webhook.clone().map(|w| Webhook::spawn(w, stats.clone()));
    if let Some(hook) = &webhook {
        builder.take_change(&first);
        hook.push(first);
    }
    let job: Arc<OnceLock<watch::Receiver<Option<crate::rendezvous::JobView>>>> = Arc::default();
    let (stop_server, http_addr) = match cfg.http {
        HttpAddr::Off => (None, None),
        HttpAddr::Listen(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener.local_addr().ok();
                info!(addr = ?bound.unwrap_or(addr), "serving /healthz, /readyz, /metrics, /status (and /job on the master)");
                let (stop, stopped) = oneshot::channel::<()>();
                let state = HttpState { reports: reports_rx, webhook: stats.clone(), job: job.clone() };
                tokio::spawn(serve(listener, state, async {
                    let _ = stopped.await;
                }));
                (Some(stop), bound)
            }
            Err(e) => {
                warn!(%addr, "cannot listen for HTTP (probes, /metrics, /status are off): {e}");
                (None, None)
            }
        },
    };
    let builder = Arc::new(Mutex::new(builder));
    let (stop_reporter, stopped) = oneshot::channel();
    let interval = cfg.webhook.as_ref().map(|w| w.interval);
    tokio::spawn(follow(builder.clone(), reports.clone(), webhook.clone(), interval, stopped));
    Reporting { builder, reports, webhook, stop_server, stop_reporter: Some(stop_reporter), http_addr, job }
}

impl Reporting {
    /// Where the HTTP server listens, when it does.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// A receiver of every new report: for later reporters (Kubernetes Events, the Pod condition).
    pub fn subscribe(&self) -> watch::Receiver<Report> {
        self.reports.subscribe()
    }

    /// Where the master's job view goes once the rendezvous link has one (set at most once).
    pub fn job_view_slot(&self) -> Arc<OnceLock<watch::Receiver<Option<crate::rendezvous::JobView>>>> {
        self.job.clone()
    }

    /// Serve `/job` from the master's job view (the rendezvous link starts after reporting, as it
    /// streams this replica's reports to the master); a second view is ignored.
    pub fn attach_job_view(&self, view: watch::Receiver<Option<crate::rendezvous::JobView>>) {
        let _ = self.job.set(view);
    }

    /// Report the final state and wait (at most `limit`) for the webhook to deliver it.
    pub async fn finish(mut self, limit: Duration) {
        if let Some(stop) = self.stop_reporter.take() {
            let _ = stop.send(());
        }
        let (report, changed) = match self.builder.lock() {
            Ok(mut b) => {
                let r = b.build();
                let changed = b.take_change(&r);
                (r, changed)
            }
            Err(_) => return,
        };
        self.reports.send_replace(report.clone());
        if let Some(hook) = &self.webhook {
            if changed {
                hook.push(report);
            }
            hook.flush(limit).await;
        }
        if let Some(stop) = self.stop_server.take() {
            let _ = stop.send(());
        }
    }
}

/// Rebuild the report on every status change; push state changes and, every
/// `interval`, the current report to the webhook.
async fn follow(
    builder: Arc<Mutex<Builder>>,
    reports: watch::Sender<Report>,
    webhook: Option<Webhook>,
    interval: Option<Duration>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut status = match builder.lock() {
        Ok(b) => b.status.clone(),
        Err(_) => return,
    };
    let period = interval.unwrap_or(Duration::from_secs(3600));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let periodic = tokio::select! {
            _ = &mut stopped => return,
            changed = status.changed() => {
                if changed.is_err() {
                    return;
                }
                false
            }
            _ = tick.tick(), if interval.is_some() => true,
        };
        let Ok(mut b) = builder.lock() else { return };
        let report = b.build();
        let push = b.take_change(&report) || periodic;
        drop(b);
        reports.send_replace(report.clone());
        if let (true, Some(hook)) = (push, &webhook) {
            hook.push(report);
        }
    }
}
