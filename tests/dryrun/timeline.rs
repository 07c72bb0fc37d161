//! `rankvisor dry-run --timeline FILE` through the real binary: a real run of seed 000's job with
//! an injected fault drawn to SVG and HTML, and a file name it cannot draw refused before anything
//! starts.

use crate::common;

use common::{rankvisor, repo_file, TestDir};

fn example(name: &str) -> String {
    repo_file(&format!("examples/{name}")).display().to_string()
}

fn dry_run(args: &[&str]) -> (i32, String) {
    let out = rankvisor().arg("dry-run").args(args).output().expect("run rankvisor dry-run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_real_run_is_drawn_with_its_pods_restarts_and_faults() {
    let dir = TestDir::new("timeline");
    let svg = dir.join("run.svg");
    let html = dir.join("run.html");
    let logs = dir.file("logs");
    let job = example("pytorchjob.yaml");
    for file in [&svg, &html] {
        let file = file.to_str().unwrap();
        let args = [
            "--timeout",
            "60s",
            "--master-port",
            "0",
            "--logs",
            &logs,
            "--inject",
            "fail:worker-1@1500ms",
            "--timeline",
            file,
            &job,
        ];
        let (code, stderr) = dry_run(&args);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains(&format!("dry-run: timeline written to {file}")), "{stderr}");
    }
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\"") && text.ends_with("</svg>\n"));
    for lane in [
        "PyTorchJob pytest",
        "PodGroup pytest",
        "pytest-master-0",
        "pytest-worker-0",
        "pytest-worker-1",
        "pytest-worker-2",
    ] {
        assert!(text.contains(&format!("data-name=\"{lane}\"")), "no lane {lane}");
    }
    let worker1 = text.split("data-name=\"pytest-worker-1\"").nth(1).unwrap().split("<g class=\"lane").next().unwrap();
    assert!(worker1.contains("data-state=\"Error\""), "the injected failure shows: {worker1}");
    assert!(worker1.contains("data-restarts=\"1\""), "and its restart: {worker1}");
    assert!(text.contains("<g class=\"fault\" data-pod=\"pytest-worker-1\">"), "the fault marker");
    let job_lane = text.split("data-name=\"PyTorchJob pytest\"").nth(1).unwrap().split("</g>").next().unwrap();
    assert!(job_lane.contains("data-state=\"Succeeded\""), "{job_lane}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("<svg xmlns="), "the HTML holds the SVG");
}

#[test]
fn a_file_it_cannot_draw_is_refused_before_anything_runs() {
    let dir = TestDir::new("timeline-bad");
    let png = dir.join("run.png");
    let (code, stderr) = dry_run(&["--timeline", png.to_str().unwrap(), &example("pytorchjob.yaml")]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.contains("invalid --timeline file") && stderr.contains("run.png") && stderr.contains(".svg or .html"),
        "{stderr}"
    );
    assert!(!stderr.contains("images are not pulled"), "nothing started: {stderr}");
    assert!(!png.exists());
}
