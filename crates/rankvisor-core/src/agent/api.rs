//! The agent's HTTP API as values: `/start`, `/update` and `/stop` bodies parsed with the
//! validation of `hyperpod_elastic_agent/server/api_models.py` (1.1.3, pydantic's lax mode),
//! the 422 body FastAPI sends for bad input, and the `/status` body byte for byte as the agent's
//! `StatusResponseJSONEncoder` writes it. Pure: no sockets here.

use super::rules::AttemptRules;
use super::state::AgentState;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The agent version reported in `/status`: the API of hyperpod-elastic-agent 1.1.3, served by
/// rankvisor (a PEP 440 local version, so a version comparison still sees 1.1.3).
pub const AGENT_VERSION: &str = concat!("1.1.3+rankvisor.", env!("CARGO_PKG_VERSION"));
/// The one restart mode served: process-level restart (`RestartMode.PROCESS_LEVEL_RESTART`).
pub const RESTART_MODE: &str = "process_level_restart";

/// This node's part of the job, as `/start` or `/update` assigned it.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The global rank of this node (`PET_NODE_RANK`).
    pub rank: i64,
    /// Nodes in the job (`PET_NNODES`).
    pub nnodes: i64,
    /// Restarts of the job so far (`TORCHELASTIC_RESTART_COUNT`, `JOB_RESTART_COUNT`).
    pub fault_count: i64,
    /// `PET_MASTER_ADDR`.
    pub master_addr: String,
    /// `PET_MASTER_PORT` (an empty string in the request is 0, as the agent has it).
    pub master_port: i64,
    /// `ipVersion`, echoed as `ipversion` in `/status`.
    pub ip_version: Option<String>,
    /// The attempt's log rules (`log_monitoring_configuration`).
    pub rules: AttemptRules,
}

impl Assignment {
    /// The environment the attempt's child gets on top of the configured one: what torchrun reads
    /// for its rendezvous (`PET_*`) and the restart counters the agent sets.
    pub fn child_env(&self) -> Vec<(String, String)> {
        let count = self.fault_count.to_string();
        vec![
            ("PET_NNODES".into(), self.nnodes.to_string()),
            ("PET_NODE_RANK".into(), self.rank.to_string()),
            ("PET_MASTER_ADDR".into(), self.master_addr.clone()),
            ("PET_MASTER_PORT".into(), self.master_port.to_string()),
            ("TORCHELASTIC_RESTART_COUNT".into(), count.clone()),
            ("JOB_RESTART_COUNT".into(), count.clone()),
            ("RANKVISOR_RESTART_COUNT".into(), count),
        ]
    }
}

/// How `/stop` wants the child stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StopOrder {
    /// `is_graceful`: SIGUSR1 instead of SIGTERM.
    pub graceful: bool,
    /// `timeout`: the wait before SIGKILL (rankvisor's grace when absent).
    pub timeout: Option<Duration>,
}

/// One validation error, as pydantic reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// pydantic's error type (`missing`, `int_parsing`, `value_error`, ...).
    pub kind: &'static str,
    /// Where: `["body", field]`.
    pub loc: Vec<Value>,
    /// The message, e.g. `Value error, Empty master_addr received from operator`.
    pub msg: String,
    /// The offending input.
    pub input: Value,
}

/// A request that fails validation: the 422 reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid(pub Vec<FieldError>);

impl Invalid {
    /// FastAPI's body: `{"detail":[{"type","loc","msg","input"}...]}`.
    pub fn body(&self) -> String {
        let detail: Vec<Value> =
            self.0.iter().map(|e| json!({"type": e.kind, "loc": e.loc, "msg": e.msg, "input": e.input})).collect();
        json!({ "detail": detail }).to_string()
    }

    /// One line for the log: `rank: Field required; master_addr: ...`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|e| {
                let loc: Vec<String> =
                    e.loc.iter().skip(1).map(|l| l.as_str().map_or(l.to_string(), str::to_string)).collect();
                format!("{}: {}", loc.join(" -> "), e.msg)
            })
            .collect();
        parts.join("; ")
    }
}

fn error(kind: &'static str, field: &str, msg: impl Into<String>, input: Value) -> FieldError {
    FieldError { kind, loc: vec!["body".into(), field.into()], msg: msg.into(), input }
}

