//! The wire protocol: one JSON object per line, carrying the protocol version `v` and a `type`.
//!
//! Every frame is bounded (`max_frame` bytes, newline excluded) so a peer can never make the other
//! side buffer more than that; the version is checked before anything else is interpreted, so a
//! future protocol is refused by name instead of being half-understood.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::health::NodeVerdict;
use crate::status::Report;

/// The protocol version this rankvisor speaks. Version 2: a `state` frame is the replica's
/// [`Report`] itself (version 1 sent `state`, `restart_count`, `generation`, `last_exit` beside
/// the report as an opaque `report`).
pub const PROTOCOL_VERSION: u32 = 2;

/// The default bound on one frame, in bytes, newline excluded.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024;

/// A node-health verdict as the rendezvous carries it: the decision plus its details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// True when the node may run work; an unhealthy replica holds the barrier.
    pub healthy: bool,
    /// The verdict's details (labels, fault type and reason).
    #[serde(default)]
    pub verdict: NodeHealth,
}

impl From<NodeHealth> for Health {
    fn from(verdict: NodeHealth) -> Self {
        Self { healthy: verdict.healthy(), verdict }
    }
}

/// What a replica's node-health source says, typed on the wire: the verdict as the source gave
/// it, `{"error": ...}` when the source cannot be read, `null` when there is no source. Anything
/// else is a malformed frame.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeHealth {
    /// The source's verdict, with the labels, fault type and reason.
    Verdict(Box<NodeVerdict>),
    /// The source cannot be read: the node counts as unhealthy.
    Unreadable {
        /// Why it cannot be read.
        error: String,
    },
    /// No node-health source: the node counts as healthy.
    #[default]
    Off,
}

impl NodeHealth {
    /// Whether the node may run work.
    pub fn healthy(&self) -> bool {
        match self {
            Self::Verdict(v) => v.healthy,
            Self::Unreadable { .. } => false,
            Self::Off => true,
        }
    }
}

#[cfg(test)]
impl NodeHealth {
    /// The verdict on a node whose `node-health-status` label is `status` (test fixtures).
    pub(crate) fn labelled(status: &str) -> Self {
        let mut snapshot = crate::kube::NodeSnapshot::default();
        snapshot.labels.insert(crate::health::NODE_HEALTH_STATUS.into(), status.into());
        Self::Verdict(Box::new(crate::health::verdict(&snapshot, false)))
    }
}

impl std::fmt::Display for NodeHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Verdict(v) => f.write_str(&crate::health::summary(v)),
            Self::Unreadable { error } => write!(f, "node health unknown: {}", crate::untrusted::Escaped(error)),
            Self::Off => f.write_str("no node-health source"),
        }
    }
}

/// The first frame a worker sends: who it is and how its node is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The job's identity (the PyTorchJob's name).
    pub job: String,
    /// This replica's index: 0 is the master, workers are 1..replica_count.
    pub replica_index: u32,
    /// How many replicas the sender believes the job has.
    pub replica_count: u32,
    /// The Kubernetes node the replica runs on.
    pub node: String,
    /// The node-health decision.
    pub healthy: bool,
    /// The node-health details.
    #[serde(default)]
    pub health: NodeHealth,
    /// The worker's nonce for the token challenge, hex.
    pub nonce: String,
}

/// An order the master sends to every worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Order {
    /// Stop the training process and finish.
    Stop {
        /// Why, for the worker's log and termination message.
        reason: String,
    },
    /// Stop the training process and meet again at the barrier of `generation`.
    Restart {
        /// The new rendezvous generation.
        generation: u64,
    },
    /// The master's launcher is done and closes the channel: nothing for the worker to do (its
    /// training goes on), and the closed connection that follows is no loss.
    Finished {
        /// Why, for the worker's log.
        reason: String,
    },
    /// `--checkpoint-signal`: a replica is being stopped; every replica's training process
    /// saves now (and goes on until its own stop, if any).
    Checkpoint {
        /// Why, for the worker's log.
        reason: String,
    },
    /// To one worker: it is a straggler; restart its child (`--straggler-action restart`).
    Straggler {
        /// Why, for the worker's log.
        reason: String,
    },
}

