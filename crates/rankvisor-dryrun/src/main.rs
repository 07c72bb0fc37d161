//! `rankvisor-dry-run JOB.yaml` (also `rankvisor dry-run JOB.yaml`): run a job manifest on this
//! machine. Parse the command line, find the launcher binary, run the event loop, exit with the
//! job's outcome: 0 Succeeded, 1 Failed, 64 invalid options or a manifest it cannot run (invalid,
//! pods the apiserver would refuse, or a job another controller manages).

use std::path::PathBuf;

use clap::Parser;
use rankvisor_core::config::args::error_text;
use rankvisor_core::{exit, logging};
use rankvisor_dryrun::cli::Cli;
use rankvisor_dryrun::{run_dry_run, DryRunOptions};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            if matches!(e.kind(), DisplayHelp | DisplayVersion) {
                let _ = e.print();
                std::process::exit(0);
            }
            let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
            let text = error_text(&e, <Cli as clap::CommandFactory>::command(), &argv, |k| std::env::var(k).ok());
            eprint!("{text}");
            std::process::exit(exit::CONFIG_ERROR);
        }
    };
    logging::init(cli.global.log_format, cli.global.log_level);
    let rankvisor = match cli.launcher.map(Ok).unwrap_or_else(find_launcher) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("{e}");
            std::process::exit(exit::CONFIG_ERROR);
        }
    };
    let a = cli.args;
    if a.hyperpod_poll.is_zero() && !a.hyperpod_read_on_change {
        tracing::error!(
            "--hyperpod-poll 0s with --hyperpod-read-on-change false: the emulated HyperPod operator would never read an agent's state; expected a poll interval such as 1s, or reads on change"
        );
        std::process::exit(exit::CONFIG_ERROR);
    }
    let opts = DryRunOptions {
        queue_capability: a.queue_capability,
        watch: a.watch,
        output: a.output,
        logs: a.logs,
        inject: a.inject,
        timeout: a.timeout,
        master_port: a.master_port,
        backoff_initial: a.backoff_initial,
        backoff_max: a.backoff_max,
        grace_period: a.grace_period,
        launcher_log_level: a.launcher_log_level.to_string().to_lowercase(),
        restart_scope: a.restart_scope,
        http: a.http,
        timeline: a.timeline,
        commands: a.commands,
        path_maps: a.path_maps,
        runtimes: a.runtimes,
        hyperpod_graceful_stop: a.hyperpod_graceful_stop,
        hyperpod_stop_timeout: a.hyperpod_stop_timeout,
        hyperpod_poll: Some(a.hyperpod_poll).filter(|d| !d.is_zero()),
        hyperpod_read_on_change: a.hyperpod_read_on_change,
        ..DryRunOptions::new(a.manifest, rankvisor)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the event loop: {e}");
            std::process::exit(exit::EXTERNAL_FAILURE);
        }
    };
    std::process::exit(runtime.block_on(run_dry_run(opts)));
}

/// `rankvisor` beside this program (a `cargo build` or `cargo install` puts them together), else
/// the first one on PATH.
fn find_launcher() -> Result<PathBuf, String> {
    let beside = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join("rankvisor")));
    if let Some(p) = beside.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|d| d.join("rankvisor")).find(|p| p.is_file()));
    on_path.flatten().ok_or_else(|| {
        let where_ = beside.map_or_else(|| "beside this program".to_string(), |p| p.display().to_string());
        format!("cannot find the rankvisor launcher: not at {where_} and not on PATH; name it with --launcher PATH")
    })
}
