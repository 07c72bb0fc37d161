//! Where the training is: a snapshot of the child's process tree (each process's `/proc` facts and,
//! for Python processes, every thread's stack), its summary for the reports, and the master's
//! grouping of every replica's summary by signature.
//!
//! The stacks are read from outside the processes by `rankvisor-stacks` (the `py-spy` crate as a
//! library), a separate binary: its dependencies are too big for the PID 1's image budget. The
//! PID 1 runs it as a subprocess ([`take`]) with a deadline ([`DEADLINE`]) and a bounded output
//! ([`MAX_BYTES`]); where it is missing or fails, the snapshot keeps the `/proc` facts
//! ([`proc_facts`]) and says why for each process.

mod group;
mod model;
mod procfs;
mod take;

pub use group::{group, render_groups, JobStacks, StackGroup};
pub use model::{bound, ProcessStacks, PyFrame, Snapshot, StacksSummary, ThreadStack, MAX_SUMMARY_FRAMES};
pub use procfs::{looks_like_python, proc_facts};
pub use take::{reader_beside, take, Reader, Snapshotter, READER_ENV, READER_NAME};

/// Master: gathers the whole job's stacks (`GET /job/stacks`) for the given reason; None once the
/// rendezvous master is gone.
pub type JobStacksAsker = std::sync::Arc<
    dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<JobStacks>> + Send>> + Send + Sync,
>;

/// The most bytes of one replica's snapshot as JSON.
pub const MAX_BYTES: usize = 64 * 1024;

/// The longest one snapshot takes, the reader's start included: past it the reader is killed and
/// the snapshot keeps the `/proc` facts.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);