/// One frame of the protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// Worker -> master: the opening frame.
    Hello(Hello),
    /// Master -> worker: the master's nonce, when a job token is set.
    Challenge {
        /// 32 random bytes, hex.
        nonce: String,
    },
    /// Worker -> master: HMAC proof of the job token over both nonces.
    Auth {
        /// HMAC-SHA256, hex.
        proof: String,
    },
    /// Master -> worker: the hello was accepted; wait for the release.
    Admitted {
        /// The generation the master is gathering or running.
        generation: u64,
        /// The master's own HMAC proof of the job token, when one is set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<String>,
    },
    /// Master -> worker: the barrier of `generation` is complete; start.
    Release {
        /// The released generation.
        generation: u64,
    },
    /// Either way: a refusal or failure, to print; the sender closes the connection.
    Error {
        /// What went wrong, naming the culprit.
        message: String,
    },
    /// Either way: I am alive.
    Heartbeat,
    /// Worker -> master: the node's health changed.
    Health(Health),
    /// Worker -> master: the replica's state changed; its report's fields are the frame's.
    State(Box<Report>),
    /// Worker -> master: ready for the barrier of `generation`.
    Rejoin {
        /// The generation the worker waits for.
        generation: u64,
    },
    /// Master -> worker: stop.
    Stop {
        /// Why.
        reason: String,
    },
    /// Master -> worker: restart in a new generation.
    Restart {
        /// The new generation.
        generation: u64,
    },
    /// Master -> worker: the master's launcher is done; the connection closes next.
    Finished {
        /// Why.
        reason: String,
    },
    /// Master -> worker: a replica is being stopped; save a checkpoint now (`--checkpoint-signal`).
    Checkpoint {
        /// Why.
        reason: String,
    },
    /// Worker -> master: a point of the `--straggler-rule` metric (a finite number).
    Metric {
        /// The value the rule captured.
        value: f64,
    },
    /// Master -> one worker: it is a straggler and `--straggler-action restart` is set: restart
    /// its child (only this replica).
    Straggler {
        /// Why (the figures), for the worker's log.
        reason: String,
    },
    /// Master -> worker: where is your training process? (`GET /job/stacks`, a hang's job restart)
    StacksAsk {
        /// The ask, echoed in the answer.
        id: u64,
    },
    /// Worker -> master: the answer to `stacks_ask` `id`: a snapshot's summary.
    Stacks {
        /// The ask answered.
        id: u64,
        /// Where the training process is (or was, at its hang's stop).
        summary: crate::stacks::StacksSummary,
    },
}

/// The names of every frame type, as written in the `type` field.
pub const FRAME_TYPES: [&str; 18] = [
    "hello",
    "challenge",
    "auth",
    "admitted",
    "release",
    "error",
    "heartbeat",
    "health",
    "state",
    "rejoin",
    "stop",
    "restart",
    "finished",
    "checkpoint",
    "metric",
    "straggler",
    "stacks_ask",
    "stacks",
];

impl Frame {
    /// The frame's `type` as written on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "hello",
            Frame::Challenge { .. } => "challenge",
            Frame::Auth { .. } => "auth",
            Frame::Admitted { .. } => "admitted",
            Frame::Release { .. } => "release",
            Frame::Error { .. } => "error",
            Frame::Heartbeat => "heartbeat",
            Frame::Health(_) => "health",
            Frame::State(_) => "state",
            Frame::Rejoin { .. } => "rejoin",
            Frame::Stop { .. } => "stop",
            Frame::Restart { .. } => "restart",
            Frame::Finished { .. } => "finished",
            Frame::Checkpoint { .. } => "checkpoint",
            Frame::Metric { .. } => "metric",
            Frame::Straggler { .. } => "straggler",
            Frame::StacksAsk { .. } => "stacks_ask",
            Frame::Stacks { .. } => "stacks",
        }
    }
}

impl From<Order> for Frame {
    fn from(order: Order) -> Self {
        match order {
            Order::Stop { reason } => Frame::Stop { reason },
            Order::Restart { generation } => Frame::Restart { generation },
            Order::Finished { reason } => Frame::Finished { reason },
            Order::Checkpoint { reason } => Frame::Checkpoint { reason },
            Order::Straggler { reason } => Frame::Straggler { reason },
        }
    }
}

