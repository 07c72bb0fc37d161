//! The report proper: what the HTTP `/status`, the webhook, the Kubernetes Events, the Pod
//! condition and the master's `/job` send upstream, built by plain functions from
//! [`LocalStatus`], the replica's identity and the clock.

use super::{ExitReason, Identity, LocalStatus, NodeHealthReport, ReplicaState};
use crate::exit::ExitHow;
use crate::signo::Signo;
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The version of [`Report`]'s JSON: bumped when a field changes meaning or disappears (adding
/// fields does not bump it).
pub const SCHEMA_VERSION: u32 = 1;

/// How the last child ended, spelled out for consumers that do not know the shell's 128+N rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastExit {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal number that killed it, when one did.
    pub signal: Option<i32>,
    /// The signal's name (`SIGKILL`), when one did.
    pub signal_name: Option<String>,
    /// The shell-style status: the code, or 128+signal.
    pub status: i32,
    /// Why it ended.
    pub reason: ExitReason,
}

/// The last exit as reported: `stopped_for` is `LocalStatus::last_exit_reason`, and a child that
/// ended while the replica is `NodeUnhealthy` was stopped for that.
pub fn last_exit(how: ExitHow, stopped_for: Option<ExitReason>, state: ReplicaState) -> LastExit {
    let (code, signal) = match how {
        ExitHow::Exited(c) => (Some(c), None),
        ExitHow::Signaled(s) => (None, Some(s)),
    };
    let reason = match (stopped_for, state) {
        (Some(r), _) => r,
        (_, ReplicaState::NodeUnhealthy) => ExitReason::NodeUnhealthy,
        _ if signal.is_some() => ExitReason::Signaled,
        _ => ExitReason::Exited,
    };
    LastExit { code, signal: signal.map(Signo::raw), signal_name: signal.map(Signo::name), status: how.code(), reason }
}

/// One replica's report: the JSON of `/status`, of every webhook POST and (later) of `/job`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Increases with every report this rankvisor builds, so receivers can drop stale ones.
    pub seq: u64,
    /// Who this replica is.
    #[serde(flatten)]
    pub identity: Identity,
    /// Where the replica is.
    pub state: ReplicaState,
    /// Restarts made by rankvisor.
    pub restart_count: u32,
    /// Rendezvous generation of the running child.
    pub generation: u64,
    /// The running child's pid.
    pub child_pid: Option<i32>,
    /// How the last child ended.
    pub last_exit: Option<LastExit>,
    /// Hangs detected so far.
    pub hang_detections: u32,
    /// The node-health verdict; None when node-health checking is off.
    pub node_health: Option<NodeHealthReport>,
    /// The latest training progress from the heartbeat (`step`, `loss`, ...).
    pub progress: Option<serde_json::Map<String, serde_json::Value>>,
    /// Seconds the latest rendezvous took, once one has ended.
    pub rendezvous_seconds: Option<f64>,
    /// The log rule that made rankvisor stop the last child, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_rule: Option<super::LogRuleReport>,
    /// Each log rule's state for the current attempt (empty without rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_rules: Vec<super::LogRuleGauge>,
    /// Agent mode: the agent's state (`READY`, `RUNNING`, `FAULTED`, ...), as the operator sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::AgentState>,
    /// The latest snapshot taken on a hang verdict, summarised: where the training process was
    /// before it was stopped (`GET /stacks` has the whole tree now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<crate::stacks::StacksSummary>,
    /// Master: the job's stacks, grouped by signature, gathered before the latest restart a hang
    /// caused (`GET /job/stacks` gathers them now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_stacks: Option<crate::stacks::JobStacks>,
    /// Master: the replicas named stragglers (`--straggler-rule`), newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stragglers: Vec<super::straggler::NamedStraggler>,
    /// When this rankvisor started (RFC 3339, UTC).
    pub started_at: String,
    /// When the replica entered `state` (RFC 3339, UTC).
    pub state_since: String,
    /// When this report was built (RFC 3339, UTC).
    pub updated_at: String,
}