/// pydantic's error for a body that is JSON but not an object.
fn not_an_object(input: Value) -> Invalid {
    let msg = "Input should be a valid dictionary or object to extract fields from";
    Invalid(vec![FieldError { kind: "model_attributes_type", loc: vec!["body".into()], msg: msg.into(), input }])
}

/// A request body as JSON, or FastAPI's `json_invalid` error.
fn parse_json(body: &[u8]) -> Result<Value, Invalid> {
    serde_json::from_slice(body).map_err(|e| {
        Invalid(vec![FieldError {
            kind: "json_invalid",
            loc: vec!["body".into(), e.column().into()],
            msg: "JSON decode error".into(),
            input: json!({}),
        }])
    })
}

/// pydantic's lax `int`: an integer, a float with no fraction, or a string of one.
fn lax_int(v: &Value) -> Result<i64, (&'static str, &'static str)> {
    const NOT_INT: (&str, &str) = ("int_type", "Input should be a valid integer");
    const PARSING: (&str, &str) =
        ("int_parsing", "Input should be a valid integer, unable to parse string as an integer");
    const FRACTION: (&str, &str) =
        ("int_from_float", "Input should be a valid integer, got a number with a fractional part");
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(i),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            (None, Some(_)) => Err(FRACTION),
            _ => Err(NOT_INT),
        },
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::String(s) => s.trim().parse::<i64>().map_err(|_| PARSING),
        _ => Err(NOT_INT),
    }
}

/// `/start` and `/update`: the assignment, validated as `StartRequest` / `UpdateRequest` are;
/// `log_monitoring_configuration` goes through `rules::check` (the log-rules engine's seam).
pub fn parse_assignment(body: &[u8]) -> Result<Assignment, Invalid> {
    let v = if body.is_empty() {
        return Err(Invalid(vec![FieldError {
            kind: "missing",
            loc: vec!["body".into()],
            msg: "Field required".into(),
            input: Value::Null,
        }]));
    } else {
        parse_json(body)?
    };
    let Value::Object(obj) = v else { return Err(not_an_object(v)) };
    let mut errors = Vec::new();
    let mut int = |field: &str| match obj.get(field) {
        None => {
            errors.push(error("missing", field, "Field required", Value::Object(obj.clone())));
            0
        }
        Some(x) => lax_int(x).unwrap_or_else(|(kind, msg)| {
            errors.push(error(kind, field, msg, x.clone()));
            0
        }),
    };
    let (rank, nnodes, fault_count) = (int("rank"), int("nnodes"), int("faultCount"));
    let master_addr = match obj.get("master_addr") {
        None => {
            errors.push(error("missing", "master_addr", "Field required", Value::Object(obj.clone())));
            String::new()
        }
        Some(Value::String(s)) if s.is_empty() => {
            let msg = "Value error, Empty master_addr received from operator";
            errors.push(error("value_error", "master_addr", msg, Value::String(String::new())));
            String::new()
        }
        Some(Value::String(s)) => s.clone(),
        Some(x) => {
            errors.push(error("string_type", "master_addr", "Input should be a valid string", x.clone()));
            String::new()
        }
    };
    let master_port = match obj.get("master_port") {
        None => {
            errors.push(error("missing", "master_port", "Field required", Value::Object(obj.clone())));
            0
        }
        Some(Value::String(s)) if s.is_empty() => 0,
        Some(Value::String(s)) => s.parse::<i64>().unwrap_or_else(|_| {
            let msg = format!("Value error, invalid literal for int() with base 10: '{s}'");
            errors.push(error("value_error", "master_port", msg, Value::String(s.clone())));
            0
        }),
        Some(x @ Value::Number(n)) if n.is_i64() => x.as_i64().unwrap_or_default(),
        Some(x) => {
            errors.push(error("int_type", "master_port", "Input should be a valid integer", x.clone()));
            0
        }
    };
    let rules = match obj.get("log_monitoring_configuration") {
        None | Some(Value::Null) => AttemptRules::none(),
        Some(Value::Array(items)) => match super::rules::check(items) {
            Ok(r) => r,
            Err(msg) => {
                errors.push(error("value_error", "log_monitoring_configuration", msg, Value::Array(items.clone())));
                AttemptRules::none()
            }
        },
        Some(x) => {
            errors.push(error("list_type", "log_monitoring_configuration", "Input should be a valid list", x.clone()));
            AttemptRules::none()
        }
    };
    let ip_version = match obj.get("ipVersion") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(x) => {
            errors.push(error("string_type", "ipVersion", "Input should be a valid string", x.clone()));
            None
        }
    };
    if !errors.is_empty() {
        return Err(Invalid(errors));
    }
    Ok(Assignment { rank, nnodes, fault_count, master_addr, master_port, ip_version, rules })
}

