//! The chaos soak: the real dry run of `examples/chaos-job.yaml` (1 Master + 7 Workers, OnFailure,
//! backoffLimit 10000) runs for a bounded time while a seeded RNG applies one random fault every
//! few seconds, and after each step the invariants below are checked.
//!
//! Faults (kinds):
//! - `launcher-stop`: SIGSTOP a launcher, SIGCONT it 2-6 s later.
//! - `child-crash`: SIGKILL a training child (a launcher's child).
//! - `child-hang`: SIGSTOP a training child; the master's is caught by its hang timeout (killed,
//!   restarted); a worker's is hidden by its peers' beats on the shared heartbeat file, so it is
//!   SIGCONTed after hang-timeout + 8 s (a transient hang).
//! - `hostile-peer`: on the rendezvous port (MASTER_PORT+1): garbage bytes, a bogus hello (wrong
//!   job, index out of range, wrong count, wrong version, a live worker's identity without the
//!   job token's proof, an oversized line), or a silent connection held 5-20 s. The hellos are the
//!   project's own frames (`rendezvous::frame`), so a change of the wire format breaks the compile.
//! - `http-flood`: on a launcher's `--http` port: 40-120 parallel connections, half of them slow
//!   (a partial head, then held), half full GETs.
//! - `label-flip` / `pod-delete`: `--inject label:...` / `--inject delete:...` at random times (the
//!   dry run takes injections up front); a flip sets another key or rewrites the health key with
//!   its healthy value, so the node stays healthy.
//! - `launcher-kill`: kill -9 of a launcher from outside (the container's PID 1 killed): its
//!   training child must be gone before the dry run prints the container's end, and under
//!   OnFailure a new launcher runs in the same pod.
//!
//! Checks after every step (about once a second): the dry run is alive and printing; no zombie
//! below it for over 3 s, except below a process we stopped; its fd count and RSS, and each
//! launcher's, stay within bounds of the first minute's peak; every launcher seen to exit is
//! accounted for by a row of its pod; every child crash is followed by a row of its pod; a hung
//! master child is caught; a launcher SIGCONTed serves HTTP again. At the end: the dry run's exit
//! status and the job's last state are what the dry run's own operator rules (`Controller`) say
//! for the faults applied, and no process of the run is left over.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use rankvisor_core::exit::ExitHow;
use rankvisor_core::rendezvous::frame::{self, Frame, Hello};
use rankvisor_dryrun::{
    parse_job, ClusterAction, ClusterEvent, Controller, ControllerConfig, JobState, Outcome, PodStatus, ReplicaId,
    ReplicaType,
};
use serde_json::Value;

use crate::common::{
    children, descendants, environ_mentions, environ_var, fd_count, http_get, proc_stat, procs, rankvisor, repo_file,
    rss_bytes, TestDir,
};

const MIB: u64 = 1024 * 1024;
/// A killed launcher's processes must be gone within this, printed row or not.
const KILL_TEARDOWN: Duration = Duration::from_secs(15);
/// And a new launcher started in its pod (the kubelet's back-off is at most 10 s).
const KILL_RESTART: Duration = Duration::from_secs(30);
const ZOMBIE_GRACE: Duration = Duration::from_secs(3);
/// RANKVISOR_HANG_TIMEOUT in examples/chaos-job.yaml.
const HANG_TIMEOUT: Duration = Duration::from_secs(6);
/// How long a row of the pod may take to follow a crash or a launcher's exit.
const ROW_WITHIN: Duration = Duration::from_secs(15);
/// The job's replicas, as the dry run names them.
const REPLICAS: [&str; 8] =
    ["master-0", "worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5", "worker-6"];

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGSTOP a launcher, SIGCONT it 2-6 s later.
    LauncherStop,
    /// SIGKILL a launcher from outside.
    LauncherKill,
    /// SIGKILL a training child.
    ChildCrash,
    /// SIGSTOP a training child.
    ChildHang,
    /// A refused peer on the rendezvous port.
    HostilePeer,
    /// Many connections, half of them slow, on a launcher's HTTP port.
    HttpFlood,
    /// A node label rewritten (`--inject label:`), the node staying healthy.
    LabelFlip,
    /// A worker's pod deleted (`--inject delete:`).
    PodDelete,
}

impl Kind {
    /// Applied while the job runs, one at a time.
    pub const LIVE: [Kind; 6] =
        [Kind::LauncherStop, Kind::LauncherKill, Kind::ChildCrash, Kind::ChildHang, Kind::HostilePeer, Kind::HttpFlood];
    /// Given to the dry run up front (`--inject`).
    pub const UP_FRONT: [Kind; 2] = [Kind::LabelFlip, Kind::PodDelete];

    /// Its name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Kind::LauncherStop => "launcher-stop",
            Kind::LauncherKill => "launcher-kill",
            Kind::ChildCrash => "child-crash",
            Kind::ChildHang => "child-hang",
            Kind::HostilePeer => "hostile-peer",
            Kind::HttpFlood => "http-flood",
            Kind::LabelFlip => "label-flip",
            Kind::PodDelete => "pod-delete",
        }
    }
}

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the job runs (its children end then); at least 60 s (the first minute is the
    /// fd/RSS baseline).
    pub duration: Duration,
    /// Fixes the faults' kinds, targets and delays (process timing still varies between runs).
    pub seed: u64,
    /// Mean seconds between faults.
    pub interval: f64,
    /// No fault in the last part of the run.
    pub tail: Duration,
}

/// What a soak did and found.
#[derive(Debug, Default)]
pub struct Summary {
    /// Faults applied, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Checks passed, by name.
    pub checks: BTreeMap<&'static str, u32>,
    /// Every violation, in order.
    pub violations: Vec<String>,
    /// Lines for the report: the final state, the fd and RSS figures, the flood's answers.
    pub report: Vec<String>,
    /// The run's directory (the dry run's output and log, with the faults marked), kept when a
    /// check failed.
    pub workdir: PathBuf,
}

impl Summary {
    /// Faults applied in all.
    pub fn fault_total(&self) -> u32 {
        self.faults.values().sum()
    }

