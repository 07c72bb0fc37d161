//! The local HTTP endpoint: Kubernetes probes, Prometheus metrics and this replica's report.

mod addr;
mod metrics;
mod server;

pub use addr::{HttpAddr, HttpAddrError};
pub use metrics::{
    escape_label, render_job_metrics, render_metrics, unix_seconds, CONTENT_TYPE as METRICS_CONTENT_TYPE,
};
pub use server::{route, serve, HttpState, Reply};
