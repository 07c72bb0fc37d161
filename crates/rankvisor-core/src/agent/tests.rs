//! The agent's table, request validation and `/status` encoding, without a socket.

use super::api::{self, isoformat, parse_assignment, parse_stop, status_body, StatusView};
use super::state::{AgentRecord, AgentState};
use std::time::{Duration, UNIX_EPOCH};
use tokio::time::Instant;
use AgentState::*;

/// `PLR_VALID_TRANSITIONS` of hyperpod_elastic_agent 1.1.3 (server/util.py), copied as data.
const PLR: [(AgentState, &[AgentState]); 7] = [
    (Init, &[Ready, Shutdown]),
    (Ready, &[Running, Shutdown]),
    (Running, &[Completed, Faulted, Stopping, Shutdown]),
    (Faulted, &[Stopping, Shutdown]),
    (Stopping, &[Ready]),
    (Completed, &[Shutdown, Stopping]),
    (Shutdown, &[]),
];

#[test]
fn every_pair_follows_the_plr_table_and_a_refused_one_changes_nothing() {
    for (from, allowed) in PLR {
        for to in AgentState::ALL {
            assert_eq!(from.may_become(to), allowed.contains(&to), "{from:?} -> {to:?}");
            // Reach `from` through allowed steps, then try `to`.
            let t0 = Instant::now();
            let mut rec = AgentRecord::new(t0);
            let path: &[AgentState] = match from {
                Init => &[],
                Ready => &[Ready],
                Running => &[Ready, Running],
                Faulted => &[Ready, Running, Faulted],
                Stopping => &[Ready, Running, Stopping],
                Completed => &[Ready, Running, Completed],
                Shutdown => &[Shutdown],
            };
            for s in path {
                assert!(rec.set(*s, Some("r".into()), None, t0), "{s:?}");
            }
            let before = rec.clone();
            let later = t0 + Duration::from_secs(1);
            let moved = rec.set(to, Some("why".into()), Some("msg".into()), later);
            assert_eq!(moved, allowed.contains(&to), "{from:?} -> {to:?}");
            if moved {
                assert_eq!((rec.state(), rec.reason(), rec.message()), (to, Some("why"), Some("msg")));
                assert!(rec.transitions().contains(&(to, later)));
            } else {
                assert_eq!(rec, before, "{from:?} -> {to:?} is ignored");
            }
        }
    }
}

#[test]
fn reentering_a_state_keeps_its_place_in_transitions() {
    let t = Instant::now();
    let mut rec = AgentRecord::new(t);
    for s in [Ready, Running, Faulted, Stopping, Ready] {
        assert!(rec.set(s, None, None, t + Duration::from_secs(rec.transitions().len() as u64)));
    }
    let order: Vec<_> = rec.transitions().iter().map(|x| x.0).collect();
    assert_eq!(order, [Init, Ready, Running, Faulted, Stopping]);
    assert_eq!(rec.transitions()[1].1, t + Duration::from_secs(5), "READY's time is the latest entry");
}