    /// Checks passed in all.
    pub fn check_total(&self) -> u32 {
        self.checks.values().sum()
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |m: &BTreeMap<&str, u32>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        writeln!(f, "---- chaos soak summary ----")?;
        for line in &self.report {
            writeln!(f, "{line}")?;
        }
        writeln!(f, "faults: {} (total {})", list(&self.faults), self.fault_total())?;
        writeln!(f, "checks passed: {} (total {})", list(&self.checks), self.check_total())?;
        if self.violations.is_empty() {
            return writeln!(f, "chaos soak: OK, no violation");
        }
        writeln!(f, "VIOLATIONS ({}):", self.violations.len())?;
        for v in &self.violations {
            writeln!(f, "  - {v}")?;
        }
        writeln!(
            f,
            "the dry run's output: {}/events.jsonl and dry-run.log (faults marked 'chaos')",
            self.workdir.display()
        )
    }
}

/// The seeded random source of one soak.
struct Dice(TestRng);

impl Dice {
    fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Dice(TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
    }

    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }

    /// Uniform in [lo, hi].
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.next_u64() % (hi - lo + 1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.0.next_u64() as usize % items.len()]
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.int(0, i as u64) as usize);
        }
    }
}

/// A fault, as the expected outcome needs it: which pod, and what happened to it.
#[derive(Debug, Clone, Copy)]
enum Applied {
    /// The training child was killed, or hung and then killed by its launcher's hang timeout.
    ChildEnded(ReplicaId),
    /// The launcher was killed from outside.
    LauncherKilled(ReplicaId),
    /// The pod was deleted (`--inject delete:`).
    PodDeleted(ReplicaId),
}

fn replica_id(name: &str) -> ReplicaId {
    match name.split_once('-') {
        Some(("master", i)) => ReplicaId { rtype: ReplicaType::Master, index: i.parse().unwrap() },
        Some(("worker", i)) => ReplicaId::worker(i.parse().unwrap()),
        _ => panic!("not a replica name: {name:?}"),
    }
}

/// `chaos-worker-3` -> `worker-3`.
fn pod_replica(pod: &str) -> Option<&'static str> {
    REPLICAS.iter().copied().find(|r| pod.strip_suffix(r).is_some_and(|rest| rest.ends_with('-')))
}

/// The job's outcome and the operator's reason, as the dry run's own controller decides it for
/// the faults applied (in order), every child then ending with 0 at the soak's end: the rules
/// that decide the real run, fed the trace this soak caused, instead of a second model of them.
/// Every crash and every hang counts as a restart (a worker's hang usually ends without one):
/// more restarts than happened, which only matters at backoffLimit, 10000 here.
fn expected_outcome(manifest: &str, applied: &[Applied]) -> (Outcome, String) {
    let job = parse_job(manifest, "chaos-job.yaml").expect("the soak's manifest is admitted");
    let mut m = Model {
        c: Controller::new(job, ControllerConfig::default()),
        now: Duration::ZERO,
        restarts: HashMap::new(),
        finished: None,
        queue: vec![ClusterEvent::Submitted],
        last_tick: None,
    };
    m.settle();
    for fault in applied {
        match *fault {
            Applied::ChildEnded(pod) => {
                let n = m.restarts.get(&pod).copied().unwrap_or(0);
                m.queue.push(ClusterEvent::ChildRunning { pod, restart_count: n + 1 });
                m.queue.push(ClusterEvent::ChildExited {
                    pod,
                    exit: ExitHow::Signaled(rankvisor_core::signo::Signo::KILL),
                    will_restart: true,
                    restart_count: n,
                });
                m.restarts.insert(pod, n + 1);
            }
            Applied::LauncherKilled(pod) => {
                m.queue.push(ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(137) })
            }
            Applied::PodDeleted(pod) => m.queue.push(ClusterEvent::PodDeleted { pod }),
        }
        m.settle();
    }
    // The soak's end: every child exits 0, then its launcher, the master's first.
    for pod in m.c.live_launchers() {
        let n = m.restarts.get(&pod).copied().unwrap_or(0);
        m.queue.push(ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(0) });
        m.queue.push(ClusterEvent::ChildExited {
            pod,
            exit: ExitHow::Exited(0),
            will_restart: false,
            restart_count: n,
        });
        m.settle();
    }
    let state = m.c.state();
    m.finished.unwrap_or_else(|| panic!("the controller decided no outcome (job state {state:?})"))
}

/// The dry run's controller driven as its event loop drives it, with launchers that do at once
/// what they are told (start, stop) and children that run until a fault or the soak's end.
struct Model {
    c: Controller,
    now: Duration,
    /// Each pod's launcher's own restart count.
    restarts: HashMap<ReplicaId, u32>,
    finished: Option<(Outcome, String)>,
    /// Events to deliver, the next one last.
    queue: Vec<ClusterEvent>,
    /// The due time of the last tick delivered.
    last_tick: Option<Duration>,
}

impl Model {
    /// Deliver the queued events and what they lead to, then the due ticks (a crashed
    /// container's restart after its back-off), until nothing is left to do.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            let event = match self.queue.pop() {
                Some(e) => e,
                // A tick the controller still asks for after it was delivered changes nothing.
                None => match self.c.next_tick() {
                    Some(t) if Some(t) != self.last_tick => {
                        self.last_tick = Some(t);
                        self.now = self.now.max(t);
                        ClusterEvent::Tick
                    }
                    _ => return,
                },
            };
            self.now += Duration::from_millis(1);
            let step = self.c.handle(self.now, event);
            let mut next = Vec::new();
            for action in step.actions {
                match action {
                    ClusterAction::StartLauncher { pod } => {
                        self.restarts.insert(pod, 0);
                        next.push(ClusterEvent::LauncherStarted { pod });
                        next.push(ClusterEvent::ChildRunning { pod, restart_count: 0 });
                    }
                    ClusterAction::StopPod { pod } => {
                        next.push(ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(143) })
                    }
                    ClusterAction::StopAll => next.extend(
                        self.c
                            .live_launchers()
                            .into_iter()
                            .map(|pod| ClusterEvent::LauncherExited { pod, status: ExitHow::Exited(143) }),
                    ),
                    ClusterAction::Finish { outcome, reason } => self.finished = Some((outcome, reason)),
                    ClusterAction::Unschedulable { .. } | ClusterAction::Note { .. } => {}
                }
            }
            // The queue pops from its end: keep the actions' order.
            self.queue.extend(next.into_iter().rev());
        }
        panic!("the controller does not settle");
    }
}

