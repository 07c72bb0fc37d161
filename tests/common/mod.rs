//! Shared harness for the black-box tests: runs the real `rankvisor` binary (optionally as PID 1 of a
//! fresh PID namespace), captures its output and `--status-fd` lines in a per-test directory, and
//! offers handshakes (files, status lines, /proc scans) with overall timeouts instead of sleeps.

#![allow(dead_code)]

use serde_json::Value;
use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod dry_run;
mod ports;
pub use ports::consecutive_ports;

/// A loopback port for a server the test starts, not handed to any other test process (see
/// `ports.rs`: locked, and outside the kernel's ephemeral range).
pub fn free_port() -> u16 {
    consecutive_ports(1)
}

/// A port P with P+1 free too (MASTER_PORT and the rendezvous on MASTER_PORT+1).
pub fn free_port_pair() -> u16 {
    consecutive_ports(2)
}

/// The PID 1 binary under test: `RANKVISOR_TEST_BIN`, which `scripts/test.sh` sets to the lean
/// `rankvisor` built on its own (`cargo build -p rankvisor`: no other workspace member's features,
/// the image's build), with `rankvisor-dry-run` beside it; else this package's test build.
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| match std::env::var("RANKVISOR_TEST_BIN") {
        Ok(p) if !p.is_empty() => p,
        _ => env!("CARGO_BIN_EXE_rankvisor").to_string(),
    })
}

/// How long any single wait may take before the test fails instead of hanging.
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// Variables of the rank contract and rankvisor's own configuration, removed from every run so the
/// environment of whoever runs the tests cannot leak into them.
const SCRUBBED: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_NODE_RANK",
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_STANDALONE",
    "PET_RDZV_ENDPOINT",
    "TORCHELASTIC_RESTART_COUNT",
    // Inside a pod these point rankvisor at the in-cluster API server (a test that wants one sets
    // them itself).
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
];

/// Test set-up variables that name where a component is (not rankvisor configuration): passed
/// through to rankvisor, and so to the replicas of a dry run.
const SET_UP_VARS: &[&str] = &["RANKVISOR_TORCH_VENV", "RANKVISOR_SMOKE_TRAIN"];

/// Remove the rank contract and rankvisor's configuration variables of whoever runs the tests from
/// `c`'s environment (set-up variables such as `RANKVISOR_TEST_*` stay).
pub fn hermetic(c: &mut Command) -> &mut Command {
    for k in SCRUBBED {
        c.env_remove(k);
    }
    for (k, _) in std::env::vars() {
        if k.starts_with("RANKVISOR_") && !k.starts_with("RANKVISOR_TEST_") && !SET_UP_VARS.contains(&k.as_str()) {
            c.env_remove(k);
        }
    }
    c
}

/// The one way a test starts the binary under test directly (`rankvisor dry-run`, `check-node`,
/// ...): a command with a hermetic environment. Supervising runs use [`Rv`], which builds on it.
pub fn rankvisor() -> Command {
    let mut c = Command::new(bin());
    hermetic(&mut c);
    c
}

/// A file (or, with "", the root) of this repository: examples, manifests, scripts.
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A scratch directory unique to one test (a `tempfile` directory named after it), removed
/// afterwards unless the test failed.
pub struct TestDir {
    /// None only while it is dropped.
    dir: Option<tempfile::TempDir>,
}

impl TestDir {
    /// A fresh directory named after the test.
    pub fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("rankvisor-it-{name}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("create a test dir for {name}: {e}"));
        // The mode a plain mkdir gives (tempfile's is 0700): containers' and pods' processes,
        // whatever their user, read the bind-mounted files there.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod test dir");
        Self { dir: Some(dir) }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("a live test dir").path()
    }

    /// A path inside the directory.
    pub fn join(&self, p: &str) -> PathBuf {
        self.path().join(p)
    }

    /// The path inside the directory as a string, for shell scripts.
    pub fn file(&self, p: &str) -> String {
        self.join(p).to_string_lossy().into_owned()
    }

    /// Write a file (a manifest, say) into the directory and return its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// Write an executable shell script and return its path.
    pub fn script(&self, name: &str, body: &str) -> String {
        let p = self.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod script");
        p.to_string_lossy().into_owned()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        // tempfile removes it when dropped; a failed test's stays for inspection.
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("keeping {} for inspection", dir.keep().display());
            }
        }
    }
}

