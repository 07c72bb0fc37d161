//! Health reporting to Kubernetes itself: an Event on this Pod for each transition that matters
//! (one Event object per reason, its count raised instead of a flood when a child crash-loops, as
//! kubelet aggregates), and the Pod condition `rankvisor.dev/ReplicaHealthy` kept current with a
//! strategic merge patch of `pods/NAME/status`. It follows the reporter's `Report` channel and
//! never feeds back into supervision: a refused or failing request is logged, never fatal.

use crate::kube::{KubeClient, KubeError};
use crate::status::{rfc3339, ExitReason, NodeHealthReport, ReplicaState, Report};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// The Pod condition's type (a custom condition, as readiness gates use).
pub const CONDITION_TYPE: &str = "rankvisor.dev/ReplicaHealthy";
/// The Event source's component.
pub const COMPONENT: &str = "rankvisor";

/// An Event's type, as `kubectl describe` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Expected progress (a restart, success).
    Normal,
    /// Something went wrong (a failure, a hang, an unhealthy node).
    Warning,
}

impl EventType {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One transition worth an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The Event's reason (one Event object per reason).
    pub reason: &'static str,
    /// Normal or Warning.
    pub kind: EventType,
    /// The human-readable message.
    pub message: String,
}

fn transition(reason: &'static str, kind: EventType, message: String) -> Transition {
    Transition { reason, kind, message }
}

fn node_unhealthy(r: &Report) -> bool {
    r.state == ReplicaState::NodeUnhealthy || r.node_health.as_ref().and_then(NodeHealthReport::healthy) == Some(false)
}

fn exit_text(r: &Report) -> String {
    match &r.last_exit {
        Some(e) => match (&e.signal_name, e.code) {
            (Some(sig), _) => format!("killed by {sig} (status {})", e.status),
            (None, Some(c)) => format!("exited with code {c}"),
            (None, None) => format!("ended with status {}", e.status),
        },
        None => "ended".to_string(),
    }
}

/// The last exit is a failure of the child itself (not a hang or node verdict of rankvisor's).
fn child_failed(r: &Report) -> bool {
    r.last_exit.as_ref().is_some_and(|e| e.status != 0 && matches!(e.reason, ExitReason::Exited | ExitReason::Signaled))
}

/// The transitions between two consecutive reports that deserve an Event. Reports may be skipped
/// (the channel keeps only the latest), so counters are compared as well as states.
pub fn transitions(prev: Option<&Report>, next: &Report) -> Vec<Transition> {
    use ReplicaState::{Failed, Pending, Succeeded};
    let (p_state, p_restarts, p_unhealthy) = match prev {
        Some(p) => (p.state, p.restart_count, node_unhealthy(p)),
        None => (Pending, 0, false),
    };
    let entered = |s: ReplicaState| next.state == s && p_state != s;
    let mut out = Vec::new();
    out.extend(node_health_changed(p_unhealthy, next));
    out.extend(stacks_taken(prev, next));
    out.extend(job_stacks_gathered(prev, next));
    out.extend(stragglers_named(prev, next));
    out.extend(stopped_by_rankvisor(prev, next));
    // Every restart since the previous report ended a run (Restarting already counts its
    // restart), and so does entering Failed: reports skipped in between (the first restart after a
    // crash is immediate, and the channel keeps only the latest) are counted, not lost.
    let restarted = next.restart_count.saturating_sub(p_restarts);
    out.extend(runs_ended(restarted, restarted + u32::from(entered(Failed)), next));
    if entered(Succeeded) {
        out.push(transition(
            "Succeeded",
            EventType::Normal,
            format!("the training process succeeded after {} restarts", next.restart_count),
        ));
    }
    if entered(Failed) {
        out.push(gave_up(p_state, next));
    }
    out
}

