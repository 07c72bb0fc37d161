//! One replica's launcher as the dry run sees it: the command line it is started with, the status
//! lines it writes on `--status-fd` (turned into the controller's events), its node's labels
//! file, and its output cut into lines. No processes here: the event loop does the I/O.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use nix::unistd::Pid;
use rankvisor_core::duration::format_duration;
use rankvisor_core::status::straggler::NamedStraggler;
use rankvisor_core::status::{ExitReason, LocalStatus, ReplicaState};

use super::injection::DEFAULT_LABEL_KEY;
use crate::kubelet::cluster::ClusterEvent;
use crate::kubelet::launch::LaunchSpec;
use crate::kubelet::replica::ReplicaId;

/// The launcher's `--backoff-limit` for a job without `runPolicy.backoffLimit`: the kubelet
/// restarts a container for as long as the operator keeps the pod, and without a backoffLimit
/// the operator never gives up on restarts, so no per-pod limit is right.
pub(crate) const UNLIMITED_RESTARTS: u32 = u32::MAX;

/// The label value every replica's node starts with: healthy.
pub(crate) const HEALTHY_NODE: &str = "Schedulable";

/// A line of replica output longer than this is cut, so a progress bar without newlines cannot
/// grow a buffer without bound.
pub(crate) const MAX_OUTPUT_LINE: usize = 16 * 1024;

/// What every launcher of the dry run gets, from the dry run's own command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LauncherSettings {
    /// `--backoff-initial`.
    pub backoff_initial: Duration,
    /// `--backoff-max`.
    pub backoff_max: Duration,
    /// `--grace-period`.
    pub grace_period: Duration,
    /// The launchers' `--log-level`.
    pub log_level: String,
    /// Whether to pass `--node-health file:<labels file>` (the launcher must support it).
    pub node_health: bool,
    /// `--restart-scope`: job makes a failure restart every replica in a new generation.
    pub restart_scope: rankvisor_core::policy::RestartScope,
}

/// What one launcher instance gets of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LauncherFiles<'a> {
    /// The descriptor number of the status pipe's write end, as the launcher inherits it.
    pub status_fd: i32,
    /// The replica's node labels file.
    pub node_labels: &'a Path,
    /// Where the launcher writes why it gave up.
    pub termination_log: &'a Path,
    /// The loopback port of its HTTP endpoint (`/status`, `/metrics`), or none (`--http-addr off`).
    pub http_port: Option<u16>,
}

