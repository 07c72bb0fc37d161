//! The job page in a real browser: Debian's headless `chromium` loads `GET /` and runs the page's
//! script, and the DOM it leaves is checked; screenshots are kept under target/ as the test's
//! artefacts. The rendering assertions run on fixtures: a loopback server answers with the
//! project's own router (`rankvisor_core::http::route`, so `/` is the page the binary serves and
//! `/job` the real `JobView` JSON) from a canned progress history, one view per poll, so what the
//! page shows does not depend on the machine's speed. Two tests load the page of a real dry run: a
//! smoke test, and workers that finished (what the master records for a connection closed after
//! success). chromium comes from `scripts/setup-views.sh`; without it the tests fail.

use crate::common;

use common::{crashloop_and_hang_running, free_port, http_get, required_tool, wait_until, DryRunHttp, Rv, TestDir};
use rankvisor_core::exit::ExitHow;
use rankvisor_core::http::route;
use rankvisor_core::rendezvous::{Health, JobView, NodeHealth};
use rankvisor_core::status::{ExitReason, Identity, LocalStatus, ReplicaState, Report, Timeline};
use rankvisor_core::webhook::WebhookCounts;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Headless chromium with a profile of its own in `dir`: its stdout. Fails the test if it does
/// not finish in a minute.
fn chromium(dir: &TestDir, args: &[&str]) -> String {
    let profile = dir.join("chromium-profile");
    let out = dir.join("chromium.out");
    let mut child = Command::new(required_tool("chromium"))
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "chromium {args:?}: {status}");
    std::fs::read_to_string(&out).unwrap()
}

/// The `<tr>` of `replica` in the dumped DOM.
fn row<'a>(dom: &'a str, replica: &str) -> &'a str {
    let at = dom.find(&format!("data-replica=\"{replica}\"")).unwrap_or_else(|| panic!("no row for {replica}:\n{dom}"));
    let start = dom[..at].rfind("<tr").unwrap();
    let end = at + dom[at..].find("</tr>").unwrap();
    &dom[start..end]
}

/// Where the screenshots are kept: target/tmp/job-page/.
fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("job-page");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What a fixture server answers: the master's (`/job` from a history of views) or a worker's
/// (`/job` not served: the page shows its `/status` alone).
enum Fixture {
    /// The master: its own report, and the job view of each poll of `/job` in turn (the last one
    /// repeated once the history is through).
    Master(Report, Vec<JobView>),
    /// A worker: its report.
    Worker(Report),
}

/// Serve `fixture` on a loopback port through the project's router (`route`), one request per
/// connection; the port. The server lives as long as the test process.
fn serve(fixture: Fixture) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().unwrap().port();
    let polls = Arc::new(AtomicUsize::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = String::new();
            let mut reader = BufReader::new(&stream);
            while reader.read_line(&mut head).is_ok_and(|n| n > 0) && !head.ends_with("\r\n\r\n") {}
            let mut words = head.split_whitespace();
            let method: hyper::Method = words.next().unwrap_or("GET").parse().unwrap_or(hyper::Method::GET);
            let path = words.next().unwrap_or("/").split('?').next().unwrap_or("/").to_string();
            let reply = match &fixture {
                Fixture::Master(report, history) => {
                    let n = if path == "/job" {
                        polls.fetch_add(1, Ordering::SeqCst)
                    } else {
                        polls.load(Ordering::SeqCst)
                    };
                    let view = history[n.min(history.len() - 1)].clone();
                    route(&method, &path, report, &WebhookCounts::default(), Some(&Some(view)))
                }
                Fixture::Worker(report) => route(&method, &path, report, &WebhookCounts::default(), None),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{}",
                reply.status,
                reply.content_type,
                reply.body.len(),
                reply.body
            );
        }
    });
    port
}

/// Steps in the fixture's progress history: each poll of `/job` shows the next one.
const STEPS: usize = 8;

/// The loss at the `k`-th step of the history: falling, with a wobble, as a training's would.
fn loss(k: usize) -> f64 {
    2.5 / (1.0 + k as f64) + (k % 3) as f64 * 0.02
}