#[test]
fn start_requests_are_validated_as_the_agent_does() {
    let ok =
        parse_assignment(br#"{"rank":0,"nnodes":2,"faultCount":1,"master_addr":"10.1.2.3","master_port":"23456"}"#)
            .unwrap();
    assert_eq!((ok.rank, ok.nnodes, ok.fault_count, ok.master_port), (0, 2, 1, 23456));
    let env = ok.child_env();
    for (k, v) in
        [("PET_NNODES", "2"), ("PET_NODE_RANK", "0"), ("PET_MASTER_ADDR", "10.1.2.3"), ("PET_MASTER_PORT", "23456")]
            .into_iter()
            .chain([("TORCHELASTIC_RESTART_COUNT", "1"), ("JOB_RESTART_COUNT", "1")])
    {
        assert!(env.contains(&(k.to_string(), v.to_string())), "{k}={v} in {env:?}");
    }
    let lax =
        parse_assignment(br#"{"rank":"1","nnodes":2.0,"faultCount":0,"master_addr":"a","master_port":" 7 "}"#).unwrap();
    assert_eq!((lax.rank, lax.nnodes, lax.master_port), (1, 2, 7), "pydantic's lax ints");
    let one = parse_assignment(br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"a","master_port":""}"#);
    assert_eq!(one.unwrap().master_port, 0, "an empty port is 0 (one replica needs none)");

    let empty = parse_assignment(br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"","master_port":1}"#);
    let e = empty.unwrap_err();
    assert_eq!(e.0[0].msg, "Value error, Empty master_addr received from operator");
    assert!(e.body().starts_with(r#"{"detail":[{"#), "{}", e.body());

    let missing = parse_assignment(br#"{"rank":"x","nnodes":1}"#).unwrap_err();
    let fields: Vec<_> = missing.0.iter().map(|e| (e.loc[1].as_str().unwrap().to_string(), e.kind)).collect();
    assert_eq!(
        fields,
        [
            ("rank".into(), "int_parsing"),
            ("faultCount".into(), "missing"),
            ("master_addr".into(), "missing"),
            ("master_port".into(), "missing")
        ]
    );
    assert!(missing.summary().contains("faultCount: Field required"), "{}", missing.summary());
    assert_eq!(parse_assignment(b"").unwrap_err().0[0].kind, "missing");
    assert_eq!(parse_assignment(b"{not json").unwrap_err().0[0].kind, "json_invalid");
    let port = parse_assignment(br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"a","master_port":"8o"}"#);
    assert_eq!(port.unwrap_err().0[0].msg, "Value error, invalid literal for int() with base 10: '8o'");
}

#[test]
fn log_rules_are_checked_a_bad_rule_is_refused_naming_it_never_ignored() {
    let none = parse_assignment(
        br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"a","master_port":1,"log_monitoring_configuration":[]}"#,
    );
    assert!(none.unwrap().rules.is_empty());
    let good = br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"a","master_port":1,
        "log_monitoring_configuration":[{"name":"JobStart","logPattern":".*Epoch.*","expectedStartCutOffInSeconds":60}]}"#;
    let a = parse_assignment(good).unwrap();
    assert_eq!(a.rules.rules.as_ref().map(|r| r.rules().len()), Some(1));
    let bad = br#"{"rank":0,"nnodes":1,"faultCount":0,"master_addr":"a","master_port":1,
        "log_monitoring_configuration":[{"name":"Loss","logPattern":"loss (\\d+)","metricThreshold":2,"operator":"ge"}]}"#;
    let e = parse_assignment(bad).unwrap_err();
    assert_eq!(e.0[0].loc, ["body", "log_monitoring_configuration"]);
    assert!(e.0[0].msg.starts_with("Value error, log rule #1 (\"Loss\"): field operator"), "{}", e.0[0].msg);
}

#[test]
fn stop_requests() {
    assert_eq!(parse_stop(b"").unwrap(), api::StopOrder::default());
    let s = parse_stop(br#"{"restart_mode":"plr","is_graceful":true,"timeout":"7"}"#).unwrap();
    assert_eq!((s.graceful, s.timeout), (true, Some(Duration::from_secs(7))));
    assert_eq!(parse_stop(br#"{"is_graceful":"maybe"}"#).unwrap_err().0[0].kind, "bool_type");
    let huge = parse_stop(br#"{"timeout":9223372036854775807}"#).unwrap().timeout.unwrap();
    assert!(Instant::now().checked_add(huge).is_some(), "a huge timeout cannot overflow a deadline");
    assert_eq!(parse_stop(br#"{"timeout":-5}"#).unwrap().timeout, Some(Duration::ZERO));
}

#[test]
fn isoformat_is_pythons() {
    let t = UNIX_EPOCH + Duration::from_micros(1_764_605_689_123_456);
    assert_eq!(isoformat(t), "2025-12-01T16:14:49.123456+00:00");
    assert_eq!(isoformat(UNIX_EPOCH + Duration::from_secs(1_764_605_689)), "2025-12-01T16:14:49+00:00");
}

#[test]
fn status_body_is_the_encoders_key_order_and_compact() {
    let t = UNIX_EPOCH + Duration::from_secs(1_764_605_689);
    let mut v = StatusView {
        state: Ready,
        reason: None,
        message: None,
        transitions: vec![(Init, t), (Ready, t)],
        assigned_rank: None,
        ip_version: None,
    };
    let want = format!(
        r#"{{"status":"ready","transitions":{{"INIT":"2025-12-01T16:14:49+00:00","READY":"2025-12-01T16:14:49+00:00"}},"restartMode":"process_level_restart","agent_version":"{}","spare":"True"}}"#,
        api::AGENT_VERSION
    );
    assert_eq!(status_body(&v), want);
    v.state = Faulted;
    v.reason = Some("WorkerCrash".into());
    v.message = Some("crashed:\n\t\"é\"\u{1}".into());
    v.assigned_rank = Some(0);
    let body = status_body(&v);
    assert!(body.contains(r#""reason":"WorkerCrash","message":"crashed:\n\t\"é\"\u0001","restartMode""#), "{body}");
    assert!(body.ends_with(r#","assigned_rank":"0","spare":"True"}"#), "rank 0 is reported: {body}");
}
