//! `kubectl get -w` output: padded columns as kubectl's tabwriter prints them, or one JSON event
//! per line for tools.

use std::time::Duration;

use super::rows::{Change, HyperPodJobRow, JobState, PodGroupPhase, PodStatus, Row};
use crate::pytorchjob::PyTorchJob;

/// kubectl's tabwriter: cells are at least this wide...
const MIN_CELL: usize = 10;
/// ...and padded by this much.
const PADDING: usize = 3;

/// A `--watch` value that names no kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid --watch value {value:?}: expected job, podgroup or pods (or all); for a TrainJob also jobset or batchjobs"
)]
pub(crate) struct WatchKindsError {
    /// The value seen.
    pub value: String,
}

/// Which kinds the watch shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchKinds {
    /// One stream of the three kinds, names qualified by kind.
    #[default]
    All,
    /// Only the PyTorchJob, bare names.
    Job,
    /// Only the PodGroup, bare names.
    PodGroup,
    /// Only the pods, bare names.
    Pods,
    /// Only a TrainJob's JobSet, bare names.
    JobSet,
    /// Only a TrainJob's batch Jobs, bare names.
    Jobs,
}

impl WatchKinds {
    /// Read `job`, `podgroup`, `pods` or `all` (with kubectl's usual aliases).
    pub(crate) fn parse(value: &str) -> Result<Self, WatchKindsError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "all" => Ok(Self::All),
            "pytorchjob" | "pytorchjobs" | "trainjob" | "trainjobs" => Ok(Self::Job),
            "hyperpodpytorchjob" | "hyperpodpytorchjobs" => Ok(Self::Job),
            // `job` names the training job (PyTorchJob or TrainJob); `batchjobs`, a TrainJob's Jobs.
            "job" | "jobs" => Ok(Self::Job),
            "jobset" | "jobsets" | "js" => Ok(Self::JobSet),
            "batchjob" | "batchjobs" => Ok(Self::Jobs),
            "podgroup" | "podgroups" | "pg" => Ok(Self::PodGroup),
            "pod" | "pods" | "po" => Ok(Self::Pods),
            _ => Err(WatchKindsError { value: value.to_string() }),
        }
    }

    /// Whether a row of this kind is shown.
    pub(crate) fn includes(self, row: &Row) -> bool {
        matches!(
            (self, row),
            (Self::All, _)
                | (Self::Job, Row::Job(_) | Row::TrainJob(_) | Row::HyperPodJob(_))
                | (Self::PodGroup, Row::PodGroup(_))
                | (Self::Pods, Row::Pod(_))
                | (Self::JobSet, Row::JobSet(_))
                | (Self::Jobs, Row::BatchJob(_))
        )
    }
}

/// kubectl's AGE (`duration.HumanDuration`): `0s`, `35s`, `119s`, `2m15s`, `12m`, `1h2m`, `9h`, `3d4h`.
pub(crate) fn kube_age(d: Duration) -> String {
    let secs = d.as_secs();
    let minutes = secs / 60;
    let hours = secs / 3600;
    let days = hours / 24;
    if secs < 120 {
        format!("{secs}s")
    } else if minutes < 10 {
        match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        match days % 365 {
            0 => format!("{}y", days / 365),
            dy => format!("{}y{dy}d", days / 365),
        }
    } else {
        format!("{}y", days / 365)
    }
}

/// The row's name as kubectl writes it when several kinds are listed.
pub(crate) fn qualified_name(row: &Row) -> String {
    match row {
        Row::Job(j) => format!("pytorchjob.kubeflow.org/{}", j.name),
        Row::PodGroup(g) => format!("podgroup.scheduling.volcano.sh/{}", g.name),
        Row::Pod(p) => format!("pod/{}", p.name),
        Row::TrainJob(t) => format!("trainjob.trainer.kubeflow.org/{}", t.name),
        Row::JobSet(j) => format!("jobset.jobset.x-k8s.io/{}", j.name),
        Row::BatchJob(j) => format!("job.batch/{}", j.name),
        Row::HyperPodJob(h) => format!("{HYPERPOD_PREFIX}{}", h.name),
    }
}

/// The row's bare name.
fn bare_name(row: &Row) -> String {
    match row {
        Row::Job(j) => j.name.clone(),
        Row::PodGroup(g) => g.name.clone(),
        Row::Pod(p) => p.name.clone(),
        Row::TrainJob(t) => t.name.clone(),
        Row::JobSet(j) => j.name.clone(),
        Row::BatchJob(j) => j.name.clone(),
        Row::HyperPodJob(h) => h.name.clone(),
    }
}