/// The words that run a command as PID 1 of a fresh PID namespace with a /proc of its own, the
/// namespace killed when `unshare` is.
pub const UNSHARE_PID1: [&str; 5] = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"];

/// `sh -c script` as PID 1 of a fresh PID namespace ([`UNSHARE_PID1`]), stdin from /dev/null, in a
/// process group of its own: the negative controls, whose PID 1 is not rankvisor (rankvisor as
/// PID 1 is [`Rv::pid1`]).
pub fn sh_as_pid1(script: &str) -> Command {
    let mut c = Command::new(UNSHARE_PID1[0]);
    c.args(&UNSHARE_PID1[1..]).args(["sh", "-c", script]).stdin(Stdio::null()).process_group(0);
    c
}

/// A rankvisor invocation being built.
pub struct Rv {
    dir: PathBuf,
    args: Vec<OsString>,
    status_fd: bool,
    command: Vec<OsString>,
    env: Vec<(String, String)>,
    pid1: bool,
    ignored: Vec<i32>,
    blocked: Vec<i32>,
    wrapper: Option<String>,
    binary: Option<PathBuf>,
}

impl Rv {
    /// rankvisor with `--status-fd 3` (lines land in `status.jsonl` of `dir`).
    pub fn new(dir: &TestDir) -> Self {
        Self {
            dir: dir.path().to_path_buf(),
            args: Vec::new(),
            status_fd: true,
            command: Vec::new(),
            env: Vec::new(),
            pid1: false,
            ignored: Vec::new(),
            blocked: Vec::new(),
            wrapper: None,
            binary: None,
        }
    }

    /// Run this rankvisor binary instead of the test build's ([`bin`]).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Run rankvisor as PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc`).
    pub fn pid1(mut self) -> Self {
        self.pid1 = true;
        self
    }

    /// Do not pass `--status-fd 3`.
    pub fn without_status_fd(mut self) -> Self {
        self.status_fd = false;
        self
    }

    /// Add rankvisor options.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set a variable in rankvisor's environment.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Start rankvisor with this signal's disposition set to SIG_IGN (as `nohup` or a shell would).
    /// Set with the raw syscall, so glibc's reserved signals 32 and 33 can be ignored too.
    pub fn ignore_signal(mut self, sig: i32) -> Self {
        self.ignored.push(sig);
        self
    }

    /// Start rankvisor with this signal blocked.
    pub fn block_signal(mut self, sig: i32) -> Self {
        self.blocked.push(sig);
        self
    }

    /// Start rankvisor through `sh -c '<prefix>; exec rankvisor ...'`.
    pub fn shell_wrapper(mut self, prefix: &str) -> Self {
        self.wrapper = Some(prefix.into());
        self
    }