/// The node turned unhealthy (with the verdict's reasons) or healthy again.
fn node_health_changed(was_unhealthy: bool, next: &Report) -> Option<Transition> {
    if !was_unhealthy && node_unhealthy(next) {
        let why = next
            .node_health
            .as_ref()
            .and_then(NodeHealthReport::verdict)
            .filter(|v| !v.reasons.is_empty())
            .map(|v| format!(": {}", v.reasons.join("; ")))
            .unwrap_or_default();
        Some(transition(
            "NodeUnhealthy",
            EventType::Warning,
            format!("the node's health labels mark it unhealthy{why}"),
        ))
    } else if was_unhealthy && !node_unhealthy(next) {
        Some(transition("NodeHealthy", EventType::Normal, "the node is healthy again".into()))
    } else {
        None
    }
}

/// A new snapshot was taken on a hang verdict: where the training process was (its top frame).
fn stacks_taken(prev: Option<&Report>, next: &Report) -> Option<Transition> {
    let s = next.stacks.as_ref().filter(|&s| prev.and_then(|p| p.stacks.as_ref()) != Some(s))?;
    let message = format!("{} before the stop: {}", crate::untrusted::escape(&s.why), s.top);
    Some(transition("Stacks", EventType::Warning, message))
}

/// Master: the job's stacks were gathered before a restart a hang caused: the groups in one line.
fn job_stacks_gathered(prev: Option<&Report>, next: &Report) -> Option<Transition> {
    let j = next.job_stacks.as_ref().filter(|&j| prev.and_then(|p| p.job_stacks.as_ref()) != Some(j))?;
    Some(transition("JobStacks", EventType::Warning, format!("{}: {}", crate::untrusted::escape(&j.why), j.summary)))
}

/// Master: each replica newly named a straggler: who, the figures, the node.
fn stragglers_named(prev: Option<&Report>, next: &Report) -> Vec<Transition> {
    let before = prev.map_or(&[][..], |p| p.stragglers.as_slice());
    next.stragglers
        .iter()
        .filter(|s| !before.contains(s))
        .map(|s| transition("Straggler", EventType::Warning, s.line()))
        .collect()
}

/// rankvisor stopped the training process since `prev`: a new hang, a log rule newly fired.
fn stopped_by_rankvisor(prev: Option<&Report>, next: &Report) -> Vec<Transition> {
    let mut out = Vec::new();
    if next.hang_detections > prev.map_or(0, |p| p.hang_detections) {
        out.push(transition(
            "Hung",
            EventType::Warning,
            format!("the training process stopped beating and was stopped (hang {})", next.hang_detections),
        ));
    }
    if let Some(hit) = next.log_rule.as_ref().filter(|&h| prev.and_then(|p| p.log_rule.as_ref()) != Some(h)) {
        let line =
            hit.line.as_deref().map_or_else(|| "no line matched".into(), |l| format!("last matched line: \"{l}\""));
        out.push(transition(
            "LogRule",
            EventType::Warning,
            format!("a log rule fired ({}; {line}); the training process was stopped", hit.reason),
        ));
    }
    out
}

/// `ended` runs ended since the previous report, `restarted` of them followed by a restart: a
/// `ChildFailed` for each when the child itself failed, a `ChildRestarted` for each restart.
fn runs_ended(restarted: u32, ended: u32, next: &Report) -> Vec<Transition> {
    let mut out = Vec::new();
    if child_failed(next) {
        for _ in 0..ended {
            out.push(transition(
                "ChildFailed",
                EventType::Warning,
                format!("the training process {} (restarts so far: {})", exit_text(next), next.restart_count),
            ));
        }
    }
    for _ in 0..restarted {
        out.push(transition(
            "ChildRestarted",
            EventType::Normal,
            format!("restarted the training process (restart {}, generation {})", next.restart_count, next.generation),
        ));
    }
    out
}

/// Entering Failed: before any training process ran (from Pending or Rendezvous), the replicas
/// did not meet; else rankvisor gave up after its restarts.
fn gave_up(p_state: ReplicaState, next: &Report) -> Transition {
    if next.last_exit.is_none() && matches!(p_state, ReplicaState::Pending | ReplicaState::Rendezvous) {
        transition(
            "RendezvousTimeout",
            EventType::Warning,
            "gave up before the training process started: the replicas did not meet at the rendezvous".into(),
        )
    } else {
        transition(
            "Failed",
            EventType::Warning,
            format!("gave up after {} restarts; the last training process {}", next.restart_count, exit_text(next)),
        )
    }
}

