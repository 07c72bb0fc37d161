//! Node health gate: the SageMaker HyperPod labels of this node, turned into a verdict, and the
//! sources (a downward-API labels file, or the Node through the Kubernetes API) that keep it up to date.

mod kubernetes;
mod labels_file;
mod render;
mod source;
mod verdict;

pub use kubernetes::{read_kubernetes_verdict, spawn_kubernetes_watcher, KubeWatchOptions};
pub use labels_file::{parse_labels_file, LabelsFileError};
pub use render::{render_json, render_text};
pub use source::{
    read_file_verdict, spawn_file_watcher, HealthError, NodeHealthSource, NodeHealthSourceError, Observation,
    MAX_FILE_BYTES, MIN_POLL,
};
pub use verdict::{
    summary, verdict, NodeVerdict, DEEP_HEALTH_CHECK_STATUS, FAULT_DETAILS, FAULT_REASON_KEYS, FAULT_TYPE_KEYS,
    LABEL_PREFIX, NODE_HEALTH_STATUS,
};