/// A replica's report as its launcher builds it (`Timeline::report`), `since` ago in its state.
fn report(index: u32, status: &LocalStatus, since: Duration) -> Report {
    let pod = if index == 0 { "pytest-master-0".to_string() } else { format!("pytest-worker-{}", index - 1) };
    let identity = Identity {
        job: Some("pytest".into()),
        replica_type: Some(if index == 0 { "Master" } else { "Worker" }.into()),
        rank: Some(index),
        replica_count: Some(3),
        world_size: Some(3),
        pod: Some(pod),
        namespace: Some("default".into()),
        node: Some(format!("node-{index}")),
        flavour: Some(rankvisor_core::rank::Flavour::TrainingOperator),
        restart_attempt: None,
    };
    let now = SystemTime::now();
    let mut timeline = Timeline::new(now - since);
    timeline.report(&identity, status, now - since);
    timeline.report(&identity, status, now)
}

fn progress(k: usize) -> Option<serde_json::Map<String, serde_json::Value>> {
    let json = serde_json::json!({"step": 10 * k, "loss": loss(k)});
    json.as_object().cloned()
}

/// The three replicas of the crash-loop-and-hang job at step `k` of the history: the master back
/// from a hang (1 restart, its last exit `Hung`) and training, worker 0 crash-looping (in its
/// restart backoff, restarted `2 + k` times, its last exit code 1), worker 1 training.
fn replicas_at(k: usize) -> [LocalStatus; 3] {
    let master = LocalStatus {
        state: ReplicaState::Running,
        restart_count: 1,
        last_exit: Some(ExitHow::Signaled(rankvisor_core::signo::Signo::TERM)),
        last_exit_reason: Some(ExitReason::Hung),
        hang_detections: 1,
        child_pid: Some(4242),
        progress: progress(k),
        ..LocalStatus::default()
    };
    let crashing = LocalStatus {
        state: ReplicaState::Restarting,
        restart_count: 2 + k as u32,
        last_exit: Some(ExitHow::Exited(1)),
        ..LocalStatus::default()
    };
    let healthy = LocalStatus {
        state: ReplicaState::Running,
        child_pid: Some(4343),
        progress: progress(k),
        ..LocalStatus::default()
    };
    [master, crashing, healthy]
}

/// The master's `/job` at each step of the history, built as the master builds it (`JobView`
/// fed the workers' joins and state updates); and the master's own last report.
fn master_fixture() -> Fixture {
    let now_ms = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut node = rankvisor_core::kube::NodeSnapshot::default();
    node.labels.insert(rankvisor_core::health::NODE_HEALTH_STATUS.into(), "Schedulable".into());
    let health = Health::from(NodeHealth::Verdict(Box::new(rankvisor_core::health::verdict(&node, false))));
    let mut view = JobView::new("pytest", 3, "node-0", &health, now_ms());
    view.joined(1, "node-1", &health, now_ms());
    view.joined(2, "node-2", &health, now_ms());
    let mut history = Vec::new();
    let mut last = None;
    for k in 1..=STEPS {
        for (index, status) in (0u32..).zip(replicas_at(k)) {
            let r = report(index, &status, Duration::from_secs(30));
            view.state(index, Box::new(r.clone()), now_ms());
            if index == 0 {
                last = Some(r);
            }
        }
        history.push(view.clone());
    }
    Fixture::Master(last.unwrap(), history)
}

/// The fixture's sparkline points: one per step of the history.
fn polyline_points(row: &str) -> usize {
    let at = row.find("<polyline points=\"").unwrap_or_else(|| panic!("no sparkline: {row}"));
    let rest = &row[at + "<polyline points=\"".len()..];
    rest[..rest.find('"').unwrap()].split_whitespace().count()
}

