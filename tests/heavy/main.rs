//! The tests that need a heavy part, one test binary, out of the quick tier (`.config/nextest.toml`):
//! torch and libtorch (`training`, and `preemption`: a real DataLoader stopped by TERM), a
//! kube-apiserver (`node_health_kube`, `reporting_kube`, `k8s_manifests`), a kubelet and Docker
//! (`real_node`, `container`), chromium (`job_page`), promtool (`prometheus`), the HyperPod agent's
//! source (`log_rules_agent`), the full tier's explicit-target builds (`install`) and the
//! two-minute chaos soak (`chaos`, whose unit tests are quick).

#[path = "../common/mod.rs"]
mod common;

mod apiserver;

mod chaos;
mod container;
mod install;
mod job_page;
mod k8s_manifests;
mod log_rules_agent;
mod node_health_kube;
mod preemption;
mod prometheus;
mod real_node;
mod reporting_kube;
mod training;
