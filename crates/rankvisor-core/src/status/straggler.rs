//! A straggler as the master reports it (issue 36 item 4): the detector's verdict
//! (`rendezvous::straggler`) with the replica's node and pod and when, kept in the master's
//! status, bounded.

/// A straggler as the master reports it (its status, `/status`, the webhook, the `Straggler`
/// Event, the dry run's timeline): who, where, the figures, and when.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NamedStraggler {
    /// The replica's index.
    pub replica: u32,
    /// Its node, as its hello gave it (from outside: escaped where it is shown).
    pub node: String,
    /// Its pod, as its latest report gave it (None before its first report).
    pub pod: Option<String>,
    /// Its latest value of the metric.
    pub value: f64,
    /// The job's median when it was named.
    pub median: f64,
    /// Its pace relative to the median's (below `--straggler-ratio`).
    pub relative: f64,
    /// Consecutive points behind.
    pub points: u32,
    /// When the master named it (RFC 3339).
    pub named_at: String,
    /// The figures in words, as the master's log line has them.
    pub message: String,
}

/// Its figures are finite: the detector takes finite points only.
impl Eq for NamedStraggler {}

impl NamedStraggler {
    /// One line: the figures, the node and the pod (escaped).
    pub fn line(&self) -> String {
        let node = crate::untrusted::escape(&self.node);
        match &self.pod {
            Some(pod) => format!("{} (pod {}, node {node})", self.message, crate::untrusted::escape(pod)),
            None => format!("{} (node {node})", self.message),
        }
    }
}

/// The most stragglers a master's status keeps, newest last: a long job's report stays bounded.
pub const STRAGGLERS_KEPT: usize = 16;

/// Add `named` to `kept`, dropping the oldest beyond [`STRAGGLERS_KEPT`].
pub fn keep(kept: &mut Vec<NamedStraggler>, named: NamedStraggler) {
    kept.push(named);
    if kept.len() > STRAGGLERS_KEPT {
        kept.drain(..kept.len() - STRAGGLERS_KEPT);
    }
}
