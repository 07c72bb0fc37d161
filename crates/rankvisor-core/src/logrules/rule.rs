//! The rules' schema (`logMonitoringConfiguration` of a HyperPodPyTorchJob), read from JSON or
//! YAML and checked field by field: a rule that would not do what it says is refused, naming the
//! rule and the field.

use super::budget::Budget;
use super::pynum::{is_py_int, py_int};
use super::pyre::PyRegex;
use crate::untrusted::escape_hidden;
use serde_json::Value;
use std::time::Duration;

/// The comparison of a captured metric with `metricThreshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `gt`: value > threshold.
    Gt,
    /// `gteq`: value >= threshold.
    Gteq,
    /// `lt`: value < threshold.
    Lt,
    /// `lteq`: value <= threshold.
    Lteq,
    /// `eq`: value == threshold.
    Eq,
}

impl Operator {
    /// Whether `value` meets the condition (Python's float-with-int comparison; exact because the
    /// threshold is within ±2^53).
    pub fn holds(self, value: f64, threshold: i64) -> bool {
        let t = threshold as f64;
        match self {
            Self::Gt => value > t,
            Self::Gteq => value >= t,
            Self::Lt => value < t,
            Self::Lteq => value <= t,
            Self::Eq => value == t,
        }
    }
}

/// One rule, validated.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `name`: names the rule in reasons (`LogHang_<name>`).
    pub name: String,
    /// `logPattern`: matched at the start of each line.
    pub log_pattern: PyRegex,
    /// `expectedStartCutOffInSeconds`: HANGING if no match this long after the attempt starts.
    pub start_cutoff: Option<Duration>,
    /// `expectedRecurringFrequencyInSeconds`: HANGING if no match this long after the last one.
    pub recurring: Option<Duration>,
    /// `stopPattern`: a matching line deactivates the rule for the attempt.
    pub stop_pattern: Option<PyRegex>,
    /// `metricThreshold` (truncated to an integer) with `operator`.
    pub metric: Option<(Operator, i64)>,
    /// `metricEvaluationDataPoints`: consecutive matches meeting the condition that make SLOW.
    pub data_points: u32,
    /// `faultOnMatch`: a match is FAULTED.
    pub fault_on_match: bool,
}

/// A rule that cannot be used: which rule, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulesError {
    /// The file or body is not JSON or the YAML subset.
    #[error("log rules: {0}")]
    Syntax(String),
    /// The document is not a list of rules, or over a limit.
    #[error("log rules: {0}")]
    Shape(String),
    /// The rules file cannot be used: why, and the file (escaped).
    #[error("log rules: {1}: {0}")]
    File(String, String),
    /// One rule's field.
    #[error("log rule #{index} ({name}): field {field}: {problem}")]
    Field {
        /// 1-based position in the list.
        index: usize,
        /// The rule's name as given (escaped), or "no name".
        name: String,
        /// The field, as spelled in the schema.
        field: String,
        /// What is wrong and what was expected.
        problem: String,
    },
}

/// Every field of the schema; anything else in a rule is refused (a misspelled field would
/// otherwise be a rule that silently never fires).
pub const FIELDS: [&str; 9] = [
    "name",
    "logPattern",
    "expectedStartCutOffInSeconds",
    "expectedRecurringFrequencyInSeconds",
    "metricThreshold",
    "operator",
    "metricEvaluationDataPoints",
    "stopPattern",
    "faultOnMatch",
];

/// The largest threshold whose comparison with a float is exact (2^53).
const MAX_THRESHOLD: i64 = 1 << 53;
/// The longest timeout accepted: ten years.
const MAX_SECONDS: i64 = 10 * 366 * 86_400;

fn rule_name(v: &Value) -> String {
    match v.get("name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => format!("{:?}", crate::untrusted::escape(n)),
        _ => "no name".into(),
    }
}

pub(super) fn field_err(index: usize, v: &Value, field: &str, problem: impl Into<String>) -> RulesError {
    RulesError::Field { index, name: rule_name(v), field: field.into(), problem: problem.into() }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    let s = if s.len() > 80 {
        format!("{}...", &s[..(0..=80).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)])
    } else {
        s
    };
    crate::untrusted::escape(&s).into_owned()
}

/// `text` between quotes, as written (its backslashes as they are), hidden characters escaped.
fn quoted(text: &str) -> String {
    format!("\"{}\"", escape_hidden(text))
}

/// Rule `index` (1-based) of a document, its patterns compiled within `budget`.
pub(super) fn rule_from_value(index: usize, v: &Value, budget: &mut Budget) -> Result<Rule, RulesError> {
    let Value::Object(o) = v else {
        return Err(RulesError::Field {
            index,
            name: "no name".into(),
            field: "(rule)".into(),
            problem: format!("expected an object with the rule's fields, got {}", show(v)),
        });
    };
    let f = RuleFields { index, v, o };
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(f.err(k, format!("unknown field; the fields are {}", FIELDS.join(", "))));
    }
    let name = f
        .string("name")?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| f.err("name", "required: a non-empty string".into()))?;
    let log_pattern =
        f.pattern("logPattern", budget)?.ok_or_else(|| f.err("logPattern", "required: a regular expression".into()))?;
    let stop_pattern = f.pattern("stopPattern", budget)?;
    let start_cutoff = f.seconds("expectedStartCutOffInSeconds")?;
    let recurring = f.seconds("expectedRecurringFrequencyInSeconds")?;
    let threshold = f.integer("metricThreshold", -MAX_THRESHOLD, MAX_THRESHOLD)?;
    let operator = f.operator()?;
    let data_points = f.integer("metricEvaluationDataPoints", 1, u32::MAX as i64)?.unwrap_or(1) as u32;
    let metric = f.metric(threshold, operator, &log_pattern)?;
    let fault_on_match = match o.get("faultOnMatch") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(f.err("faultOnMatch", format!("expected true or false, got {}", show(other)))),
    };
    Ok(Rule {
        name: name.to_string(),
        log_pattern,
        start_cutoff,
        recurring,
        stop_pattern,
        metric,
        data_points,
        fault_on_match,
    })
}

