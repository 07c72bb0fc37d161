//! One launcher process: how it is started (own process group, status pipe, log file) and the
//! task that owns it, relays its status lines and signals, and reports its exit.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use rankvisor_core::exit::{self, ExitHow};
use rankvisor_core::process::{signal_group, signal_pid};
use rankvisor_core::signo::Signo;

use super::launcher::{is_operator_managed_var, launcher_args, parse_status_line, LauncherFiles, LauncherSettings};
use super::output::{note, open_log};
use super::ports::free_loopback_port;
use super::workdir::WorkDir;
use crate::kubelet::launch::{LaunchSpec, DRY_RUN_MASTER_ADDR, DRY_RUN_NODE};
use crate::kubelet::replica::ReplicaId;
use crate::options::DryRunOptions;

/// How long to wait for a launcher's last status lines and output after it exited.
pub(super) const DRAIN_LIMIT: Duration = Duration::from_millis(500);

/// What a launcher's task reports to the loop.
#[derive(Debug)]
pub(super) struct LauncherReport {
    pub(super) pod: ReplicaId,
    pub(super) instance: u64,
    pub(super) what: LauncherNews,
}

#[derive(Debug)]
pub(super) enum LauncherNews {
    Status(Box<rankvisor_core::status::LocalStatus>),
    Unreadable(String),
    Exited(ExitHow),
    /// A HyperPod pod's agent state, read from its `GET /status`, its reason, and the read's number
    /// (the dry run's reads of all agents, in the order they were asked).
    AgentStatus(rankvisor_core::status::AgentState, Option<String>, u64),
}

/// Start one launcher: its own process group (the terminal's Ctrl-C reaches only the dry run,
/// which stops everyone in order), stdin from /dev/null, the status pipe on an inherited fd.
pub(super) fn spawn_launcher(
    opts: &DryRunOptions,
    settings: &LauncherSettings,
    workdir: &WorkDir,
    job_token: &str,
    spec: &LaunchSpec,
) -> std::io::Result<(Child, OwnedFd)> {
    let (status_read, status_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let status_write = above_stdio(status_write)?;
    let termination_log = workdir.termination_log(&spec.pod);
    let _ = std::fs::remove_file(&termination_log);
    let node_labels = workdir.labels(&spec.pod);
    let http_port = if opts.http { free_loopback_port() } else { None };
    if let Some(port) = http_port {
        note(&format!(
            "{} serves http://{DRY_RUN_MASTER_ADDR}:{port}/status (and /metrics, /readyz, /healthz)",
            spec.pod
        ));
    }
    let files = LauncherFiles {
        status_fd: status_write.as_raw_fd(),
        node_labels: &node_labels,
        termination_log: &termination_log,
        http_port,
    };
    let mut cmd = Command::new(&opts.rankvisor);
    cmd.args(launcher_args(spec, settings, files));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_operator_managed_var) {
            cmd.env_remove(name);
        }
    }
    // What the downward API gives a real pod (examples/k8s/pytorchjob.yaml asks for these): the
    // launcher names its job and itself from them. The container's own env comes after, and wins.
    cmd.env("POD_NAME", &spec.pod).env("POD_NAMESPACE", &spec.namespace).env("NODE_NAME", DRY_RUN_NODE);
    cmd.env("RANKVISOR_JOB_TOKEN", job_token);
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &spec.working_dir {
        cmd.current_dir(dir);
    }
    cmd.stdin(Stdio::null()).process_group(0).kill_on_drop(false);
    match &opts.logs {
        Some(dir) => {
            let log = open_log(&dir.join(format!("{}.log", spec.pod)))?;
            cmd.stdout(log.try_clone()?).stderr(log);
        }
        None => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    let fd = status_write.as_raw_fd();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (fcntl, prctl) on plain integers; no allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            // The launcher inherits the status pipe's write end (it marks it close-on-exec
            // again itself, so its child does not).
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A dry run killed outright still stops its launchers, gracefully.
            libc::prctl(libc::PR_SET_PDEATHSIG, Signo::TERM.raw(), 0, 0, 0);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(status_write);
    Ok((child, status_read))
}

