//! A small Kubernetes API client: in-cluster configuration, an HTTPS client that trusts only the
//! given CA and re-reads the (rotating) service-account token, GET and watch of one Node.

mod client;
mod config;
mod node;
mod wire;

pub use client::{KubeClient, KubeError, NodeWatch};
pub use config::{
    check_node_name, KubeConfig, KubeConfigError, KubeOverrides, DEFAULT_CA_FILE, DEFAULT_NAMESPACE_FILE,
    DEFAULT_TOKEN_FILE, SERVICE_ACCOUNT_DIR,
};
pub use node::{NodeSnapshot, Taint};
pub use wire::{
    parse_status, parse_watch_event, Node, NodeMetadata, NodeSpec, Status, WatchEvent, WireError, MAX_LINE_BYTES,
};
