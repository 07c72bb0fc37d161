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

/// The most bytes of the offending input one error echoes: FastAPI echoes the whole body for
/// each missing field, which made a 680 KB body a 3.4 MB reply.
pub const MAX_ECHO: usize = 4096;
/// The most bytes of one error message (a log rule's message may quote the rule).
const MAX_MSG: usize = 1024;

fn error(kind: &'static str, field: &str, msg: impl Into<String>, input: &Value) -> FieldError {
    FieldError { kind, loc: vec!["body".into(), field.into()], msg: bounded_msg(msg.into()), input: echo(input) }
}

/// `input` as the 422 echoes it: itself when its JSON is at most [`MAX_ECHO`] bytes, else a
/// string saying what it was and its size (counted without writing it out).
pub fn echo(input: &Value) -> Value {
    /// Counts bytes and refuses past the limit, so a huge input is never serialized whole.
    struct Budget(usize);
    impl std::io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            if self.0 > MAX_ECHO {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if serde_json::to_writer(&mut Budget(0), input).is_ok() {
        return input.clone();
    }
    let what = match input {
        Value::Object(o) => format!("an object of {} fields", o.len()),
        Value::Array(a) => format!("a list of {} items", a.len()),
        Value::String(s) => format!("a string of {} bytes", s.len()),
        _ => "a value".to_string(),
    };
    Value::String(format!("({what}, over {MAX_ECHO} bytes of JSON: not echoed)"))
}

fn bounded_msg(mut msg: String) -> String {
    if msg.len() > MAX_MSG {
        let mut cut = MAX_MSG;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
        msg.push_str("...");
    }
    msg
}

/// pydantic's error for a body that is JSON but not an object.
fn not_an_object(input: Value) -> Invalid {
    let msg = "Input should be a valid dictionary or object to extract fields from";
    let input = echo(&input);
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

/// Why a value is not a lax `int`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotInt {
    /// pydantic's own error: (type, message).
    Pydantic(&'static str, &'static str),
    /// A whole number beyond i64 (pydantic takes any size; nothing here can use one): below
    /// zero when `negative`.
    Range { negative: bool },
}

impl NotInt {
    fn kind(self) -> &'static str {
        match self {
            Self::Pydantic(kind, _) => kind,
            Self::Range { .. } => "int_range",
        }
    }

    fn msg(self) -> String {
        match self {
            Self::Pydantic(_, msg) => msg.to_string(),
            Self::Range { .. } => format!("Input should be an integer from {} to {}", i64::MIN, i64::MAX),
        }
    }
}

/// pydantic's lax `int`: an integer, a float with no fraction, or a string of one.
fn lax_int(v: &Value) -> Result<i64, NotInt> {
    const NOT_INT: NotInt = NotInt::Pydantic("int_type", "Input should be a valid integer");
    const PARSING: NotInt =
        NotInt::Pydantic("int_parsing", "Input should be a valid integer, unable to parse string as an integer");
    const FRACTION: NotInt =
        NotInt::Pydantic("int_from_float", "Input should be a valid integer, got a number with a fractional part");
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(i),
            // A u64 above i64::MAX, or a float (1e300) that is whole.
            (None, _) if n.is_u64() => Err(NotInt::Range { negative: false }),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            (None, Some(f)) if f.fract() == 0.0 && f.is_finite() => Err(NotInt::Range { negative: f < 0.0 }),
            (None, Some(_)) => Err(FRACTION),
            _ => Err(NOT_INT),
        },
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::String(s) => {
            let t = s.trim();
            t.parse::<i64>().map_err(|_| {
                let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
                match !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    true => NotInt::Range { negative: t.starts_with('-') },
                    false => PARSING,
                }
            })
        }
        _ => Err(NOT_INT),
    }
}