/// `examples/chaos-job.yaml` with its `# chaos:` lines rewritten: the children's end epoch and
/// the heartbeat files in `workdir`.
fn manifest(workdir: &Path, end_epoch: u64) -> String {
    let text = std::fs::read_to_string(repo_file("examples/chaos-job.yaml")).expect("examples/chaos-job.yaml");
    let mut marks = BTreeMap::new();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let Some((head, mark)) = line.split_once(" # chaos: ") else { return line.to_string() };
            let Some((indent, _)) = head.split_once("value: ") else { return line.to_string() };
            *marks.entry(mark.to_string()).or_insert(0) += 1;
            let value = match mark.split_once(' ') {
                None if mark == "end" => end_epoch.to_string(),
                Some(("heartbeat", who)) => workdir.join(format!("{who}.hb")).display().to_string(),
                _ => panic!("examples/chaos-job.yaml: unknown mark {mark:?}"),
            };
            format!("{indent}value: \"{value}\" # chaos: {mark}")
        })
        .collect();
    let want: BTreeMap<String, i32> =
        [("end", 2), ("heartbeat master", 1), ("heartbeat workers", 1)].map(|(k, n)| (k.to_string(), n)).into();
    assert_eq!(marks, want, "examples/chaos-job.yaml: the '# chaos:' marks");
    lines.join("\n") + "\n"
}

/// What the dry run printed: its watch events (stdout) and its log (stderr), each with the time
/// it was read; and what its log said about ports.
#[derive(Default)]
struct Output {
    events: Vec<(Instant, Value)>,
    notes: Vec<Instant>,
    http_ports: BTreeMap<&'static str, u16>,
    master_port: Option<u16>,
    bad_lines: Vec<String>,
}

/// One launcher killed from outside, until its checks are done.
struct Kill {
    at: Instant,
    replica: &'static str,
    pid: i32,
    /// Its training child, until its teardown was checked.
    child: Option<i32>,
}

