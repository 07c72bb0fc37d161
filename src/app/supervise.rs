//! `rankvisor [OPTIONS] -- COMMAND`: the composition root of supervision. It builds the runtime,
//! starts the sources (node health, rendezvous link) and the sinks (HTTP, webhook, Kubernetes
//! Events, `--status-fd`), and hands them to the driver's one event loop.

use crate::config::{KubeEventsTarget, SuperviseConfig};
use crate::health::{self, NodeHealthSource};
use crate::kube::{KubeClient, KubeConfig};
use crate::process::{self, ChildCommand, Signals};
use crate::supervise::RestartScope;
use crate::{driver, exit, job_link};
use std::time::Duration;
use tracing::{error, info, warn};

/// Supervise the training command; return rankvisor's exit status.
pub fn run(cfg: SuperviseConfig, env: &crate::config::EnvSnapshot, signals: Signals) -> i32 {
    for w in &cfg.warnings {
        warn!("{w}");
    }
    if !cfg.inferred.is_empty() {
        info!("rank contract: {}", cfg.inferred.join("; "));
    }
    let status_sink = match cfg.status_fd.map(crate::status_sink::StatusSink::from_fd).transpose() {
        Ok(s) => s,
        Err(e) => return super::config_error(&e.to_string(), cfg.termination_log.clone()),
    };
    process::become_subreaper();
    let runtime = match super::runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let kube_events_cfg = match kube_events_reporter(&cfg, env) {
        Ok(c) => c,
        Err(e) => return super::config_error(&e, cfg.termination_log.clone()),
    };
    let (status, _keep) = tokio::sync::watch::channel(Default::default());
    let health = match &cfg.health.source {
        NodeHealthSource::File(path) => {
            let _guard = runtime.enter();
            Some(driver::HealthGate {
                rx: health::spawn_file_watcher(path.clone(), cfg.health.require_label, Duration::from_secs(1)),
                wait: cfg.health.wait,
            })
        }
        NodeHealthSource::Kubernetes => match runtime.block_on(kube_health(&cfg, env, &signals)) {
            Ok(rx) => Some(driver::HealthGate { rx, wait: cfg.health.wait }),
            Err(code) => return code,
        },
        _ => None,
    };
    let health_rx = health.as_ref().map(|g| g.rx.clone());
    // Reporting starts before the rendezvous link: the link streams this replica's reports to the
    // master, and the master's HTTP server serves the link's job view on /job.
    let reporting_cfg = crate::reporting::ReportingConfig { http: cfg.http, webhook: cfg.webhook.clone() };
    let reporting = runtime.block_on(crate::reporting::start(
        reporting_cfg,
        cfg.identity.clone(),
        status.subscribe(),
        health_rx.clone(),
    ));
    let linger = (cfg.supervisor.scope == RestartScope::Job)
        .then(|| cfg.link.as_ref().map(|l| l.rendezvous.barrier_timeout))
        .flatten();
    let link = match cfg.link.clone() {
        Some(lc) => {
            let _guard = runtime.enter();
            let rdzv_health = job_link::rendezvous_health(health_rx.clone());
            match job_link::start(lc, rdzv_health, status.subscribe(), Some(reporting.subscribe())) {
                Ok(l) => Some(l),
                Err(e) => {
                    let msg = format!("rendezvous failed: {e}");
                    error!("{msg}");
                    if let Some(p) = &cfg.termination_log {
                        let _ = crate::termination::write_message(p, &msg);
                    }
                    runtime.block_on(reporting.finish(Duration::from_secs(2)));
                    runtime.shutdown_background();
                    return exit::EXTERNAL_FAILURE;
                }
            }
        }
        None => None,
    };
    if let Some(view) = link.as_ref().and_then(|l| l.job_view.clone()) {
        reporting.attach_job_view(view);
    }
    let kube_events = kube_events_cfg.map(|kc| {
        let _guard = runtime.enter();
        crate::kube_events::spawn(kc, reporting.subscribe())
    });
    let dcfg = driver::DriverConfig {
        supervisor: cfg.supervisor,
        command: ChildCommand {
            program: cfg.program.clone(),
            args: cfg.args.clone(),
            env: Vec::new(),
            env_remove: cfg.env_remove.clone(),
        },
        heartbeat_file: cfg.heartbeat_file.clone(),
        termination_log: cfg.termination_log.clone(),
        generation_requests: link.as_ref().map(|l| l.generation_requests.clone()),
        status_sink,
        health,
    };
    let (links, workers_done) = link.map(|l| (l.links, l.workers_done)).unwrap_or_default();
    let code = match runtime.block_on(driver::supervise(dcfg, signals.clone(), status, links)) {
        Ok(code) => code,
        Err(e) => {
            error!("supervision failed: {e}");
            exit::EXTERNAL_FAILURE
        }
    };
    if let (0, Some(limit), Some(_)) = (code, linger, workers_done.as_ref()) {
        runtime.block_on(linger_for_workers(workers_done, limit, &signals));
    }
    runtime.block_on(reporting.finish(Duration::from_secs(2)));
    if let Some(k) = kube_events {
        runtime.block_on(k.finish(Duration::from_secs(2)));
    }
    // Do not wait for a blocked DNS lookup of the webhook's host.
    runtime.shutdown_background();
    code
}