/// A frame that could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame is longer than the bound.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Bytes seen (a lower bound when reading stopped at the limit).
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A line ran past the bound before its newline (reading stops there).
    #[error("frame exceeds the limit of {max} bytes (no newline within it)")]
    LineTooLong {
        /// The bound.
        max: usize,
    },
    /// The line is not JSON.
    #[error("frame is not json: {detail}")]
    NotJson {
        /// The parser's complaint.
        detail: String,
    },
    /// The line is JSON but not an object.
    #[error("frame is a json {seen}, expected an object")]
    NotObject {
        /// The JSON kind seen.
        seen: &'static str,
    },
    /// The version field is missing or not the one spoken here.
    #[error("unsupported protocol version {seen}: this rankvisor speaks version {expected}")]
    Version {
        /// The `v` value seen (`none` when missing).
        seen: String,
        /// The version spoken here.
        expected: u32,
    },
    /// The `type` field is missing or names no frame.
    #[error("unknown frame type {seen}: expected one of {}", FRAME_TYPES.join(", "))]
    UnknownType {
        /// The `type` value seen (`none` when missing).
        seen: String,
    },
    /// The frame type is known but its fields are wrong.
    #[error("malformed {kind} frame: {detail}")]
    Malformed {
        /// The frame type.
        kind: String,
        /// The parser's complaint, naming the field.
        detail: String,
    },
}

#[derive(Serialize)]
struct Envelope<'a> {
    v: u32,
    #[serde(flatten)]
    frame: &'a Frame,
}

/// Encode one frame as a line (newline included), refusing frames over `max` bytes.
pub fn encode(frame: &Frame, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut line = serde_json::to_vec(&Envelope { v: PROTOCOL_VERSION, frame })
        .map_err(|e| FrameError::Malformed { kind: frame.kind().to_string(), detail: e.to_string() })?;
    if line.len() > max {
        return Err(FrameError::TooLarge { len: line.len(), max });
    }
    line.push(b'\n');
    Ok(line)
}

