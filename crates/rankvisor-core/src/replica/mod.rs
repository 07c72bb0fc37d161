//! One replica: the decision machine (`machine`), the event loop that feeds it (`event_loop`),
//! and the rendezvous link it talks to (`link`).

pub mod child;
pub mod event_loop;
pub mod link;
mod log_watch;
pub mod machine;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

pub use event_loop::{run, AgentChannels, Finished, HealthSource, LinkParts, LinkStarter, LoopConfig, Sources};
pub use link::{JobLinkConfig, Link, LinkCommand, LinkEvent, Upstream};
pub use machine::{Effect, HealthGate, Input, Mode, Note, Replica, ReplicaConfig};