/// `fd` itself, or a copy numbered 3 or more: a dry run started with a standard stream closed
/// gets pipes numbered 0-2, which the launcher's own stdio would overwrite.
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on an open descriptor; the new descriptor is owned only by the OwnedFd below.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `copy` is a fresh, open descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// The `fail:` injection: SIGKILL to the training process group, as a crash or the OOM killer.
pub(super) fn fail_child(pod: &str, pid: Pid) {
    note(&format!("injected: {pod}'s training process fails (SIGKILL to its process group {pid})"));
    if let Err(e) = signal_group(pid, Signo::KILL) {
        note(&format!("injection fail: cannot SIGKILL {pod}'s process group {pid}: {e}"));
    }
}

/// A launcher's pid, while it is not reaped (None once it is, or if the OS gave none).
pub(super) fn launcher_pid(child: &Child) -> Option<Pid> {
    child.id().and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw)
}

/// The task that owns one launcher process.
pub(super) struct LauncherTask {
    pub(super) pod: ReplicaId,
    pub(super) instance: u64,
    pub(super) reports: mpsc::UnboundedSender<LauncherReport>,
}

type StatusLines = Lines<BufReader<pipe::Receiver>>;

impl LauncherTask {
    fn send(&self, what: LauncherNews) {
        let _ = self.reports.send(LauncherReport { pod: self.pod, instance: self.instance, what });
    }

    fn send_line(&self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        match parse_status_line(line) {
            Ok(status) => self.send(LauncherNews::Status(Box::new(status))),
            Err(e) => self.send(LauncherNews::Unreadable(e.to_string())),
        }
    }

    /// Relay status lines and signals until the launcher exits, then its last lines, then the exit.
    pub(super) async fn follow(
        self,
        mut child: Child,
        status_pipe: OwnedFd,
        mut signals: mpsc::UnboundedReceiver<Signo>,
    ) {
        let pid = launcher_pid(&child);
        let mut lines: Option<StatusLines> = match pipe::Receiver::from_owned_fd(status_pipe) {
            Ok(r) => Some(BufReader::new(r).lines()),
            Err(e) => {
                self.send(LauncherNews::Unreadable(format!("cannot read the status pipe: {e}")));
                None
            }
        };
        let mut signals_open = true;
        let status = loop {
            tokio::select! {
                biased;
                line = next_line(&mut lines) => match line {
                    Some(line) => self.send_line(&line),
                    None => lines = None,
                },
                sig = signals.recv(), if signals_open => match (sig, pid) {
                    // The child has not been reaped (wait() has not returned), so the pid is still ours.
                    (Some(sig), Some(pid)) => { let _ = signal_pid(pid, sig); }
                    (Some(_), None) => {}
                    (None, _) => signals_open = false,
                },
                status = child.wait() => break status,
            }
        };
        if let Some(mut rest) = lines {
            let _ = tokio::time::timeout(DRAIN_LIMIT, async {
                while let Ok(Some(line)) = rest.next_line().await {
                    self.send_line(&line);
                }
            })
            .await;
        }
        let exit = match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => ExitHow::Exited(code),
                (None, Some(sig)) => match Signo::new(sig) {
                    Some(sig) => ExitHow::Signaled(sig),
                    None => ExitHow::Exited(exit::EXTERNAL_FAILURE),
                },
                (None, None) => ExitHow::Exited(exit::EXTERNAL_FAILURE),
            },
            Err(_) => ExitHow::Exited(exit::EXTERNAL_FAILURE),
        };
        self.send(LauncherNews::Exited(exit));
    }
}

/// The next status line; None at the end of the pipe; never ready once the pipe is gone.
async fn next_line(lines: &mut Option<StatusLines>) -> Option<String> {
    match lines {
        Some(l) => l.next_line().await.ok().flatten(),
        None => std::future::pending().await,
    }
}
