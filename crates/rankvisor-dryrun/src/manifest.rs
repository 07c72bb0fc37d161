//! Reading a manifest file (YAML or JSON, bounded) and admitting it as the job kind it holds: a
//! PyTorchJob ([`crate::pytorchjob::admission`]), a TrainJob ([`crate::trainjob::admission`]) or a
//! HyperPodPyTorchJob ([`crate::hyperpodjob::admission`]).

use std::path::Path;

use crate::k8s::document::{documents, ManifestError};
use crate::pytorchjob::admission::{admit_text, LoadedJob};

/// The largest manifest read (a PyTorchJob is a few KiB; `/dev/zero` must not fill memory).
pub(crate) const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;
/// The most YAML aliases a manifest may use (each may repeat a large node: no amplification).
pub(crate) const MAX_ALIASES: usize = 64;
/// The deepest nesting of flow collections (`[` and `{`) accepted (deeper is quadratic to parse).
pub(crate) const MAX_FLOW_DEPTH: usize = 64;

/// A manifest's text: a regular file, at most [`MAX_MANIFEST_BYTES`], UTF-8, within the shape bounds.
fn read_manifest(path: &Path) -> Result<String, ManifestError> {
    let read = |source: std::io::Error| ManifestError::Read { path: path.display().to_string(), source };
    let invalid = |m: String| read(std::io::Error::new(std::io::ErrorKind::InvalidData, m));
    let bytes = rankvisor_core::untrusted::files::read_head(path, MAX_MANIFEST_BYTES + 1)
        .map_err(|e| invalid(e.to_string()))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(invalid(format!(
            "larger than {MAX_MANIFEST_BYTES} bytes: expected a PyTorchJob or TrainJob manifest"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| invalid(format!("not UTF-8 ({e}): expected YAML or JSON text")))?;
    check_shape(&text).map_err(invalid)?;
    Ok(text)
}

/// An admitted manifest of either kind.
#[derive(Debug, Clone)]
pub(crate) enum Loaded {
    /// A PyTorchJob.
    PyTorch(Box<LoadedJob>),
    /// A TrainJob (with the runtime documents of its file and of `runtimes`).
    Train(Box<crate::trainjob::admission::LoadedTrainJob>),
    /// A HyperPodPyTorchJob.
    HyperPod(Box<crate::hyperpodjob::admission::LoadedHyperPodJob>),
}

/// Read and admit the manifest at `path`: a PyTorchJob, or a TrainJob (alone, or with
/// ClusterTrainingRuntime and TrainingRuntime documents in the same file or in `runtimes`).
pub(crate) fn load_manifest(path: &Path, runtimes: &[std::path::PathBuf]) -> Result<Loaded, ManifestError> {
    use crate::trainjob::admission::{admit_train_job, holds_train_job};
    let text = read_manifest(path)?;
    let source_name = path.display().to_string();
    let mut docs = documents(&text, &source_name)?;
    if crate::hyperpodjob::admission::holds_hyperpod_job(&docs) && runtimes.is_empty() {
        let loaded = crate::hyperpodjob::admission::admit_hyperpod_job(&docs, &source_name)?;
        return Ok(Loaded::HyperPod(Box::new(loaded)));
    }
    if !holds_train_job(&docs) {
        if !runtimes.is_empty() {
            return Err(ManifestError::Unsupported {
                source_name,
                reason: "--runtime goes with a TrainJob (trainer.kubeflow.org/v1alpha1), and this file has none".into(),
            });
        }
        return admit_text(&text, &source_name).map(|l| Loaded::PyTorch(Box::new(l)));
    }
    for runtime in runtimes {
        let name = runtime.display().to_string();
        docs.extend(documents(&read_manifest(runtime)?, &name)?);
    }
    admit_train_job(&docs, &source_name).map(|l| Loaded::Train(Box::new(l)))
}

/// Bounds on what a parser would amplify: YAML aliases and deeply nested flow collections.
fn check_shape(text: &str) -> Result<(), String> {
    let (mut depth, mut deepest, mut aliases) = (0usize, 0usize, 0usize);
    let (mut quote, mut prev) = (None::<char>, ' ');
    for line in text.lines() {
        let mut comment = false;
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '#') if prev == ' ' || prev == '\t' => comment = true,
                _ if comment => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '[' | '{') => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                (None, '*') if matches!(prev, ' ' | '[' | '{' | ',' | ':' | '-') => aliases += 1,
                _ => {}
            }
            prev = c;
        }
        prev = ' ';
        // A plain scalar never spans lines with an open quote in a manifest worth reading.
        if quote == Some('\'') {
            quote = None;
        }
    }
    if deepest > MAX_FLOW_DEPTH {
        return Err(format!("nested {deepest} levels deep: expected at most {MAX_FLOW_DEPTH}"));
    }
    if aliases > MAX_ALIASES {
        return Err(format!("uses {aliases} YAML aliases: expected at most {MAX_ALIASES}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_names_the_path() {
        let e = load_manifest(Path::new("/nonexistent/job.yaml"), &[]).unwrap_err();
        assert!(e.to_string().starts_with("cannot read manifest /nonexistent/job.yaml: "), "{e}");
    }
}
