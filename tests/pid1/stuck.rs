//! Issue 36 item 5: a process that survives SIGKILL cannot keep rankvisor from finishing. The
//! child joins a frozen cgroup: on this kernel a process frozen by cgroup v2's `cgroup.freeze`
//! still dies on SIGKILL, and one frozen by the v1 freezer (`freezer.state`) does not (it waits in
//! `D`), so the test uses the v1 freezer. rankvisor gives up at the grace plus 5 s, exits with the
//! KILL's status and names the stuck pid with its state and wait channel.

use crate::common;
use common::*;

const FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A v1 freezer cgroup of its own, thawed and removed when dropped.
struct Frozen {
    dir: std::path::PathBuf,
}

impl Frozen {
    fn new(name: &str) -> Self {
        assert!(
            std::path::Path::new(FREEZER).join("freezer.state").exists()
                || std::path::Path::new(FREEZER).join("cgroup.procs").exists(),
            "this test needs the cgroup v1 freezer at {FREEZER} (a process frozen by cgroup v2 dies on SIGKILL)"
        );
        let dir = std::path::Path::new(FREEZER).join(format!("rankvisor-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a freezer cgroup (root)");
        Self { dir }
    }

    fn procs(&self) -> String {
        self.dir.join("cgroup.procs").to_str().unwrap().to_string()
    }

    fn freeze(&self) {
        std::fs::write(self.dir.join("freezer.state"), "FROZEN").unwrap();
        wait_until("the cgroup to freeze", || (read(&self.dir.join("freezer.state")).trim() == "FROZEN").then_some(()));
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        // Its processes, KILLed long ago, die once thawed; the cgroup goes once they are gone.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

fn base(dir: &TestDir) -> Rv {
    Rv::new(dir).args([
        "--node-health",
        "off",
        "--http-addr",
        "off",
        "--grace-period",
        "1s",
        "--termination-log",
        &dir.file("termination-log"),
    ])
}

#[test]
fn a_child_frozen_past_sigkill_is_given_up_at_the_grace_plus_5s_and_named() {
    let dir = TestDir::new("stuck-child");
    let cg = Frozen::new("child");
    // The child moves itself (its pid as its own namespace sees it) into the cgroup.
    let running = base(&dir)
        .sh(&format!("echo $$ > {}; echo $$ > {}; exec sleep 1000", q(&cg.procs()), q(&dir.file("pid"))))
        .spawn();
    let pid: i32 = wait_until("the child in the cgroup", || read(&dir.join("pid")).trim().parse().ok());
    cg.freeze();
    running.signal(libc::SIGTERM);
    let out = running.wait();
    out.assert_code(137);
    let msg = read(&dir.join("termination-log"));
    let want =
        format!("the child (pid {pid}) outlived SIGKILL by 5s; gave up waiting: pid {pid} (sleep) D (disk sleep)");
    assert!(msg.starts_with(&want), "{msg}");
    assert!(out.stderr.contains(&want), "{}", out.stderr);
}

#[test]
fn an_escapee_frozen_past_sigkill_is_named_after_the_childs_own_message() {
    let dir = TestDir::new("stuck-escapee");
    let cg = Frozen::new("escapee");
    // A setsid grandchild in the cgroup; the child itself exits 3 once it runs.
    let script = format!(
        "setsid sh -c 'echo $$ > {procs}; echo $$ > {pid}; exec sleep 1000' & \
         while [ ! -s {pid} ]; do sleep 0.01; done; while [ ! -e {go} ]; do sleep 0.01; done; exit 3",
        procs = q(&cg.procs()),
        pid = q(&dir.file("pid")),
        go = q(&dir.file("go"))
    );
    let running = base(&dir).args(["--restart-policy", "Never"]).sh(&script).spawn();
    let pid: i32 = wait_until("the escapee in the cgroup", || read(&dir.join("pid")).trim().parse().ok());
    // Its pid is written before its exec: frozen earlier, it would be named `sh`.
    wait_until("the escapee's exec of sleep", || {
        (std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim() == "sleep").then_some(())
    });
    cg.freeze();
    std::fs::write(dir.join("go"), "").unwrap();
    let out = running.wait();
    out.assert_code(3);
    let msg = read(&dir.join("termination-log"));
    let want = format!(
        "; processes below rankvisor outlived SIGKILL by 5s; gave up waiting: pid {pid} (sleep) D (disk sleep)"
    );
    assert!(msg.starts_with("child exited with code 3") && msg.contains(&want), "{msg}");
}