    /// The supervised command.
    pub fn cmd<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, cmd: I) -> Self {
        self.command = cmd.into_iter().map(Into::into).collect();
        self
    }

    /// Supervise `sh -c script`.
    pub fn sh(self, script: &str) -> Self {
        self.cmd(["sh", "-c", script])
    }

    /// Start it.
    pub fn spawn(self) -> Running {
        let stdout = self.dir.join("stdout");
        let stderr = self.dir.join("stderr");
        let status = self.dir.join("status.jsonl");
        let mut argv: Vec<OsString> = vec![self.binary.clone().map_or_else(|| bin().into(), PathBuf::into_os_string)];
        if self.status_fd {
            argv.extend(["--status-fd".into(), "3".into()]);
        }
        argv.extend(self.args.iter().cloned());
        argv.push("--".into());
        argv.extend(self.command.iter().cloned());
        if let Some(prefix) = &self.wrapper {
            // sh -c 'prefix; exec "$0" "$@"' rankvisor args...
            let mut w: Vec<OsString> = vec!["sh".into(), "-c".into(), format!("{prefix}; exec \"$0\" \"$@\"").into()];
            w.extend(argv);
            argv = w;
        }
        if self.pid1 {
            let mut u: Vec<OsString> = UNSHARE_PID1.iter().map(OsString::from).collect();
            u.extend(argv);
            argv = u;
        }
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        hermetic(&mut c);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c.stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        // Our own group, so a stuck run can be killed as a whole.
        c.process_group(0);
        let status_file = std::fs::File::create(&status).expect("status file");
        let status_fd = std::os::fd::AsRawFd::as_raw_fd(&status_file);
        let ignored = self.ignored.clone();
        // SAFETY: sigset functions only write the set.
        let mut blocked: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe { libc::sigemptyset(&mut blocked) };
        for &s in &self.blocked {
            // SAFETY: as above.
            unsafe { libc::sigaddset(&mut blocked, s) };
        }
        // SAFETY: only async-signal-safe calls (dup2, fcntl, rt_sigaction, sigprocmask) between fork
        // and exec.
        unsafe {
            c.pre_exec(move || {
                if status_fd == 3 {
                    libc::fcntl(3, libc::F_SETFD, 0);
                } else if libc::dup2(status_fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for &s in &ignored {
                    // The kernel's struct sigaction: handler, flags, then zeroes (restorer, mask).
                    let act: [usize; 4] = [libc::SIG_IGN, 0, 0, 0];
                    if libc::syscall(libc::SYS_rt_sigaction, s, act.as_ptr(), std::ptr::null::<usize>(), 8) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                libc::sigprocmask(libc::SIG_SETMASK, &blocked, std::ptr::null_mut());
                Ok(())
            });
        }
        let started = Instant::now();
        let child = c.spawn().expect("spawn rankvisor");
        drop(status_file);
        Running { child: Some(child), pid1: self.pid1, stdout, stderr, status, started }
    }

    /// Start it and wait for it to exit.
    pub fn run(self) -> Finished {
        self.spawn().wait()
    }
}

/// A running rankvisor (or the `unshare` around it).
pub struct Running {
    child: Option<Child>,
    pid1: bool,
    stdout: PathBuf,
    stderr: PathBuf,
    status: PathBuf,
    /// When it was started.
    pub started: Instant,
}

/// How a run ended and what it printed.
#[derive(Debug)]
pub struct Finished {
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// rankvisor's stdout (the child's, since it is inherited).
    pub stdout: String,
    /// rankvisor's stderr (its log lines and the child's stderr).
    pub stderr: String,
    /// Every `--status-fd` line.
    pub statuses: Vec<Value>,
    /// From spawn to reaped.
    pub elapsed: Duration,
}

impl Finished {
    /// The exit code, failing the test with the output when it did not exit normally.
    pub fn code(&self) -> i32 {
        match self.code {
            Some(c) => c,
            None => panic!("rankvisor was killed by signal {:?}\nstderr:\n{}", self.signal, self.stderr),
        }
    }

    /// Assert the exit code, showing stderr on mismatch.
    pub fn assert_code(&self, want: i32) {
        assert_eq!(
            self.code,
            Some(want),
            "exit status of rankvisor (signal {:?})\nstderr:\n{}",
            self.signal,
            self.stderr
        );
    }

    /// The last status line.
    pub fn last_status(&self) -> &Value {
        self.statuses.last().unwrap_or_else(|| panic!("no status line\nstderr:\n{}", self.stderr))
    }
}

impl Running {
    fn child(&self) -> &Child {
        self.child.as_ref().expect("still running")
    }

    /// The pid of the process we started (rankvisor, or `unshare` in PID 1 mode).
    pub fn outer_pid(&self) -> i32 {
        self.child().id() as i32
    }

    /// rankvisor's pid as this (host) namespace sees it.
    pub fn rankvisor_pid(&self) -> i32 {
        let outer = self.outer_pid();
        if !self.pid1 {
            return outer;
        }
        // unshare forks once and execs rankvisor: wait for that child to be rankvisor.
        wait_until("rankvisor to start under unshare", || {
            procs().into_iter().find(|p| p.ppid == outer && p.comm == "rankvisor").map(|p| p.pid)
        })
    }

    /// Send `sig` to rankvisor itself.
    pub fn signal(&self, sig: i32) {
        let pid = self.rankvisor_pid();
        // SAFETY: kill(2) has no memory-safety preconditions.
        let r = unsafe { libc::kill(pid, sig) };
        assert_eq!(r, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
    }

    /// Every complete status line so far.
    pub fn statuses(&self) -> Vec<Value> {
        read_statuses(&self.status)
    }

    /// Wait for a status line matching `pred` and return it.
    pub fn wait_status(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        wait_until(what, || self.statuses().into_iter().find(|v| pred(v)))
    }

    /// Its stderr so far (its log lines and the child's stderr).
    pub fn stderr(&self) -> String {
        read(&self.stderr)
    }

    /// How many lines of its stderr so far contain `needle`.
    pub fn log_lines(&self, needle: &str) -> usize {
        self.stderr().lines().filter(|l| l.contains(needle)).count()
    }

    /// Wait until its stderr has at least `count` lines containing `needle` (a log line as the
    /// event to wait for, never a sleep); their number then.
    pub fn wait_log(&self, needle: &str, count: usize) -> usize {
        wait_until(&format!("{count} line(s) with {needle:?} in rankvisor's stderr"), || {
            let n = self.log_lines(needle);
            (n >= count).then_some(n)
        })
    }

    /// Wait for it to exit (failing the test after `HANG_GUARD`).
    pub fn wait(self) -> Finished {
        self.wait_for(HANG_GUARD)
    }

    /// Wait at most `limit` for it to exit.
    pub fn wait_for(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let mut child = self.child.take().expect("still running");
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() >= deadline {
                kill_tree(child.id() as i32);
                let _ = child.wait();
                panic!(
                    "rankvisor did not exit within {limit:?}\nstderr:\n{}\nstatus:\n{}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default(),
                    std::fs::read_to_string(&self.status).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let elapsed = self.started.elapsed();
        Finished {
            code: status.code(),
            signal: status.signal(),
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
            statuses: read_statuses(&self.status),
            elapsed,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_tree(c.id() as i32);
            let _ = c.wait();
        }
    }
}

fn read_statuses(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Only complete lines: the writer may be half-way through the last one.
    let complete = match text.rfind('\n') {
        Some(i) => &text[..=i],
        None => "",
    };
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("status line is JSON"))
        .collect()
}

/// A new pseudo-terminal: (controller, terminal).
pub fn pty() -> (OwnedFd, OwnedFd) {
    let (mut controller, mut terminal) = (-1, -1);
    // SAFETY: openpty writes the two descriptors; the name, termios and winsize are not asked for.
    let r = unsafe {
        libc::openpty(&mut controller, &mut terminal, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty returned two open descriptors that nothing else owns.
    unsafe { (OwnedFd::from_raw_fd(controller), OwnedFd::from_raw_fd(terminal)) }
}

/// Poll `f` every 5 ms until it yields a value; fail the test after `HANG_GUARD`.
pub fn wait_until<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_until_for(what, HANG_GUARD, f)
}

/// Poll `f` every 5 ms until it yields a value; fail the test after `limit`.
pub fn wait_until_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait for a file to exist.
pub fn wait_file(path: &Path) {
    wait_until(&format!("{}", path.display()), || path.exists().then_some(()));
}

/// Read a file, or the empty string.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// One process as the host's /proc shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: i32,
    /// Its parent.
    pub ppid: i32,
    /// R, S, Z, ...
    pub state: char,
    /// Its command name.
    pub comm: String,
}

/// Parse /proc/PID/stat.
pub fn proc_stat(pid: i32) -> Option<Proc> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(line: &str) -> Option<Proc> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let pid = line[..open].trim().parse().ok()?;
    let comm = line[open + 1..close].to_string();
    let mut rest = line[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(Proc { pid, ppid, state, comm })
}

/// Every process on the host.
pub fn procs() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        proc_stat(pid)
    })
    .collect()
}

