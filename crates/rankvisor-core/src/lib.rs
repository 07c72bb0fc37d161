//! rankvisor: PID 1 and replica supervisor for distributed PyTorch training jobs.
//!
//! # Theory of operation
//!
//! The binary (`src/main.rs` at the workspace root) blocks every asynchronous signal before any thread exists, reads the
//! environment once (`config::EnvSnapshot`), parses the command line (`config::args`), validates
//! both into one configuration (`config::supervise_config`) and hands it to a composition root
//! (`app::supervise`). That root starts the sources and the sinks and runs one single-threaded
//! event loop (`replica::event_loop`). Every source becomes one `replica::Input`:
//!
//! - signals, read in order from a signalfd: SIGCHLD wakes the one reaper (`process::reap_all`, the
//!   only `waitpid` in the program), whose (pid, how it ended) pairs become `Exited`; every other
//!   signal is handed to the machine, which stops the child on TERM/INT and forwards the rest;
//! - timers: the machine names its next deadline (backoff end, grace end, hang deadline, linger
//!   end, sweep step) and gets a `Tick` there;
//! - the heartbeat file: a change is a `Beat`, a JSON object in it is training progress;
//! - the node-health source (labels file or Kubernetes watch): each verdict is `Health`;
//! - the rendezvous link (`replica::link`, an actor): `Released`, orders, a lost master, ...
//! - agent mode (`--agent hyperpod`): the operator's validated requests from the agent's HTTP
//!   edge (`agent::server`) are `Agent` orders; the loop publishes the agent's `/status` view.
//!
//! `replica::Replica::on_input` is a plain synchronous function from (state, input, now) to
//! effects (spawn, signal the group, or on a shutdown each process below in order: the programs
//! first, forked helpers once their parent is gone; write the termination message, a link
//! command, sweep, exit);
//! it owns every decision and is unit-tested with paused time and no processes. It delegates the
//! child's own lifecycle to `replica::child::Supervisor`. The loop performs the effects and publishes
//! one `status::LocalStatus` on a watch channel; every sink follows it: `--status-fd` and the
//! reporter, whose `Report` feeds HTTP, the webhook, Kubernetes Events and the link (which
//! streams it to the master as its `state` frames; the master's typed `JobView` keeps each
//! replica's latest `Report` and is served on `/job`).
//!
//! ```text
//!  signalfd, timers, heartbeat, node health, link events
//!          │
//!          ▼
//!   replica::event_loop ──Input──> replica::machine ──Effect──> process / termination / link
//!          │
//!   watch<LocalStatus> ──> status-fd (read back by the dry run as LocalStatus), reporting (Report ─> HTTP, webhook, Kubernetes Events, link)
//! ```
//!
//! # Modules
//!
//! `config` (arguments and environment -> configuration), `app` (composition roots), `replica`
//! (machine, loop, link, and `replica::child`: the child's pure lifecycle), `policy` (restart
//! policies), `agent` (the HyperPod agent's API for `--agent hyperpod`), `backoff`, `process`
//! (signals, reaper, spawn), `rank`, `health`, `rendezvous`, `status` (the one status model, with the `--status-fd`
//! sink) and `reporting` with its sinks (`http`, `webhook`, `kube_events`), `kube`, and small edges
//! (`heartbeat`, `termination`, `logging`, `exit`, `duration`), and `logrules` (the HyperPod agent's log
//! rules: evaluator, stdout relay, `log-rules test`). The dry run is the
//! `rankvisor-dryrun` crate and the trainer helpers `rankvisor-trainer`.

#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod agent;
pub mod app;
pub mod backoff;
pub mod config;
pub mod duration;
pub mod exit;
pub mod health;
pub mod heartbeat;
pub mod http;
pub mod kube;
pub mod kube_events;
pub mod lines;
pub mod logging;
pub mod logrules;
pub mod net;
pub mod policy;
pub mod process;
pub mod rank;
pub mod rendezvous;
pub mod replica;
pub mod reporting;
pub mod signo;
pub mod stacks;
pub mod status;
pub mod termination;
pub mod untrusted;
pub mod webhook;

#[cfg(test)]
mod test_support;