impl Report {
    /// The training step, when the heartbeat's progress has a non-negative integer `step`.
    pub fn training_step(&self) -> Option<u64> {
        self.progress.as_ref()?.get("step")?.as_u64()
    }
}

/// What a report needs to remember between status changes: the state's start and the rendezvous.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    started_at: SystemTime,
    state: Option<ReplicaState>,
    state_since: SystemTime,
    rendezvous_seconds: Option<f64>,
    seq: u64,
}

impl Timeline {
    /// A timeline for a rankvisor started at `started_at`.
    pub fn new(started_at: SystemTime) -> Self {
        Self { started_at, state: None, state_since: started_at, rendezvous_seconds: None, seq: 0 }
    }

    /// The report for `status` observed at `now`; a changed state starts at `now`.
    pub fn report(&mut self, identity: &Identity, status: &LocalStatus, now: SystemTime) -> Report {
        if self.state != Some(status.state) {
            if self.state == Some(ReplicaState::Rendezvous) {
                let took = now.duration_since(self.state_since).unwrap_or_default();
                self.rendezvous_seconds = Some(took.as_secs_f64());
            }
            self.state = Some(status.state);
            self.state_since = now;
        }
        self.seq += 1;
        Report {
            schema_version: SCHEMA_VERSION,
            seq: self.seq,
            identity: identity.clone(),
            state: status.state,
            restart_count: status.restart_count,
            generation: status.generation,
            child_pid: status.child_pid,
            last_exit: status.last_exit.map(|how| last_exit(how, status.last_exit_reason, status.state)),
            hang_detections: status.hang_detections,
            node_health: status.node_health.clone(),
            progress: status.progress.clone(),
            rendezvous_seconds: self.rendezvous_seconds,
            log_rule: status.log_rule.clone(),
            log_rules: status.log_rules.clone(),
            agent: status.agent,
            stacks: status.stacks.clone(),
            job_stacks: status.job_stacks.clone(),
            stragglers: status.stragglers.clone(),
            started_at: rfc3339(self.started_at),
            state_since: rfc3339(self.state_since),
            updated_at: rfc3339(now),
        }
    }
}

/// True when `next` is worth a webhook POST of its own: anything but progress, pid and time moved.
pub fn is_state_change(prev: Option<&Report>, next: &Report) -> bool {
    let Some(prev) = prev else { return true };
    let healthy = |r: &Report| r.node_health.as_ref().and_then(NodeHealthReport::healthy);
    prev.state != next.state
        || prev.restart_count != next.restart_count
        || prev.generation != next.generation
        || prev.last_exit != next.last_exit
        || prev.hang_detections != next.hang_detections
        || prev.log_rule != next.log_rule
        || prev.agent != next.agent
        || prev.stacks != next.stacks
        || prev.job_stacks != next.job_stacks
        || prev.stragglers != next.stragglers
        || healthy(prev) != healthy(next)
}