/// One rule's fields, each read and checked by its kind; an error names the rule and the field.
struct RuleFields<'a> {
    index: usize,
    v: &'a Value,
    o: &'a serde_json::Map<String, Value>,
}

impl<'a> RuleFields<'a> {
    fn err(&self, field: &str, problem: String) -> RulesError {
        field_err(self.index, self.v, field, problem)
    }

    fn string(&self, field: &str) -> Result<Option<&'a str>, RulesError> {
        match self.o.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(field, format!("expected a string, got {}", show(other)))),
        }
    }

    /// A regular expression, compiled within `budget`, that does not match an empty line.
    fn pattern(&self, field: &str, budget: &mut Budget) -> Result<Option<PyRegex>, RulesError> {
        let Some(text) = self.string(field)? else { return Ok(None) };
        if text.is_empty() {
            return Err(self.err(field, "an empty pattern matches every line: give a regular expression".into()));
        }
        let re = budget.compile(text).map_err(|e| self.err(field, format!("{}: {e}", quoted(text))))?;
        if re.is_match("") {
            return Err(self.err(
                field,
                format!(
                    "{} matches an empty line; the agent evaluates an empty line every second the log is \
                     quiet, so this rule would match then (write .+ where .* would match nothing)",
                    quoted(text)
                ),
            ));
        }
        Ok(Some(re))
    }

    /// Python's `int()` of a number (truncated) or a string of digits, from `min` to `max`.
    fn integer(&self, field: &str, min: i64, max: i64) -> Result<Option<i64>, RulesError> {
        let Some(value) = self.o.get(field) else { return Ok(None) };
        // `Some(None)`: an integer, beyond i64.
        let n = match value {
            // Python's int() of a JSON number truncates toward zero.
            Value::Number(n) => {
                Some(n.as_i64().or_else(|| n.as_f64().filter(|f| f.abs() < 9.2e18).map(|f| f.trunc() as i64)))
            }
            Value::String(s) => py_int(s).map(Some).or_else(|| is_py_int(s).then_some(None)),
            _ => None,
        };
        match n {
            Some(Some(n)) if (min..=max).contains(&n) => Ok(Some(n)),
            Some(Some(n)) => Err(self.err(field, format!("{n} is out of range: expected {min} to {max}"))),
            Some(None) => Err(self.err(field, format!("{} is out of range: expected {min} to {max}", show(value)))),
            None => Err(self.err(
                field,
                format!("expected an integer (a number, truncated, or a string of digits), got {}", show(value)),
            )),
        }
    }

    /// A whole number of seconds, up to ten years.
    fn seconds(&self, field: &str) -> Result<Option<Duration>, RulesError> {
        Ok(self.integer(field, 0, MAX_SECONDS)?.map(|s| Duration::from_secs(s as u64)))
    }

    fn operator(&self) -> Result<Option<Operator>, RulesError> {
        Ok(match self.string("operator")? {
            None => None,
            Some("gt") => Some(Operator::Gt),
            Some("gteq") => Some(Operator::Gteq),
            Some("lt") => Some(Operator::Lt),
            Some("lteq") => Some(Operator::Lteq),
            Some("eq") => Some(Operator::Eq),
            Some(other) => {
                return Err(self.err("operator", format!("{}: expected gt, gteq, lt, lteq or eq", quoted(other))))
            }
        })
    }

    /// The metric condition: threshold and operator both or neither; with one, `logPattern`
    /// captures the value, and without, `metricEvaluationDataPoints` has nothing to count.
    fn metric(
        &self,
        threshold: Option<i64>,
        operator: Option<Operator>,
        log_pattern: &PyRegex,
    ) -> Result<Option<(Operator, i64)>, RulesError> {
        let metric = match (threshold, operator) {
            (Some(t), Some(op)) => Some((op, t)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(self.err("operator", "required with metricThreshold: gt, gteq, lt, lteq or eq".into()))
            }
            (None, Some(_)) => return Err(self.err("metricThreshold", "required with operator".into())),
        };
        if metric.is_some() && log_pattern.groups() == 0 {
            return Err(self.err(
                "logPattern",
                "metricThreshold needs a capturing group in logPattern: its first group is the value".into(),
            ));
        }
        if metric.is_none() && self.o.contains_key("metricEvaluationDataPoints") {
            return Err(self.err(
                "metricEvaluationDataPoints",
                "counts matches meeting metricThreshold: give metricThreshold and operator".into(),
            ));
        }
        Ok(metric)
    }
}
