//! Rendezvous and control channel: the replicas meet at a barrier on the master's launcher
//! (replica 0), then keep the connection as a control channel (states up, orders down).
//!
//! Master: `listen` (or any bound listener), `start_master`, then `MasterHandle::barrier(0)`;
//! read `events()`, send `order(..)`, serve `job_view()`. Worker: `join` returns once released;
//! then `send_state`, `next_order` (None = master lost) and `rejoin` for a new generation.
//! The wire protocol is newline-delimited JSON (`frame`), bounded and versioned.

pub mod admission;
pub mod auth;
pub mod checkpoint;
mod config;
mod conn;
mod error;
pub mod frame;
mod io;
pub mod job;
mod master;
pub mod roster;
pub mod straggler;
mod worker;

#[cfg(test)]
mod tests;

pub use config::{Member, Released, RendezvousConfig, MAX_REPLICAS};
pub use error::RendezvousError;
pub use frame::{Health, NodeHealth, Order, PROTOCOL_VERSION};
pub use job::{JobPhase, JobView, ReplicaView};
pub use master::{listen, start_master, ControlEvent, MasterHandle, StacksAnswers, FINISHED};
pub use worker::{join, StacksAnswerer, WorkerSession};
