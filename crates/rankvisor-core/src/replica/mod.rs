//! One replica: the decision machine (`machine`), the event loop that feeds it (`event_loop`),
//! the rendezvous link it talks to (`link`), and the order in which a shutdown signals the
//! processes below rankvisor (`shutdown_order`).

pub mod child;
pub mod event_loop;
pub mod job_stacks;
pub mod link;
mod log_watch;
pub mod machine;
#[cfg(test)]
mod properties;
pub mod shutdown_order;
#[cfg(test)]
mod tests;

pub use event_loop::{run, AgentChannels, Finished, HealthSource, LinkParts, LinkStarter, LoopConfig, Sources};
pub use link::{JobLinkConfig, Link, LinkCommand, LinkEvent, Upstream};
pub use machine::{Effect, HealthGate, Input, Mode, Note, Replica, ReplicaConfig};