/// The RESTARTS column: `0`, `1 (2s ago)`.
fn restarts_cell(restarts: u32, ago: Option<Duration>) -> String {
    match ago {
        Some(d) if restarts > 0 => format!("{restarts} ({} ago)", kube_age(d)),
        _ => restarts.to_string(),
    }
}

/// The row's cells, in column order, with `name` as the first.
fn cells(row: &Row, name: String) -> Vec<String> {
    match row {
        Row::Job(j) => vec![name, j.state.map(JobState::as_str).unwrap_or("").to_string(), kube_age(j.age)],
        Row::PodGroup(g) => vec![
            name,
            g.status.map(PodGroupPhase::as_str).unwrap_or("").to_string(),
            g.min_member.to_string(),
            if g.runnings == 0 { String::new() } else { g.runnings.to_string() },
            kube_age(g.age),
            g.queue.clone(),
        ],
        Row::Pod(p) => vec![
            name,
            if p.ready { "1/1" } else { "0/1" }.to_string(),
            p.status.as_str().to_string(),
            restarts_cell(p.restarts, p.last_restart_ago),
            kube_age(p.age),
            p.node.clone().unwrap_or_else(|| "<none>".to_string()),
        ],
        Row::TrainJob(t) => vec![name, t.state.unwrap_or("").to_string(), kube_age(t.age)],
        Row::JobSet(j) => vec![
            name,
            j.terminal_state.unwrap_or("").to_string(),
            j.restarts.to_string(),
            if j.completed { "True" } else { "" }.to_string(),
            j.suspended.map(|s| s.to_string()).unwrap_or_default(),
            kube_age(j.age),
        ],
        Row::BatchJob(j) => vec![
            name,
            j.status.to_string(),
            format!("{}/{}", j.succeeded, j.completions),
            j.duration.map(kube_age).unwrap_or_default(),
            kube_age(j.age),
        ],
        Row::HyperPodJob(h) => hyperpod_cells(h, name),
    }
}

/// A HyperPodPyTorchJob's cells: NAME, STATE (the newest condition), RESTARTS, TYPE (the latest
/// restart's), AGE.
fn hyperpod_cells(h: &HyperPodJobRow, name: String) -> Vec<String> {
    vec![
        name,
        h.state.unwrap_or("").to_string(),
        h.restart_count.to_string(),
        h.restart_type.unwrap_or("").to_string(),
        kube_age(h.age),
    ]
}

/// Pad every cell but the last as kubectl's tabwriter does.
fn line(cells: &[String], widths: &[usize]) -> String {
    let mut out = String::new();
    let last = cells.len().saturating_sub(1);
    for (i, cell) in cells.iter().enumerate() {
        if i == last {
            out.push_str(cell);
        } else {
            let width = widths.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{cell:<width$}"));
        }
    }
    out.trim_end().to_string()
}

/// Column widths from the widest content each column can hold.
fn widths(longest: &[usize]) -> Vec<usize> {
    longest.iter().map(|n| (n + PADDING).max(MIN_CELL)).collect()
}

/// Turns changes into watch lines; stateful only to print each kind's header once.
#[derive(Debug, Clone)]
pub(crate) struct TextRenderer {
    kinds: WatchKinds,
    job_widths: Vec<usize>,
    podgroup_widths: Vec<usize>,
    pod_widths: Vec<usize>,
    trainjob_widths: Vec<usize>,
    jobset_widths: Vec<usize>,
    batchjob_widths: Vec<usize>,
    hyperpod_widths: Vec<usize>,
    headers_shown: [bool; 7],
}

/// A HyperPodPyTorchJob's qualified name's prefix.
const HYPERPOD_PREFIX: &str = "hyperpodpytorchjob.sagemaker.amazonaws.com/";
const HYPERPOD_HEADER: [&str; 5] = ["NAME", "STATE", "RESTARTS", "TYPE", "AGE"];

const JOB_HEADER: [&str; 3] = ["NAME", "STATE", "AGE"];
const PODGROUP_HEADER: [&str; 6] = ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE", "QUEUE"];
const POD_HEADER: [&str; 6] = ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"];
const TRAINJOB_HEADER: [&str; 3] = ["NAME", "STATE", "AGE"];
const JOBSET_HEADER: [&str; 6] = ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"];
const BATCHJOB_HEADER: [&str; 5] = ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"];

