//! The API's JSON as rankvisor reads it: the Node (only what the health verdict needs), the
//! `Status` of refusals, and the watch stream's newline-delimited events.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::node::{NodeSnapshot, Taint};

/// Longest watch event line accepted; a Node with a long image list is ~100 KB.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// A Node object, reduced to what the verdict reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Node {
    /// Name, resource version, labels and annotations.
    #[serde(default)]
    pub metadata: NodeMetadata,
    /// The taints.
    #[serde(default)]
    pub spec: NodeSpec,
}

/// The Node's metadata fields rankvisor uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetadata {
    /// The node's name.
    #[serde(default)]
    pub name: String,
    /// Where a watch resumes.
    #[serde(default)]
    pub resource_version: String,
    /// Every label (`null` reads as none).
    #[serde(default, deserialize_with = "null_as_default")]
    pub labels: BTreeMap<String, String>,
    /// Every annotation (`null` reads as none).
    #[serde(default, deserialize_with = "null_as_default")]
    pub annotations: BTreeMap<String, String>,
}

/// The Node's spec fields rankvisor uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct NodeSpec {
    /// Every taint (`null` reads as none).
    #[serde(default, deserialize_with = "null_as_default")]
    pub taints: Vec<Taint>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl Node {
    /// The verdict's input: labels, annotations and taints.
    pub fn snapshot(&self) -> NodeSnapshot {
        NodeSnapshot {
            labels: self.metadata.labels.clone(),
            annotations: self.metadata.annotations.clone(),
            taints: self.spec.taints.clone(),
        }
    }
}

/// A `Status` object: how the API explains a refusal or a watch error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Status {
    /// HTTP-like code (403, 404, 410, ...).
    #[serde(default)]
    pub code: u16,
    /// Machine-readable reason (`Forbidden`, `NotFound`, `Expired`, ...).
    #[serde(default)]
    pub reason: String,
    /// Human-readable explanation from the server.
    #[serde(default)]
    pub message: String,
}

/// Parse a response body as a `Status`; None if it is not one.
pub fn parse_status(body: &[u8]) -> Option<Status> {
    #[derive(Deserialize)]
    struct Typed {
        #[serde(default)]
        kind: String,
        #[serde(flatten)]
        status: Status,
    }
    let t: Typed = serde_json::from_slice(body).ok()?;
    (t.kind == "Status").then_some(t.status)
}

/// One event of a watch stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// The node as first seen by a watch without a resource version.
    Added(Node),
    /// The node changed.
    Modified(Node),
    /// The node was deleted (its last state).
    Deleted(Node),
    /// No change; the resource version to resume from.
    Bookmark(String),
    /// The server ends the watch; 410 `Expired` means re-list.
    Error(Status),
}

/// A watch line that is not a well-formed event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not JSON, or not the shape expected for its type.
    #[error("watch event {line:?}: {problem}: expected {{\"type\":...,\"object\":{{...}}}}")]
    Malformed {
        /// The line, cut to 200 characters.
        line: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A type other than ADDED, MODIFIED, DELETED, BOOKMARK and ERROR.
    #[error("watch event type {kind:?}: expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR")]
    UnknownType {
        /// The type seen.
        kind: String,
    },
    /// A line longer than [`MAX_LINE_BYTES`] without a newline (the HTTP client's line reader
    /// stops there).
    #[error("watch event longer than {MAX_LINE_BYTES} bytes: expected one JSON event per line")]
    TooLong,
}

/// Parse one line of a watch stream.
pub fn parse_watch_event(line: &[u8]) -> Result<WatchEvent, WireError> {
    #[derive(Deserialize)]
    struct Raw {
        #[serde(rename = "type")]
        kind: String,
        object: serde_json::Value,
    }
    let malformed = |problem: String| WireError::Malformed { line: cut(line), problem };
    let raw: Raw = serde_json::from_slice(line).map_err(|e| malformed(e.to_string()))?;
    let node = |v: serde_json::Value| serde_json::from_value::<Node>(v).map_err(|e| malformed(e.to_string()));
    Ok(match raw.kind.as_str() {
        "ADDED" => WatchEvent::Added(node(raw.object)?),
        "MODIFIED" => WatchEvent::Modified(node(raw.object)?),
        "DELETED" => WatchEvent::Deleted(node(raw.object)?),
        "BOOKMARK" => WatchEvent::Bookmark(node(raw.object)?.metadata.resource_version),
        "ERROR" => WatchEvent::Error(serde_json::from_value(raw.object).map_err(|e| malformed(e.to_string()))?),
        _ => return Err(WireError::UnknownType { kind: raw.kind }),
    })
}

