//! `rankvisor [OPTIONS] -- COMMAND`: the composition root of supervision. It builds the runtime,
//! the sources (node health, the rendezvous link) and the sinks (HTTP, webhook, Kubernetes Events,
//! `--status-fd`), runs the one event loop, and lets the sinks finish before rankvisor exits.
//!
//! Shutdown is one event: the loop returns and drops the replica's status sender (and the agent's
//! status sender). Every background task follows a channel that closes because of it: the
//! reporter publishes and pushes the final report and tells the webhook to deliver it, then drops
//! the reports channel, which ends the HTTP server and the Kubernetes Events reporter after they
//! have served or sent the final report; the link sends the final state to the master; the
//! agent's server replies to what it has already accepted (`/shutdown`). Every such task is in one
//! `JoinSet`, drained with one deadline ([`FINISH`]) and aborted past it.

use crate::agent;
use crate::config::{EnvSnapshot, KubeEventsTarget, SuperviseConfig};
use crate::health::{self, NodeHealthSource};
use crate::kube::{KubeClient, KubeConfig};
use crate::policy::RestartScope;
use crate::process::{self, Signals};
use crate::replica::{
    self, link, AgentChannels, HealthGate, HealthSource, LinkParts, LinkStarter, LoopConfig, ReplicaConfig, Sources,
};
use crate::reporting::{self, Reporting, ReportingConfig};
use crate::status::fd_sink::StatusSink;
use crate::{exit, kube_events, stacks};
use std::time::Duration;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

/// How long the sinks may take to deliver the final state once supervision is over.
const FINISH: Duration = Duration::from_secs(2);

/// Supervise the training command; return rankvisor's exit status.
pub fn run(cfg: SuperviseConfig, env: &EnvSnapshot, signals: Signals) -> i32 {
    for w in &cfg.warnings {
        warn!("{w}");
    }
    if !cfg.inferred.is_empty() {
        info!("rank contract: {}", cfg.inferred.join("; "));
    }
    if let Some(path) = &cfg.heartbeat_file {
        // A FIFO or device there would block the loop: refused before anything starts.
        if let Err(e) = crate::heartbeat::check_path(path) {
            return super::config_error(
                &format!("--heartbeat-file (RANKVISOR_HEARTBEAT_FILE): {e}"),
                cfg.termination_log.clone(),
            );
        }
    }
    let status_sink = match cfg.status_fd.map(StatusSink::from_fd).transpose() {
        Ok(s) => s,
        Err(e) => return super::config_error(&e.to_string(), cfg.termination_log.clone()),
    };
    let kube_events_cfg = match kube_events_reporter(&cfg, env) {
        Ok(c) => c,
        Err(e) => return super::config_error(&e, cfg.termination_log.clone()),
    };
    let kube_health = match cfg.health.source {
        NodeHealthSource::Kubernetes => match super::check_node::kube_client(&cfg.kube, env) {
            Ok(c) => Some(c),
            Err(e) => return super::config_error(&e, cfg.termination_log.clone()),
        },
        _ => None,
    };
    if let Err(e) = process::become_subreaper() {
        warn!("cannot become a child subreaper: {e}");
    }
    process::install_panic_hook(cfg.termination_log.clone());
    if cfg.termination_log.is_some() {
        crate::termination::reserve_descriptor();
    }
    let runtime = match super::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    // A failpoint for the test of the panic path: in debug builds, and in a release build only with
    // the `failpoints` feature (never in the image's).
    let panic_after_spawn = (cfg!(debug_assertions) || cfg!(feature = "failpoints"))
        && env.get("RANKVISOR_TEST_FAILPOINT").as_deref() == Some("panic-after-spawn");
    let me = std::env::current_exe().ok();
    let named = env.get(stacks::READER_ENV).map(std::path::PathBuf::from);
    let reader = stacks::reader_beside(me.as_deref(), named, env.get("PATH").as_deref().map(std::ffi::OsStr::new));
    let snapshots = std::sync::Arc::new(stacks::Snapshotter::new(reader));
    let sinks = Sinks { kube_events: kube_events_cfg, status: status_sink.clone(), snapshots };
    let code = runtime.block_on(supervise(cfg, kube_health, sinks, signals, panic_after_spawn));
    // Off the event loop: the --status-fd reader gets every line before the launcher is gone.
    if let Some(sink) = &status_sink {
        sink.flush(FINISH);
    }
    // The process exits next: no wait for a blocked DNS lookup of the webhook's host (a blocking
    // thread); exit(2) ends every thread.
    runtime.shutdown_background();
    code
}

/// Where the replica's status goes besides HTTP and the webhook, and what takes its snapshots.
struct Sinks {
    kube_events: Option<kube_events::KubeEventsConfig>,
    status: Option<StatusSink>,
    snapshots: std::sync::Arc<stacks::Snapshotter>,
}