impl TextRenderer {
    /// A renderer for `job`'s objects, showing `kinds`.
    pub(crate) fn new(job: &PyTorchJob, kinds: WatchKinds) -> Self {
        let pod_name = job.replicas().iter().map(|id| job.pod_name(*id).len()).max().unwrap_or(0);
        Self::sized(&job.name, pod_name, kinds)
    }

    /// A renderer for a job named `name` whose longest pod name is `pod_name` long.
    pub(crate) fn sized(name: &str, pod_name: usize, kinds: WatchKinds) -> Self {
        let qualified = kinds == WatchKinds::All;
        let prefix = |p: &str| if qualified { p.len() } else { 0 };
        let job_name = name.len() + prefix("pytorchjob.kubeflow.org/");
        let pg_name = name.len() + prefix("podgroup.scheduling.volcano.sh/");
        let pod_name = pod_name + prefix("pod/");
        let trainjob_name = name.len() + prefix("trainjob.trainer.kubeflow.org/");
        let jobset_name = name.len() + prefix("jobset.jobset.x-k8s.io/");
        let batchjob_name = name.len() + "-node-0".len() + prefix("job.batch/");
        let age = "59m59s".len();
        let longest_status = PodStatus::ContainerCreating.as_str().len();
        Self {
            kinds,
            job_widths: widths(&[job_name, JobState::Restarting.as_str().len(), age]),
            podgroup_widths: widths(&[pg_name, "Inqueue".len(), "MINMEMBER".len(), "RUNNINGS".len(), age, 0]),
            pod_widths: widths(&[pod_name, "READY".len(), longest_status, "99 (59m59s ago)".len(), age, 0]),
            trainjob_widths: widths(&[trainjob_name, "Suspended".len(), age]),
            jobset_widths: widths(&[
                jobset_name,
                "TERMINALSTATE".len(),
                "RESTARTS".len(),
                "COMPLETED".len(),
                "SUSPENDED".len(),
                age,
            ]),
            batchjob_widths: widths(&[batchjob_name, "Suspended".len(), "COMPLETIONS".len(), "DURATION".len(), age]),
            hyperpod_widths: widths(&[
                name.len() + prefix(HYPERPOD_PREFIX),
                "Restarting".len(),
                "RESTARTS".len(),
                "TYPE".len(),
                age,
            ]),
            headers_shown: [false; 7],
        }
    }

    /// The lines for one change: none if its kind is not watched; a header before a kind's first row.
    pub(crate) fn render(&mut self, change: &Change) -> Vec<String> {
        if !self.kinds.includes(&change.row) {
            return Vec::new();
        }
        let (slot, header, widths): (usize, &[&str], &[usize]) = match &change.row {
            Row::Job(_) => (0, &JOB_HEADER, &self.job_widths),
            Row::PodGroup(_) => (1, &PODGROUP_HEADER, &self.podgroup_widths),
            Row::Pod(_) => (2, &POD_HEADER, &self.pod_widths),
            Row::TrainJob(_) => (3, &TRAINJOB_HEADER, &self.trainjob_widths),
            Row::JobSet(_) => (4, &JOBSET_HEADER, &self.jobset_widths),
            Row::BatchJob(_) => (5, &BATCHJOB_HEADER, &self.batchjob_widths),
            Row::HyperPodJob(_) => (6, &HYPERPOD_HEADER, &self.hyperpod_widths),
        };
        let name = if self.kinds == WatchKinds::All { qualified_name(&change.row) } else { bare_name(&change.row) };
        let mut out = Vec::new();
        if !self.headers_shown[slot] {
            self.headers_shown[slot] = true;
            let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
            out.push(line(&header, widths));
        }
        out.push(line(&cells(&change.row, name), widths));
        out
    }
}

