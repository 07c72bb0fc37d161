//! Log rules: the HyperPod agent's `logMonitoringConfiguration`, evaluated on every line of the
//! child's stdout with the agent's semantics (docs/log-rules.md).
//!
//! `ruleset` reads the rules within their limits (JSON or the YAML subset of `yaml`), `rule`
//! checks each rule, `pyre` gives their patterns Python's meaning, `eval` is the pure evaluator
//! (lines and time in, states out, and the next deadline), `lines` splits a stream as the agent's reader does, `relay` copies the child's
//! stdout through to rankvisor's while feeding the rules, `replay` is `rankvisor log-rules test`.

mod budget;
pub mod eval;
pub mod lines;
pub mod pynum;
pub mod pyre;
pub mod relay;
pub mod replay;
pub mod rule;
pub mod ruleset;
mod yaml;

pub use eval::{Evaluator, LogState, Verdict};
pub use pyre::{PatternError, PyRegex};
pub use relay::{Relay, Step};
pub use replay::{replay, ReplayError, ReplayOptions};
pub use rule::{Operator, Rule, RulesError};
pub use ruleset::{parse_rules, read_rules_file, rules_from_value, RuleSet};
