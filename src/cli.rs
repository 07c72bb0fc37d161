//! The command line: the top-level parser and its subcommands. The option groups themselves are
//! `rankvisor_core::config::args` (shared with the configuration's tests). `rankvisor dry-run` is
//! not parsed here: `main` hands it to the `rankvisor-dry-run` binary, git-style.

use clap::{Parser, Subcommand};
use rankvisor_core::config::args::{CheckNodeArgs, GlobalArgs, SuperviseArgs};
use std::ffi::OsString;

/// PID 1 and replica supervisor for distributed PyTorch training jobs.
///
/// Every option can also be set by an environment variable RANKVISOR_<OPTION_NAME>.
#[derive(Parser, Debug)]
#[command(name = "rankvisor", version, args_conflicts_with_subcommands = true)]
#[command(
    override_usage = "rankvisor [OPTIONS] -- COMMAND [ARGS]...\n       rankvisor dry-run [OPTIONS] JOB.yaml\n       rankvisor check-node [OPTIONS]\n       rankvisor env [--json]"
)]
pub struct Cli {
    #[command(subcommand)]
    pub sub: Option<Sub>,
    #[command(flatten)]
    pub sup: SuperviseArgs,
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The training command and its arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Subcommand, Debug)]
pub enum Sub {
    /// Print the resolved rank contract.
    Env {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print this node's health verdict; exit 0 only if healthy.
    CheckNode(CheckNodeArgs),
}