/// The Pod condition's content, without its transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// True when the training process runs on a healthy node.
    pub healthy: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// The condition for a report: True when Running and the node is not unhealthy.
pub fn condition(r: &Report) -> Condition {
    if node_unhealthy(r) {
        return Condition {
            healthy: false,
            reason: "NodeUnhealthy".into(),
            message: format!("the node's health labels mark it unhealthy (replica state {:?})", r.state),
        };
    }
    let message = match r.state {
        ReplicaState::Running => format!("the training process runs (restarts: {})", r.restart_count),
        ReplicaState::Pending => "rankvisor started; the training process has not started yet".into(),
        ReplicaState::Rendezvous => "waiting for the other replicas at the rendezvous".into(),
        ReplicaState::Restarting => {
            format!("the training process {}; restarting after a backoff (restarts: {})", exit_text(r), r.restart_count)
        }
        ReplicaState::Stopping => "the training process is being stopped".into(),
        ReplicaState::Succeeded => "the training process succeeded".into(),
        ReplicaState::Failed => format!("rankvisor gave up; the last training process {}", exit_text(r)),
        ReplicaState::NodeUnhealthy => "the node is unhealthy".into(),
    };
    Condition { healthy: r.state == ReplicaState::Running, reason: format!("{:?}", r.state), message }
}

/// `t` as Kubernetes writes times: RFC 3339 in UTC, whole seconds.
pub fn kube_time(t: SystemTime) -> String {
    let full = rfc3339(t);
    match full.get(..19) {
        Some(secs) => format!("{secs}Z"),
        None => full,
    }
}

/// The strategic merge patch of `pods/NAME/status` that sets the condition (merged by type).
pub fn condition_patch(c: &Condition, last_transition: &str) -> Value {
    json!({"status": {"conditions": [{
        "type": CONDITION_TYPE,
        "status": if c.healthy { "True" } else { "False" },
        "reason": c.reason,
        "message": c.message,
        "lastTransitionTime": last_transition,
    }]}})
}

/// A new Event's name: the pod's name and the time in hex, as kubelet names its Events.
pub fn event_name(pod: &str, now: SystemTime) -> String {
    let nanos = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let pod = pod.get(..pod.len().min(200)).unwrap_or(pod);
    format!("{pod}.{nanos:x}")
}

/// Who the Events are about and who reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The Pod's namespace.
    pub namespace: String,
    /// The Pod's name.
    pub pod: String,
    /// The Pod's uid, once known (`kubectl describe pod` matches Events by it).
    pub uid: Option<String>,
    /// The node, for the Event's source.
    pub node: Option<String>,
}

/// A new core/v1 Event about the Pod, seen once at `now`.
pub fn event_object(s: &Subject, name: &str, t: &Transition, now: &str) -> Value {
    let mut involved = json!({"apiVersion": "v1", "kind": "Pod", "name": s.pod, "namespace": s.namespace});
    if let (Some(uid), Some(obj)) = (&s.uid, involved.as_object_mut()) {
        obj.insert("uid".into(), json!(uid));
    }
    let mut source = json!({"component": COMPONENT});
    if let (Some(node), Some(obj)) = (&s.node, source.as_object_mut()) {
        obj.insert("host".into(), json!(node));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": s.namespace},
        "involvedObject": involved,
        "reason": t.reason,
        "message": t.message,
        "type": t.kind.as_str(),
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": source,
        "reportingComponent": COMPONENT,
        "reportingInstance": s.pod,
    })
}

/// The patch that records one more occurrence of an Event.
pub fn event_patch(count: u32, message: &str, now: &str) -> Value {
    json!({"count": count, "message": message, "lastTimestamp": now})
}

/// Where to report, from the command line and the downward API.
#[derive(Debug, Clone)]
pub struct KubeEventsConfig {
    /// The same client (and configuration) as the node-health source.
    pub client: KubeClient,
    /// `POD_NAMESPACE`.
    pub namespace: String,
    /// `POD_NAME`.
    pub pod: String,
    /// `NODE_NAME`, when set.
    pub node: Option<String>,
}

