//! The live job page in a real browser: Debian's headless `chromium` loads `GET /` of a real dry
//! run (a crash-looping worker, a master back from a hang, a healthy worker), runs the page's
//! script against the live `/job`, and the DOM it leaves is checked; a screenshot is kept under
//! target/ as the test's artefact. chromium comes from `scripts/setup-views.sh`; without it the
//! test fails.

mod common;

use common::{crashloop_and_hang_running, free_port, http_get, required_tool, wait_until, DryRunHttp, Rv, TestDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

#[test]
fn the_masters_page_shows_every_replica_and_marks_the_crash_loop_and_the_hang() {
    let dir = TestDir::new("job-page");
    let (_run, master) =
        crashloop_and_hang_running(&dir, "180s", "a crash-looping worker and a master back from a hang");
    let url = format!("http://127.0.0.1:{master}/");
    let (code, html) = http_get(master, "/").expect("GET / answers");
    assert_eq!(code, 200);
    assert!(html.contains("<script>"), "{html}");

    // The sparkline needs two different steps seen by the page's own polls. Under chromium's
    // virtual time the polls run back to back, as fast as the master answers, so one page may span
    // less real time than one heartbeat report: a longer budget (more polls), and a new page (up to
    // five) while none has a line yet. The assertions below are on the last page.
    let mut dom = String::new();
    for _ in 0..5 {
        dom = chromium(&dir, &["--virtual-time-budget=240000", "--dump-dom", &url]);
        if dom.contains("<polyline") {
            break;
        }
    }
    assert!(dom.contains("<title>rankvisor: job pytest</title>"), "the script ran and titled the page:\n{dom}");
    let summary = dom.split("id=\"summary\"").nth(1).expect("summary").split("</p>").next().unwrap();
    assert!(summary.contains(">Running<"), "the job's phase: {summary}");
    assert!(
        summary.contains(", but ") && summary.contains("pytest-worker-0 is crash-looping"),
        "why the job needs a look: {summary}"
    );
    assert!(summary.contains("pytest-master-0 is hung"), "{summary}");

    let crashing = row(&dom, "pytest-worker-0");
    assert!(crashing.contains("class=\"alarm\""), "{crashing}");
    assert!(crashing.contains("class=\"flag crash-looping\">crash-looping<"), "a word, not only a colour: {crashing}");
    assert!(crashing.contains("(code 1, Exited)"), "its last exit and reason: {crashing}");
    let hung = row(&dom, "pytest-master-0");
    assert!(hung.contains("class=\"flag hung\">hung<"), "{hung}");
    assert!(hung.contains("Hung)"), "the last exit's reason: {hung}");
    assert!(hung.contains("1 hang"), "{hung}");
    // The sparkline needs two steps seen by the page; which replica gets them first depends on the
    // machine's load (the hung one may not beat again before the dump), so any row will do.
    assert!(dom.contains("<polyline"), "a loss sparkline on some replica: {dom}");
    let healthy = row(&dom, "pytest-worker-1");
    assert!(healthy.contains("data-flags=\"\"") && healthy.contains(">ok<"), "{healthy}");
    assert!(healthy.contains("<td>Running</td>"), "{healthy}");

    let shot = artefacts().join("master.png");
    let _ = std::fs::remove_file(&shot);
    chromium(
        &dir,
        &["--virtual-time-budget=30000", "--window-size=1280,420", &format!("--screenshot={}", shot.display()), &url],
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} bytes", png.len());
    eprintln!("job page screenshot: {}", shot.display());
}

#[test]
fn a_workers_page_shows_that_replica_alone_and_links_to_the_master() {
    let dir = TestDir::new("replica-page");
    let (run, _) = crashloop_and_hang_running(&dir, "180s", "a crash-looping worker");
    let worker = run.port("pytest-worker-0");
    let url = format!("http://127.0.0.1:{worker}/");
    let dom = chromium(&dir, &["--virtual-time-budget=4000", "--dump-dom", &url]);
    assert!(dom.contains("<title>rankvisor: pytest-worker-0</title>"), "{dom}");
    assert!(dom.contains("This page shows this replica alone"), "{dom}");
    assert!(dom.contains(&format!("href=\"//pytest-master-0:{worker}/\"")), "the link to the master: {dom}");
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
