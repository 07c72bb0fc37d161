//! The local HTTP endpoint: Kubernetes probes, Prometheus metrics and this replica's report; and
//! `client`, the HTTP client of the Kubernetes API and the webhook.

mod addr;
pub mod client;
mod metrics;
mod server;

pub use addr::{HttpAddr, HttpAddrError};
pub use metrics::{escape_label, render_metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
pub use server::{route, serve, HttpState, Reply};
