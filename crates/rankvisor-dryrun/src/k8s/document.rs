//! A manifest file's text as documents, and why a manifest cannot be run ([`ManifestError`]):
//! what every job kind's admission shares, below them all.

use serde::Deserialize;
use serde_json::Value;

use super::field_error::FieldErrors;

/// The `apiVersion` a PyTorchJob manifest has (a TrainJob has its own).
pub(crate) const API_VERSION: &str = "kubeflow.org/v1";

/// The `kind` a PyTorchJob manifest has (a TrainJob has its own).
pub(crate) const KIND: &str = "PyTorchJob";

/// Why a manifest cannot be run. Every variant means exit status 64.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read manifest {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON, or a field has the wrong type.
    #[error("error parsing {source_name}: line {line}, column {column}: {message}")]
    Syntax {
        /// The file name (as given on the command line).
        source_name: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The document is not a `kubeflow.org/v1` `PyTorchJob`.
    #[error("error parsing {source_name}: no matches for kind {kind:?} in version {api_version:?}: expected apiVersion {API_VERSION} and kind {KIND}")]
    WrongKind {
        /// The file name.
        source_name: String,
        /// The `apiVersion` seen.
        api_version: String,
        /// The `kind` seen.
        kind: String,
    },
    /// The apiserver's schema validation refuses the object.
    #[error("The PyTorchJob {name:?} is invalid: {errors}")]
    Invalid {
        /// The job's name as written.
        name: String,
        /// Every refusal, in the apiserver's `field.ErrorList` form.
        errors: FieldErrors,
    },
    /// The operator's admission webhook refuses the job.
    #[error("error when creating {source_name:?}: admission webhook \"validator.pytorchjob.training-operator.kubeflow.org\" denied the request: {errors}")]
    Denied {
        /// The file name.
        source_name: String,
        /// Every refusal, in the apiserver's `field.ErrorList` form.
        errors: FieldErrors,
    },
    /// The apiserver's schema validation refuses an object of another kind (a TrainJob).
    #[error("The {kind} {name:?} is invalid: {errors}")]
    InvalidObject {
        /// The kind as the apiserver names it, `TrainJob.trainer.kubeflow.org`.
        kind: String,
        /// The object's name as written.
        name: String,
        /// Every refusal.
        errors: FieldErrors,
    },
    /// Kubeflow Trainer's TrainJob webhook refuses the TrainJob.
    #[error("error when creating {source_name:?}: admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: {errors}")]
    TrainJobDenied {
        /// The file name.
        source_name: String,
        /// Every refusal.
        errors: FieldErrors,
    },
    /// kubectl's strict decoding: fields the kind's schema does not have.
    #[error("error when creating {source_name:?}: {kind} in version \"v1\" cannot be handled as a {kind}: strict decoding error: {}", .fields.iter().map(|f| format!("unknown field {f:?}")).collect::<Vec<_>>().join(", "))]
    UnknownFields {
        /// The file name.
        source_name: String,
        /// The kind.
        kind: &'static str,
        /// Every unknown field, as `spec.runPolicy.foo`.
        fields: Vec<String>,
    },
    /// A valid job that a local dry run cannot run (for instance `valueFrom` env).
    #[error("{source_name}: the dry run cannot run this job: {reason}")]
    Unsupported {
        /// The file name.
        source_name: String,
        /// What the dry run cannot do, naming the field.
        reason: String,
    },
}

/// Every document of a YAML stream (or one JSON document), as values.
pub(crate) fn documents(text: &str, source_name: &str) -> Result<Vec<Value>, ManifestError> {
    if text.trim_start().starts_with('{') {
        return serde_json::from_str(text).map(|v| vec![v]).map_err(|e| json_syntax(&e, source_name));
    }
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| yaml_syntax(&e, source_name))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// A JSON parser's error as a manifest's, its position given once.
pub(crate) fn json_syntax(e: &serde_json::Error, source_name: &str) -> ManifestError {
    let message = strip_position(&e.to_string(), &format!(" at line {} column {}", e.line(), e.column()));
    ManifestError::Syntax { source_name: source_name.to_string(), line: e.line(), column: e.column(), message }
}

/// A YAML parser's error as a manifest's, its position given once.
pub(crate) fn yaml_syntax(e: &serde_yaml_ng::Error, source_name: &str) -> ManifestError {
    let (line, column) = e.location().map(|l| (l.line(), l.column())).unwrap_or((1, 1));
    let message = strip_position(&e.to_string(), &format!(" at line {line} column {column}"));
    ManifestError::Syntax { source_name: source_name.to_string(), line, column, message }
}

/// Drop the parser's own copy of the position, which the error already carries.
fn strip_position(message: &str, position: &str) -> String {
    message.replacen(position, "", 1)
}
