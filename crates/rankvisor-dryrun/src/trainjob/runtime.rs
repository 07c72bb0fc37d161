//! The ClusterTrainingRuntimes a Kubeflow Trainer v2.3.0 install ships (`manifests/base/runtimes/`),
//! found by name when the file gives no runtime of that name. Only `torch-distributed` is
//! emulated; the others are named, with what they need that a local run lacks.

/// `torch-distributed` as v2.3.0 installs it: one ReplicatedJob `node` (the trainer ancestor),
/// container `node`, `mlPolicy.numNodes: 1`, `torch: {}`.
pub(crate) const TORCH_DISTRIBUTED: &str = r#"apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
  labels:
    trainer.kubeflow.org/framework: torch
spec:
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
"#;

/// The other built-in runtimes of v2.3.0 and why the dry run does not run them.
pub(crate) const NOT_EMULATED: [(&str, &str); 8] = [
    ("torch-distributed-with-cache", "its dataset-initializer Job fills a data cache from cloud storage"),
    ("deepspeed-distributed", "MPI: its launcher reaches the nodes through sshd and a hostfile"),
    ("mlx-distributed", "MPI: its launcher reaches the nodes through sshd and a hostfile"),
    ("jax-distributed", "the JAX plugin's env (not torchrun's PET_ variables)"),
    ("xgboost-distributed", "the XGBoost plugin's tracker env (not torchrun's PET_ variables)"),
    ("torchtune-llama3.2-1b", "its model and dataset initializer Jobs download from Hugging Face"),
    ("torchtune-llama3.2-3b", "its model and dataset initializer Jobs download from Hugging Face"),
    ("torchtune-qwen2.5-1.5b", "its model and dataset initializer Jobs download from Hugging Face"),
];

/// The built-in runtime's manifest text, or why it is not emulated (None: no such runtime).
pub(crate) fn builtin(name: &str) -> Option<Result<&'static str, &'static str>> {
    if name == "torch-distributed" {
        return Some(Ok(TORCH_DISTRIBUTED));
    }
    NOT_EMULATED.iter().find(|(n, _)| *n == name).map(|(_, why)| Err(*why))
}