/// `t` as RFC 3339 in UTC with microseconds, e.g. `2026-11-29T14:39:54.123456Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        let at = |s: u64, us: u32| UNIX_EPOCH + Duration::new(s, us * 1000);
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.000005Z");
        assert_eq!(rfc3339(at(1_709_164_799, 999_999)), "2024-02-28T23:59:59.999999Z");
        assert_eq!(rfc3339(at(1_735_689_599, 0)), "2024-12-31T23:59:59.000000Z");
        assert_eq!(rfc3339(at(4_102_444_800, 0)), "2100-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(UNIX_EPOCH - Duration::from_secs(1)), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn last_exit_reasons() {
        use ReplicaState::*;
        let e = last_exit(ExitHow::Exited(3), None, Restarting);
        assert_eq!(
            e,
            LastExit { code: Some(3), signal: None, signal_name: None, status: 3, reason: ExitReason::Exited }
        );
        let s = last_exit(ExitHow::Signaled(crate::signo::Signo::KILL), None, Failed);
        assert_eq!(
            (s.signal, s.signal_name.as_deref(), s.status, s.reason),
            (Some(9), Some("SIGKILL"), 137, ExitReason::Signaled)
        );
        assert_eq!(
            last_exit(ExitHow::Signaled(crate::signo::Signo::TERM), Some(ExitReason::Hung), Restarting).reason,
            ExitReason::Hung
        );
        assert_eq!(
            last_exit(ExitHow::Signaled(crate::signo::Signo::TERM), None, NodeUnhealthy).reason,
            ExitReason::NodeUnhealthy
        );
        let g = last_exit(ExitHow::Exited(0), Some(ExitReason::NewGeneration), Restarting);
        assert_eq!(g.reason, ExitReason::NewGeneration);
    }

    #[test]
    fn timeline_tracks_state_since_and_rendezvous() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut tl = Timeline::new(t0);
        let id = Identity::default();
        let mut st = LocalStatus { state: ReplicaState::Rendezvous, ..LocalStatus::default() };
        let r1 = tl.report(&id, &st, at(10));
        assert_eq!((r1.seq, r1.rendezvous_seconds, r1.state_since.as_str()), (1, None, rfc3339(at(10)).as_str()));
        let r2 = tl.report(&id, &st, at(500));
        assert_eq!(r2.state_since, r1.state_since, "same state, same start");
        assert_eq!(r2.updated_at, rfc3339(at(500)));
        st.state = ReplicaState::Running;
        st.child_pid = Some(42);
        let r3 = tl.report(&id, &st, at(1510));
        assert_eq!(r3.rendezvous_seconds, Some(1.5));
        assert_eq!(r3.state_since, rfc3339(at(1510)));
        assert_eq!(r3.started_at, rfc3339(t0));
        assert_eq!(r3.seq, 3);
        st.state = ReplicaState::Restarting;
        let r4 = tl.report(&id, &st, at(2000));
        assert_eq!(r4.rendezvous_seconds, Some(1.5), "kept after the rendezvous");
    }

    #[test]
    fn state_changes_ignore_progress_and_time() {
        let mut tl = Timeline::new(UNIX_EPOCH);
        let id = Identity::default();
        let mut st = LocalStatus { state: ReplicaState::Running, ..LocalStatus::default() };
        let a = tl.report(&id, &st, UNIX_EPOCH);
        assert!(is_state_change(None, &a));
        st.progress = crate::heartbeat::parse_progress(r#"{"step": 7}"#);
        let b = tl.report(&id, &st, UNIX_EPOCH + Duration::from_secs(1));
        assert!(!is_state_change(Some(&a), &b));
        assert_eq!(b.training_step(), Some(7));
        st.restart_count = 1;
        assert!(is_state_change(Some(&b), &tl.report(&id, &st, UNIX_EPOCH)));
        st.restart_count = 0;
        st.last_exit = Some(ExitHow::Exited(1));
        assert!(is_state_change(Some(&b), &tl.report(&id, &st, UNIX_EPOCH)));
        let unhealthy = crate::status::unhealthy_node_for_tests();
        let c = tl.report(&id, &LocalStatus { state: ReplicaState::Running, ..LocalStatus::default() }, UNIX_EPOCH);
        let d = tl.report(
            &id,
            &LocalStatus { state: ReplicaState::Running, node_health: Some(unhealthy), ..LocalStatus::default() },
            UNIX_EPOCH,
        );
        assert!(is_state_change(Some(&c), &d));
    }

    #[test]
    fn report_json_shape() {
        let mut tl = Timeline::new(UNIX_EPOCH);
        let id = Identity { job: Some("j".into()), rank: Some(1), ..Identity::default() };
        let st = LocalStatus {
            state: ReplicaState::Restarting,
            restart_count: 1,
            last_exit: Some(ExitHow::Exited(1)),
            ..LocalStatus::default()
        };
        let r = tl.report(&id, &st, UNIX_EPOCH);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["job"], "j", "identity is flattened");
        assert_eq!(v["rank"], 1);
        assert_eq!(v["state"], "Restarting");
        assert_eq!(v["last_exit"]["code"], 1);
        assert_eq!(v["last_exit"]["reason"], "Exited");
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn local_status_line_is_unchanged() {
        let v = serde_json::to_value(LocalStatus::default()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys.len(),
            12,
            "the --status-fd line keeps its fields (adding is fine, update this test): {keys:?}"
        );
    }
}