/// One change as one JSON object (one line): time offset, event, kind, name and typed fields.
pub(crate) fn render_json(change: &Change) -> String {
    use serde_json::json;
    let (kind, name, fields) = match &change.row {
        Row::Job(j) => (
            "PyTorchJob",
            &j.name,
            json!({ "state": j.state, "age": kube_age(j.age), "age_ms": j.age.as_millis() as u64 }),
        ),
        Row::PodGroup(g) => (
            "PodGroup",
            &g.name,
            json!({
                "status": g.status, "minMember": g.min_member, "runnings": g.runnings,
                "age": kube_age(g.age), "age_ms": g.age.as_millis() as u64, "queue": g.queue,
            }),
        ),
        Row::Pod(p) => (
            "Pod",
            &p.name,
            json!({
                "replica": p.replica.to_string(), "ready": if p.ready { "1/1" } else { "0/1" },
                "status": p.status, "restarts": p.restarts,
                "lastRestartAgo_ms": p.last_restart_ago.map(|d| d.as_millis() as u64),
                "age": kube_age(p.age), "age_ms": p.age.as_millis() as u64, "node": p.node,
                "restartAttempt": p.restart_attempt, "agent": p.agent,
            }),
        ),
        Row::TrainJob(t) => (
            "TrainJob",
            &t.name,
            json!({ "state": t.state, "reason": t.reason, "age": kube_age(t.age), "age_ms": t.age.as_millis() as u64 }),
        ),
        Row::JobSet(j) => (
            "JobSet",
            &j.name,
            json!({
                "terminalState": j.terminal_state, "restarts": j.restarts, "completed": j.completed,
                "suspended": j.suspended, "age": kube_age(j.age), "age_ms": j.age.as_millis() as u64,
            }),
        ),
        Row::BatchJob(j) => (
            "Job",
            &j.name,
            json!({
                "status": j.status, "succeeded": j.succeeded, "completions": j.completions,
                "duration_ms": j.duration.map(|d| d.as_millis() as u64), "age": kube_age(j.age),
                "age_ms": j.age.as_millis() as u64,
            }),
        ),
        Row::HyperPodJob(h) => ("HyperPodPyTorchJob", &h.name, hyperpod_json(h)),
    };
    json!({
        "time_ms": change.at.as_millis() as u64,
        "type": change.event.as_str(),
        "kind": kind,
        "name": name,
        "fields": fields,
    })
    .to_string()
}