/// Every descendant of `root` (zombies included).
pub fn descendants(root: i32) -> Vec<Proc> {
    let all = procs();
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for c in all.iter().filter(|c| c.ppid == p && c.pid != root) {
            out.push(c.clone());
            stack.push(c.pid);
        }
    }
    out
}

/// The pids of `pid`'s living children (zombies left out).
pub fn children(pid: i32) -> Vec<i32> {
    procs().into_iter().filter(|p| p.ppid == pid && p.state != 'Z').map(|p| p.pid).collect()
}

/// The value of `key` in the environment `pid` was started with.
pub fn environ_var(pid: i32, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// True when some variable of the environment `pid` was started with contains `needle` (a run's
/// own directory, say: how a test finds every process of its run).
pub fn environ_mentions(pid: i32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// How many descriptors `pid` has open, while it exists.
pub fn fd_count(pid: i32) -> Option<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd")).ok().map(|d| d.count())
}

/// `pid`'s resident set (VmRSS) in bytes, while it exists.
pub fn rss_bytes(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|p| p.state != 'Z' && p.state != 'X')
}

/// SIGKILL `root` and everything below it (a stuck test must not leak processes).
pub fn kill_tree(root: i32) {
    for p in descendants(root) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(p.pid, libc::SIGKILL) };
    }
    // SAFETY: as above.
    unsafe { libc::kill(root, libc::SIGKILL) };
}