/// `/start` and `/update`: the assignment, validated as `StartRequest` / `UpdateRequest` are,
/// then against the rank contract every other mode applies (`rank::check_assignment`);
/// `log_monitoring_configuration` goes through `rules::check` (the log-rules engine's seam).
pub fn parse_assignment(body: &[u8]) -> Result<Assignment, Invalid> {
    if body.is_empty() {
        return Err(Invalid(vec![FieldError {
            kind: "missing",
            loc: vec!["body".into()],
            msg: "Field required".into(),
            input: Value::Null,
        }]));
    }
    let v = parse_json(body)?;
    let Some(obj) = v.as_object() else { return Err(not_an_object(v)) };
    let mut fields = Fields { body: &v, obj, errors: Vec::new() };
    let (rank, nnodes, fault_count) = (fields.int("rank"), fields.int("nnodes"), fields.int("faultCount"));
    let master_addr = fields.master_addr();
    let master_port = fields.master_port();
    let rules = fields.rules();
    let ip_version = fields.ip_version();
    if !fields.errors.is_empty() {
        return Err(Invalid(fields.errors));
    }
    let assignment = Assignment { rank, nnodes, fault_count, master_addr, master_port, ip_version, rules };
    // Stricter than the agent, which starts a child with whatever it was given (docs/hyperpod.md):
    // only a body the agent's models accept reaches the rank contract.
    check_contract(&assignment, obj)?;
    Ok(assignment)
}

/// An assignment's fields read one by one as pydantic validates them: each gives its value, or
/// records its error (every field's, in the models' order) and gives a placeholder.
struct Fields<'a> {
    /// The whole body: the input a missing field's error echoes.
    body: &'a Value,
    obj: &'a serde_json::Map<String, Value>,
    errors: Vec<FieldError>,
}

impl Fields<'_> {
    /// A required lax `int`.
    fn int(&mut self, field: &str) -> i64 {
        match self.obj.get(field) {
            None => self.missing(field, 0),
            Some(x) => lax_int(x).unwrap_or_else(|e| {
                self.errors.push(error(e.kind(), field, e.msg(), x));
                0
            }),
        }
    }

    /// A required, non-empty string (the agent's validator rejects an empty one).
    fn master_addr(&mut self) -> String {
        match self.obj.get("master_addr") {
            None => self.missing("master_addr", String::new()),
            Some(x @ Value::String(s)) if s.is_empty() => {
                let msg = "Value error, Empty master_addr received from operator";
                self.errors.push(error("value_error", "master_addr", msg, x));
                String::new()
            }
            Some(Value::String(s)) => s.clone(),
            Some(x) => {
                self.errors.push(error("string_type", "master_addr", "Input should be a valid string", x));
                String::new()
            }
        }
    }

    /// A required port: an integer, or a string the agent's validator passes through `int(v)`
    /// (an empty one is 0: the port left unset, see `rank::check_assignment`).
    fn master_port(&mut self) -> i64 {
        match self.obj.get("master_port") {
            None => self.missing("master_port", 0),
            Some(Value::String(s)) if s.is_empty() => 0,
            // `int(v)`: surrounding whitespace is fine, any size parses (the contract bounds it).
            Some(x @ Value::String(s)) => lax_int(x).unwrap_or_else(|e| {
                match e {
                    NotInt::Range { .. } => self.errors.push(error(e.kind(), "master_port", e.msg(), x)),
                    NotInt::Pydantic(..) => {
                        let msg = format!("Value error, invalid literal for int() with base 10: '{s}'");
                        self.errors.push(error("value_error", "master_port", msg, x));
                    }
                }
                0
            }),
            Some(x @ Value::Number(n)) if n.is_i64() => x.as_i64().unwrap_or_default(),
            Some(x) => {
                self.errors.push(error("int_type", "master_port", "Input should be a valid integer", x));
                0
            }
        }
    }

    /// The optional `log_monitoring_configuration`, checked by the log-rules engine's seam.
    fn rules(&mut self) -> AttemptRules {
        match self.obj.get("log_monitoring_configuration") {
            None | Some(Value::Null) => AttemptRules::none(),
            Some(x @ Value::Array(items)) => match super::rules::check(items) {
                Ok(r) => r,
                Err(msg) => {
                    self.errors.push(error("value_error", "log_monitoring_configuration", msg, x));
                    AttemptRules::none()
                }
            },
            Some(x) => {
                self.errors.push(error("list_type", "log_monitoring_configuration", "Input should be a valid list", x));
                AttemptRules::none()
            }
        }
    }

    /// The optional `ipVersion` string.
    fn ip_version(&mut self) -> Option<String> {
        match self.obj.get("ipVersion") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(x) => {
                self.errors.push(error("string_type", "ipVersion", "Input should be a valid string", x));
                None
            }
        }
    }

    /// A required field that is absent: pydantic's `missing`, echoing the whole body.
    fn missing<T>(&mut self, field: &str, placeholder: T) -> T {
        self.errors.push(error("missing", field, "Field required", self.body));
        placeholder
    }
}