/// Start following `reports` in `tasks`: the task ends once the reports channel has closed and
/// the final report is sent (or the API refuses both Events and the Pod's status).
pub fn spawn(cfg: KubeEventsConfig, reports: watch::Receiver<Report>, tasks: &mut tokio::task::JoinSet<()>) {
    tasks.spawn(run(cfg, reports));
}

/// One Event object per reason: its name and how many times it was seen.
#[derive(Debug, Clone)]
struct Aggregate {
    name: String,
    count: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Events,
    Pod,
}

struct Reporter {
    client: KubeClient,
    subject: Subject,
    events: HashMap<&'static str, Aggregate>,
    condition: Option<Condition>,
    since: String,
    events_refused: bool,
    pod_refused: bool,
    warned_refused: bool,
    failing: bool,
}

impl Reporter {
    /// A failed request: 403 turns that kind off with one warning for the whole run; anything
    /// else warns once until a request succeeds again.
    fn failed(&mut self, kind: Kind, e: KubeError) {
        if matches!(e, KubeError::ReportForbidden { .. }) {
            match kind {
                Kind::Events => self.events_refused = true,
                Kind::Pod => self.pod_refused = true,
            }
            if !self.warned_refused {
                self.warned_refused = true;
                warn!("{e}; Kubernetes Events and the Pod condition are skipped where refused; supervision continues");
            } else {
                debug!("{e}");
            }
            return;
        }
        if self.failing {
            debug!("cannot report to Kubernetes: {e}");
        } else {
            self.failing = true;
            warn!("cannot report to Kubernetes: {e}; retrying on the next change; supervision continues");
        }
    }

    fn succeeded(&mut self) {
        if self.failing {
            self.failing = false;
            info!("reporting to Kubernetes works again");
        }
    }

    async fn learn_uid(&mut self) {
        let (client, ns, pod) = (self.client.clone(), self.subject.namespace.clone(), self.subject.pod.clone());
        match client.get_pod_status(&ns, &pod).await {
            Ok(v) => {
                self.succeeded();
                self.subject.uid = v.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string);
            }
            Err(e) => self.failed(Kind::Pod, e),
        }
    }

    async fn event(&mut self, t: &Transition) {
        if self.events_refused {
            return;
        }
        let now = kube_time(SystemTime::now());
        let client = self.client.clone();
        let ns = self.subject.namespace.clone();
        if let Some(agg) = self.events.get(t.reason).cloned() {
            let count = agg.count.saturating_add(1);
            match client.patch_event(&ns, &agg.name, &event_patch(count, &t.message, &now)).await {
                Ok(_) => {
                    self.succeeded();
                    self.events.insert(t.reason, Aggregate { name: agg.name, count });
                    return;
                }
                // Expired (the API server keeps Events for an hour): start a new one.
                Err(KubeError::NotFound { .. }) => {}
                Err(e) => return self.failed(Kind::Events, e),
            }
        }
        let name = event_name(&self.subject.pod, SystemTime::now());
        match client.create_event(&ns, &event_object(&self.subject, &name, t, &now)).await {
            Ok(_) => {
                self.succeeded();
                self.events.insert(t.reason, Aggregate { name, count: 1 });
            }
            Err(e) => self.failed(Kind::Events, e),
        }
    }

    async fn update_condition(&mut self, report: &Report) {
        let c = condition(report);
        if self.pod_refused || self.condition.as_ref() == Some(&c) {
            return;
        }
        if self.condition.as_ref().map(|old| old.healthy) != Some(c.healthy) {
            self.since = kube_time(SystemTime::now());
        }
        let client = self.client.clone();
        let (ns, pod) = (self.subject.namespace.clone(), self.subject.pod.clone());
        match client.patch_pod_status(&ns, &pod, &condition_patch(&c, &self.since)).await {
            Ok(_) => {
                self.succeeded();
                self.condition = Some(c);
            }
            Err(e) => self.failed(Kind::Pod, e),
        }
    }
}

