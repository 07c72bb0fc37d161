//! Why the apiserver or a webhook refuses an object, as `k8s.io/apimachinery/pkg/util/validation/field`
//! lists it, and the names Kubernetes accepts (DNS-1035 labels): what every job kind's admission shares.

use std::fmt;

/// The kind of a field error, as `k8s.io/apimachinery/pkg/util/validation/field` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    /// `Required value`.
    Required,
    /// `Forbidden`.
    Forbidden,
    /// `Invalid value`.
    Invalid,
    /// `Unsupported value`.
    NotSupported,
}

/// The bad value an `Invalid`/`NotSupported` error quotes, printed as Go's field package does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// Printed quoted.
    Str(String),
    /// Printed bare.
    Int(i64),
}

/// One refusal: `<path>: <Type>: <detail>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.pytorchReplicaSpecs[Master].replicas`.
    pub field: String,
    /// Required, Forbidden, Invalid or NotSupported.
    pub kind: FieldErrorType,
    /// The value quoted by Invalid and NotSupported.
    pub value: Option<BadValue>,
    /// The explanation.
    pub detail: String,
}

impl FieldError {
    pub(crate) fn new(
        field: impl Into<String>,
        kind: FieldErrorType,
        value: Option<BadValue>,
        detail: impl Into<String>,
    ) -> Self {
        Self { field: field.into(), kind, value, detail: detail.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let type_name = match self.kind {
            FieldErrorType::Required => "Required value",
            FieldErrorType::Forbidden => "Forbidden",
            FieldErrorType::Invalid => "Invalid value",
            FieldErrorType::NotSupported => "Unsupported value",
        };
        write!(f, "{}: {type_name}", self.field)?;
        match (&self.kind, &self.value) {
            (FieldErrorType::Invalid | FieldErrorType::NotSupported, Some(BadValue::Str(s))) => write!(f, ": {s:?}")?,
            (FieldErrorType::Invalid | FieldErrorType::NotSupported, Some(BadValue::Int(i))) => write!(f, ": {i}")?,
            _ => {}
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// Every refusal of one manifest, printed as `ErrorList.ToAggregate()` does: one error alone,
/// several as `[a, b]`, duplicates dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut seen: Vec<String> = Vec::new();
        for e in &self.0 {
            let msg = e.to_string();
            if !seen.contains(&msg) {
                seen.push(msg);
            }
        }
        match seen.as_slice() {
            [one] => f.write_str(one),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

pub(crate) const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// apimachinery's `IsDNS1035Label`: the reasons `name` is not a DNS-1035 label.
pub(crate) fn dns1035_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > 63 {
        problems.push("must be no more than 63 characters".to_string());
    }
    let bytes = name.as_bytes();
    let ok = matches!(bytes.first(), Some(b'a'..=b'z'))
        && matches!(bytes.last(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.iter().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'));
    if !ok {
        problems.push(DNS1035_MSG.to_string());
    }
    problems
}