/// The rank contract's checks (`rank::check_assignment`) on a typed assignment, and a restart
/// count that is a count: a 422 naming the field and its value as received.
fn check_contract(a: &Assignment, obj: &serde_json::Map<String, Value>) -> Result<(), Invalid> {
    let culprit = |field: &str, msg: String| {
        let input = obj.get(field).unwrap_or(&Value::Null);
        Invalid(vec![error("value_error", field, format!("Value error, {msg}"), input)])
    };
    if a.fault_count < 0 {
        let msg = format!("faultCount={} is invalid: expected a restart count >= 0", a.fault_count);
        return Err(culprit("faultCount", msg));
    }
    crate::rank::check_assignment(a.rank, a.nnodes, &a.master_addr, a.master_port).map_err(|e| {
        let field = match e.var() {
            "PET_NODE_RANK" => "rank",
            "PET_NNODES" => "nnodes",
            "PET_MASTER_ADDR" | "MASTER_ADDR" => "master_addr",
            _ => "master_port",
        };
        culprit(field, e.to_string())
    })
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
            errors.push(error("bool_type", "is_graceful", "Input should be a valid boolean", x));
            false
        }
    };
    let timeout = match obj.get("timeout") {
        None | Some(Value::Null) => None,
        Some(x) => match lax_int(x) {
            // A negative wait is no wait: SIGKILL follows at once, as `Popen.wait(timeout<0)` does.
            // A huge one is capped so that a deadline never overflows the clock.
            Ok(t) => Some(Duration::from_secs(t.clamp(0, i64::from(u32::MAX)) as u64)),
            Err(NotInt::Range { negative }) => {
                Some(Duration::from_secs(if negative { 0 } else { u64::from(u32::MAX) }))
            }
            Err(e) => {
                errors.push(error(e.kind(), "timeout", e.msg(), x));
                None
            }
        },
    };
    if let Some(x) = obj.get("restart_mode").filter(|x| !x.is_null() && !x.is_string()) {
        errors.push(error("string_type", "restart_mode", "Input should be a valid string", x));
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

#[cfg(test)]
mod hostile_tests {
    use super::*;

    const VALID: &str = r#"{"rank":0,"nnodes":2,"faultCount":0,"master_addr":"10.0.0.1","master_port":"23456"}"#;

    /// A valid assignment with `field` set to the JSON `raw`.
    fn with(field: &str, raw: &str) -> Vec<u8> {
        let mut m: serde_json::Map<String, Value> = serde_json::from_str(VALID).unwrap();
        m.insert(field.into(), serde_json::from_str(raw).unwrap());
        serde_json::to_vec(&m).unwrap()
    }

    /// The one error of a valid assignment with `field` set to `raw`.
    fn refused(field: &str, raw: &str) -> FieldError {
        let e = parse_assignment(&with(field, raw)).expect_err(raw);
        assert_eq!(e.0.len(), 1, "{}", e.body());
        assert_eq!(e.0[0].loc[1].as_str(), Some(field), "{}", e.body());
        e.0.into_iter().next().unwrap()
    }

    /// Regression: a missing field echoed the whole body, once per missing field (680 KB -> 3.4 MB; 64 KB here).
    #[test]
    fn a_large_invalid_body_gets_a_small_422() {
        assert!(parse_assignment(VALID.as_bytes()).is_ok());
        let pad = "a".repeat(64 * 1024);
        let raw = format!(r#"{{"pad":"{pad}"}}"#);
        let e = parse_assignment(raw.as_bytes()).unwrap_err();
        assert_eq!(e.0.len(), 5, "every required field is missing: {}", e.summary());
        let reply = e.body();
        assert!(reply.len() < 2 * MAX_ECHO, "a 422 of {} bytes for a body of {}", reply.len(), raw.len());
        assert!(reply.contains("(an object of 1 fields, over 4096 bytes of JSON: not echoed)"), "{reply}");
        // A large value of one field is bounded the same way; a small body is echoed whole.
        let e = refused("rank", &Value::String(pad.clone()).to_string());
        let want = format!("(a string of {} bytes, over 4096 bytes of JSON: not echoed)", pad.len());
        assert_eq!(e.input, Value::String(want));
        let small = parse_assignment(br#"{"rank":0}"#).unwrap_err();
        assert_eq!(small.0[0].input, serde_json::json!({"rank": 0}));
        // A message (a log rule's may quote the rule) is bounded too.
        let long = error("value_error", "log_monitoring_configuration", "é".repeat(MAX_MSG), &Value::Null);
        assert!(long.msg.len() <= MAX_MSG + 3 && long.msg.ends_with("..."), "{}", long.msg.len());
    }

    /// Regression: each of these started a child with that environment.
    #[test]
    fn the_rank_contract_refuses_an_assignment_naming_the_field() {
        let cases = [
            ("nnodes", "0", "PET_NNODES=\"0\" is invalid: expected a replica count from 1 to 131072"),
            (
                "master_port",
                r#""99999""#,
                "PET_MASTER_PORT=\"99999\" is invalid: expected a TCP port number from 1 to 65535",
            ),
            ("rank", "7", "PET_NODE_RANK=\"7\" is invalid: expected a replica index from 0 to 1 (replicas: 2)"),
            ("rank", "-1", "PET_NODE_RANK=\"-1\" is invalid: expected a replica index from 0 to 1"),
            ("master_addr", r#""x y;rm -rf /""#, "=\"x y;rm -rf /\" is invalid: expected a host name or IP address"),
            ("faultCount", "-5", "faultCount=-5 is invalid: expected a restart count >= 0"),
            (
                "master_port",
                r#""""#,
                "MASTER_PORT is not set: expected the master's port, since the job has 2 replicas",
            ),
        ];
        for (field, raw, want) in cases {
            let e = refused(field, raw);
            assert_eq!(e.kind, "value_error", "{field}={raw}");
            assert_eq!(e.input, serde_json::from_str::<Value>(raw).unwrap(), "the input as received");
            assert!(e.msg.starts_with("Value error, ") && e.msg.contains(want), "{field}={raw}: {}", e.msg);
        }
        let one = br#"{"rank":0,"nnodes":1,"faultCount":3,"master_addr":"node-0.job","master_port":""}"#;
        assert!(parse_assignment(one).is_ok(), "one replica needs no port");
    }

    /// Regression: 2^63 was "a number with a fractional part", a long digit string "unable to parse".
    #[test]
    fn a_whole_number_beyond_i64_is_named_as_out_of_range() {
        let range = format!("Input should be an integer from {} to {}", i64::MIN, i64::MAX);
        for raw in ["9223372036854775808", r#""9223372036854775808""#, "1e300", r#"" -99999999999999999999 ""#] {
            let e = refused("rank", raw);
            assert_eq!((e.kind, e.msg.as_str()), ("int_range", range.as_str()), "{raw}");
        }
        assert_eq!(refused("master_port", r#""99999999999999999999""#).msg, range);
        assert_eq!(refused("rank", "1.5").kind, "int_from_float");
        assert_eq!(refused("rank", r#""1x""#).kind, "int_parsing");
        let huge = parse_stop(br#"{"timeout":1e300}"#).unwrap().timeout;
        assert_eq!(huge, Some(Duration::from_secs(u64::from(u32::MAX))), "a timeout beyond i64 is capped");
    }
}
