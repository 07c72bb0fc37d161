//! The reporter: turns the driver's `LocalStatus` (and the node verdict) into `Report`s, keeps the
//! latest one for the HTTP server, and feeds the webhook on every state change and every interval.
//! It runs as tasks on the supervisor's runtime and only ever reads from the status channel, so
//! reporting can neither block nor slow supervision.

use crate::http::{serve, HttpAddr, HttpState};
use crate::status::{is_state_change, Identity, LocalStatus, Report, Timeline};
use crate::webhook::{Webhook, WebhookConfig, WebhookStats};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

/// What to report to, from the command line.
#[derive(Debug, Clone)]
pub struct ReportingConfig {
    /// `--http-addr`.
    pub http: HttpAddr,
    /// `--report-url` and friends, when a webhook is configured.
    pub webhook: Option<WebhookConfig>,
    /// What `GET /stacks` takes its snapshots with.
    pub stacks: Arc<crate::stacks::Snapshotter>,
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

/// The running reporters. They end on their own once the replica's status channel closes (the
/// event loop is over): the reporter publishes and pushes the final report, the webhook delivers
/// it, and the closing of the reports channel then ends the HTTP server and every follower of
/// [`Reporting::subscribe`]. Their tasks are in the caller's task set.
pub struct Reporting {
    reports: watch::Receiver<Report>,
    http_addr: Option<SocketAddr>,
    job: Arc<OnceLock<watch::Receiver<Option<crate::rendezvous::JobView>>>>,
    job_stacks: Arc<OnceLock<crate::stacks::JobStacksAsker>>,
}

impl std::fmt::Debug for Reporting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporting").field("http_addr", &self.http_addr).finish_non_exhaustive()
    }
}

/// Start the HTTP server and the webhook in `tasks`, fed by the replica's `status`.
///
/// An address that cannot be bound is logged and the endpoint is skipped: reporting is never a
/// reason to stop (or not start) training.
pub async fn start(
    cfg: ReportingConfig,
    identity: Identity,
    status: watch::Receiver<LocalStatus>,
    tasks: &mut JoinSet<()>,
) -> Reporting {
    let mut builder = Builder { identity, timeline: Timeline::new(SystemTime::now()), status, last_pushed: None };
    let first = builder.build();
    let (reports, reports_rx) = watch::channel(first.clone());
    let stats = Arc::new(WebhookStats::default());
    let webhook = cfg.webhook.clone().map(|w| Webhook::spawn(w, stats.clone(), tasks));
    if let Some(hook) = &webhook {
        builder.take_change(&first);
        hook.push(first);
    }
    let job: Arc<OnceLock<watch::Receiver<Option<crate::rendezvous::JobView>>>> = Arc::default();
    let job_stacks: Arc<OnceLock<crate::stacks::JobStacksAsker>> = Arc::default();
    let http_addr = match cfg.http {
        HttpAddr::Off => None,
        HttpAddr::Listen(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener.local_addr().ok();
                info!(addr = ?bound.unwrap_or(addr), "serving /healthz, /readyz, /metrics, /status (and /job on the master)");
                let state = HttpState {
                    reports: reports_rx.clone(),
                    webhook: stats.clone(),
                    job: job.clone(),
                    stacks: cfg.stacks.clone(),
                    job_stacks: job_stacks.clone(),
                };
                // Served until the reporter has published the final report and ended.
                let mut closing = reports_rx.clone();
                tasks.spawn(serve(listener, state, async move { while closing.changed().await.is_ok() {} }));
                bound
            }
            Err(e) => {
                warn!(%addr, "cannot listen for HTTP (probes, /metrics, /status are off): {e}");
                None
            }
        },
    };
    let interval = cfg.webhook.as_ref().map(|w| w.interval);
    tasks.spawn(follow(builder, reports, webhook, interval));
    Reporting { reports: reports_rx, http_addr, job, job_stacks }
}

impl Reporting {
    /// Where the HTTP server listens, when it does.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// A receiver of every new report (for later reporters: Kubernetes Events, the Pod
    /// condition); its channel closes after the final report.
    pub fn subscribe(&self) -> watch::Receiver<Report> {
        self.reports.clone()
    }

    /// Where the master's gathering of the job's stacks goes once the rendezvous link has one.
    pub fn job_stacks_slot(&self) -> Arc<OnceLock<crate::stacks::JobStacksAsker>> {
        self.job_stacks.clone()
    }

    /// Where the master's job view goes once the rendezvous link has one (set at most once): the
    /// link starts after reporting, as it streams this replica's reports to the master.
    pub fn job_view_slot(&self) -> Arc<OnceLock<watch::Receiver<Option<crate::rendezvous::JobView>>>> {
        self.job.clone()
    }
}

/// Rebuild the report on every status change; push state changes and, every `interval`, the
/// current report to the webhook. When the status channel closes: the final report, published
/// and pushed, and the webhook told to deliver what it holds; returning drops `reports`.
async fn follow(
    mut builder: Builder,
    reports: watch::Sender<Report>,
    webhook: Option<Webhook>,
    interval: Option<Duration>,
) {
    let mut status = builder.status.clone();
    let period = interval.unwrap_or(Duration::from_secs(3600));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (periodic, last) = tokio::select! {
            changed = status.changed() => (false, changed.is_err()),
            _ = tick.tick(), if interval.is_some() => (true, false),
        };
        let report = builder.build();
        let push = builder.take_change(&report) || periodic;
        reports.send_replace(report.clone());
        if let (true, Some(hook)) = (push, &webhook) {
            hook.push(report);
        }
        if last {
            if let Some(hook) = webhook {
                hook.finish();
            }
            return;
        }
    }
}
