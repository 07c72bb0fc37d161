//! Property-based tests of the parsers that read outside input (issue 15, item 6 of the issue):
//! durations, the downward-API labels file, rendezvous frames, HTTP requests reaching the router,
//! and the escaping of outside values. A short run (32 cases each) is part of the normal suite;
//! `scripts/fuzz.sh` runs them with PROPTEST_CASES=100000.

use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use rankvisor_core::duration::{format_duration, parse_duration};
use rankvisor_core::health::parse_labels_file;
use rankvisor_core::http::route;
use rankvisor_core::rendezvous::frame::{decode, encode, Frame, Hello, DEFAULT_MAX_FRAME};
use rankvisor_core::status::{Identity, LocalStatus, ReplicaState, Timeline};
use rankvisor_core::untrusted::{escape, escape_bytes};
use rankvisor_core::webhook::WebhookCounts;

/// 32 cases unless PROPTEST_CASES says otherwise (the fuzz script).
fn config() -> ProptestConfig {
    let mut c = ProptestConfig { failure_persistence: None, ..ProptestConfig::default() };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 32;
    }
    c
}

fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
}

/// Go's `%q` as far as the kubelet needs it for label values.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn label_key() -> impl Strategy<Value = String> {
    let name = "[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?";
    let prefix = "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?){0,3}";
    (proptest::option::of(prefix), name).prop_map(|(p, n)| match p {
        Some(p) => format!("{p}/{n}"),
        None => n,
    })
}

fn report() -> rankvisor_core::status::Report {
    let st = LocalStatus { state: ReplicaState::Running, ..LocalStatus::default() };
    Timeline::new(UNIX_EPOCH).report(&Identity::default(), &st, UNIX_EPOCH)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn durations_never_panic_and_stay_bounded(text in "\\PC{0,12}|[-+ 0-9.a-z]{0,12}") {
        if let Ok(d) = parse_duration(&text) {
            prop_assert!(d <= Duration::from_secs(1_000_000_000), "{text:?} -> {d:?}");
            prop_assert!(!text.trim().starts_with(['+', '-']), "a sign was accepted: {text:?}");
        }
    }

    #[test]
    fn formatted_durations_read_back(ms in 0u64..1_000_000_000_000) {
        let d = Duration::from_millis(ms);
        prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }

    #[test]
    fn labels_files_never_panic(text in "\\PC{0,200}|[a-z./=\"\\\\\n -]{0,200}") {
        let _ = parse_labels_file(&text);
    }

    #[test]
    fn quoted_labels_read_back(pairs in proptest::collection::btree_map(label_key(), "\\PC{0,40}|[\\x00-\\x7f]{0,40}", 0..8)) {
        let text: String = pairs.iter().map(|(k, v)| format!("{k}={}\n", go_quote(v))).collect();
        let back = parse_labels_file(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(back, pairs);
    }

    #[test]
    fn a_key_with_a_hidden_character_is_an_error(key in label_key(), at in 0usize..64, c in prop_oneof![Just('\u{feff}'), Just('\u{200b}'), Just('\u{202e}'), Just('\n'), Just('\x1b')]) {
        // A newline before the key is just a blank line in front of it.
        prop_assume!(!(c == '\n' && at == 0));
        let mut chars: Vec<char> = key.chars().collect();
        chars.insert(at.min(chars.len()), c);
        let bad: String = chars.into_iter().collect();
        let text = format!("{bad}=\"Unschedulable\"\n");
        // A newline splits the line in two: still an error, never a different key.
        prop_assert!(parse_labels_file(&text).is_err(), "{text:?} was accepted");
    }

    #[test]
    fn frames_never_panic_and_errors_are_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Err(e) = decode(&bytes, 1024) {
            prop_assert!(e.to_string().len() < 2048, "{e}");
        }
    }

    #[test]
    fn json_frames_with_any_fields_never_panic(kind in "hello|rejoin|state|health|error|auth|[a-z]{0,8}", v in 0u64..3, field in "\\PC{0,20}", n in any::<u64>()) {
        let line = serde_json::json!({"v": v, "type": kind, "generation": n, "message": field, "node": field,
            "job": field, "replica_index": n, "replica_count": n, "healthy": true, "nonce": field});
        let _ = decode(line.to_string().as_bytes(), DEFAULT_MAX_FRAME);
    }

    #[test]
    fn frames_read_back(node in "\\PC{0,40}", message in "\\PC{0,40}", g in any::<u64>(), index in any::<u32>()) {
        let frames = [
            Frame::Hello(Hello { job: node.clone(), replica_index: index, replica_count: index, node: node.clone(),
                healthy: g % 2 == 0, health: rankvisor_core::rendezvous::NodeHealth::Unreadable { error: message.clone() }, nonce: message.clone() }),
            Frame::Rejoin { generation: g },
            Frame::Error { message: message.clone() },
            Frame::Heartbeat,
        ];
        for f in frames {
            let line = encode(&f, DEFAULT_MAX_FRAME).unwrap();
            prop_assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
            prop_assert_eq!(decode(&line, DEFAULT_MAX_FRAME), Ok(f));
        }
    }

    #[test]
    fn the_router_answers_every_request(method in "[A-Z]{1,10}", path in "/\\PC{0,40}|[ -~]{0,40}") {
        let Ok(method) = hyper::Method::from_bytes(method.as_bytes()) else { return Ok(()) };
        let reply = route(&method, &path, &report(), &WebhookCounts::default(), None);
        prop_assert!([200, 404, 405, 503].contains(&reply.status.as_u16()), "{} {path:?} -> {}", method, reply.status);
        prop_assert!(!reply.body.is_empty());
        prop_assert!(reply.body.ends_with('\n'));
    }

    #[test]
    fn escaped_values_are_one_visible_line(text in "\\PC{0,60}|\\PC{0,10}[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{200b}\\u{feff}\\u{202e}]{1,5}\\PC{0,10}") {
        let e = escape(&text);
        prop_assert!(!e.chars().any(hidden), "{e:?}");
        if !text.chars().any(|c| hidden(c) || c == '\\') {
            prop_assert_eq!(e.as_ref(), text.as_str());
        }
    }

    #[test]
    fn escaped_bytes_are_one_visible_line(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let e = escape_bytes(&bytes);
        prop_assert!(!e.chars().any(hidden), "{e:?}");
    }
}