/// Shell-quote a path for a script.
pub fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A `rankvisor dry-run --http` running in the background, with the loopback port of each pod's
/// HTTP endpoint read from its `dry-run: <pod> serves http://127.0.0.1:PORT/...` notes. Stopped
/// with SIGINT (the dry run stops every replica in order) when dropped.
pub struct DryRunHttp {
    child: Child,
    ports: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u16>>>,
    /// The dry run's stdout (one JSON watch event per line).
    pub stdout: PathBuf,
}

impl DryRunHttp {
    /// `rankvisor dry-run --http --master-port 0 --output json --logs DIR EXTRA... MANIFEST`, with
    /// the replicas' output in `dir/logs` and the watch stream in `dir/watch.jsonl`.
    pub fn start(dir: &TestDir, manifest: &Path, extra: &[&str]) -> Self {
        Self::start_in(dir, manifest, extra, None)
    }

    /// `start`, with the dry run (so every replica) working in `cwd` when given.
    pub fn start_in(dir: &TestDir, manifest: &Path, extra: &[&str], cwd: Option<&Path>) -> Self {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).expect("logs dir");
        let stdout = dir.join("watch.jsonl");
        let mut cmd = rankvisor();
        // --master-port 0: a free port of its own, so dry runs of parallel tests do not collide.
        cmd.arg("dry-run").args(["--http", "--master-port", "0", "--output", "json", "--logs"]);
        cmd.arg(&logs).args(extra).arg(manifest);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        cmd.stdin(Stdio::null()).stdout(std::fs::File::create(&stdout).expect("watch file")).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn rankvisor dry-run");
        let stderr = child.stderr.take().expect("stderr piped");
        let ports = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let seen = ports.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let Some(rest) = line.strip_prefix("dry-run: ") else { continue };
                let Some((pod, url)) = rest.split_once(" serves http://127.0.0.1:") else { continue };
                if let Some(port) = url.split('/').next().and_then(|p| p.parse::<u16>().ok()) {
                    seen.lock().unwrap().insert(pod.to_string(), port);
                }
            }
        });
        Self { child, ports, stdout }
    }

    /// The HTTP port of `pod`, once the dry run has said it.
    pub fn port(&self, pod: &str) -> u16 {
        wait_until(&format!("the dry run to say {pod}'s HTTP port"), || self.ports.lock().unwrap().get(pod).copied())
    }

    /// The HTTP port of the first pod whose name `pick` accepts (a TrainJob's pods end in a
    /// suffix), once the dry run has said it.
    pub fn port_where(&self, what: &str, pick: impl Fn(&str) -> bool) -> u16 {
        wait_until(&format!("the dry run to say {what}'s HTTP port"), || {
            self.ports.lock().unwrap().iter().find(|(pod, _)| pick(pod)).map(|(_, port)| *port)
        })
    }

    /// Wait at most `limit` for the dry run to end on its own; its exit status.
    pub fn wait_for(&mut self, limit: Duration) -> std::process::ExitStatus {
        wait_until_for("the dry run to end", limit, || self.child.try_wait().expect("try_wait"))
    }
}

