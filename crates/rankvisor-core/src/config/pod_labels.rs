//! The pod's own labels, read once from the downward-API labels file: the JobSet's restart attempt.

use crate::health::NodeHealthSource;

/// Where a pod's downward-API labels are mounted by convention (Kubernetes' own examples).
pub const POD_LABELS_FILE: &str = "/etc/podinfo/labels";

/// The JobSet's restart attempt from the pod's labels file: the `--node-health file:` one, else
/// [`POD_LABELS_FILE`] when it exists. Read once: a JobSet restart recreates the pod. A file that
/// cannot be read or parsed, or a malformed label, is a warning, never a failure.
pub fn pod_restart_attempt(source: &NodeHealthSource, warnings: &mut Vec<String>) -> Option<u32> {
    let path = match source {
        NodeHealthSource::File(p) => p.clone(),
        _ if std::path::Path::new(POD_LABELS_FILE).is_file() => POD_LABELS_FILE.into(),
        _ => return None,
    };
    let bytes = match crate::untrusted::files::read_head(&path, crate::health::MAX_FILE_BYTES) {
        Ok(b) => b,
        // Not there yet (the node-health source says so itself): no attempt to show.
        Err(_) => return None,
    };
    let labels = match crate::health::parse_labels_file(&String::from_utf8_lossy(&bytes)) {
        Ok(l) => l,
        Err(_) => return None,
    };
    crate::rank::restart_attempt(&labels).unwrap_or_else(|e| {
        warnings.push(format!("{}: {e}", path.display()));
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_attempt_is_read_from_the_labels_file() {
        let path = std::env::temp_dir().join(format!("rankvisor-pod-labels-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let source = NodeHealthSource::File(path.clone());
        let mut warnings = Vec::new();
        assert_eq!(pod_restart_attempt(&source, &mut warnings), None, "not mounted: nothing");
        std::fs::write(&path, "jobset.sigs.k8s.io/restart-attempt=\"2\"\n").unwrap();
        assert_eq!(pod_restart_attempt(&source, &mut warnings), Some(2));
        std::fs::write(&path, "jobset.sigs.k8s.io/restart-attempt=\"two\"\n").unwrap();
        assert_eq!(pod_restart_attempt(&source, &mut warnings), None);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("restart-attempt=\"two\" is invalid"), "{warnings:?}");
        let _ = std::fs::remove_file(&path);
    }
}
