//! The seam for the log-rules engine: `/start`'s `log_monitoring_configuration` becomes the
//! attempt's rules here, and the event loop hands `Assignment::rules` to the child's output
//! pipeline when it spawns the attempt (`replica::event_loop`, `Loop::spawn`).
//!
//! Until the engine is in this build, a non-empty configuration is refused with a 422 naming the
//! field: accepting it would run the job with the hang and slowdown detection the user asked for
//! silently off (the agent's own fail-open when a rule does not parse is not copied either).
//! To wire the engine: make `AttemptRules` hold its compiled rule set, build it in `check` from
//! the engine's parser (its error, naming the rule and the field, becomes the 422's message), and
//! start the evaluation for the attempt in `Loop::spawn`; a firing rule then reaches the machine
//! as a fault with the engine's reason (`LogHang_<rule>`, ...) through `Replica::on_input`.

use serde_json::Value;

/// One attempt's log rules, validated; empty when `/start` carried none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptRules {
    /// The configuration as received (non-empty only once an engine accepts it).
    pub config: Vec<Value>,
}

impl AttemptRules {
    /// No rules.
    pub fn none() -> Self {
        Self::default()
    }

    /// True when the attempt has no rules.
    pub fn is_empty(&self) -> bool {
        self.config.is_empty()
    }
}

/// Validate `log_monitoring_configuration` into the attempt's rules, or say why not.
pub fn check(config: &[Value]) -> Result<AttemptRules, String> {
    if config.is_empty() {
        return Ok(AttemptRules::none());
    }
    Err(format!(
        "Value error, log rules are not supported by this build of rankvisor: {} rule(s) refused rather than \
         ignored (the job would run without the monitoring it asks for); remove logMonitoringConfiguration \
         or use a build with the log-rules engine",
        config.len()
    ))
}