impl Drop for DryRunHttp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::SIGINT);
            let deadline = Instant::now() + HANG_GUARD;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET path` on 127.0.0.1:`port`: (status code, body), or None when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at(std::net::SocketAddr::from(([127, 0, 0, 1], port)), path)
}

/// `GET path` on `addr` (a container's address, say): (status code, body), or None when nothing
/// answers. The one HTTP client of the tests.
pub fn http_get_at(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// A tool the test drives (promtool, chromium), or a loud failure saying how to install it.
pub fn required_tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    found.unwrap_or_else(|| {
        panic!("{name} is not installed: run `bash scripts/setup-views.sh` (apt: prometheus, chromium)")
    })
}

/// A PyTorchJob for the monitoring tests, written into `dir`. Every trainer writes a JSON heartbeat
/// (`step` and a falling `loss`) every 0.2 s. The master hangs on its first start after 5 steps
/// (stops beating; its launcher has a 3 s hang timeout, 15 beats long, so a loaded machine does not
/// make a false hang), is restarted, then trains. The worker
/// with RANK 1 (`pytest-worker-0`) crash-loops (exit 1 after 0.5 s). The worker with RANK 2
/// (`pytest-worker-1`) trains. No backoffLimit: the restarts never fail the job. (Only the master
/// hangs: a manifest's env is per replica type, so the workers share one heartbeat file and one
/// worker's beats would hide another's hang.)
pub fn crashloop_and_hung_manifest(dir: &TestDir) -> PathBuf {
    let master_hb = dir.file("master-heartbeat.json");
    let worker_hb = dir.file("worker-heartbeat.json");
    let train = r#"i=0
                  while [ $i -lt 3000 ]; do
                    i=$((i + 1))
                    awk -v s=$i 'BEGIN { printf "{\"step\": %d, \"loss\": %.4f}\n", s, 2.5 / (1 + s / 10) + (s % 3) * 0.02 }' > "$RANKVISOR_HEARTBEAT_FILE.$$"
                    mv "$RANKVISOR_HEARTBEAT_FILE.$$" "$RANKVISOR_HEARTBEAT_FILE"
                    if [ $i = 5 ] && [ "$HANG_AT_FIRST_START" = yes ] && [ "$RANKVISOR_RESTART_COUNT" = 0 ]; then exec sleep 600; fi
                    sleep 0.2
                  done"#;
    let text = format!(
        r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pytest
  namespace: default
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox:1.37.0-glibc
              env:
                - {{name: RANKVISOR_HEARTBEAT_FILE, value: "{master_hb}"}}
                - {{name: RANKVISOR_HANG_TIMEOUT, value: "3s"}}
                - {{name: HANG_AT_FIRST_START, value: "yes"}}
              command:
                - sh
                - -c
                - |
                  {train}
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox:1.37.0-glibc
              env:
                - {{name: RANKVISOR_HEARTBEAT_FILE, value: "{worker_hb}"}}
              command:
                - sh
                - -c
                - |
                  if [ "$RANK" = 1 ]; then sleep 0.5; exit 1; fi
                  {train}
"#
    );
    dir.write("pytorchjob-crashloop-hung.yaml", &text)
}

/// A dry run of [`crashloop_and_hung_manifest`] in `dir` (backoff 200 ms to 400 ms, `--timeout
/// timeout`), once the master's `/job` shows the crash loop and the hang
/// ([`crashloop_and_hang_seen`]; `what` names that in the failure): the run and the master's port.
pub fn crashloop_and_hang_running(dir: &TestDir, timeout: &str, what: &str) -> (DryRunHttp, u16) {
    let manifest = crashloop_and_hung_manifest(dir);
    let run = DryRunHttp::start(
        dir,
        &manifest,
        &["--backoff-initial", "200ms", "--backoff-max", "400ms", "--timeout", timeout],
    );
    let master = run.port("pytest-master-0");
    wait_job(master, what, crashloop_and_hang_seen);
    (run, master)
}

/// The master's `/job` view, once `pred` holds for it.
pub fn wait_job(master_port: u16, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_until_for(what, Duration::from_secs(60), || {
        let (code, body) = http_get(master_port, "/job")?;
        let view: Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
        assert_ne!(view["phase"], "Failed", "the job failed while waiting for {what}: {view:#}");
        pred(&view).then_some(view)
    })
}

/// The job view shows the crash-looping worker (replica 1) restarted at least twice and the master
/// (replica 0) back from a hang (its last exit for `Hung`) and training, while the job is Running.
pub fn crashloop_and_hang_seen(view: &Value) -> bool {
    let r = &view["replicas"];
    view["phase"] == "Running"
        && r["1"]["restart_count"].as_u64().unwrap_or(0) >= 2
        && r["0"]["report"]["last_exit"]["reason"] == "Hung"
        && r["0"]["state"] == "Running"
        && r["0"]["report"]["progress"]["step"].as_u64().unwrap_or(0) >= 3
}