#[test]
fn the_masters_page_shows_every_replica_and_marks_the_crash_loop_and_the_hang() {
    let dir = TestDir::new("job-page");
    let port = serve(master_fixture());
    let url = format!("http://127.0.0.1:{port}/");
    // Under virtual time each poll (every 1 s) runs once the previous one was answered: 30 s of it
    // is 30 polls, more than the history's STEPS views.
    let dom = chromium(&dir, &["--virtual-time-budget=30000", "--dump-dom", &url]);
    assert!(dom.contains("<title>rankvisor: job pytest</title>"), "the script ran and titled the page:\n{dom}");
    let summary = dom.split("id=\"summary\"").nth(1).expect("summary").split("</p>").next().unwrap();
    assert!(summary.contains(">Running<"), "the job's phase: {summary}");
    assert!(
        summary.contains(", but ") && summary.contains("pytest-worker-0 is crash-looping"),
        "why the job needs a look: {summary}"
    );
    assert!(summary.contains("pytest-master-0 is hung"), "{summary}");
    assert!(summary.contains("3/3 replicas heard"), "{summary}");

    let crashing = row(&dom, "pytest-worker-0");
    assert!(crashing.contains("class=\"alarm\""), "{crashing}");
    assert!(crashing.contains("class=\"flag crash-looping\">crash-looping<"), "a word, not only a colour: {crashing}");
    assert!(crashing.contains("(code 1, Exited)"), "its last exit and reason: {crashing}");
    assert!(crashing.contains(&format!("<td>{}</td>", 2 + STEPS)), "its latest restart count: {crashing}");
    assert!(!crashing.contains("<polyline"), "no progress, no sparkline: {crashing}");
    let hung = row(&dom, "pytest-master-0");
    assert!(hung.contains("class=\"flag hung\">hung<"), "{hung}");
    assert!(!hung.contains("crash-looping"), "one restart is not a crash loop: {hung}");
    assert!(hung.contains("(SIGTERM, Hung)"), "the last exit's signal and reason: {hung}");
    assert!(hung.contains("1 \u{b7} 1 hang"), "{hung}");
    assert!(hung.contains("on node-0"), "{hung}");
    // Every step of the history is on the sparkline of both training replicas, and the latest
    // step and loss are shown.
    let healthy = row(&dom, "pytest-worker-1");
    assert!(healthy.contains("data-flags=\"\"") && healthy.contains(">ok<"), "{healthy}");
    assert!(healthy.contains("<td>Running</td>"), "{healthy}");
    assert!(healthy.contains("healthy (Schedulable)"), "{healthy}");
    for r in [hung, healthy] {
        assert_eq!(polyline_points(r), STEPS, "one point per step seen: {r}");
        assert!(r.contains(&format!("<td>{}</td>", 10 * STEPS)), "the latest step: {r}");
        assert!(r.contains(&format!("<td>{:.4}</td>", loss(STEPS))), "the latest loss: {r}");
    }

    let shot = artefacts().join("master.png");
    let _ = std::fs::remove_file(&shot);
    let port = serve(master_fixture());
    chromium(
        &dir,
        &[
            "--virtual-time-budget=30000",
            "--window-size=1280,420",
            &format!("--screenshot={}", shot.display()),
            &format!("http://127.0.0.1:{port}/"),
        ],
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} bytes", png.len());
    eprintln!("job page screenshot: {}", shot.display());
}

#[test]
fn a_workers_page_shows_that_replica_alone_and_links_to_the_master() {
    let dir = TestDir::new("replica-page");
    let [_, crashing, _] = replicas_at(1);
    let port = serve(Fixture::Worker(report(1, &crashing, Duration::from_secs(30))));
    let url = format!("http://127.0.0.1:{port}/");
    let dom = chromium(&dir, &["--virtual-time-budget=4000", "--dump-dom", &url]);
    assert!(dom.contains("<title>rankvisor: pytest-worker-0</title>"), "{dom}");
    assert!(dom.contains("This page shows this replica alone"), "{dom}");
    assert!(dom.contains(&format!("href=\"//pytest-master-0:{port}/\"")), "the link to the master: {dom}");
    assert!(dom.contains("Worker rank 1 of job pytest: Restarting."), "{dom}");
    assert_eq!(dom.matches("data-replica=").count(), 1, "one row: {dom}");
    let me = row(&dom, "pytest-worker-0");
    assert!(me.contains("class=\"flag crash-looping\">crash-looping<"), "{me}");

    let shot = artefacts().join("worker.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &dir,
        &["--virtual-time-budget=4000", "--window-size=1280,300", &format!("--screenshot={}", shot.display()), &url],
    );
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 5_000), "{}", shot.display());
    eprintln!("replica page screenshot: {}", shot.display());
}

