//! The local HTTP endpoint: Kubernetes probes, Prometheus metrics, this replica's report and the
//! live job page. (The HTTP client is `net::client`.)

mod addr;
mod body;
mod metrics;
mod page;
mod server;

pub use addr::{HttpAddr, HttpAddrError};
pub use body::{read_body, BodyError};
pub use metrics::{
    escape_label, render_job_metrics, render_metrics, unix_seconds, CONTENT_TYPE as METRICS_CONTENT_TYPE,
};
pub use page::{CONTENT_TYPE as PAGE_CONTENT_TYPE, JOB_PAGE};
pub use server::{route, serve, serve_with, HttpState, Reply};
