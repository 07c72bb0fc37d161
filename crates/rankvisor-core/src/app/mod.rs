//! The composition roots: one function per subcommand that builds what it needs from validated
//! configuration, runs it, and returns rankvisor's exit status. the binary's `main` only parses the
//! command line and picks one of these.

pub mod check_node;
pub mod env;
pub mod log_rules;
pub mod supervise;

use crate::config::EnvSnapshot;
use crate::exit;
use std::path::PathBuf;

/// Where to write why rankvisor gives up: `--termination-log`, else RANKVISOR_TERMINATION_LOG,
/// else `/dev/termination-log` where it exists (`kubectl describe pod` shows it).
pub fn termination_path(flag: Option<PathBuf>, env: &EnvSnapshot) -> Option<PathBuf> {
    flag.or_else(|| env.non_empty("RANKVISOR_TERMINATION_LOG").map(PathBuf::from))
        .or_else(crate::termination::default_path)
}

/// Log a configuration error, write it to the termination log and return exit status 64.
pub fn config_error(msg: &str, termination_log: Option<PathBuf>) -> i32 {
    tracing::error!("configuration error: {msg}");
    if let Some(path) = termination_log {
        let _ = crate::termination::write_message(&path, &format!("configuration error: {msg}"));
    }
    exit::CONFIG_ERROR
}

/// A current-thread runtime with I/O and timers, or the error already logged.
pub fn runtime() -> Result<tokio::runtime::Runtime, i32> {
    tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(|e| {
        tracing::error!("cannot start the event loop: {e}");
        exit::EXTERNAL_FAILURE
    })
}