/// The smoke test: the page of a real dry run's master (a crash-looping worker, a master back
/// from a hang, a healthy worker), once its `/job` shows both. What the rows show in detail is
/// the fixtures' business above; here, that the live page renders the live view.
#[test]
fn a_live_dry_runs_page_shows_its_replicas() {
    let dir = TestDir::new("job-page-live");
    let (_run, master) =
        crashloop_and_hang_running(&dir, "180s", "a crash-looping worker and a master back from a hang");
    let (code, html) = http_get(master, "/").expect("GET / answers");
    assert_eq!(code, 200);
    assert!(html.contains("<script>"), "{html}");
    let dom = chromium(&dir, &["--virtual-time-budget=4000", "--dump-dom", &format!("http://127.0.0.1:{master}/")]);
    assert!(dom.contains("<title>rankvisor: job pytest</title>"), "the script ran and titled the page:\n{dom}");
    for pod in ["pytest-master-0", "pytest-worker-0", "pytest-worker-1"] {
        row(&dom, pod);
    }
    assert!(row(&dom, "pytest-worker-0").contains("class=\"flag crash-looping\">crash-looping<"), "{dom}");
    assert!(row(&dom, "pytest-master-0").contains("Hung)"), "the last exit's reason: {dom}");
}

#[test]
fn a_replica_held_by_an_unhealthy_node_is_marked_with_its_fault_labels() {
    // A real rankvisor waiting for its node (--unhealthy-node wait), HyperPod's labels in a file.
    let dir = TestDir::new("unhealthy-page");
    let labels = dir.join("labels");
    std::fs::write(
        &labels,
        "sagemaker.amazonaws.com/node-health-status=\"UnschedulablePendingReboot\"\nsagemaker.amazonaws.com/fault-type=\"GpuFailure\"\n",
    )
    .unwrap();
    let port = free_port();
    let _run = Rv::new(&dir)
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .args(["--node-health", &format!("file:{}", labels.display()), "--unhealthy-node", "wait"])
        .env("POD_NAME", "pytest-worker-2")
        .env("NODE_NAME", "ip-10-1-2-3")
        .sh("sleep 600")
        .spawn();
    wait_until("the replica to wait for its node", || {
        http_get(port, "/status").filter(|(_, body)| body.contains("\"NodeUnhealthy\"")).map(|_| ())
    });
    let dom = chromium(&dir, &["--virtual-time-budget=4000", "--dump-dom", &format!("http://127.0.0.1:{port}/")]);
    let me = row(&dom, "pytest-worker-2");
    assert!(me.contains("class=\"flag unhealthy-node\">unhealthy-node<"), "{me}");
    assert!(me.contains("class=\"alarm\""), "{me}");
    assert!(
        me.contains("UNHEALTHY \u{b7} UnschedulablePendingReboot \u{b7} GpuFailure"),
        "the verdict and fault labels: {me}"
    );
    assert!(me.contains("on ip-10-1-2-3"), "{me}");
    assert!(me.contains("<td>NodeUnhealthy</td>"), "{me}");
}