/// The Kubernetes Events and Pod-condition reporter's settings, when they are on.
fn kube_events_reporter(
    cfg: &SuperviseConfig,
    env: &crate::config::EnvSnapshot,
) -> Result<Option<crate::kube_events::KubeEventsConfig>, String> {
    let Some(KubeEventsTarget { pod, namespace, best_effort }) = cfg.kube_events.clone() else {
        return Ok(None);
    };
    let client = KubeConfig::resolve(&cfg.kube.overrides, env.lookup())
        .map_err(|e| e.to_string())
        .and_then(|c| KubeClient::new(c).map_err(|e| e.to_string()));
    let client = match client {
        Ok(c) => c,
        // auto is best effort: reporting must not keep training from starting.
        Err(e) if best_effort => {
            warn!("Kubernetes Events and the Pod condition are off: {e}");
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    Ok(Some(crate::kube_events::KubeEventsConfig { client, namespace, pod, node: cfg.identity.node.clone() }))
}

/// The master's child succeeded: keep the control channel up until every worker has finished or
/// disconnected, at most `limit`, and no longer than a TERM or INT.
async fn linger_for_workers(done: Option<tokio::sync::watch::Receiver<bool>>, limit: Duration, signals: &Signals) {
    info!("the master's child succeeded; waiting for the workers to finish (at most {limit:?})");
    let shutdown = async {
        let Ok(mut stream) = process::SignalStream::new(signals) else {
            return std::future::pending().await;
        };
        loop {
            match stream.next().await {
                Ok(sigs) if sigs.iter().any(|&s| process::is_shutdown(s)) => return,
                Ok(_) => {}
                Err(_) => return std::future::pending().await,
            }
        }
    };
    tokio::select! {
        () = job_link::workers_finished(done) => info!("every worker has finished"),
        () = tokio::time::sleep(limit) => warn!("workers still running after {limit:?}; closing the control channel"),
        () = shutdown => info!("stopped while waiting for the workers"),
    }
}

/// Start the Kubernetes watcher and wait for its first observation (the API may be retried for
/// --node-health-timeout), while still honouring TERM and INT: nothing has started yet.
async fn kube_health(
    cfg: &SuperviseConfig,
    env: &crate::config::EnvSnapshot,
    signals: &Signals,
) -> Result<tokio::sync::watch::Receiver<health::Observation>, i32> {
    let (client, node) = super::check_node::kube_client(&cfg.kube, env)
        .map_err(|e| super::config_error(&e, cfg.termination_log.clone()))?;
    let opts = health::KubeWatchOptions::new(node, cfg.health.require_label, cfg.kube.node_health_timeout);
    let mut stream = process::SignalStream::new(signals).map_err(|e| {
        error!("cannot read signals: {e}");
        exit::EXTERNAL_FAILURE
    })?;
    let watcher = health::spawn_kubernetes_watcher(client, opts);
    tokio::pin!(watcher);
    loop {
        tokio::select! {
            rx = &mut watcher => return Ok(rx),
            sigs = stream.next() => {
                let sigs = sigs.map_err(|e| {
                    error!("cannot read signals: {e}");
                    exit::EXTERNAL_FAILURE
                })?;
                if let Some(&s) = sigs.iter().find(|&&s| process::is_shutdown(s)) {
                    let msg = format!("stopped by {} before the child started", exit::signal_name(s));
                    info!("{msg}");
                    if let Some(p) = &cfg.termination_log {
                        let _ = crate::termination::write_message(p, &msg);
                    }
                    return Err(128 + s);
                }
            }
        }
    }
}
