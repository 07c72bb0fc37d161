//! Values and files that come from outside rankvisor (peers, the child, the node, the user):
//! shown escaped, opened without blocking, read with a bound.

pub mod escape;
pub mod files;

pub use escape::{escape, escape_bytes, escape_hidden, Escaped};
