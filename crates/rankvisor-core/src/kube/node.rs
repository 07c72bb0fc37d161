//! A node as rankvisor reads it: its labels, annotations and taints, from the Kubernetes API or a
//! downward-API labels file. The node-health verdict (the `health` module) is a function of it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A Kubernetes node taint, as the API reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    /// Taint key, e.g. `sagemaker.amazonaws.com/node-health-status`.
    pub key: String,
    /// Taint value; Kubernetes allows it to be empty.
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// The taint the way kubectl writes it: `key=value:Effect` (or `key:Effect` without a value).
impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// What a health source knows about the node at one moment: the input of
/// the node-health verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSnapshot {
    /// Every label of the node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Every annotation of the node (the fault details live there).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Every taint of the node.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

impl NodeSnapshot {
    /// A snapshot with labels only, as a downward-API labels file gives.
    pub fn from_labels(labels: BTreeMap<String, String>) -> Self {
        Self { labels, ..Self::default() }
    }
}