/// Decode one line (with or without its newline), refusing lines over `max` bytes.
pub fn decode(line: &[u8], max: usize) -> Result<Frame, FrameError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > max {
        return Err(FrameError::TooLarge { len: line.len(), max });
    }
    if line.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(match serde_json::from_slice::<Value>(line) {
            Ok(other) => FrameError::NotObject { seen: json_kind(&other) },
            Err(e) => FrameError::NotJson { detail: e.to_string() },
        });
    }
    // A first, allocation-light pass reads only `v` and `type`, so the version is checked before
    // the frame is interpreted and errors can name the field at fault.
    let head: Head = serde_json::from_slice(line).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            FrameError::Malformed { kind: "unidentified".to_string(), detail: e.to_string() }
        }
        _ => FrameError::NotJson { detail: e.to_string() },
    })?;
    match &head.v {
        Some(v) if v.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
        seen => {
            return Err(FrameError::Version {
                seen: seen.as_ref().map_or_else(|| "none".to_string(), Value::to_string),
                expected: PROTOCOL_VERSION,
            })
        }
    }
    let kind = match head.kind {
        Some(Value::String(t)) if FRAME_TYPES.contains(&t.as_str()) => t,
        seen => {
            return Err(FrameError::UnknownType { seen: seen.map_or_else(|| "none".to_string(), |v| v.to_string()) })
        }
    };
    serde_json::from_slice(line).map_err(|e| FrameError::Malformed { kind, detail: e.to_string() })
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    v: Option<Value>,
    #[serde(default, rename = "type")]
    kind: Option<Value>,
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitHow;
    use crate::status::{Identity, LocalStatus, ReplicaState, Timeline};
    use std::time::UNIX_EPOCH;

    fn report(status: LocalStatus) -> Report {
        let id = Identity { job: Some("pytest".into()), rank: Some(2), ..Identity::default() };
        Timeline::new(UNIX_EPOCH).report(&id, &status, UNIX_EPOCH)
    }

    fn every_frame() -> Vec<Frame> {
        vec![
            Frame::Hello(Hello {
                job: "pytest".into(),
                replica_index: 2,
                replica_count: 4,
                node: "node-a".into(),
                healthy: false,
                health: NodeHealth::labelled("Unschedulable"),
                nonce: "ab".repeat(32),
            }),
            Frame::Challenge { nonce: "cd".repeat(32) },
            Frame::Auth { proof: "ef".repeat(32) },
            Frame::Admitted { generation: 3, proof: None },
            Frame::Admitted { generation: 0, proof: Some("01".repeat(32)) },
            Frame::Release { generation: 7 },
            Frame::Error { message: "replica_index 9 is out of range".into() },
            Frame::Heartbeat,
            Frame::Health(Health::from(NodeHealth::labelled("Schedulable"))),
            Frame::Health(Health::from(NodeHealth::Unreadable { error: "labels file: gone".into() })),
            Frame::Health(Health::from(NodeHealth::Off)),
            Frame::State(Box::new(report(LocalStatus {
                state: ReplicaState::Restarting,
                restart_count: 2,
                generation: 1,
                last_exit: Some(ExitHow::Signaled(crate::signo::Signo::KILL)),
                progress: crate::heartbeat::parse_progress(r#"{"step": 10}"#),
                ..LocalStatus::default()
            }))),
            Frame::State(Box::new(report(LocalStatus { state: ReplicaState::Running, ..LocalStatus::default() }))),
            Frame::Rejoin { generation: 2 },
            Frame::Stop { reason: "job failed".into() },
            Frame::Restart { generation: 2 },
            Frame::Finished { reason: "the master's launcher finished".into() },
            Frame::Checkpoint { reason: "replica 3 is being stopped".into() },
            Frame::Metric { value: 1234.5 },
            Frame::Straggler { reason: "replica 2 is a straggler".into() },
            Frame::StacksAsk { id: 4 },
            Frame::Stacks {
                id: 4,
                summary: crate::stacks::StacksSummary {
                    taken_at: "2026-12-04T10:00:00.000000Z".into(),
                    why: "asked".into(),
                    pid: Some(42),
                    frames: vec!["slow_here (train.py:40)".into()],
                    top: "pid 42 in slow_here (train.py:40)".into(),
                },
            },
        ]
    }

    #[test]
    fn every_frame_kind_round_trips() {
        let frames = every_frame();
        let mut kinds: Vec<&str> = frames.iter().map(Frame::kind).collect();
        kinds.dedup();
        assert_eq!(kinds, FRAME_TYPES, "the test covers every frame type");
        for frame in frames {
            let line = encode(&frame, DEFAULT_MAX_FRAME).unwrap();
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
            let text = std::str::from_utf8(&line).unwrap();
            assert!(text.starts_with("{\"v\":2,"), "{text}");
            assert!(text.contains(&format!("\"type\":\"{}\"", frame.kind())), "{text}");
            assert_eq!(decode(&line, DEFAULT_MAX_FRAME).unwrap(), frame);
        }
    }

    #[test]
    fn decodes_without_newline_and_with_crlf() {
        let frame = Frame::Release { generation: 1 };
        assert_eq!(decode(br#"{"v":2,"type":"release","generation":1}"#, 100), Ok(frame.clone()));
        assert_eq!(decode(b"{\"v\":2,\"type\":\"release\",\"generation\":1}\r\n", 100), Ok(frame));
    }

    #[test]
    fn ignores_unknown_fields_for_forward_compatibility() {
        let line = br#"{"v":2,"type":"heartbeat","sent_at":12}"#;
        assert_eq!(decode(line, 100), Ok(Frame::Heartbeat));
    }

    #[test]
    fn size_limit_applies_both_ways() {
        let frame = Frame::Error { message: "x".repeat(200) };
        let line = encode(&frame, 1000).unwrap();
        let len = line.len() - 1;
        assert!(encode(&frame, len).is_ok(), "exactly at the limit is fine");
        assert_eq!(encode(&frame, len - 1), Err(FrameError::TooLarge { len, max: len - 1 }));
        assert!(decode(&line, len).is_ok());
        let e = decode(&line, len - 1).unwrap_err();
        assert_eq!(e, FrameError::TooLarge { len, max: len - 1 });
        assert!(e.to_string().contains("exceeds the limit"), "{e}");
    }

    #[test]
    fn malformed_input_names_what_was_wrong() {
        let cases: [(&[u8], &str); 14] = [
            (b"", "not json"),
            (b"\x00\xff garbage", "not json"),
            (b"{\"v\":2,", "not json"),
            (b"[1,2]", "json array, expected an object"),
            (b"\"hello\"", "json string, expected an object"),
            (br#"{"type":"heartbeat"}"#, "unsupported protocol version none"),
            (br#"{"v":1,"type":"heartbeat"}"#, "unsupported protocol version 1: this rankvisor speaks version 2"),
            (br#"{"v":"1","type":"heartbeat"}"#, "unsupported protocol version \"1\""),
            (br#"{"v":2}"#, "unknown frame type none"),
            (br#"{"v":2,"type":"launch"}"#, "unknown frame type \"launch\": expected one of hello,"),
            (br#"{"v":2,"type":"release"}"#, "malformed release frame: missing field `generation`"),
            (
                br#"{"v":2,"type":"state","state":"Dancing","restart_count":0,"generation":0,"last_exit":null}"#,
                "malformed state frame: unknown variant `Dancing`",
            ),
            (
                br#"{"v":2,"type":"state","state":"Running","restart_count":0,"generation":0,"last_exit":137}"#,
                "malformed state frame: invalid type: integer `137`, expected struct LastExit",
            ),
            (br#"{"v":2,"type":"state","state":"Running"}"#, "malformed state frame: missing field"),
        ];
        for (line, want) in cases {
            let e = decode(line, DEFAULT_MAX_FRAME).unwrap_err().to_string();
            assert!(e.contains(want), "{:?}: {e} should contain {want}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn a_duplicated_header_field_is_malformed() {
        let e = decode(br#"{"v":2,"v":2,"type":"heartbeat"}"#, 100).unwrap_err();
        assert!(e.to_string().starts_with("malformed unidentified frame: duplicate field `v`"), "{e}");
    }

    #[test]
    fn hello_fields_are_checked() {
        let e = decode(
            br#"{"v":2,"type":"hello","job":"j","replica_index":-1,"replica_count":4,"node":"n","healthy":true,"nonce":""}"#,
            DEFAULT_MAX_FRAME,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("malformed hello frame: invalid value: integer `-1`"), "{e}");
        let e = decode(br#"{"v":2,"type":"hello","job":"j"}"#, DEFAULT_MAX_FRAME).unwrap_err().to_string();
        assert!(e.contains("missing field `replica_index`"), "{e}");
    }

    #[test]
    fn node_health_is_typed_a_verdict_an_error_or_null_and_nothing_else() {
        let health = |h: &str| format!(r#"{{"v":2,"type":"health","healthy":false,"verdict":{h}}}"#);
        let off = decode(health("null").as_bytes(), DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(off, Frame::Health(Health { healthy: false, verdict: NodeHealth::Off }));
        let missing = decode(br#"{"v":2,"type":"health","healthy":true}"#, DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(missing, Frame::Health(Health::from(NodeHealth::Off)));
        let error = decode(health(r#"{"error":"x"}"#).as_bytes(), DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(error, Frame::Health(Health::from(NodeHealth::Unreadable { error: "x".into() })));
        for untyped in [r#"{"status":"Schedulable"}"#, r#""Schedulable""#, "7", r#"{"healthy":true}"#] {
            let e = decode(health(untyped).as_bytes(), DEFAULT_MAX_FRAME).unwrap_err().to_string();
            assert!(e.starts_with("malformed health frame"), "{untyped}: {e}");
        }
        let hello = br#"{"v":2,"type":"hello","job":"j","replica_index":1,"replica_count":4,"node":"n","healthy":true,"health":{"labels":{}},"nonce":""}"#;
        let e = decode(hello, DEFAULT_MAX_FRAME).unwrap_err().to_string();
        assert!(e.starts_with("malformed hello frame"), "{e}");
        assert_eq!(NodeHealth::Unreadable { error: "a\nb".into() }.to_string(), "node health unknown: a\\nb");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let mut line = br#"{"v":2,"type":"state","progress":"#.to_vec();
        line.extend(vec![b'['; 10_000]);
        assert!(matches!(decode(&line, DEFAULT_MAX_FRAME), Err(FrameError::NotJson { .. })));
    }

    #[test]
    fn orders_become_frames() {
        assert_eq!(Frame::from(Order::Stop { reason: "r".into() }), Frame::Stop { reason: "r".into() });
        assert_eq!(Frame::from(Order::Restart { generation: 4 }), Frame::Restart { generation: 4 });
    }
}
