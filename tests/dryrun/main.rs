//! Whole jobs through `rankvisor dry-run`, one test binary: the PyTorchJob and TrainJob manifests,
//! the timeline, and the Kubeflow examples, each replica one real launcher (`tests/common`).

#[path = "../common/mod.rs"]
mod common;

mod dry_run;
mod dry_run_hyperpod;
mod dry_run_trainjob;
mod kubeflow_examples;
mod timeline;