/// The launcher's arguments (after the program name): supervision options, then `--`, then the
/// container's command.
///
/// `--backoff-limit` is the job's `runPolicy.backoffLimit` when it has one. While the job runs,
/// the controller's job-wide rule (restarts summed over the pods reach the limit) fails the job
/// when a pod starts its run number limit+1, before that pod's launcher would give up; after the
/// outcome (the seed's worker-0, still crash-looping after the job Succeeded) the launcher's own
/// limit ends the replica, so the dry run ends too. Without a backoffLimit: [`UNLIMITED_RESTARTS`].
pub(crate) fn launcher_args(spec: &LaunchSpec, settings: &LauncherSettings, files: LauncherFiles<'_>) -> Vec<OsString> {
    let backoff_limit = spec.backoff_limit.unwrap_or(UNLIMITED_RESTARTS);
    let mut args: Vec<OsString> = [
        "--restart-policy",
        &spec.restart_policy.to_string(),
        "--backoff-limit",
        &backoff_limit.to_string(),
        "--backoff-initial",
        &format_duration(settings.backoff_initial),
        "--backoff-max",
        &format_duration(settings.backoff_max),
        "--grace-period",
        &format_duration(settings.grace_period),
        "--status-fd",
        &files.status_fd.to_string(),
        "--log-level",
        &settings.log_level,
        // Its pods are not Kubernetes objects, even when the dry run itself runs in a cluster.
        "--kube-events",
        "off",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    // Several launchers share this machine: each gets its own loopback port, or none.
    args.push("--http-addr".into());
    args.push(files.http_port.map_or_else(|| "off".into(), |p| format!("127.0.0.1:{p}")).into());
    if let Some((host, port)) = &spec.leader {
        args.extend(["--rendezvous-host".into(), host.into(), "--rendezvous-port".into(), port.to_string().into()]);
    }
    if let Some(port) = spec.agent_port {
        // The pod's container is HyperPod's agent: rankvisor's agent mode serves its API.
        args.extend(["--agent".into(), "hyperpod".into(), "--agent-addr".into(), format!("127.0.0.1:{port}").into()]);
    } else if settings.restart_scope == rankvisor_core::policy::RestartScope::Job {
        args.push("--restart-scope".into());
        args.push("job".into());
    }
    args.push("--termination-log".into());
    args.push(files.termination_log.as_os_str().to_owned());
    if settings.node_health {
        let mut source = OsString::from("file:");
        source.push(files.node_labels.as_os_str());
        args.push("--node-health".into());
        args.push(source);
    }
    args.push("--".into());
    args.extend(spec.command.iter().map(OsString::from));
    args
}

/// Whether the dry-run process's own environment variable `name` is one the operator sets, and
/// so must not leak into a replica: as in a pod, the rank contract comes only from the manifest.
pub(crate) fn is_operator_managed_var(name: &str) -> bool {
    const EXACT: [&str; 9] = [
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "NODE_RANK",
    ];
    EXACT.contains(&name) || name.starts_with("PET_") || name.starts_with("TORCHELASTIC_")
}

/// A status line that is not the launcher's JSON.
#[derive(Debug, thiserror::Error)]
#[error("unreadable status line {line:?} from the launcher: {source}")]
pub(crate) struct StatusLineError {
    /// The line (cut short if long).
    pub line: String,
    /// The JSON error.
    pub source: serde_json::Error,
}

/// Read one `--status-fd` line: the launcher's [`LocalStatus`], the same type it published.
pub(crate) fn parse_status_line(line: &str) -> Result<LocalStatus, StatusLineError> {
    serde_json::from_str(line).map_err(|source| StatusLineError { line: line.chars().take(200).collect(), source })
}

/// Follows one launcher's status lines and says what the kubelet would have seen.
///
/// A launcher restarting with no backoff goes from one `Running` to the next without a
/// `Restarting` line, so a new restart count on a `Running` line also means the previous run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StatusTracker {
    /// The restart count of the run in progress, if a child runs.
    run: Option<u32>,
    /// The running child's pid, from the latest line.
    child_pid: Option<i32>,
    /// A final state was reported: the launcher is about to exit.
    ended: bool,
    /// When the latest job's stacks shown were gathered (the master's, on a hang).
    job_stacks_at: Option<String>,
    /// The master's stragglers already shown.
    stragglers_seen: Vec<NamedStraggler>,
    /// The agent's state (HyperPod) in the latest line.
    agent: Option<rankvisor_core::status::AgentState>,
}

impl StatusTracker {
    /// The line to print for a job's stacks newly in `line` (the master gathered them on a hang,
    /// before the job-scope restart): why, and the groups, largest first.
    pub(crate) fn new_job_stacks(&mut self, line: &LocalStatus) -> Option<String> {
        let job = line.job_stacks.as_ref()?;
        if self.job_stacks_at.as_deref() == Some(job.taken_at.as_str()) {
            return None;
        }
        self.job_stacks_at = Some(job.taken_at.clone());
        Some(format!("job stacks ({}): {}", rankvisor_core::untrusted::escape(&job.why), job.summary))
    }

    /// Whether the agent's state (HyperPod) in a line differs from the previous line's.
    pub(crate) fn agent_changed(&mut self, agent: Option<rankvisor_core::status::AgentState>) -> bool {
        agent.is_some() && std::mem::replace(&mut self.agent, agent) != agent
    }

    /// The stragglers newly named in `line` (the master's), oldest first.
    pub(crate) fn new_stragglers(&mut self, line: &LocalStatus) -> Vec<NamedStraggler> {
        let new: Vec<NamedStraggler> =
            line.stragglers.iter().filter(|s| !self.stragglers_seen.contains(s)).cloned().collect();
        self.stragglers_seen.clone_from(&line.stragglers);
        new
    }