/// A HyperPodPyTorchJob's JSON fields: `state` (the newest condition's type), `reason`,
/// `restartCount`, `restartType`, and the rest of its status as the CRD names it.
fn hyperpod_json(h: &HyperPodJobRow) -> serde_json::Value {
    serde_json::json!({
        "state": h.state, "reason": h.reason, "restartCount": h.restart_count, "restartType": h.restart_type,
        "restartStatus": h.restart_status.map(|(window, full, plr)| serde_json::json!({
            "currentEvalPeriod": window, "fullJobRestartCount": full, "restartCount": plr,
        })),
        "latestFaultyPodInstanceList": h.restart_type.map(|t| serde_json::json!({
            "restartType": t, "faultyPodList": h.faulty_pods, "faultyRankList": h.faulty_ranks,
        })),
        "masterAddr": h.master.as_ref().map(|m| m.0.clone()),
        "masterPort": h.master.as_ref().map(|m| m.1.to_string()),
        "age": kube_age(h.age), "age_ms": h.age.as_millis() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::replica::ReplicaId;
    use crate::pytorchjob::admission::parse_job;
    use crate::render::rows::{JobRow, PodGroupRow, PodRow, WatchEventType};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (35, "35s"),
            (75, "75s"),
            (119, "119s"),
            (120, "2m"),
            (135, "2m15s"),
            (219, "3m39s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600 + 120, "3h2m"),
            (5 * 3600, "5h"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (72 * 3600, "3d"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
            (3000 * 86400, "8y"),
        ];
        for (s, want) in cases {
            assert_eq!(kube_age(secs(s)), want, "{s}s");
        }
        assert_eq!(kube_age(Duration::from_millis(1999)), "1s");
    }

    #[test]
    fn watch_kinds_parse() {
        assert_eq!(WatchKinds::parse("pods"), Ok(WatchKinds::Pods));
        assert_eq!(WatchKinds::parse("job"), Ok(WatchKinds::Job));
        assert_eq!(WatchKinds::parse("PodGroup"), Ok(WatchKinds::PodGroup));
        let e = WatchKinds::parse("nodes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid --watch value \"nodes\": expected job, podgroup or pods (or all); for a TrainJob also jobset or batchjobs"
        );
        assert_eq!(WatchKinds::parse("jobset"), Ok(WatchKinds::JobSet));
        assert_eq!(WatchKinds::parse("batchjobs"), Ok(WatchKinds::Jobs));
    }

    fn job() -> PyTorchJob {
        parse_job(include_str!("../../../../examples/pytorchjob.yaml"), "pytorchjob.yaml").unwrap()
    }

    fn pod_change(status: PodStatus, restarts: u32, ago: Option<u64>, age: u64) -> Change {
        Change {
            at: secs(age),
            event: WatchEventType::Modified,
            row: Row::Pod(PodRow {
                name: "pytest-worker-0".into(),
                replica: ReplicaId::worker(0),
                ready: status == PodStatus::Running,
                status,
                restarts,
                last_restart_ago: ago.map(secs),
                age: secs(age),
                node: Some("las1".into()),
                restart_attempt: None,
                agent: None,
            }),
        }
    }

    #[test]
    fn single_kind_has_a_header_and_bare_names() {
        let mut r = TextRenderer::new(&job(), WatchKinds::Pods);
        let lines = r.render(&pod_change(PodStatus::Running, 1, Some(2), 17));
        assert_eq!(
            lines,
            vec![
                "NAME              READY     STATUS              RESTARTS          AGE       NODE",
                "pytest-worker-0   1/1       Running             1 (2s ago)        17s       las1",
            ]
        );
        let lines = r.render(&pod_change(PodStatus::CrashLoopBackOff, 1, Some(12), 38));
        assert_eq!(lines, vec!["pytest-worker-0   0/1       CrashLoopBackOff    1 (12s ago)       38s       las1"]);
        let job_change = Change {
            at: secs(0),
            event: WatchEventType::Added,
            row: Row::Job(JobRow { name: "pytest".into(), state: None, age: secs(0) }),
        };
        assert!(r.render(&job_change).is_empty(), "other kinds are filtered out");
    }

    #[test]
    fn combined_stream_qualifies_names_like_kubectl() {
        let mut r = TextRenderer::new(&job(), WatchKinds::All);
        let job_lines = r.render(&Change {
            at: secs(0),
            event: WatchEventType::Added,
            row: Row::Job(JobRow { name: "pytest".into(), state: None, age: secs(0) }),
        });
        assert_eq!(job_lines[0], "NAME                             STATE        AGE");
        assert_eq!(job_lines[1], "pytorchjob.kubeflow.org/pytest                0s");
        let pg = Change {
            at: secs(4),
            event: WatchEventType::Modified,
            row: Row::PodGroup(PodGroupRow {
                name: "pytest".into(),
                status: Some(PodGroupPhase::Running),
                min_member: 4,
                runnings: 1,
                age: secs(4),
                queue: "default".into(),
            }),
        };
        let lines = r.render(&pg);
        assert_eq!(lines.len(), 2, "header, then the row");
        assert_eq!(
            lines[1],
            "podgroup.scheduling.volcano.sh/pytest   Running   4           1          4s        default"
        );
        let lines = r.render(&pod_change(PodStatus::Pending, 0, None, 0));
        assert!(lines[1].starts_with("pod/pytest-worker-0   0/1       Pending"), "{}", lines[1]);
        assert_eq!(r.render(&pg).len(), 1, "the header is shown once");
    }

    #[test]
    fn blank_cells_stay_blank() {
        let mut r = TextRenderer::new(&job(), WatchKinds::PodGroup);
        let lines = r.render(&Change {
            at: secs(0),
            event: WatchEventType::Added,
            row: Row::PodGroup(PodGroupRow {
                name: "pytest".into(),
                status: None,
                min_member: 4,
                runnings: 0,
                age: secs(0),
                queue: "default".into(),
            }),
        });
        assert_eq!(lines[1], "pytest              4                      0s        default");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cells, vec!["pytest", "4", "0s", "default"], "as seed 000's first PodGroup line");
    }

    #[test]
    fn json_is_one_object_per_line() {
        let text = render_json(&pod_change(PodStatus::Error, 1, Some(12), 27));
        assert!(!text.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["type"], "MODIFIED");
        assert_eq!(v["kind"], "Pod");
        assert_eq!(v["name"], "pytest-worker-0");
        assert_eq!(v["time_ms"], 27000);
        assert_eq!(v["fields"]["status"], "Error");
        assert_eq!(v["fields"]["restarts"], 1);
        assert_eq!(v["fields"]["lastRestartAgo_ms"], 12000);
        assert_eq!(v["fields"]["ready"], "0/1");
        assert_eq!(v["fields"]["replica"], "worker-0");
    }
}