/// Raw bytes reaching the real HTTP server: it answers or closes, never hangs or panics.
mod http_server {
    use super::*;
    use rankvisor_core::http::{serve, HttpState};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn request() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..400),
            ("[A-Z]{1,7}", "/\\PC{0,30}", proptest::collection::vec("[!-~]{1,10}: [ -~]{0,20}", 0..5))
                .prop_map(|(m, p, headers)| format!("{m} {p} HTTP/1.1\r\nHost: x\r\n{}\r\n\r\n", headers.join("\r\n"))
                    .into_bytes()),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_bytes_get_an_answer_or_a_close(bytes in request()) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let outcome: Result<Vec<u8>, String> = rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (_tx, rx) = tokio::sync::watch::channel(report());
                let state = HttpState {
                    reports: rx,
                    webhook: Arc::default(),
                    job: Arc::default(),
                    stacks: Arc::default(),
                    job_stacks: Arc::default(),
                };
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let server = tokio::spawn(serve(listener, state, async { let _ = stopped.await; }));
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                let _ = s.write_all(&bytes).await;
                let _ = s.shutdown().await;
                let mut answer = Vec::new();
                let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut answer)).await;
                let _ = stop.send(());
                let _ = server.await;
                match read {
                    Ok(_) => Ok(answer),
                    Err(_) => Err("the server neither answered nor closed within 20 s".to_string()),
                }
            });
            let answer = outcome.map_err(TestCaseError::fail)?;
            if !answer.is_empty() {
                prop_assert!(answer.starts_with(b"HTTP/1.1 "), "{:?}", String::from_utf8_lossy(&answer));
            }
        }
    }
}
