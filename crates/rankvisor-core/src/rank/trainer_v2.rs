//! Kubeflow Trainer v2's shape of the rank contract (`kubeflow/trainer` v2.3.0, the Torch plugin's
//! `EnforceMLPolicy`): a TrainJob's nodes are the pods of one Indexed Job `<trainjob>-node-0`
//! (hostname `<trainjob>-node-0-<k>`, subdomain `<trainjob>`), and the trainer container gets
//! exactly `PET_NNODES`, `PET_NPROC_PER_NODE`, `PET_NODE_RANK` (the Job's completion index),
//! `PET_MASTER_ADDR` = `<trainjob>-node-0-0.<trainjob>` and `PET_MASTER_PORT` = 29500: no
//! `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` or `RANK`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The label the JobSet controller puts on every Job and pod of one restart attempt.
pub const RESTART_ATTEMPT_LABEL: &str = "jobset.sigs.k8s.io/restart-attempt";

/// The ReplicatedJob (and container) name of a TrainJob's trainer nodes (`constants.Node`).
const NODE: &str = "node";

/// Which controller wrote the rank contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavour {
    /// Nothing was injected: a bare container or a local run.
    None,
    /// Kubeflow's training-operator (v1): a PyTorchJob's `MASTER_ADDR`, `RANK`, `WORLD_SIZE`, or
    /// its elastic `PET_RDZV_*`.
    TrainingOperator,
    /// Kubeflow Trainer v2: a TrainJob's five `PET_` variables and nothing else.
    TrainerV2,
}

/// The flavour from which variables are set: Trainer v2 sets `PET_MASTER_ADDR` but never
/// `MASTER_ADDR`, `RANK`, `WORLD_SIZE` or a rendezvous endpoint.
pub(super) fn flavour(get: &impl Fn(&str) -> Option<String>) -> Flavour {
    let v1_only = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND"];
    let any_v1 = v1_only.iter().any(|k| get(k).is_some());
    let any = any_v1
        || ["PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"].iter().any(|k| get(k).is_some());
    match (any, any_v1, get("PET_MASTER_ADDR").is_some()) {
        (false, ..) => Flavour::None,
        (true, false, true) => Flavour::TrainerV2,
        _ => Flavour::TrainingOperator,
    }
}

/// The TrainJob's name from a trainer node's hostname `<trainjob>-node-0-<k>` or its pod's name
/// `<trainjob>-node-0-<k>-<suffix>` (the Job controller adds five random characters), with `k`.
pub fn train_job_of_pod(pod: &str) -> Option<(String, u32)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parse = |name: &str| {
        let (rest, k) = name.rsplit_once('-')?;
        let job = rest.strip_suffix(&format!("-{NODE}-0")).filter(|j| !j.is_empty())?;
        digits(k).then(|| k.parse().ok().map(|k| (job.to_string(), k)))?
    };
    parse(pod).or_else(|| {
        let (name, suffix) = pod.rsplit_once('-')?;
        let random = suffix.len() == 5 && suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        random.then(|| parse(name))?
    })
}

/// The TrainJob's name from `PET_MASTER_ADDR` = `<trainjob>-node-0-0.<trainjob>`.
pub fn train_job_of_master_addr(addr: &str) -> Option<String> {
    let (host, domain) = addr.split_once('.').unwrap_or((addr, ""));
    let job = host.strip_suffix(&format!("-{NODE}-0-0")).filter(|j| !j.is_empty())?;
    let subdomain = domain.split('.').next().unwrap_or("");
    (subdomain.is_empty() || subdomain == job).then(|| job.to_string())
}

/// The JobSet's restart attempt from the pod's labels (the downward API's `metadata.labels` file):
/// None when the label is absent, an error naming the value when it is not a count.
pub fn restart_attempt(labels: &BTreeMap<String, String>) -> Result<Option<u32>, String> {
    match labels.get(RESTART_ATTEMPT_LABEL) {
        None => Ok(None),
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().map(Some).map_err(|_| bad_attempt(v))
        }
        Some(v) => Err(bad_attempt(v)),
    }
}

fn bad_attempt(value: &str) -> String {
    format!(
        "pod label {RESTART_ATTEMPT_LABEL}=\"{}\" is invalid: expected the JobSet's restart count, a number >= 0",
        crate::untrusted::escape(value)
    )
}
