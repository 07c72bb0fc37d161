//! The command line: the top-level parser and its subcommands. The option groups themselves are
//! `rankvisor_core::config::args` (shared with the configuration's tests). `rankvisor dry-run` is
//! not parsed here: `main` hands it to the `rankvisor-dry-run` binary, git-style.

use clap::{Parser, Subcommand};
use rankvisor_core::config::args::{CheckNodeArgs, GlobalArgs, SuperviseArgs};
use std::ffi::OsString;
use std::path::PathBuf;

/// PID 1 and replica supervisor for distributed PyTorch training jobs.
///
/// Every option can also be set by an environment variable RANKVISOR_<OPTION_NAME>.
#[derive(Parser, Debug)]
#[command(name = "rankvisor", version, args_conflicts_with_subcommands = true)]
#[command(
    override_usage = "rankvisor [OPTIONS] -- COMMAND [ARGS]...\n       rankvisor dry-run [OPTIONS] JOB.yaml\n       rankvisor check-node [OPTIONS]\n       rankvisor env [--json]\n       rankvisor log-rules test RULES LOG [--timestamps] [--json]"
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
    /// Log rules (HyperPod's logMonitoringConfiguration): try them on a saved log.
    #[command(subcommand)]
    LogRules(LogRulesSub),
}

#[derive(Subcommand, Debug)]
pub enum LogRulesSub {
    /// Replay a log through the rules, printing each rule's state line by line.
    Test {
        /// The rules: a JSON or YAML list of rules (or an object with logMonitoringConfiguration).
        #[arg(value_name = "RULES")]
        rules: PathBuf,
        /// The log to replay; `-` reads standard input.
        #[arg(value_name = "LOG")]
        log: PathBuf,
        /// Each line starts with an RFC 3339 time and a space (`kubectl logs --timestamps`).
        #[arg(long)]
        timestamps: bool,
        /// Print one JSON object per evaluation.
        #[arg(long)]
        json: bool,
    },
}