/// Issue 24 item 8: workers that succeeded and closed their connection (the normal end) are done,
/// not "disconnected", on the master's page while the master still trains.
#[test]
fn workers_that_succeeded_and_left_are_shown_done_not_disconnected() {
    let dir = TestDir::new("finished-page");
    let manifest = dir.write(
        "job.yaml",
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pytest\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n        spec:\n          containers:\n            - {name: pytorch, image: busybox, command: [sh, -c, sleep 120]}\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n            - {name: pytorch, image: busybox, command: [sh, -c, sleep 0.5]}\n",
    );
    let run = DryRunHttp::start(&dir, &manifest, &["--timeout", "150s"]);
    let master = run.port("pytest-master-0");
    common::wait_job(master, "both workers to succeed and close their connections", |v| {
        let r = &v["replicas"];
        ["1", "2"].iter().all(|i| r[i]["state"] == "Succeeded" && r[i]["connected"] == false)
    });
    let dom = chromium(&dir, &["--virtual-time-budget=4000", "--dump-dom", &format!("http://127.0.0.1:{master}/")]);
    for worker in ["pytest-worker-0", "pytest-worker-1"] {
        let done = row(&dom, worker);
        assert!(done.contains("data-flags=\"\"") && done.contains(">ok<"), "{worker}: {done}");
        assert!(done.contains("<td>Succeeded</td>"), "{done}");
    }
    let summary = dom.split("id=\"summary\"").nth(1).expect("summary").split("</p>").next().unwrap();
    assert!(!summary.contains("disconnected"), "{summary}");
}

/// Issue 36: the master's page shows where the job was at its latest hang: the grouped stacks
/// from the master's report, the odd replica named.
#[test]
fn the_masters_page_shows_the_grouped_stacks_of_the_last_hang() {
    let dir = TestDir::new("job-page-stacks");
    let Fixture::Master(report, mut history) = master_fixture() else { unreachable!() };
    let job = rankvisor_core::stacks::JobStacks {
        taken_at: "2026-12-04T10:00:00.000000Z".into(),
        why: "replica 2: hung".into(),
        elapsed_ms: 31,
        groups: vec![],
        summary: "2 replicas (0, 1): all_reduce (distributed_c10d.py:2501); replica 2: slow_here (train.py:40)".into(),
        replicas: vec![],
    };
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    for view in &mut history {
        let mut own = view.replicas()[&0].report().cloned().expect("the master's report");
        own.job_stacks = Some(job.clone());
        view.state(0, Box::new(own), now_ms);
    }
    let port = serve(Fixture::Master(report, history));
    let dom = chromium(&dir, &["--virtual-time-budget=5000", "--dump-dom", &format!("http://127.0.0.1:{port}/")]);
    let stacks = dom.split("id=\"stacks\"").nth(1).expect("the stacks line").split("</p>").next().unwrap();
    assert!(stacks.contains("Stacks at the last hang (replica 2: hung, 2026-12-04T10:00:00.000000Z)"), "{stacks}");
    assert!(stacks.contains("replica 2: slow_here (train.py:40)"), "{stacks}");
}

/// Issue 36 item 4: a replica the master named a straggler is marked on the job page, in words
/// ("straggling", the colour repeats it) with its figures on hover, and the summary says so; the
/// others are not marked.
#[test]
fn the_masters_page_marks_a_straggler_with_its_figures() {
    let dir = TestDir::new("job-page-straggler");
    let Fixture::Master(report, mut history) = master_fixture() else { unreachable!() };
    let why = "replica 2 is a straggler: its metric 60 against the job's median 100 (0.60x the median's pace) for 3 points in a row";
    for view in &mut history {
        assert_eq!(
            view.straggler(2, why.into()),
            ("node-2".into(), Some("pytest-worker-1".into())),
            "its node and pod"
        );
    }
    let port = serve(Fixture::Master(report, history));
    let dom = chromium(&dir, &["--virtual-time-budget=5000", "--dump-dom", &format!("http://127.0.0.1:{port}/")]);
    let slow = row(&dom, "pytest-worker-1");
    assert!(
        slow.contains("<span class=\"flag straggling\"") && slow.contains(">straggling</span>"),
        "a word, not only a colour: {slow}"
    );
    assert!(slow.contains(&format!("title=\"{why}\"")), "its figures on hover: {slow}");
    assert!(slow.contains("class=\"alarm\""), "{slow}");
    for other in ["pytest-master-0", "pytest-worker-0"] {
        assert!(!row(&dom, other).contains("straggling"), "{other} is not marked");
    }
    let summary = dom.split("id=\"summary\"").nth(1).expect("summary").split("</p>").next().unwrap();
    assert!(summary.contains("pytest-worker-1 is straggling"), "{summary}");
}
