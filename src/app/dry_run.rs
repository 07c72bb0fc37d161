//! `rankvisor dry-run JOB.yaml`: run a PyTorchJob manifest on this machine.

use crate::config::args::DryRunArgs;
use crate::dryrun::{self, DryRunOptions};
use crate::exit;
use crate::process::Signals;

/// Run the dry run; 0 Succeeded, 1 Failed, 64 invalid manifest.
pub fn run(a: DryRunArgs, signals: &Signals) -> i32 {
    // The dry run is not PID 1: it gets back the signal mask it inherited, so tokio handles INT,
    // TERM and CHLD, and the launchers do not inherit a mask with everything blocked.
    if let Err(e) =
        nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&signals.original), None)
    {
        tracing::error!("cannot restore the signal mask: {e}");
        return exit::EXTERNAL_FAILURE;
    }
    let rankvisor = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("cannot find the rankvisor binary to run the launchers: {e}");
            return exit::EXTERNAL_FAILURE;
        }
    };
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
        ..DryRunOptions::new(a.manifest, rankvisor)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the event loop: {e}");
            return exit::EXTERNAL_FAILURE;
        }
    };
    runtime.block_on(dryrun::run_dry_run(opts))
}