struct Soak {
    opts: Options,
    dice: Dice,
    /// Held for the run: removed when the soak passed (renamed away first when it did not).
    _dir: TestDir,
    workdir: PathBuf,
    manifest_text: String,
    proc: Child,
    t0: Instant,
    out: Arc<Mutex<Output>>,
    log: Arc<Mutex<std::fs::File>>,
    summary: Summary,
    applied: Vec<Applied>,
    launchers: BTreeMap<i32, &'static str>,
    last_scan: Instant,
    exited: Vec<(Instant, &'static str, i32)>,
    pending_cont: Vec<(Instant, i32, String)>,
    stopped_launchers: BTreeMap<i32, &'static str>,
    resumed: Vec<(Instant, &'static str, i32)>,
    /// child pid -> (its replica, its launcher)
    hung: BTreeMap<i32, (&'static str, i32)>,
    master_hangs: Vec<Instant>,
    crashes: Vec<(Instant, &'static str)>,
    kills: Vec<Kill>,
    held: Vec<(Instant, TcpStream)>,
    quiet_since: Instant,
    zombie_since: BTreeMap<i32, Instant>,
    zombies_reported: Vec<i32>,
    baseline: BTreeMap<String, (usize, u64)>,
    peak: BTreeMap<String, (usize, u64)>,
    flood: (u32, u32),
    bag: Vec<Kind>,
}

/// Run one soak; its summary (violations included: the caller asserts).
pub fn run(opts: Options) -> Summary {
    assert!(opts.duration >= Duration::from_secs(60), "the first minute is the fd/RSS baseline");
    let mut soak = Soak::start(opts);
    soak.main_loop();
    soak.release_all();
    soak.finish();
    soak.summary.workdir = soak.workdir.clone();
    if !soak.summary.violations.is_empty() {
        // Keep the run's directory: TestDir removes it unless a test panics.
        let kept = soak.workdir.with_extension("kept");
        let _ = std::fs::rename(&soak.workdir, &kept);
        soak.summary.workdir = kept;
    }
    std::mem::take(&mut soak.summary)
}

impl Soak {
    fn start(opts: Options) -> Self {
        let mut dice = Dice::new(opts.seed);
        let dir = TestDir::new("chaos-soak");
        let workdir = dir.path().to_path_buf();
        let end_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
            + opts.duration.as_secs();
        let manifest_text = manifest(&workdir, end_epoch);
        let manifest_path = dir.write("chaos-job.yaml", &manifest_text);
        let mut summary = Summary::default();
        let mut applied = Vec::new();
        let injections = up_front(&opts, &mut dice, &mut summary, &mut applied);
        let mut cmd = rankvisor();
        cmd.args(["dry-run", "--output", "json", "--http", "--master-port", "0", "--launcher-log-level", "info"])
            .arg("--timeout")
            .arg(format!("{}s", opts.duration.as_secs() + 120));
        for spec in &injections {
            cmd.args(["--inject", spec]);
        }
        cmd.arg(&manifest_path)
            .current_dir(&workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        eprintln!(
            "chaos: seed {} (replay: bash scripts/chaos.sh --duration {} --seed {}); workdir {}",
            opts.seed,
            opts.duration.as_secs(),
            opts.seed,
            workdir.display()
        );
        let log = Arc::new(Mutex::new(std::fs::File::create(workdir.join("dry-run.log")).expect("dry-run.log")));
        let mut proc = cmd.spawn().expect("start rankvisor dry-run");
        let t0 = Instant::now();
        let out = Arc::new(Mutex::new(Output::default()));
        let stdout = proc.stdout.take().unwrap();
        let events_file = std::fs::File::create(workdir.join("events.jsonl")).expect("events.jsonl");
        let sink = out.clone();
        std::thread::spawn(move || read_events(stdout, events_file, &sink));
        let stderr = proc.stderr.take().unwrap();
        let (sink, log2) = (out.clone(), log.clone());
        std::thread::spawn(move || read_log(stderr, t0, &log2, &sink));
        Soak {
            opts,
            dice,
            _dir: dir,
            workdir,
            manifest_text,
            proc,
            t0,
            out,
            log,
            summary,
            applied,
            launchers: BTreeMap::new(),
            last_scan: t0,
            exited: Vec::new(),
            pending_cont: Vec::new(),
            stopped_launchers: BTreeMap::new(),
            resumed: Vec::new(),
            hung: BTreeMap::new(),
            master_hangs: Vec::new(),
            crashes: Vec::new(),
            kills: Vec::new(),
            held: Vec::new(),
            quiet_since: t0,
            zombie_since: BTreeMap::new(),
            zombies_reported: Vec::new(),
            baseline: BTreeMap::new(),
            peak: BTreeMap::new(),
            flood: (0, 0),
            bag: Vec::new(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    fn mark(&self, msg: &str) {
        let line = format!("{:9.3} chaos {msg}\n", self.elapsed().as_secs_f64());
        let _ = self.log.lock().unwrap().write_all(line.as_bytes());
    }

    fn note(&self, msg: &str) {
        eprintln!("[chaos {:6.1}s] {msg}", self.elapsed().as_secs_f64());
        self.mark(msg);
    }

    fn violate(&mut self, msg: String) {
        self.note(&format!("VIOLATION: {msg}"));
        self.summary.violations.push(msg);
    }

    fn pass(&mut self, check: &'static str) {
        *self.summary.checks.entry(check).or_default() += 1;
    }

    fn dry_run_pid(&self) -> i32 {
        self.proc.id() as i32
    }

    fn exited_early(&mut self) -> Option<std::process::ExitStatus> {
        self.proc.try_wait().expect("try_wait")
    }

    /// Pod rows of `replica` (any when None) printed at or after `t`.
    fn rows_since(&self, t: Instant, replica: Option<&str>) -> Vec<Value> {
        let out = self.out.lock().unwrap();
        out.events
            .iter()
            .filter(|(at, ev)| *at >= t && ev["kind"] == "Pod" && replica.is_none_or(|r| ev["fields"]["replica"] == r))
            .map(|(_, ev)| ev.clone())
            .collect()
    }

    /// A launcher of `replica`, alive at `at`, is gone: a row of its pod printed since accounts
    /// for it, or its pod's latest row already showing its container ended (a child that exited 0
    /// is printed Completed before its launcher exits).
    fn exit_accounted(&self, at: Instant, replica: &str) -> bool {
        if !self.rows_since(at, Some(replica)).is_empty() {
            return true;
        }
        let rows = self.rows_since(self.t0, Some(replica));
        rows.last().is_some_and(|last| {
            last["type"] == "DELETED"
                || [PodStatus::Completed.as_str(), PodStatus::Error.as_str()]
                    .contains(&last["fields"]["status"].as_str().unwrap_or(""))
        })
    }

    /// The dry run's children that are launchers (each names its pod in POD_NAME).
    fn scan_launchers(&mut self) -> BTreeMap<i32, &'static str> {
        let mut current = BTreeMap::new();
        for pid in children(self.dry_run_pid()) {
            if let Some(r) = self.launchers.get(&pid) {
                current.insert(pid, *r);
            } else if let Some(r) = environ_var(pid, "POD_NAME").as_deref().and_then(pod_replica) {
                current.insert(pid, r);
            }
        }
        for (pid, r) in &self.launchers {
            if !current.contains_key(pid) {
                // Alive at the previous scan: rows printed since then may account for it.
                self.exited.push((self.last_scan, *r, *pid));
            }
        }
        self.launchers = current.clone();
        self.last_scan = Instant::now();
        current
    }

    fn training_child(launcher: i32) -> Option<i32> {
        children(launcher).into_iter().next()
    }

    fn state(pid: i32) -> Option<char> {
        proc_stat(pid).map(|p| p.state)
    }

    fn parent(pid: i32) -> Option<i32> {
        proc_stat(pid).map(|p| p.ppid)
    }

    fn check(&mut self, last: bool) {
        if !last {
            if let Some(status) = self.exited_early() {
                if self.elapsed() < self.opts.duration.saturating_sub(self.opts.tail) {
                    self.violate(format!("the dry run exited early ({status}) at {:.0?}", self.elapsed()));
                }
                return;
            }
        }
        self.pass("alive");
        self.check_zombies();
        let launchers = self.scan_launchers();
        self.check_fds_and_rss(&launchers);
        let now = Instant::now();
        for (at, replica, pid) in std::mem::take(&mut self.exited) {
            if self.exit_accounted(at, replica) {
                self.pass("launcher-exit-accounted");
            } else if now - at > ROW_WITHIN || last {
                self.violate(format!(
                    "launcher {pid} of {replica} exited {:.0?} ago and no row of its pod was printed since",
                    now - at
                ));
            } else {
                self.exited.push((at, replica, pid));
            }
        }
        self.check_master_hangs(last);
        self.check_resumed();
        self.check_kills(last);
        for (at, replica) in std::mem::take(&mut self.crashes) {
            if !self.rows_since(at, Some(replica)).is_empty() {
                self.pass("crash-printed");
            } else if now - at > ROW_WITHIN || last {
                self.violate(format!(
                    "{replica}'s child was killed {:.0?} ago and no row of its pod followed",
                    now - at
                ));
            } else {
                self.crashes.push((at, replica));
            }
        }
    }

    /// A zombie is a process its parent has not reaped yet. One whose parent we stopped cannot be
    /// reaped until the SIGCONT; any other must be gone within ZOMBIE_GRACE.
    fn check_zombies(&mut self) {
        let now = Instant::now();
        let root = self.dry_run_pid();
        let zombies: Vec<i32> = descendants(root)
            .into_iter()
            .filter(|p| p.state == 'Z' && Self::state(p.ppid) != Some('T'))
            .map(|p| p.pid)
            .collect();
        self.zombie_since.retain(|p, _| zombies.contains(p));
        let mut bad = Vec::new();
        for p in zombies {
            let first = *self.zombie_since.entry(p).or_insert(now);
            if now - first > ZOMBIE_GRACE && !self.zombies_reported.contains(&p) {
                self.zombies_reported.push(p);
                bad.push(format!("{p} (parent {:?})", Self::parent(p)));
            }
        }
        if bad.is_empty() {
            self.pass("no-zombie");
        } else {
            self.violate(format!("zombie(s) below the dry run for over {ZOMBIE_GRACE:?}: {}", bad.join(", ")));
        }
    }

    /// Held connections (a flood, a silent peer) legitimately hold fds in the launchers: they are
    /// measured only when nothing is held, 2 s after the last release, and not while stopped.
    fn check_fds_and_rss(&mut self, launchers: &BTreeMap<i32, &'static str>) {
        let quiet = self.held.is_empty() && self.quiet_since.elapsed() > Duration::from_secs(2);
        let mut measured = vec![("dry-run".to_string(), self.dry_run_pid())];
        if quiet {
            measured.extend(
                launchers
                    .iter()
                    .filter(|(p, _)| Self::state(**p) != Some('T'))
                    .map(|(p, r)| (format!("launcher {r}"), *p)),
            );
        }
        let first_minute = self.elapsed() < Duration::from_secs(60);
        for (key, pid) in measured {
            let (Some(fds), Some(rss)) = (fd_count(pid), rss_bytes(pid)) else { continue };
            let peak = self.peak.entry(key.clone()).or_default();
            *peak = (peak.0.max(fds), peak.1.max(rss));
            if first_minute {
                let base = self.baseline.entry(key).or_default();
                *base = (base.0.max(fds), base.1.max(rss));
                continue;
            }
            let Some(&(base_fds, base_rss)) = self.baseline.get(&key) else { continue };
            if fds > (2 * base_fds).max(base_fds + 8) {
                self.violate(format!("{key} (pid {pid}) has {fds} fds, first-minute peak {base_fds}"));
            } else if rss > base_rss + 100 * MIB {
                self.violate(format!(
                    "{key} (pid {pid}) RSS {} MiB, first-minute peak {} MiB",
                    rss / MIB,
                    base_rss / MIB
                ));
            } else {
                self.pass("bounded-fd-rss");
            }
        }
    }

    /// A launcher killed outright: once a row of its pod shows the container's end (Error,
    /// CrashLoopBackOff or DELETED), its training child is gone (the dry run reports the end only
    /// after the PID namespace's emulated teardown), and in any case within KILL_TEARDOWN; and
    /// under OnFailure a new launcher runs in its pod within KILL_RESTART (unless the job ended).
    fn check_kills(&mut self, last: bool) {
        let now = Instant::now();
        for mut kill in std::mem::take(&mut self.kills) {
            if let Some(child) = kill.child {
                let ended = self.rows_since(kill.at, Some(kill.replica)).iter().any(|ev| {
                    ev["type"] == "DELETED"
                        || [PodStatus::Error.as_str(), PodStatus::CrashLoopBackOff.as_str()]
                            .contains(&ev["fields"]["status"].as_str().unwrap_or(""))
                });
                if ended || now - kill.at > KILL_TEARDOWN || last {
                    let state = Self::state(child);
                    // Gone, or a zombie not ours (a pid reused meanwhile is not ours either).
                    if state.is_none() || (state == Some('Z') && Self::parent(child) != Some(self.dry_run_pid())) {
                        self.pass("kill-teardown");
                    } else {
                        let why = if ended {
                            "once its container's end was printed".to_string()
                        } else {
                            format!("{:.0?} after the kill", now - kill.at)
                        };
                        self.violate(format!(
                            "the training child {child} of {}'s killed launcher {} is still there (state {state:?}) {why}",
                            kill.replica, kill.pid
                        ));
                    }
                    kill.child = None;
                }
            }
            if kill.child.is_some() {
                self.kills.push(kill);
            } else if self.launchers.iter().any(|(p, r)| *r == kill.replica && *p != kill.pid) {
                self.pass("kill-restarted");
            } else if now - kill.at > KILL_RESTART || last {
                if !last && self.exited_early().is_none() {
                    self.violate(format!(
                        "{}'s launcher {} was killed {:.0?} ago and no new launcher runs in its pod",
                        kill.replica,
                        kill.pid,
                        now - kill.at
                    ));
                }
            } else {
                self.kills.push(kill);
            }
        }
    }

    /// A launcher SIGCONTed after a SIGSTOP serves its HTTP endpoint again (within 10 s).
    fn check_resumed(&mut self) {
        let now = Instant::now();
        for (at, replica, pid) in std::mem::take(&mut self.resumed) {
            let port = self.out.lock().unwrap().http_ports.get(replica).copied();
            let Some(port) = port.filter(|_| self.launchers.contains_key(&pid)) else {
                continue; // deleted meanwhile: nothing to ask
            };
            if http_get(port, "/healthz").is_some() {
                self.pass("launcher-answers-after-sigcont");
            } else if now - at > Duration::from_secs(10) {
                self.violate(format!(
                    "launcher {replica} (pid {pid}) does not answer /healthz on :{port} {:.0?} after its SIGCONT",
                    now - at
                ));
            } else {
                self.resumed.push((at, replica, pid));
            }
        }
    }

    /// A stopped master child stops beating its own heartbeat file: after the hang timeout its
    /// launcher stops and restarts it, which prints a row of master-0.
    fn check_master_hangs(&mut self, last: bool) {
        let now = Instant::now();
        let limit = HANG_TIMEOUT + Duration::from_secs(20);
        for at in std::mem::take(&mut self.master_hangs) {
            if !self.rows_since(at, Some("master-0")).is_empty() {
                self.pass("master-hang-caught");
            } else if now - at > limit || last {
                // The job may have ended before the hang timeout could run out.
                let ended_first = last && now - at < HANG_TIMEOUT + Duration::from_secs(5);
                if !ended_first {
                    self.violate(format!(
                        "master-0's child was stopped {:.0?} ago and its launcher did not act",
                        now - at
                    ));
                }
            } else {
                self.master_hangs.push(at);
            }
        }
    }

    fn signal(pid: i32, sig: Signal) -> bool {
        kill(Pid::from_raw(pid), sig).is_ok()
    }

    fn pick_launcher(&mut self) -> Option<(i32, &'static str)> {
        let live: Vec<(i32, &'static str)> = self
            .scan_launchers()
            .into_iter()
            .filter(|(p, _)| !matches!(Self::state(*p), Some('T' | 'Z') | None))
            .collect();
        (!live.is_empty()).then(|| *self.dice.pick(&live))
    }

    /// Apply one fault of `kind`; false when it found no target.
    fn fault(&mut self, kind: Kind) -> bool {
        match kind {
            Kind::LauncherStop => {
                let Some((pid, replica)) = self.pick_launcher() else { return false };
                let hold = self.dice.uniform(2.0, 6.0);
                Self::signal(pid, Signal::SIGSTOP);
                self.pending_cont.push((
                    Instant::now() + Duration::from_secs_f64(hold),
                    pid,
                    format!("launcher {replica}"),
                ));
                self.stopped_launchers.insert(pid, replica);
                self.note(&format!("fault launcher-stop: SIGSTOP launcher {replica} (pid {pid}) for {hold:.1}s"));
            }
            Kind::LauncherKill => {
                let Some((pid, replica)) = self.pick_launcher() else { return false };
                let child = Self::training_child(pid);
                let at = Instant::now(); // before the signal, as for a child crash
                Self::signal(pid, Signal::SIGKILL);
                self.kills.push(Kill { at, replica, pid, child });
                self.hung.retain(|_, (_, l)| *l != pid);
                self.applied.push(Applied::LauncherKilled(replica_id(replica)));
                self.note(&format!(
                    "fault launcher-kill: SIGKILL launcher {replica} (pid {pid}, training child {child:?})"
                ));
            }
            Kind::ChildCrash | Kind::ChildHang => {
                let mut pairs = Vec::new();
                for (pid, replica) in self.scan_launchers() {
                    if let Some(child) = Self::training_child(pid) {
                        if !self.hung.contains_key(&child) && Self::state(child) != Some('T') {
                            pairs.push((child, replica, pid));
                        }
                    }
                }
                if pairs.is_empty() {
                    return false;
                }
                let (child, replica, launcher) = *self.dice.pick(&pairs);
                if kind == Kind::ChildCrash {
                    // The time is taken before the signal: the rows may come before we look again.
                    let at = Instant::now();
                    Self::signal(child, Signal::SIGKILL);
                    self.crashes.push((at, replica));
                    self.note(&format!("fault child-crash: SIGKILL {replica}'s child (pid {child})"));
                } else {
                    Self::signal(child, Signal::SIGSTOP);
                    self.hung.insert(child, (replica, launcher));
                    if replica == "master-0" {
                        self.master_hangs.push(Instant::now());
                    }
                    // Past the hang timeout the master's launcher has killed it; a worker's is
                    // hidden by its peers' beats: let it go on.
                    let due = Instant::now() + HANG_TIMEOUT + Duration::from_secs(8);
                    self.pending_cont.push((due, child, format!("child of {replica}")));
                    self.note(&format!("fault child-hang: SIGSTOP {replica}'s child (pid {child})"));
                }
                self.applied.push(Applied::ChildEnded(replica_id(replica)));
            }
            Kind::HostilePeer => return self.hostile_peer(),
            Kind::HttpFlood => return self.http_flood(),
            Kind::LabelFlip | Kind::PodDelete => unreachable!("given up front"),
        }
        true
    }

    fn hostile_peer(&mut self) -> bool {
        let Some(master_port) = self.out.lock().unwrap().master_port else { return false };
        let port = master_port + 1;
        let variants = [
            "garbage",
            "hello-wrong-job",
            "hello-bad-index",
            "hello-bad-count",
            "hello-bad-version",
            "hello-impersonate",
            "long-line",
            "silent",
        ];
        let variant = *self.dice.pick(&variants);
        let mut hello = Hello {
            job: "chaos".into(),
            replica_index: 3,
            replica_count: 8,
            node: "evil\n[rankvisor] ERROR forged".into(),
            healthy: true,
            health: rankvisor_core::rendezvous::NodeHealth::Off,
            nonce: "00".into(),
        };
        match variant {
            "hello-wrong-job" => hello.job = "not-chaos".into(),
            "hello-bad-index" => hello.replica_index = *self.dice.pick(&[8, 99, u32::MAX]),
            "hello-bad-count" => {
                hello.replica_count = *self.dice.pick(&[0, 7, 9, 100_000]);
                hello.replica_index = 0;
            }
            "hello-impersonate" => {
                // A live worker's identity, without the job token's proof: refused, the worker unharmed.
                hello.replica_index = self.dice.int(1, 7) as u32;
                hello.node = "localhost".into();
            }
            _ => {}
        }
        let line = frame::encode(&Frame::Hello(hello), usize::MAX).expect("encode a hello");
        let payload = match variant {
            "garbage" => (0..self.dice.int(1, 4096)).map(|_| self.dice.int(0, 255) as u8).collect(),
            "long-line" => [b"{".as_slice(), &vec![b'a'; 1024 * 1024]].concat(),
            "silent" => Vec::new(),
            "hello-bad-version" => {
                let mut v: Value = serde_json::from_slice(&line).unwrap();
                v["v"] = 999.into();
                format!("{v}\n").into_bytes()
            }
            _ => line,
        };
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut s) => {
                let _ = s.set_write_timeout(Some(Duration::from_secs(3)));
                let _ = s.write_all(&payload); // refused midway: fine
                let hold = Duration::from_secs_f64(self.dice.uniform(5.0, 20.0));
                self.held.push((Instant::now() + hold, s));
            }
            Err(e) => self.note(&format!("fault hostile-peer: cannot connect to {port}: {e}")),
        }
        self.note(&format!("fault hostile-peer: {variant} on the rendezvous port {port}"));
        true
    }

    fn http_flood(&mut self) -> bool {
        let ports: Vec<(&'static str, u16)> =
            self.out.lock().unwrap().http_ports.iter().map(|(r, p)| (*r, *p)).collect();
        if ports.is_empty() {
            return false;
        }
        let (replica, port) = *self.dice.pick(&ports);
        let n = self.dice.int(40, 120);
        let paths = ["/status", "/metrics", "/healthz", "/readyz", "/job", "/nope"];
        let mut full = Vec::new();
        let mut opened = 0;
        for i in 0..n {
            let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)) else {
                continue;
            };
            opened += 1;
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            if i % 2 == 1 {
                // Slow: a partial request line and header, then held.
                let pad = "a".repeat(self.dice.int(1, 8000) as usize);
                if s.write_all(format!("GET /status HTTP/1.1\r\nHost: x\r\nX-Slow: {pad}").as_bytes()).is_ok() {
                    let hold = Duration::from_secs_f64(self.dice.uniform(3.0, 15.0));
                    self.held.push((Instant::now() + hold, s));
                }
            } else {
                let path = *self.dice.pick(&paths);
                if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
                    .is_ok()
                {
                    full.push(s);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut answered = 0;
        for mut s in full.iter() {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(50));
            let _ = s.set_read_timeout(Some(left));
            let mut head = [0u8; 8];
            if s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") {
                answered += 1;
            }
        }
        self.flood.0 += full.len() as u32;
        self.flood.1 += answered;
        self.note(&format!(
            "fault http-flood: {opened}/{n} connections to :{port} ({replica}), {answered}/{} full requests answered",
            full.len()
        ));
        true
    }

    fn housekeeping(&mut self) {
        let now = Instant::now();
        for (due, pid, what) in std::mem::take(&mut self.pending_cont) {
            if due > now {
                self.pending_cont.push((due, pid, what));
                continue;
            }
            if Self::signal(pid, Signal::SIGCONT) {
                self.mark(&format!("SIGCONT {what} (pid {pid})"));
            }
            self.hung.remove(&pid);
            if let Some(replica) = self.stopped_launchers.remove(&pid) {
                self.resumed.push((now, replica, pid));
            }
            // A launcher forwards the SIGCONT it receives to its child's process group: a child
            // we stopped runs again, its hang is over.
            let ended: Vec<i32> = self.hung.iter().filter(|(_, (_, l))| *l == pid).map(|(c, _)| *c).collect();
            for child in ended {
                let (replica, _) = self.hung.remove(&child).unwrap();
                if replica == "master-0" && !self.master_hangs.is_empty() {
                    self.master_hangs.clear();
                    self.pass("hang-ended-by-forwarded-sigcont");
                    self.mark("the master child's hang ends: its launcher forwards SIGCONT");
                }
            }
        }
        let before = self.held.len();
        self.held.retain(|(release, _)| *release > now);
        if self.held.len() < before {
            self.quiet_since = now;
        }
    }

    fn release_all(&mut self) {
        for (_, pid, _) in std::mem::take(&mut self.pending_cont) {
            Self::signal(pid, Signal::SIGCONT);
        }
        self.held.clear();
    }

    /// The next fault kind, from a shuffled bag holding each kind once (refilled when empty):
    /// random order, but every kind comes up in every round.
    fn next_kind(&mut self) -> Kind {
        if self.bag.is_empty() {
            self.bag = Kind::LIVE.to_vec();
            self.dice.shuffle(&mut self.bag);
        }
        self.bag.pop().unwrap()
    }

    fn main_loop(&mut self) {
        let faults_end = self.opts.duration.saturating_sub(self.opts.tail);
        let mut next_fault = self.t0 + Duration::from_secs(10); // let the barrier complete first
        while self.elapsed() < faults_end {
            // The soak's clock: one look a second (the checks' own limits are in seconds).
            std::thread::sleep(Duration::from_secs(1));
            self.housekeeping();
            self.check(false);
            if self.exited_early().is_some() {
                return;
            }
            if Instant::now() >= next_fault {
                let kind = self.next_kind();
                if self.fault(kind) {
                    *self.summary.faults.entry(kind.name()).or_default() += 1;
                    std::thread::sleep(Duration::from_millis(500));
                    self.check(false);
                }
                let i = self.opts.interval;
                next_fault = Instant::now() + Duration::from_secs_f64(self.dice.uniform(i / 2.0, i * 1.5));
            }
            // Still printing: a row or a log line within the last 60 s while faults land.
            let last = {
                let out = self.out.lock().unwrap();
                [out.events.last().map(|e| e.0), out.notes.last().copied(), Some(self.t0)]
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap()
            };
            if last.elapsed() > Duration::from_secs(60) && self.summary.fault_total() > 0 {
                self.violate(format!("nothing printed for {:.0?}", last.elapsed()));
                return;
            }
        }
    }

    fn finish(&mut self) {
        self.note("faults stop; waiting for the job to end (the children end at the soak's end)");
        let deadline = Instant::now() + self.opts.tail + Duration::from_secs(90);
        while self.exited_early().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(1));
            self.housekeeping();
            self.check(false);
        }
        let status = match self.exited_early() {
            Some(s) => s,
            None => {
                self.violate("the dry run did not end within 90 s after the soak's end".into());
                crate::common::kill_tree(self.dry_run_pid());
                self.proc.wait().expect("wait")
            }
        };
        // The readers see the pipes' end once every launcher (which inherit them) is gone too.
        crate::common::wait_until("the dry run's output to be read whole", || {
            let out = self.out.lock().unwrap();
            let last = [out.events.last().map(|e| e.0), out.notes.last().copied()].into_iter().flatten().max()?;
            (last.elapsed() > Duration::from_millis(500)).then_some(())
        });
        self.check(true);
        let bad = std::mem::take(&mut self.out.lock().unwrap().bad_lines);
        for line in bad {
            self.violate(format!("a stdout line is not JSON: {line}"));
        }
        let job_state = {
            let out = self.out.lock().unwrap();
            out.events.iter().rev().find(|(_, e)| e["kind"] == "PyTorchJob").map(|(_, e)| e["fields"]["state"].clone())
        };
        let (want, why) = expected_outcome(&self.manifest_text, &self.applied);
        let want_state = match want {
            Outcome::Succeeded => JobState::Succeeded.as_str(),
            Outcome::Failed => JobState::Failed.as_str(),
        };
        let state = job_state.as_ref().and_then(Value::as_str).unwrap_or("none");
        self.summary.report.push(format!(
            "job: {state} (exit {:?}); the operator's rules say {want_state} (exit {}): {why}",
            status.code(),
            want.exit_code()
        ));
        if state != want_state || status.code() != Some(want.exit_code()) {
            self.violate(format!("job ended {state} ({status}); the operator's rules say {want_state}: {why}"));
        } else {
            self.pass("final-state");
        }
        self.check_leftovers();
        self.summary.report.push(format!(
            "seed {}, duration {:?}, {:.0?} elapsed; http flood: {}/{} full requests answered within 5 s",
            self.opts.seed,
            self.opts.duration,
            self.elapsed(),
            self.flood.1,
            self.flood.0
        ));
        let figures: Vec<String> = self
            .peak
            .iter()
            .map(|(k, (fds, rss))| {
                let (bf, br) = self.baseline.get(k).copied().unwrap_or_default();
                format!("{k}: fds {bf}->{fds}, RSS {:.1}->{:.1} MiB", br as f64 / MIB as f64, *rss as f64 / MIB as f64)
            })
            .collect();
        self.summary.report.push(format!("first-minute peak -> whole-run peak: {}", figures.join("; ")));
    }

    /// No process of this run is left: every launcher and child has the run's directory in its
    /// environment (the heartbeat files).
    fn check_leftovers(&mut self) {
        let needle = self.workdir.display().to_string();
        let me = std::process::id() as i32;
        let mine = || -> Vec<String> {
            procs()
                .into_iter()
                .filter(|p| p.pid != me && p.state != 'Z' && environ_mentions(p.pid, &needle))
                .map(|p| format!("{} (parent {}, {})", p.pid, p.ppid, p.comm))
                .collect()
        };
        // Gone within a few seconds of the dry run's end, or left over.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut left = mine();
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            left = mine();
        }
        if left.is_empty() {
            self.pass("no-leftover");
        } else {
            self.violate(format!("processes of the run left after the dry run ended: {}", left.join("; ")));
        }
    }
}

/// Label flips and pod deletions at random times (the dry run takes them on its command line).
fn up_front(opts: &Options, dice: &mut Dice, summary: &mut Summary, applied: &mut Vec<Applied>) -> Vec<String> {
    let d = opts.duration.as_secs();
    let last = (d.saturating_sub(opts.tail.as_secs())).max(20) as f64;
    let mut specs = Vec::new();
    for i in 0..(d / 40).max(1) {
        let t = dice.uniform(15.0, last);
        let r = *dice.pick(&REPLICAS);
        // Half set another key, half rewrite the health key with its healthy value.
        let label =
            if dice.uniform(0.0, 1.0) < 0.5 { format!("chaos.rankvisor.dev/flip=v{i}") } else { "Schedulable".into() };
        specs.push(format!("label:{r}@{}ms={label}", (t * 1000.0) as u64));
        *summary.faults.entry(Kind::LabelFlip.name()).or_default() += 1;
    }
    for _ in 0..(d / 60).max(1) {
        let t = dice.uniform(15.0, last);
        let r = *dice.pick(&REPLICAS[1..]); // a recreated master waits in vain if the workers are done
        specs.push(format!("delete:{r}@{}ms", (t * 1000.0) as u64));
        *summary.faults.entry(Kind::PodDelete.name()).or_default() += 1;
        applied.push(Applied::PodDeleted(replica_id(r)));
    }
    specs
}

fn read_events(stdout: impl Read, mut file: std::fs::File, out: &Mutex<Output>) {
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let now = Instant::now();
        let _ = writeln!(file, "{line}");
        let mut out = out.lock().unwrap();
        match serde_json::from_str::<Value>(&line) {
            Ok(ev) => out.events.push((now, ev)),
            Err(_) => out.bad_lines.push(line.chars().take(200).collect()),
        }
    }
}

fn read_log(stderr: impl Read, t0: Instant, log: &Mutex<std::fs::File>, out: &Mutex<Output>) {
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        let now = Instant::now();
        let _ = writeln!(log.lock().unwrap(), "{:9.3} {line}", (now - t0).as_secs_f64());
        let mut out = out.lock().unwrap();
        out.notes.push(now);
        let Some(rest) = line.strip_prefix("dry-run: ") else { continue };
        if let Some((pod, url)) = rest.split_once(" serves http://127.0.0.1:") {
            let port = url.split('/').next().and_then(|p| p.parse().ok());
            if let (Some(r), Some(port)) = (pod_replica(pod), port) {
                out.http_ports.insert(r, port);
            }
        }
        if let Some(port) = rest.split_once("MASTER_PORT=").and_then(|(_, p)| p.split(')').next()?.parse().ok()) {
            out.master_port = Some(port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(backoff_limit: u32) -> String {
        let text = manifest(Path::new("/tmp/chaos-unit"), 0);
        assert!(text.contains("backoffLimit: 10000"), "{text}");
        text.replace("backoffLimit: 10000", &format!("backoffLimit: {backoff_limit}"))
    }

    /// The oracle is the dry run's controller: it can say Failed (restarts reaching the
    /// backoffLimit), so a run that should have failed and did not, or the reverse, is caught.
    #[test]
    fn the_expected_outcome_follows_the_operators_rules() {
        let worker = ReplicaId::worker(2);
        let (outcome, why) = expected_outcome(&job(10_000), &[]);
        assert_eq!(outcome, Outcome::Succeeded, "{why}");
        let faults = [
            Applied::ChildEnded(worker),
            Applied::LauncherKilled(ReplicaId::MASTER),
            Applied::PodDeleted(worker),
            Applied::ChildEnded(ReplicaId::MASTER),
        ];
        let (outcome, why) = expected_outcome(&job(10_000), &faults);
        assert_eq!(outcome, Outcome::Succeeded, "OnFailure restarts each of them: {why}");
        let crashes =
            [Applied::ChildEnded(worker), Applied::ChildEnded(ReplicaId::MASTER), Applied::ChildEnded(worker)];
        let (outcome, why) = expected_outcome(&job(2), &crashes);
        assert_eq!(outcome, Outcome::Failed, "3 restarts past backoffLimit 2: {why}");
        assert!(why.contains("backoff limit"), "{why}");
        let (outcome, why) = expected_outcome(&job(2), &crashes[..1]);
        assert_eq!(outcome, Outcome::Succeeded, "1 restart, backoffLimit 2: {why}");
    }

    #[test]
    fn the_manifests_marks_are_rewritten_and_pods_named() {
        let text = manifest(Path::new("/tmp/chaos-unit"), 1_234);
        assert_eq!(text.matches("value: \"1234\" # chaos: end").count(), 2, "{text}");
        assert!(text.contains("value: \"/tmp/chaos-unit/master.hb\" # chaos: heartbeat master"), "{text}");
        assert!(text.contains("value: \"/tmp/chaos-unit/workers.hb\" # chaos: heartbeat workers"), "{text}");
        assert_eq!(pod_replica("chaos-worker-3"), Some("worker-3"));
        assert_eq!(pod_replica("chaos-master-0"), Some("master-0"));
        assert_eq!(pod_replica("chaos-worker-30"), None);
        assert_eq!(replica_id("worker-6"), ReplicaId::worker(6));
    }

    #[test]
    fn the_dice_replay_with_their_seed() {
        let roll = |seed| {
            let mut d = Dice::new(seed);
            (0..16).map(|_| d.int(0, 1000)).collect::<Vec<_>>()
        };
        assert_eq!(roll(15006), roll(15006));
        assert_ne!(roll(15006), roll(15007));
    }
}