    /// The events one status line of `pod`'s launcher means, in order.
    pub(crate) fn observe(&mut self, pod: ReplicaId, line: &LocalStatus) -> Vec<ClusterEvent> {
        self.child_pid = line.child_pid;
        let exit = line.last_exit;
        let ended = |will_restart: bool, restart_count: u32| {
            exit.map(|exit| ClusterEvent::ChildExited { pod, exit, will_restart, restart_count })
        };
        let mut events = Vec::new();
        match line.state {
            ReplicaState::Running => {
                match self.run {
                    Some(n) if n == line.restart_count => {}
                    Some(n) => {
                        events.extend(ended(true, n));
                        events.push(ClusterEvent::ChildRunning { pod, restart_count: line.restart_count });
                    }
                    None => events.push(ClusterEvent::ChildRunning { pod, restart_count: line.restart_count }),
                }
                self.run = Some(line.restart_count);
            }
            ReplicaState::Restarting => {
                let generation_stop = line.last_exit_reason == Some(ExitReason::NewGeneration);
                if let Some(n) = self.run.take() {
                    if !generation_stop {
                        events.extend(ended(true, n));
                    }
                }
            }
            state if state.is_final() => {
                self.ended = true;
                if let Some(n) = self.run.take() {
                    events.extend(ended(false, n));
                }
            }
            // Pending, Rendezvous, Stopping: the container's state is unchanged.
            _ => {}
        }
        events
    }

    /// The running child's pid (its process group), if one runs. A line naming pid 0 or 1 (or a
    /// negative one) names no child: signalling that group would reach the dry run's own group or
    /// every process.
    pub(crate) fn child_pid(&self) -> Option<Pid> {
        self.child_pid.filter(|p| *p > 1 && self.run.is_some()).map(Pid::from_raw)
    }

    /// Whether the launcher reported a final state (it will not start its child again).
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }
}

/// A node's labels as new: healthy.
pub(crate) fn healthy_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(DEFAULT_LABEL_KEY.to_string(), HEALTHY_NODE.to_string())])
}

/// The downward-API labels file for `labels`: `key="value"` lines, sorted, values quoted as Go's
/// `%q` quotes them (what the kubelet writes and `health::parse_labels_file` reads).
pub(crate) fn labels_file_text(labels: &BTreeMap<String, String>) -> String {
    labels.iter().map(|(k, v)| format!("{k}={}\n", go_quote(v))).collect()
}

