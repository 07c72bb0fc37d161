//! The PID 1 binary's black-box tests, one test binary: each module is one area (signals, reaping,
//! rendezvous, ...) and runs the real `rankvisor` (`tests/common`); beside them the property tests
//! of the parsers it runs on outside input, and the crates' module graphs and function lengths.
//! None needs a heavy part but the few tests the quick tier's filter names (`.config/nextest.toml`).

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod backoff;
mod child_env;
mod config_errors;
mod escapees;
mod exit_codes;
mod hang;
mod hostile_agent;
mod hostile_fds;
mod hostile_files;
mod hostile_http;
mod hostile_logging;
mod hostile_rendezvous;
mod hostile_status_fd;
mod hyperpod_agent;
mod kubeflow_env;
mod lean_build;
mod log_rules;
mod log_rules_pid1;
mod node_health_file;
mod parser_properties;
mod preemption;
mod rank_env;
mod reaping;
mod rendezvous;
mod reporting;
mod reporting_job;
mod restart_policies;
mod signal_mask;
mod signals;
mod spawn_paths;
mod stacks;
mod stuck;
mod termination_log;