async fn run(cfg: KubeEventsConfig, mut reports: watch::Receiver<Report>) {
    let subject = Subject { namespace: cfg.namespace, pod: cfg.pod, uid: None, node: cfg.node };
    let mut r = Reporter {
        client: cfg.client,
        subject,
        events: HashMap::new(),
        condition: None,
        since: kube_time(SystemTime::now()),
        events_refused: false,
        pod_refused: false,
        warned_refused: false,
        failing: false,
    };
    r.learn_uid().await;
    let mut prev: Option<Report> = None;
    loop {
        let report = reports.borrow_and_update().clone();
        for t in transitions(prev.as_ref(), &report) {
            r.event(&t).await;
        }
        r.update_condition(&report).await;
        prev = Some(report);
        if r.events_refused && r.pod_refused {
            return;
        }
        // After the sender is gone, an unseen final report still comes first.
        if reports.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitHow;
    use crate::status::{Identity, LocalStatus, Timeline};

    fn rep(state: ReplicaState, restarts: u32, exit: Option<ExitHow>, hangs: u32) -> Report {
        let st = LocalStatus {
            state,
            restart_count: restarts,
            last_exit: exit,
            hang_detections: hangs,
            last_exit_reason: (hangs > 0).then_some(ExitReason::Hung),
            ..LocalStatus::default()
        };
        Timeline::new(UNIX_EPOCH).report(&Identity::default(), &st, UNIX_EPOCH)
    }

    fn reasons(prev: Option<&Report>, next: &Report) -> Vec<&'static str> {
        transitions(prev, next).iter().map(|t| t.reason).collect()
    }

    #[test]
    fn a_new_snapshot_is_a_stacks_event_with_its_top_frame() {
        let running = rep(ReplicaState::Running, 0, None, 0);
        let mut stopping = rep(ReplicaState::Stopping, 0, None, 1);
        stopping.stacks = Some(crate::stacks::StacksSummary {
            taken_at: "t".into(),
            why: "hung".into(),
            pid: Some(7),
            frames: vec!["slow_here (hang.py:4)".into()],
            top: "pid 7 in slow_here (hang.py:4)".into(),
        });
        let t = transitions(Some(&running), &stopping);
        let stacks = t.iter().find(|t| t.reason == "Stacks").expect("a Stacks event");
        assert_eq!(stacks.message, "hung before the stop: pid 7 in slow_here (hang.py:4)");
        assert!(!reasons(Some(&stopping), &stopping).contains(&"Stacks"), "once per snapshot");
    }

    /// The master's job stacks, gathered on a hang, are one `JobStacks` Event: why (escaped) and the
    /// groups in one line; once per gathering.
    #[test]
    fn the_jobs_gathered_stacks_are_one_job_stacks_event() {
        let running = rep(ReplicaState::Running, 0, None, 0);
        let mut gathered = running.clone();
        gathered.job_stacks = Some(crate::stacks::JobStacks {
            taken_at: "t".into(),
            why: "replica 2: hung\n".into(),
            elapsed_ms: 20,
            groups: vec![],
            summary: "2 replicas (0, 1): all_reduce (c10d.py:9); replica 2: slow_here (train.py:40)".into(),
            replicas: vec![],
        });
        let t = transitions(Some(&running), &gathered);
        let job = t.iter().find(|t| t.reason == "JobStacks").expect("a JobStacks event");
        assert_eq!(
            job.message,
            "replica 2: hung\\n: 2 replicas (0, 1): all_reduce (c10d.py:9); replica 2: slow_here (train.py:40)"
        );
        assert!(!reasons(Some(&gathered), &gathered).contains(&"JobStacks"), "once per gathering");
    }

    /// Each replica newly named a straggler is one `Straggler` Event with its figures and its
    /// node (escaped); one named before is not told again, and neither is one the bounded list
    /// dropped.
    #[test]
    fn each_newly_named_straggler_is_one_event_with_its_figures_and_node() {
        use crate::rendezvous::straggler::Straggler;
        use crate::status::straggler::keep;
        let named = |replica: u32, node: &str| {
            let s = Straggler { replica, value: 60.0, median: 100.0, relative: 0.6, points: 3 };
            s.named(node.into(), None, "t".into())
        };
        let running = rep(ReplicaState::Running, 0, None, 0);
        let mut one = running.clone();
        keep(&mut one.stragglers, named(2, "node-b\x1b[31m"));
        let t = transitions(Some(&running), &one);
        let s: Vec<_> = t.iter().filter(|t| t.reason == "Straggler").collect();
        assert_eq!(s.len(), 1, "{t:?}");
        assert_eq!(
            s[0].message,
            "replica 2 is a straggler: its metric 60 against the job's median 100 (0.60x the median's pace) for 3 points in a row (node node-b\\u{1b}[31m)"
        );
        assert!(!reasons(Some(&one), &one).contains(&"Straggler"), "once");
        let mut two = one.clone();
        keep(&mut two.stragglers, named(5, "node-e"));
        let t = transitions(Some(&one), &two);
        let s: Vec<_> = t.iter().filter(|t| t.reason == "Straggler").map(|t| t.message.as_str()).collect();
        assert_eq!(s.len(), 1, "only the new one: {s:?}");
        assert!(s[0].starts_with("replica 5 ") && s[0].ends_with("(node node-e)"), "{s:?}");
        let mut many = two.clone();
        for i in 0..40 {
            keep(&mut many.stragglers, named(100 + i, "n"));
        }
        assert_eq!(many.stragglers.len(), crate::status::straggler::STRAGGLERS_KEPT, "bounded");
        assert_eq!(many.stragglers.last().map(|s| s.replica), Some(139), "newest last");
    }

    #[test]
    fn a_failure_then_a_restart_then_success() {
        use ReplicaState::*;
        let running = rep(Running, 0, None, 0);
        assert!(reasons(None, &rep(Pending, 0, None, 0)).is_empty());
        assert!(reasons(Some(&rep(Rendezvous, 0, None, 0)), &running).is_empty());
        // Entering Restarting counts the restart it waits for (the machine's own convention).
        let failed = rep(Restarting, 1, Some(ExitHow::Exited(1)), 0);
        let t = transitions(Some(&running), &failed);
        assert_eq!(t.iter().map(|t| t.reason).collect::<Vec<_>>(), ["ChildFailed", "ChildRestarted"]);
        assert_eq!(t[0].kind, EventType::Warning);
        assert!(t[0].message.contains("exited with code 1"), "{}", t[0].message);
        let again = rep(Running, 1, Some(ExitHow::Exited(1)), 0);
        assert!(reasons(Some(&failed), &again).is_empty(), "the restart was already counted");
        assert_eq!(reasons(Some(&again), &rep(Succeeded, 1, Some(ExitHow::Exited(0)), 0)), ["Succeeded"]);
        // The Restarting report was skipped (the first restart is immediate): still counted.
        assert_eq!(reasons(Some(&running), &again), ["ChildFailed", "ChildRestarted"]);
        // Two restarts between two reports: two of each, as the Event counts must say.
        let twice = rep(Restarting, 2, Some(ExitHow::Exited(3)), 0);
        assert_eq!(reasons(Some(&running), &twice), ["ChildFailed", "ChildFailed", "ChildRestarted", "ChildRestarted"]);
        // The same state again is nothing new.
        assert!(reasons(Some(&again), &again).is_empty());
    }

    #[test]
    fn giving_up_hangs_rendezvous_and_node() {
        use ReplicaState::*;
        let running = rep(Running, 0, None, 0);
        assert_eq!(
            reasons(Some(&running), &rep(Failed, 0, Some(ExitHow::Signaled(crate::signo::Signo::KILL)), 0)),
            ["ChildFailed", "Failed"]
        );
        let hung = rep(Restarting, 0, Some(ExitHow::Signaled(crate::signo::Signo::TERM)), 1);
        assert_eq!(reasons(Some(&running), &hung), ["Hung"], "a hang is not also a child failure");
        assert_eq!(reasons(Some(&rep(Rendezvous, 0, None, 0)), &rep(Failed, 0, None, 0)), ["RendezvousTimeout"]);
        let mut sick = running.clone();
        sick.node_health = Some(crate::status::unhealthy_node_for_tests());
        let t = transitions(Some(&running), &sick);
        assert_eq!((t[0].reason, t[0].kind), ("NodeUnhealthy", EventType::Warning));
        assert!(reasons(Some(&sick), &sick).is_empty());
        assert_eq!(reasons(Some(&sick), &running), ["NodeHealthy"]);
        let c = condition(&sick);
        assert_eq!((c.healthy, c.reason.as_str()), (false, "NodeUnhealthy"));
    }

    #[test]
    fn a_fired_log_rule_is_one_log_rule_event_not_a_child_failure() {
        use ReplicaState::*;
        let running = rep(Running, 0, None, 0);
        let st = LocalStatus {
            state: Restarting,
            restart_count: 1,
            last_exit: Some(ExitHow::Signaled(crate::signo::Signo::TERM)),
            last_exit_reason: Some(ExitReason::LogRule),
            log_rule: Some(crate::status::LogRuleReport {
                reason: "LogHang_Step".into(),
                rule: "Step".into(),
                line: Some("step 1".into()),
            }),
            ..LocalStatus::default()
        };
        let fired = Timeline::new(UNIX_EPOCH).report(&Identity::default(), &st, UNIX_EPOCH);
        let t = transitions(Some(&running), &fired);
        assert_eq!(t.iter().map(|t| t.reason).collect::<Vec<_>>(), ["LogRule", "ChildRestarted"]);
        assert_eq!(t[0].kind, EventType::Warning);
        assert!(t[0].message.contains(r#"LogHang_Step; last matched line: "step 1""#), "{}", t[0].message);
        assert!(reasons(Some(&fired), &fired).is_empty(), "the same rule again is nothing new");
    }

    #[test]
    fn condition_follows_the_state() {
        for s in ReplicaState::ALL {
            let c = condition(&rep(s, 2, Some(ExitHow::Exited(3)), 0));
            assert_eq!(c.healthy, s == ReplicaState::Running, "{s:?}");
            assert_eq!(c.reason, format!("{s:?}"));
            assert!(!c.message.is_empty());
        }
        let p = condition_patch(&condition(&rep(ReplicaState::Running, 0, None, 0)), "2026-01-02T03:04:05Z");
        let cond = &p["status"]["conditions"][0];
        assert_eq!(cond["type"], CONDITION_TYPE);
        assert_eq!(cond["status"], "True");
        assert_eq!(cond["reason"], "Running");
        assert_eq!(cond["lastTransitionTime"], "2026-01-02T03:04:05Z");
    }

    #[test]
    fn event_objects() {
        let at = UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5);
        assert_eq!(kube_time(at), "2023-11-14T22:13:20Z");
        let name = event_name("job-worker-1", at);
        assert_eq!(name, format!("job-worker-1.{:x}", 1_700_000_000_000_000_005u128));
        let s = Subject {
            namespace: "team".into(),
            pod: "job-worker-1".into(),
            uid: Some("u-1".into()),
            node: Some("n1".into()),
        };
        let t = transition("ChildFailed", EventType::Warning, "boom".into());
        let e = event_object(&s, &name, &t, "2023-11-14T22:13:20Z");
        assert_eq!(e["metadata"]["namespace"], "team");
        assert_eq!(e["involvedObject"]["namespace"], "team", "the API requires the same namespace");
        assert_eq!(e["involvedObject"]["uid"], "u-1");
        assert_eq!(
            (e["reason"].as_str(), e["type"].as_str(), e["count"].as_u64()),
            (Some("ChildFailed"), Some("Warning"), Some(1))
        );
        assert_eq!(e["source"]["host"], "n1");
        let no_uid = event_object(&Subject { uid: None, node: None, ..s }, &name, &t, "x");
        assert!(no_uid["involvedObject"].get("uid").is_none() && no_uid["source"].get("host").is_none());
        assert_eq!(event_patch(3, "m", "t"), json!({"count": 3, "message": "m", "lastTimestamp": "t"}));
        let long = "p".repeat(300);
        assert!(event_name(&long, at).len() < 253);
    }
}
