//! `/start`'s `log_monitoring_configuration` becomes the attempt's rules here; the event loop
//! evaluates them on the attempt's child (`replica::event_loop`), where they replace
//! `--log-rules`. A rule that cannot be used is a 422 naming the rule and the field: the agent's
//! own fail-open (all monitoring off when a rule does not parse) is not copied.

use crate::logrules::{rules_from_value, RuleSet};
use serde_json::Value;
use std::sync::Arc;

/// One attempt's log rules, validated; empty when `/start` carried none.
#[derive(Debug, Clone, Default)]
pub struct AttemptRules {
    /// The configuration as received.
    pub config: Vec<Value>,
    /// The checked rules; None when the configuration is empty.
    pub rules: Option<Arc<RuleSet>>,
}

impl PartialEq for AttemptRules {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
    }
}

impl AttemptRules {
    /// No rules.
    pub fn none() -> Self {
        Self::default()
    }

    /// True when the attempt has no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_none()
    }
}

/// Validate `log_monitoring_configuration` into the attempt's rules, or say why not.
pub fn check(config: &[Value]) -> Result<AttemptRules, String> {
    if config.is_empty() {
        return Ok(AttemptRules::none());
    }
    let rules = rules_from_value(&Value::Array(config.to_vec())).map_err(|e| format!("Value error, {e}"))?;
    Ok(AttemptRules { config: config.to_vec(), rules: Some(Arc::new(rules)) })
}