/// `/stop`: an empty body means the defaults (`StopRequest` is optional there).
pub fn parse_stop(body: &[u8]) -> Result<StopOrder, Invalid> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(StopOrder::default());
    }
    let v = parse_json(body)?;
    let obj = match v {
        Value::Null => return Ok(StopOrder::default()),
        Value::Object(o) => o,
        other => return Err(not_an_object(other)),
    };
    let mut errors = Vec::new();
    let graceful = match obj.get("is_graceful") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(x) => {
            errors.push(error("bool_type", "is_graceful", "Input should be a valid boolean", x.clone()));
            false
        }
    };
    let timeout = match obj.get("timeout") {
        None | Some(Value::Null) => None,
        Some(x) => match lax_int(x) {
            // A negative wait is no wait: SIGKILL follows at once, as `Popen.wait(timeout<0)` does.
            // A huge one is capped so that a deadline never overflows the clock.
            Ok(t) => Some(Duration::from_secs(t.clamp(0, i64::from(u32::MAX)) as u64)),
            Err((kind, msg)) => {
                errors.push(error(kind, "timeout", msg, x.clone()));
                None
            }
        },
    };
    if let Some(x) = obj.get("restart_mode").filter(|x| !x.is_null() && !x.is_string()) {
        errors.push(error("string_type", "restart_mode", "Input should be a valid string", x.clone()));
    }
    if !errors.is_empty() {
        return Err(Invalid(errors));
    }
    Ok(StopOrder { graceful, timeout })
}

/// What `/status` shows, with wall-clock times.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusView {
    /// The state.
    pub state: AgentState,
    /// Its reason.
    pub reason: Option<String>,
    /// Its message.
    pub message: Option<String>,
    /// When each state was last entered, in first-entry order.
    pub transitions: Vec<(AgentState, SystemTime)>,
    /// The rank `/start` assigned.
    pub assigned_rank: Option<i64>,
    /// `ipVersion` from the last `/start` or `/update`.
    pub ip_version: Option<String>,
}

/// The `/status` body as `json.dumps(..., ensure_ascii=False, separators=(",", ":"),
/// cls=StatusResponseJSONEncoder)` writes it for a PLR agent: `spare` is always `"True"` there
/// (PLR never updates it) and `progress` is absent (no checkpoint discovery here).
pub fn status_body(v: &StatusView) -> String {
    // serde_json writes strings as Python's encoder does with ensure_ascii=False; the keys are
    // written in the encoder's order by hand (a serde_json Map sorts them).
    let mut out = String::from("{\"status\":");
    let str_of = |s: &str| Value::String(s.into()).to_string();
    out.push_str(&str_of(&v.state.name().to_lowercase()));
    out.push_str(",\"transitions\":{");
    for (i, (s, t)) in v.transitions.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&str_of(s.name()));
        out.push(':');
        out.push_str(&str_of(&isoformat(*t)));
    }
    out.push('}');
    let mut field = |k: &str, val: Option<&str>| {
        if let Some(val) = val.filter(|s| !s.is_empty()) {
            out.push_str(&format!(",\"{k}\":{}", str_of(val)));
        }
    };
    field("reason", v.reason.as_deref());
    field("message", v.message.as_deref());
    field("restartMode", Some(RESTART_MODE));
    field("ipversion", v.ip_version.as_deref());
    field("agent_version", Some(AGENT_VERSION));
    let rank = v.assigned_rank.filter(|r| *r >= 0).map(|r| r.to_string());
    // `if o.assigned_rank:` on a string: "0" is truthy, so rank 0 is reported.
    field("assigned_rank", rank.as_deref());
    field("spare", Some("True"));
    out.push('}');
    out
}

/// `datetime.isoformat()` of an aware UTC time: `2026-12-01T16:14:49.123456+00:00`, the
/// fraction left out when it is zero.
pub fn isoformat(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let stamp = crate::status::rfc3339(UNIX_EPOCH + Duration::from_secs(since.as_secs()));
    let seconds = stamp.split('.').next().unwrap_or(&stamp);
    match since.subsec_micros() {
        0 => format!("{seconds}+00:00"),
        us => format!("{seconds}.{us:06}+00:00"),
    }
}