async fn supervise(
    cfg: SuperviseConfig,
    kube_health: Option<(KubeClient, String)>,
    sinks: Sinks,
    signals: Signals,
    panic_after_spawn: bool,
) -> i32 {
    let Sinks { kube_events: kube_events_cfg, status: status_sink, snapshots } = sinks;
    let mut tasks = JoinSet::new();
    let (status, _keep) = tokio::sync::watch::channel(Default::default());
    let health: Option<HealthSource> = match (&cfg.health.source, kube_health) {
        (NodeHealthSource::File(path), _) => {
            let rx = health::spawn_file_watcher(path.clone(), cfg.health.require_label, Duration::from_secs(1));
            Some(Box::pin(async move { rx }))
        }
        // The first look may take --node-health-timeout; the loop handles signals meanwhile.
        (NodeHealthSource::Kubernetes, Some((client, node))) => {
            let opts = health::KubeWatchOptions::new(node, cfg.health.require_label, cfg.kube.node_health_timeout);
            Some(Box::pin(health::spawn_kubernetes_watcher(client, opts)))
        }
        _ => None,
    };
    let reporting = reporting::start(
        ReportingConfig { http: cfg.http, webhook: cfg.webhook.clone(), stacks: snapshots.clone() },
        cfg.identity.clone(),
        status.subscribe(),
        &mut tasks,
    )
    .await;
    if let Some(kc) = kube_events_cfg {
        kube_events::spawn(kc, reporting.subscribe(), &mut tasks);
    }
    let agent = match cfg.agent {
        Some(addr) => match start_agent(addr, &mut tasks).await {
            Ok(channels) => Some(channels),
            Err(e) => return super::config_error(&e, cfg.termination_log.clone()),
        },
        None => None,
    };
    let link = cfg.link.clone().map(|lc| link_starter(lc, cfg.supervisor.scope, &reporting, snapshots.clone()));
    let loop_cfg = LoopConfig {
        replica: ReplicaConfig {
            supervisor: cfg.supervisor,
            health_gate: match (&health, cfg.health.wait) {
                (None, _) => HealthGate::Off,
                (Some(_), false) => HealthGate::FailFast,
                (Some(_), true) => HealthGate::Wait,
            },
            mode: crate::config::replica_mode(&cfg),
            log_rules: cfg.log_rules.clone().map(replica::machine::LogRules),
        },
        command: cfg.child.clone(),
        heartbeat_file: cfg.heartbeat_file.clone(),
        termination_log: cfg.termination_log.clone(),
        status_sink,
        panic_after_spawn,
        metric_rule: cfg.straggler.as_ref().map(|s| s.rule.clone()),
        snapshots,
    };
    let code = match replica::run(loop_cfg, signals, status, Sources { health, link, agent }).await {
        Ok(replica::Finished { code, link }) => {
            if let Some(link) = link {
                tasks.spawn(async move {
                    let _ = link.await;
                });
            }
            code
        }
        Err(e) => {
            error!("supervision failed: {e}");
            exit::EXTERNAL_FAILURE
        }
    };
    drop(reporting);
    finish(tasks).await;
    code
}

/// Wait for every task to end (each follows a channel the loop's end closed), at most [`FINISH`];
/// abort the rest.
async fn finish(mut tasks: JoinSet<()>) {
    let drained = tokio::time::timeout(FINISH, async {
        while let Some(ended) = tasks.join_next().await {
            // The child's status is decided: a sink's panic is logged, not rankvisor's exit.
            if let Err(e) = ended {
                error!("a reporting task failed: {e}");
            }
        }
    })
    .await;
    if drained.is_err() {
        warn!(left = tasks.len(), "reporting did not finish within {FINISH:?}: giving up on it");
        tasks.abort_all();
    }
}

/// Serve the HyperPod agent's API on `addr` in `tasks`; the server ends once the loop has dropped
/// the agent's status (its replies already accepted still go out).
async fn start_agent(addr: std::net::SocketAddr, tasks: &mut JoinSet<()>) -> Result<AgentChannels, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--agent-addr (RANKVISOR_AGENT_ADDR) {addr}: cannot listen: {e}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    info!(addr = %bound, "agent hyperpod: serving /status, /start, /stop, /update, /shutdown");
    let (orders_tx, orders) = tokio::sync::mpsc::unbounded_channel();
    let init = agent::StatusView::initial(std::time::SystemTime::now());
    let (status, status_rx) = tokio::sync::watch::channel(init);
    let mut closing = status_rx.clone();
    let http = agent::server::AgentHttp { orders: orders_tx, status: status_rx };
    tasks.spawn(agent::server::serve(listener, http, async move { while closing.changed().await.is_ok() {} }));
    Ok(AgentChannels { orders, status })
}

/// Starts the rendezvous link once the machine asks: the health it carries follows the source,
/// this replica's reports go upstream, and the master's job view is served on `/job`.
fn link_starter(
    lc: link::JobLinkConfig,
    scope: RestartScope,
    reporting: &Reporting,
    snapshots: std::sync::Arc<stacks::Snapshotter>,
) -> LinkStarter {
    let reports = reporting.subscribe();
    let (job_views, job_stacks) = (reporting.job_view_slot(), reporting.job_stacks_slot());
    Box::new(move |health| {
        let upstream = link::Upstream::new(reports).with_snapshots(snapshots);
        let l = link::start(lc, scope, link::rendezvous_health(health), upstream)
            .map_err(|e| format!("rendezvous failed: {e}"))?;
        if let Some(view) = l.job_view {
            let _ = job_views.set(view);
        }
        if let Some(ask) = l.job_stacks {
            let _ = job_stacks.set(ask);
        }
        Ok(LinkParts { commands: l.commands, events: l.events, task: l.task })
    })
}

/// The Kubernetes Events and Pod-condition reporter's settings, when they are on.
fn kube_events_reporter(
    cfg: &SuperviseConfig,
    env: &EnvSnapshot,
) -> Result<Option<kube_events::KubeEventsConfig>, String> {
    let Some(KubeEventsTarget { pod, namespace, best_effort }) = cfg.kube_events.clone() else {
        return Ok(None);
    };
    let client = KubeConfig::resolve(&cfg.kube.overrides, env.lookup())
        .map_err(|e| e.to_string())
        .and_then(|c| KubeClient::new(c).map_err(|e| e.to_string()));
    match client {
        Ok(client) => {
            Ok(Some(kube_events::KubeEventsConfig { client, namespace, pod, node: cfg.identity.node.clone() }))
        }
        // auto is best effort: reporting must not keep training from starting.
        Err(e) if best_effort => {
            warn!("Kubernetes Events and the Pod condition are off: {e}");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
