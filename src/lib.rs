//! rankvisor: PID 1 and replica supervisor for distributed PyTorch training jobs.
//!
//! # Theory of operation
//!
//! rankvisor blocks every asynchronous signal before any thread exists, then runs a single-threaded
//! tokio loop (`driver`). Every source becomes one `supervise::Event`:
//!
//! - signals, read in order from a signalfd: SIGCHLD wakes the one reaper (`process::reap_all`, the
//!   only `waitpid` in the program), whose (pid, how it ended) pairs become `Exited`; TERM and INT
//!   become `Shutdown`; the rest are forwarded to the child's process group;
//! - timers: the machine names its next deadline (backoff end, grace end, hang deadline) and gets a
//!   `Tick` there;
//! - the heartbeat file: a change is a `Beat`, a JSON object in it is training progress;
//! - later sources (node-health label changes, rendezvous orders) become `GiveUp` and friends.
//!
//! `supervise::Supervisor::on_event` is a plain synchronous function from (state, event, now) to
//! actions (spawn, signal the group, write the termination message, exit); it is unit-tested with
//! paused time and no processes. The driver performs the actions and publishes a `LocalStatus` for
//! the reporters. On exit, processes left below rankvisor (setsid escapees) get TERM, then KILL.

pub mod driver;
pub mod dryrun;
pub mod duration;
pub mod exit;
pub mod health;
pub mod heartbeat;
pub mod http;
pub mod job_link;
pub mod kube;
pub mod kube_events;
pub mod logging;
pub mod process;
pub mod rank;
pub mod rendezvous;
pub mod report;
pub mod reporting;
pub mod status_sink;
pub mod supervise;
pub mod termination;
pub mod trainer;
pub mod untrusted;
pub mod webhook;