/// Go's `strconv.Quote` for the characters a label value can hold.
fn go_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `pod | line`, the pod name padded to `width` so the output lines up as `docker compose`'s does.
pub(crate) fn prefixed(pod: &str, width: usize, line: &str) -> String {
    format!("{pod:<width$} | {line}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytorchjob::admission::parse_job;
    use crate::pytorchjob::env::launch_spec;
    use rankvisor_core::exit::ExitHow;
    use rankvisor_core::health::parse_labels_file;
    use rankvisor_core::policy::RestartPolicy;

    const MASTER: ReplicaId = ReplicaId::MASTER;

    fn line(state: ReplicaState, restart_count: u32, last_exit: Option<ExitHow>, pid: Option<i32>) -> LocalStatus {
        LocalStatus { state, restart_count, last_exit, child_pid: pid, ..LocalStatus::default() }
    }

    #[test]
    fn a_job_s_stacks_are_shown_once_each() {
        let mut t = StatusTracker::default();
        let job = rankvisor_core::stacks::JobStacks {
            taken_at: "t1".into(),
            why: "replica 2: hung".into(),
            elapsed_ms: 3,
            groups: vec![],
            summary: "2 replicas (0, 1): wait_here (job.py:10); replica 2: slow_here (job.py:14)".into(),
            replicas: vec![],
        };
        let mut l = line(ReplicaState::Running, 0, None, Some(7));
        assert_eq!(t.new_job_stacks(&l), None);
        l.job_stacks = Some(job.clone());
        assert_eq!(
            t.new_job_stacks(&l).as_deref(),
            Some("job stacks (replica 2: hung): 2 replicas (0, 1): wait_here (job.py:10); replica 2: slow_here (job.py:14)")
        );
        assert_eq!(t.new_job_stacks(&l), None, "once");
        l.job_stacks = Some(rankvisor_core::stacks::JobStacks { taken_at: "t2".into(), ..job });
        assert!(t.new_job_stacks(&l).is_some(), "a later gathering is shown too");
    }

    #[test]
    fn an_agents_state_is_news_when_it_changes() {
        use rankvisor_core::status::AgentState::{Faulted, Ready, Running};
        let mut t = StatusTracker::default();
        assert!(!t.agent_changed(None), "not an agent");
        assert!(t.agent_changed(Some(Ready)));
        assert!(!t.agent_changed(Some(Ready)), "the same state again");
        assert!(t.agent_changed(Some(Running)));
        assert!(t.agent_changed(Some(Faulted)));
    }

    #[test]
    fn each_straggler_is_shown_once() {
        use rankvisor_core::rendezvous::straggler::Straggler;
        use rankvisor_core::status::straggler::keep;
        let named = |replica| {
            let s = Straggler { replica, value: 60.0, median: 100.0, relative: 0.6, points: 3 };
            s.named("n".into(), None, "t".into())
        };
        let mut t = StatusTracker::default();
        let mut l = line(ReplicaState::Running, 0, None, Some(7));
        assert_eq!(t.new_stragglers(&l), vec![]);
        keep(&mut l.stragglers, named(2));
        assert_eq!(t.new_stragglers(&l).iter().map(|s| s.replica).collect::<Vec<_>>(), [2]);
        assert_eq!(t.new_stragglers(&l), vec![], "once");
        keep(&mut l.stragglers, named(3));
        assert_eq!(t.new_stragglers(&l).iter().map(|s| s.replica).collect::<Vec<_>>(), [3], "only the new one");
    }

    fn settings() -> LauncherSettings {
        LauncherSettings {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_millis(1500),
            grace_period: Duration::from_secs(5),
            log_level: "warn".into(),
            node_health: false,
            restart_scope: rankvisor_core::policy::RestartScope::Replica,
        }
    }

    #[test]
    fn args_carry_the_policy_the_limit_the_timing_and_the_command() {
        let job = parse_job(include_str!("../../../../examples/pytorchjob.yaml"), "j.yaml").unwrap();
        let spec = launch_spec(&job, MASTER, 23456).unwrap();
        let files = LauncherFiles {
            status_fd: 7,
            node_labels: Path::new("/w/pytest-master-0.labels"),
            termination_log: Path::new("/w/pytest-master-0.termination-log"),
            http_port: None,
        };
        let args: Vec<String> =
            launcher_args(&spec, &settings(), files).into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(
            args,
            [
                "--restart-policy",
                "OnFailure",
                "--backoff-limit",
                "3",
                "--backoff-initial",
                "1s",
                "--backoff-max",
                "1500ms",
                "--grace-period",
                "5s",
                "--status-fd",
                "7",
                "--log-level",
                "warn",
                "--kube-events",
                "off",
                "--http-addr",
                "off",
                "--termination-log",
                "/w/pytest-master-0.termination-log",
                "--",
                "sh",
                "-c",
                "sleep 3"
            ]
        );

        let mut no_limit = spec.clone();
        no_limit.backoff_limit = None;
        no_limit.restart_policy = RestartPolicy::ExitCode;
        let with_health = LauncherSettings { node_health: true, ..settings() };
        let args: Vec<String> =
            launcher_args(&no_limit, &with_health, files).into_iter().map(|a| a.into_string().unwrap()).collect();
        let after = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
        assert_eq!(after("--backoff-limit"), Some(u32::MAX.to_string()), "the kubelet never stops restarting");
        assert_eq!(after("--restart-policy").as_deref(), Some("ExitCode"));
        assert_eq!(after("--node-health").as_deref(), Some("file:/w/pytest-master-0.labels"));
        assert!(args.iter().position(|a| a == "--node-health") < args.iter().position(|a| a == "--"));

        let job_scope = LauncherSettings { restart_scope: rankvisor_core::policy::RestartScope::Job, ..settings() };
        let served = LauncherFiles { http_port: Some(40001), ..files };
        let led = LaunchSpec { leader: Some(("127.0.0.1".into(), 40002)), ..spec.clone() };
        let args: Vec<String> =
            launcher_args(&led, &job_scope, served).into_iter().map(|a| a.into_string().unwrap()).collect();
        let after = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
        assert_eq!(after("--rendezvous-host").as_deref(), Some("127.0.0.1"), "Worker 0 on this machine");
        assert_eq!(after("--rendezvous-port").as_deref(), Some("40002"));
        assert_eq!(after("--restart-scope").as_deref(), Some("job"));
        assert_eq!(after("--http-addr").as_deref(), Some("127.0.0.1:40001"));
    }

    #[test]
    fn only_the_contracts_variables_are_held_back() {
        for name in ["RANK", "MASTER_PORT", "PET_NNODES", "PET_RDZV_ENDPOINT", "TORCHELASTIC_RESTART_COUNT"] {
            assert!(is_operator_managed_var(name), "{name}");
        }
        for name in ["PATH", "HOME", "RANKVISOR_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "RANKING", "PETS"] {
            assert!(!is_operator_managed_var(name), "{name}");
        }
    }

    #[test]
    fn status_lines_parse_and_ignore_extra_fields() {
        let text = r#"{"state":"Restarting","restart_count":1,"generation":0,"last_exit":{"exited":1},"last_exit_reason":null,"child_pid":null,"hang_detections":0,"progress":null,"new":1}"#;
        assert_eq!(parse_status_line(text).unwrap(), line(ReplicaState::Restarting, 1, Some(ExitHow::Exited(1)), None));
        // The line is what the launcher's status publishes, read back as the same type.
        let published = LocalStatus {
            state: ReplicaState::Failed,
            last_exit: Some(ExitHow::Signaled(rankvisor_core::signo::Signo::KILL)),
            last_exit_reason: Some(ExitReason::Hung),
            ..LocalStatus::default()
        };
        let text = serde_json::to_string(&published).unwrap();
        assert_eq!(parse_status_line(&text).unwrap(), published);
        let e = parse_status_line(r#"{"state":"Failed","restart_count":0}"#).unwrap_err();
        assert!(e.to_string().contains("missing field `generation`"), "{e}");
        let e = parse_status_line("{\"state\":\"Dancing\"}").unwrap_err();
        assert!(e.to_string().starts_with("unreadable status line \"{\\\"state\\\":\\\"Dancing\\\"}\""), "{e}");
    }

    #[test]
    fn a_run_a_restart_and_a_final_failure() {
        let mut t = StatusTracker::default();
        let e1 = Some(ExitHow::Exited(1));
        assert_eq!(t.observe(MASTER, &line(ReplicaState::Pending, 0, None, None)), vec![]);
        assert_eq!(
            t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(10))),
            vec![ClusterEvent::ChildRunning { pod: MASTER, restart_count: 0 }]
        );
        assert_eq!(t.child_pid(), Some(Pid::from_raw(10)));
        assert_eq!(t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(10))), vec![], "no change");
        assert_eq!(
            t.observe(MASTER, &line(ReplicaState::Restarting, 1, e1, None)),
            vec![ClusterEvent::ChildExited {
                pod: MASTER,
                exit: ExitHow::Exited(1),
                will_restart: true,
                restart_count: 0
            }],
            "RESTARTS goes up when the container runs again, not when it fails"
        );
        assert_eq!(t.child_pid(), None);
        assert_eq!(
            t.observe(MASTER, &line(ReplicaState::Running, 1, e1, Some(11))),
            vec![ClusterEvent::ChildRunning { pod: MASTER, restart_count: 1 }]
        );
        assert_eq!(t.child_pid(), Some(Pid::from_raw(11)));
        assert!(!t.ended());
        assert_eq!(
            t.observe(MASTER, &line(ReplicaState::Failed, 1, e1, None)),
            vec![ClusterEvent::ChildExited {
                pod: MASTER,
                exit: ExitHow::Exited(1),
                will_restart: false,
                restart_count: 1
            }]
        );
        assert_eq!(t.child_pid(), None);
        assert!(t.ended());
    }

    /// A status line is input from outside: a child pid of 1, 0 or below would turn the `fail:`
    /// injection's and the kill's group SIGKILL into one to every process or to the dry run's own.
    #[test]
    fn a_status_line_naming_pid_one_zero_or_below_names_no_child() {
        for pid in [1, 0, -1, -4242] {
            let mut t = StatusTracker::default();
            t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(pid)));
            assert_eq!(t.child_pid(), None, "pid {pid}");
        }
    }

    #[test]
    fn a_restart_without_backoff_skips_restarting() {
        let mut t = StatusTracker::default();
        t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(10)));
        assert_eq!(
            t.observe(
                MASTER,
                &line(ReplicaState::Running, 1, Some(ExitHow::Signaled(rankvisor_core::signo::Signo::KILL)), Some(11))
            ),
            vec![
                ClusterEvent::ChildExited {
                    pod: MASTER,
                    exit: ExitHow::Signaled(rankvisor_core::signo::Signo::KILL),
                    will_restart: true,
                    restart_count: 0
                },
                ClusterEvent::ChildRunning { pod: MASTER, restart_count: 1 },
            ]
        );
    }

    #[test]
    fn stopping_changes_nothing_until_the_end() {
        let mut t = StatusTracker::default();
        t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(10)));
        assert_eq!(t.observe(MASTER, &line(ReplicaState::Stopping, 0, None, Some(10))), vec![]);
        assert_eq!(t.child_pid(), Some(Pid::from_raw(10)), "a stopping child is still there to kill");
        assert_eq!(
            t.observe(
                MASTER,
                &line(
                    ReplicaState::NodeUnhealthy,
                    0,
                    Some(ExitHow::Signaled(rankvisor_core::signo::Signo::TERM)),
                    None
                )
            ),
            vec![ClusterEvent::ChildExited {
                pod: MASTER,
                exit: ExitHow::Signaled(rankvisor_core::signo::Signo::TERM),
                will_restart: false,
                restart_count: 0
            }]
        );
    }

    #[test]
    fn final_states_without_a_run_leave_it_to_the_launchers_exit() {
        // The command was not found (127) or the node was unhealthy before the start: no child
        // ever ran, so only the launcher's exit tells the controller.
        let mut t = StatusTracker::default();
        assert_eq!(t.observe(MASTER, &line(ReplicaState::Failed, 0, None, None)), vec![]);
        // Stopped while waiting out a backoff: the exit was already reported.
        let mut t = StatusTracker::default();
        t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(10)));
        t.observe(MASTER, &line(ReplicaState::Restarting, 1, Some(ExitHow::Exited(1)), None));
        assert_eq!(t.observe(MASTER, &line(ReplicaState::Failed, 1, Some(ExitHow::Exited(1)), None)), vec![]);
    }

    #[test]
    fn labels_files_read_back_as_written() {
        let mut labels = healthy_labels();
        assert_eq!(labels_file_text(&labels), "sagemaker.amazonaws.com/node-health-status=\"Schedulable\"\n");
        labels.insert("a/b".into(), "q\"uote\\ tab\t nl\n bell\u{7} é".into());
        let text = labels_file_text(&labels);
        assert!(text.contains(r#"a/b="q\"uote\\ tab\t nl\n bell\x07 é""#), "{text}");
        assert_eq!(parse_labels_file(&text).unwrap(), labels);
    }

    #[test]
    fn prefixes_line_up() {
        assert_eq!(prefixed("pytest-master-0", 16, "hi"), "pytest-master-0  | hi");
        assert_eq!(prefixed("pytest-worker-10", 16, "hi"), "pytest-worker-10 | hi");
    }

    #[test]
    fn a_generation_stop_is_not_a_failure_the_kubelet_sees() {
        let mut t = StatusTracker::default();
        assert_eq!(t.observe(MASTER, &line(ReplicaState::Running, 0, None, Some(10))).len(), 1);
        let mut stop =
            line(ReplicaState::Restarting, 1, Some(ExitHow::Signaled(rankvisor_core::signo::Signo::TERM)), None);
        stop.last_exit_reason = Some(ExitReason::NewGeneration);
        assert!(t.observe(MASTER, &stop).is_empty(), "no ChildExited for a job-scope stop");
        let events = t.observe(
            MASTER,
            &line(ReplicaState::Running, 1, Some(ExitHow::Signaled(rankvisor_core::signo::Signo::TERM)), Some(11)),
        );
        assert!(matches!(events.as_slice(), [ClusterEvent::ChildRunning { restart_count: 1, .. }]), "{events:?}");
    }
}