fn cut(line: &[u8]) -> String {
    let s = String::from_utf8_lossy(line);
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::NODE_HEALTH_STATUS;
    use crate::lines::{LineSplitter, LineTooLong, Overlong};

    /// A MODIFIED event as kube-apiserver 1.20.2 sends it (fields trimmed to the ones that matter).
    const MODIFIED: &str = r#"{"type":"MODIFIED","object":{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","uid":"6f0b","resourceVersion":"231","creationTimestamp":"2026-11-29T10:00:00Z","labels":{"pool":"b","sagemaker.amazonaws.com/node-health-status":"Schedulable"},"annotations":{"sagemaker.amazonaws.com/fault-details":"{}"},"managedFields":[{"manager":"curl","operation":"Update"}]},"spec":{"taints":[{"key":"sagemaker.amazonaws.com/node-health-status","value":"Unschedulable","effect":"NoSchedule","timeAdded":"2026-11-29T10:00:00Z"}]},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":""}}}}"#;

    #[test]
    fn modified_event_gives_the_snapshot() {
        let WatchEvent::Modified(node) = parse_watch_event(MODIFIED.as_bytes()).unwrap() else { panic!() };
        assert_eq!(node.metadata.name, "n1");
        assert_eq!(node.metadata.resource_version, "231");
        let snap = node.snapshot();
        assert_eq!(snap.labels.get(NODE_HEALTH_STATUS).map(String::as_str), Some("Schedulable"));
        assert_eq!(snap.labels.len(), 2);
        assert_eq!(snap.annotations.len(), 1);
        assert_eq!(
            snap.taints,
            vec![Taint { key: NODE_HEALTH_STATUS.into(), value: "Unschedulable".into(), effect: "NoSchedule".into() }]
        );
    }

    #[test]
    fn every_event_type_parses() {
        let added = MODIFIED.replace("MODIFIED", "ADDED");
        assert!(matches!(parse_watch_event(added.as_bytes()), Ok(WatchEvent::Added(_))));
        let deleted = MODIFIED.replace("MODIFIED", "DELETED");
        assert!(matches!(parse_watch_event(deleted.as_bytes()), Ok(WatchEvent::Deleted(_))));
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"512","creationTimestamp":null},"spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{}}}}"#;
        assert_eq!(parse_watch_event(bookmark.as_bytes()), Ok(WatchEvent::Bookmark("512".into())));
        let expired = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (231)","reason":"Expired","code":410}}"#;
        assert_eq!(
            parse_watch_event(expired.as_bytes()),
            Ok(WatchEvent::Error(Status {
                code: 410,
                reason: "Expired".into(),
                message: "too old resource version: 1 (231)".into()
            }))
        );
    }

    #[test]
    fn a_node_without_labels_annotations_or_taints() {
        let e = r#"{"type":"ADDED","object":{"kind":"Node","metadata":{"name":"n1","resourceVersion":"7","labels":null},"spec":{"taints":null}}}"#;
        let WatchEvent::Added(node) = parse_watch_event(e.as_bytes()).unwrap() else { panic!() };
        assert_eq!(node.snapshot(), NodeSnapshot::default());
        let bare: Node = serde_json::from_str(r#"{"kind":"Node"}"#).unwrap();
        assert_eq!(bare, Node::default());
    }

    #[test]
    fn malformed_events_are_named() {
        let e = parse_watch_event(b"not json").unwrap_err();
        assert!(matches!(&e, WireError::Malformed { line, .. } if line == "not json"), "{e}");
        let e = parse_watch_event(br#"{"type":"MODIFIED"}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `object`"), "{e}");
        let e = parse_watch_event(br#"{"type":"MODIFIED","object":{"metadata":{"labels":{"a":1}}}}"#).unwrap_err();
        assert!(e.to_string().contains("invalid type: integer"), "{e}");
        let e = parse_watch_event(br#"{"type":"WEIRD","object":{}}"#).unwrap_err();
        assert_eq!(e, WireError::UnknownType { kind: "WEIRD".into() });
        let long = format!("{{\"type\":\"X{}\"", "y".repeat(500));
        let WireError::Malformed { line, .. } = parse_watch_event(long.as_bytes()).unwrap_err() else { panic!() };
        assert_eq!(line.chars().count(), 200);
    }

    #[test]
    fn status_bodies_parse() {
        let forbidden = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"n1\" is forbidden: User \"nobody\" cannot get resource \"nodes\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"name":"n1","kind":"nodes"},"code":403}"#;
        let s = parse_status(forbidden).unwrap();
        assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
        assert!(s.message.contains("User \"nobody\" cannot get"));
        assert_eq!(parse_status(b"Unauthorized"), None);
        assert_eq!(parse_status(br#"{"kind":"Node"}"#), None);
    }

    #[test]
    fn lines_split_across_any_chunking() {
        let stream = format!("{MODIFIED}\n\n{MODIFIED}\n");
        for size in [1, 2, 7, 100, stream.len()] {
            let mut buf = LineSplitter::new(MAX_LINE_BYTES, Overlong::Refuse);
            let mut lines = Vec::new();
            for chunk in stream.as_bytes().chunks(size) {
                lines.extend(buf.push(chunk).unwrap().into_iter().filter(|l| !l.is_empty()));
            }
            assert_eq!(lines.len(), 2, "chunk size {size}");
            assert!(lines.iter().all(|l| l == MODIFIED.as_bytes()));
            assert!(buf.pending().is_empty());
        }
        let mut buf = LineSplitter::new(MAX_LINE_BYTES, Overlong::Refuse);
        assert!(buf.push(&MODIFIED.as_bytes()[..10]).unwrap().is_empty());
        assert!(!buf.pending().is_empty());
    }

    #[test]
    fn endless_line_is_refused() {
        let mut buf = LineSplitter::new(MAX_LINE_BYTES, Overlong::Refuse);
        let chunk = vec![b'x'; 1024 * 1024];
        let mut result = Ok(Vec::new());
        for _ in 0..9 {
            result = buf.push(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(LineTooLong { limit: MAX_LINE_BYTES }));
        assert!(buf.pending().is_empty());
    }
}
