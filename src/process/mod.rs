//! Processes at the OS edge: signals, the one reaper, spawning the child, sweeping leftovers.

mod procfs;
mod reaper;
mod signals;
mod spawn;

pub use procfs::{alive_descendants, ProcEntry};
pub use reaper::{has_children, reap_all};
pub use signals::{block_signals, is_shutdown, signal_group, SignalStream, Signals};
pub use spawn::{spawn_child, ChildCommand, SpawnError};
