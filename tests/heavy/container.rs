//! rankvisor as the real PID 1 of Docker containers (the image `images/build.sh` builds, FROM
//! scratch): the seed's job as four containers on a user-defined network, `docker stop` and
//! `docker kill`, a replica cut off before the barrier, a master killed under job scope, a
//! node-health flip through a bind-mounted labels file, and the log rules' relay into Docker's
//! log pipe.
//!
//! Needs a Docker engine and the image named by `RANKVISOR_TEST_IMAGE` (scripts/test.sh runs
//! images/build.sh and exports it). Without either, every test here FAILS, on purpose, saying what
//! is missing: a container test that cannot run must not pass as if it had.

use crate::common;

use common::{http_get_at, wait_until_for, TestDir};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// The training-operator's env for replica `rank` of a job of `count` replicas (seed 000: one
/// master, three workers), with MASTER_ADDR the master pod's name (resolved by Docker's DNS).
fn operator_env(job: &str, rank: u32, count: u32) -> Vec<(String, String)> {
    let master = format!("{job}-master-0");
    let pod = if rank == 0 { master.clone() } else { format!("{job}-worker-{}", rank - 1) };
    [
        ("MASTER_ADDR", master.clone()),
        ("PET_MASTER_ADDR", master),
        ("MASTER_PORT", "23456".into()),
        ("PET_MASTER_PORT", "23456".into()),
        ("WORLD_SIZE", count.to_string()),
        ("RANK", rank.to_string()),
        ("PET_NODE_RANK", rank.to_string()),
        ("PET_NNODES", count.to_string()),
        ("PET_NPROC_PER_NODE", "1".into()),
        ("PYTHONUNBUFFERED", "1".into()),
        ("POD_NAME", pod),
        ("POD_NAMESPACE", "default".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn pod_name(job: &str, rank: u32) -> String {
    if rank == 0 {
        format!("{job}-master-0")
    } else {
        format!("{job}-worker-{}", rank - 1)
    }
}

fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).stdin(Stdio::null()).output().expect("cannot run the docker CLI")
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// How long a container may take to start, stop or reach a state: generous, a loaded machine's
/// docker is slow; it bounds a failing test, it is not what a test measures.
const GUARD: Duration = Duration::from_secs(60);

/// How to get what the container tests need.
const HOW_TO: &str = "run `bash scripts/test.sh`, which builds the image with `bash images/build.sh` and exports \
                      RANKVISOR_TEST_IMAGE; a Docker engine must answer `docker info`";

/// The image to test (`RANKVISOR_TEST_IMAGE`). Without a Docker engine, without the variable or
/// without the image the test FAILS, saying why: a container test that cannot run must not pass.
fn image() -> String {
    match Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]).stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            panic!("no Docker engine answers `docker info` ({}): {HOW_TO}", String::from_utf8_lossy(&o.stderr).trim())
        }
        Err(e) => panic!("no docker CLI ({e}): {HOW_TO}"),
    }
    let image = std::env::var("RANKVISOR_TEST_IMAGE")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("RANKVISOR_TEST_IMAGE is not set: {HOW_TO}"));
    let out = docker(&["image", "inspect", "--format", "{{.Id}}", &image]);
    assert!(
        out.status.success(),
        "RANKVISOR_TEST_IMAGE={image}: no such image ({}): {HOW_TO}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    image
}

/// Containers, networks and directories of one test, removed on drop (also when the test fails).
struct Scene {
    image: String,
    suffix: String,
    containers: Vec<String>,
    networks: Vec<String>,
    images: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Scene {
    fn new(test: &str, image: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        let suffix = format!("{test}-{}-{}-{:x}", std::process::id(), N.fetch_add(1, Ordering::SeqCst), nanos % 0xffff);
        Self { image: image.into(), suffix, containers: vec![], networks: vec![], images: vec![], dirs: vec![] }
    }

    fn network(&mut self) -> String {
        let name = format!("rv-{}", self.suffix);
        docker_ok(&["network", "create", &name]);
        self.networks.push(name.clone());
        name
    }

    /// A host directory for bind mounts, world-writable.
    fn dir(&mut self, name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rv-ctr-{}-{name}", self.suffix));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        self.dirs.push(d.clone());
        d
    }

    /// An image built from `ctx` with `args` (a `-f`, `--build-arg`s) by the legacy builder with no
    /// network, as images/build.sh builds (the base images are local), removed on drop: its tag.
    fn build(&mut self, ctx: &Path, args: &[&str]) -> String {
        let tag = format!("rv-{}:test", self.suffix);
        self.images.push(tag.clone());
        let out = Command::new("docker")
            .args(["build", "--network", "none", "-q", "-t", &tag])
            .args(args)
            .arg(ctx)
            .env("DOCKER_BUILDKIT", "0")
            .stdin(Stdio::null())
            .output()
            .expect("run docker build");
        assert!(out.status.success(), "docker build of {}: {}", ctx.display(), String::from_utf8_lossy(&out.stderr));
        tag
    }

    /// `docker create` a container named `rv-<suffix>-<name>` (not started); returns its name.
    fn create(&mut self, name: &str, opts: &[String], cmd: &[&str]) -> String {
        let cname = format!("rv-{}-{name}", self.suffix);
        let mut args: Vec<String> = vec!["create".into(), "--name".into(), cname.clone()];
        args.extend(opts.iter().cloned());
        args.push(self.image.clone());
        args.extend(cmd.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker_ok(&refs);
        self.containers.push(cname.clone());
        cname
    }

    /// The container `name` running `sh -c script`, with a host directory mounted at /out, started;
    /// returned once its child has run `touch /out/started` (which `script` does, after any trap
    /// it sets): the container's name and the host directory.
    fn start_child(&mut self, name: &str, opts: &[String], script: &str) -> (String, PathBuf) {
        let out = self.dir("out");
        let mut all = mount(&out, "/out");
        all.extend(opts.iter().cloned());
        let c = self.create(name, &all, &["sh", "-c", script]);
        docker_ok(&["start", &c]);
        wait_file(&out.join("started"), GUARD, "child start");
        (c, out)
    }

    /// One replica of the job `job` on `net`: hostname and network alias are the pod's name.
    fn replica(&mut self, job: &str, rank: u32, count: u32, net: &str, extra: &[String], cmd: &[&str]) -> String {
        let pod = pod_name(job, rank);
        let mut opts: Vec<String> = vec![
            "--network".into(),
            net.into(),
            "--network-alias".into(),
            pod.clone(),
            "--hostname".into(),
            pod.clone(),
        ];
        for (k, v) in operator_env(job, rank, count) {
            opts.push("-e".into());
            opts.push(format!("{k}={v}"));
        }
        opts.extend(extra.iter().cloned());
        self.create(&pod, &opts, cmd)
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", "-v", c]);
        }
        for n in &self.networks {
            let _ = docker(&["network", "rm", n]);
        }
        for i in &self.images {
            let _ = docker(&["rmi", "-f", i]);
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn env_opts(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs.iter().flat_map(|(k, v)| ["-e".to_string(), format!("{k}={v}")]).collect()
}

fn mount(host: &Path, target: &str) -> Vec<String> {
    vec!["-v".into(), format!("{}:{target}", host.display())]
}

/// `docker wait` with a guard: the container's exit code.
fn wait_exit(name: &str, guard: Duration) -> i64 {
    let t = Instant::now();
    loop {
        let state = docker_ok(&["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name]);
        if let Some(code) = state.strip_prefix("exited ") {
            return code.trim().parse().unwrap_or(-1);
        }
        assert!(t.elapsed() < guard, "{name} still {state} after {guard:?}; logs:\n{}", logs(name));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `docker stop -t 60` (docker's own KILL only after 60 s): the container's exit code and how long
/// the `docker stop` took.
fn docker_stop(name: &str) -> (i64, Duration) {
    let t = Instant::now();
    docker_ok(&["stop", "-t", "60", name]);
    let took = t.elapsed();
    (wait_exit(name, GUARD), took)
}

fn logs(name: &str) -> String {
    let out = docker(&["logs", name]);
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn wait_file(path: &Path, guard: Duration, what: &str) {
    wait_until_for(&format!("{what}: {}", path.display()), guard, || path.exists().then_some(()));
}

/// Item 1: the image exists, is FROM scratch with rankvisor as ENTRYPOINT, and is small.
#[test]
fn image_is_small_with_rankvisor_as_entrypoint() {
    let image = image();
    let size: u64 = docker_ok(&["image", "inspect", "--format", "{{.Size}}", &image]).parse().unwrap();
    let entry = docker_ok(&["image", "inspect", "--format", "{{json .Config.Entrypoint}}", &image]);
    eprintln!("image {image}: {size} bytes ({:.2} MiB)", size as f64 / 1048576.0);
    assert_eq!(entry, r#"["/rankvisor","--"]"#);
    // With busybox (1.9 MiB) the demo image is over the slim target; rankvisor alone is under it.
    assert!(size < 8 * 1024 * 1024, "image {image} is {size} bytes: expected under 8 MiB");
    let slim = format!("{image}-slim");
    let slim_size: u64 = docker_ok(&["image", "inspect", "--format", "{{.Size}}", &slim]).parse().unwrap();
    eprintln!("image {slim}: {slim_size} bytes ({:.2} MiB)", slim_size as f64 / 1048576.0);
    assert!(slim_size <= 4 * 1024 * 1024, "image {slim} is {slim_size} bytes: expected at most 4 MiB (issue 34)");
    // rankvisor really is PID 1 and the child's parent.
    let mut s = Scene::new("pid1", &image);
    let c = s.create("pid1", &[], &["sh", "-c", "echo pid=$$ ppid=$PPID; cat /proc/1/comm"]);
    docker_ok(&["start", &c]);
    assert_eq!(wait_exit(&c, GUARD), 0, "{}", logs(&c));
    let out = logs(&c);
    assert!(out.contains("ppid=1") && out.contains("rankvisor"), "{out}");
}

/// The image ships the lean PID 1 build (`images/build.sh`: the root package alone): no dry run,
/// no YAML parser. Asking it for `dry-run` is a configuration error (64) that names the separate
/// program and how to install it, not clap's "unexpected argument".
#[test]
fn the_images_build_is_lean_and_says_it_has_no_dry_run() {
    let image = image();
    let run = |args: &[&str]| {
        let mut argv = vec!["run", "--rm", "--network", "none", "--entrypoint", "/rankvisor", image.as_str()];
        argv.extend_from_slice(args);
        docker(&argv)
    };
    let help = run(&["--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    assert_eq!(help.status.code(), Some(0), "--help: {text}");
    assert!(text.contains("rankvisor [OPTIONS] -- COMMAND"), "usage: {text}");
    // The image ships PID 1 alone: `rankvisor dry-run` is a separate program (rankvisor-dry-run),
    // which it names, with how to install it, instead of clap's "unexpected argument".
    let dry = run(&["dry-run", "job.yaml"]);
    let err = String::from_utf8_lossy(&dry.stderr);
    assert_eq!(dry.status.code(), Some(64), "dry-run in the image: {err}");
    assert!(err.contains("rankvisor-dry-run") && err.contains("PID 1 alone"), "{err}");
    assert!(err.contains("cargo install --path crates/rankvisor-dryrun"), "{err}");
    assert!(!err.contains("unexpected argument"), "{err}");
}

/// The ELF section headers of a 64-bit little-endian file: (name, size). Enough for the test below;
/// a file that is not such an ELF is a test failure naming what was wrong.
fn elf_sections(file: &[u8]) -> Vec<(String, u64)> {
    assert!(file.len() > 64 && file.starts_with(b"\x7fELF\x02\x01"), "not a 64-bit little-endian ELF file");
    let u16_at = |o: usize| u16::from_le_bytes(file[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(file[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    assert!(shoff + shentsize * shnum <= file.len() && shstrndx < shnum, "section headers out of the file");
    let header = |i: usize| shoff + i * shentsize;
    let names = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let h = header(i);
            let start = names + u32_at(h);
            let len = file[start..].iter().position(|&b| b == 0).expect("section name");
            (String::from_utf8_lossy(&file[start..start + len]).into_owned(), u64_at(h + 0x20))
        })
        .collect()
}

/// The image's PID 1 binary (copied out of the image) links a std compiled without the backtrace
/// symbolizer, and no crate has unwind tables (`images/build.sh`, RANKVISOR_STD=rebuilt): no
/// `.gcc_except_table` (landing pads), an `.eh_frame` of what musl's C objects bring (about 11 KB;
/// the toolchain's prebuilt std made it 340 KB), no gimli/addr2line (which name the DWARF sections
/// they read). The panic hook still runs in that build: config_errors.rs
/// `a_panic_in_the_lean_build_runs_the_hook_and_aborts`.
#[test]
fn the_images_binary_has_no_unwind_tables_and_no_backtrace_symbolizer() {
    let image = image();
    let name = format!("rv-elf-{}", std::process::id());
    docker_ok(&["create", "--name", &name, &image]);
    let dir = TestDir::new("image-elf");
    let out = dir.join("rankvisor");
    let cp = docker(&["cp", &format!("{name}:/rankvisor"), &out.to_string_lossy()]);
    docker(&["rm", "-f", &name]);
    assert!(cp.status.success(), "docker cp: {}", String::from_utf8_lossy(&cp.stderr));
    let file = std::fs::read(&out).expect("the copied binary");
    let sections = elf_sections(&file);
    let size = |n: &str| sections.iter().find(|(s, _)| s == n).map(|(_, z)| *z);
    eprintln!("/rankvisor: {} bytes; .text {:?}, .eh_frame {:?}", file.len(), size(".text"), size(".eh_frame"));
    assert!(size(".text").is_some(), "no .text in {sections:?}");
    assert_eq!(size(".gcc_except_table"), None, "landing pads: something was built to unwind: {sections:?}");
    let eh = size(".eh_frame").unwrap_or(0);
    assert!(eh < 32 * 1024, ".eh_frame is {eh} bytes: unwind tables are in the build (prebuilt std: ~340 KB)");
    for needle in [&b"symbolize/gimli"[..], b".debug_info", b".debug_line"] {
        let found = file.windows(needle.len()).any(|w| w == needle);
        assert!(!found, "{:?} in the binary: std's backtrace symbolizer is linked", String::from_utf8_lossy(needle));
    }
}

/// Item 2: seed 000's job as four containers; the rendezvous runs across real network namespaces.
#[test]
fn seed_job_four_containers_rendezvous_and_succeed() {
    let image = image();
    let mut s = Scene::new("seed", &image);
    let net = s.network();
    let extra = env_opts(&[("RANKVISOR_RENDEZVOUS_TIMEOUT", "60s")]);
    let names: Vec<String> = (0..4)
        .map(|r| {
            s.replica("pytest", r, 4, &net, &extra, &["sh", "-c", "echo rank=$RANK gen=$RANKVISOR_GENERATION; sleep 1"])
        })
        .collect();
    let t = Instant::now();
    for n in &names {
        docker_ok(&["start", n]);
    }
    for n in &names {
        let code = wait_exit(n, Duration::from_secs(90));
        let l = logs(n);
        assert_eq!(code, 0, "{n} exited {code}:\n{l}");
        assert!(l.contains("rank="), "{n}: the child did not run:\n{l}");
    }
    eprintln!("seed job: 4 containers, start -> all exited 0 in {:?}", t.elapsed());
    let master = logs(&names[0]);
    assert!(master.to_lowercase().contains("rendezvous"), "master logs say nothing of the rendezvous:\n{master}");
}

/// The image's rankvisor is static musl: MASTER_ADDR is resolved by musl's stub resolver, with no
/// NSS. A pod resolves the master's short name as the kubelet sets it up: a search list and
/// `ndots:5` in resolv.conf, the cluster's DNS answering only the fully qualified name. Here Docker's
/// embedded DNS (127.0.0.11) answers only `<master pod>.default.svc.cluster.local` (the master's
/// one network alias; not in /etc/hosts, not its hostname), so the short name resolves only through
/// the search list (without it the worker cannot resolve the master and the job fails with 138).
#[test]
fn master_pod_name_resolves_through_the_dns_search_list() {
    let image = image();
    let mut s = Scene::new("dns", &image);
    let net = s.network();
    let job = "dnsjob";
    let fqdn = format!("{}.default.svc.cluster.local", pod_name(job, 0));
    // The kubelet's resolv.conf for a pod in namespace `default`.
    let dns: Vec<String> = ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        .iter()
        .flat_map(|d| ["--dns-search".to_string(), d.to_string()])
        .chain(["--dns-opt".to_string(), "ndots:5".to_string()])
        .collect();
    let names: Vec<String> = (0..2)
        .map(|rank| {
            let pod = pod_name(job, rank);
            let mut opts: Vec<String> = vec!["--network".into(), net.clone()];
            if rank == 0 {
                // Docker's DNS also answers a container's hostname: the master keeps Docker's own
                // (its id), so that its short pod name is answered by nothing but the search list.
                opts.extend(["--network-alias".to_string(), fqdn.clone()]);
            } else {
                opts.extend(["--hostname".to_string(), pod.clone()]);
            }
            opts.extend(dns.iter().cloned());
            for (k, v) in operator_env(job, rank, 2) {
                opts.extend(["-e".to_string(), format!("{k}={v}")]);
            }
            opts.extend(env_opts(&[("RANKVISOR_RENDEZVOUS_TIMEOUT", "60s")]));
            // The child shows the resolver's inputs: the search list and that /etc/hosts lacks the name.
            let show = format!("cat /etc/resolv.conf; grep -c {} /etc/hosts || true", pod_name(job, 0));
            s.create(&pod, &opts, &["sh", "-c", &show])
        })
        .collect();
    for n in &names {
        docker_ok(&["start", n]);
    }
    for n in &names {
        let code = wait_exit(n, Duration::from_secs(90));
        assert_eq!(code, 0, "{n} exited {code}:\n{}", logs(n));
    }
    let worker = logs(&names[1]);
    assert!(
        worker.contains("search default.svc.cluster.local svc.cluster.local cluster.local")
            && worker.contains("ndots:5"),
        "the worker's resolv.conf is not the kubelet's:\n{worker}"
    );
    let hosts_hits = worker.lines().rev().find(|l| l.trim().parse::<u32>().is_ok()).map(str::trim);
    assert_eq!(hosts_hits, Some("0"), "the master's name must not come from /etc/hosts:\n{worker}");
    // The child runs only after the barrier, which the worker reached by that name.
    assert!(worker.contains("nameserver 127.0.0.11"), "not Docker's embedded DNS:\n{worker}");
}

/// Item 3a: `docker stop` sends TERM to PID 1; rankvisor stops the child (no trap needed) and the
/// container exits 143: a TERM, not docker's own KILL (137), which would come only after 60 s.
#[test]
fn docker_stop_terms_the_child_and_exits_143() {
    let image = image();
    let mut s = Scene::new("stop", &image);
    let opts = env_opts(&[("RANKVISOR_GRACE_PERIOD", "20s")]);
    let (c, _) = s.start_child("stop", &opts, "touch /out/started; sleep 1000");
    let (code, took) = docker_stop(&c);
    eprintln!("docker stop -> exited {code} in {took:?}");
    assert_eq!(code, 143, "{}", logs(&c));
}

/// Item 3b: a child that ignores TERM is KILLed after rankvisor's grace (2 s), not before, and long
/// before docker's own KILL (60 s): the container exits 137 after 2 s and well under 60 s.
#[test]
fn docker_stop_kills_a_term_ignoring_child_after_grace() {
    let image = image();
    let mut s = Scene::new("stopkill", &image);
    let opts = env_opts(&[("RANKVISOR_GRACE_PERIOD", "2s")]);
    let (c, _) = s.start_child("stopkill", &opts, "trap '' TERM; touch /out/started; while true; do sleep 0.2; done");
    let (code, took) = docker_stop(&c);
    eprintln!("docker stop (TERM ignored, grace 2s) -> exited {code} in {took:?}");
    assert_eq!(code, 137, "{}", logs(&c));
    // Order, not speed: the KILL came after rankvisor's grace and before docker's (a loaded machine
    // only moves `took` up, into a 58 s margin).
    assert!(took >= Duration::from_millis(1900), "KILLed before the 2 s grace ended: {took:?}");
    assert!(took < Duration::from_secs(45), "no KILL from rankvisor: docker's came after {took:?}");
}

/// Item 3c: `docker kill --signal USR1` reaches the child through rankvisor.
#[test]
fn docker_kill_usr1_reaches_the_child() {
    let image = image();
    let mut s = Scene::new("usr1", &image);
    let (c, out) = s.start_child(
        "usr1",
        &[],
        "trap 'echo usr1 > /out/usr1; exit 0' USR1; touch /out/started; while true; do sleep 0.1; done",
    );
    docker_ok(&["kill", "--signal", "USR1", &c]);
    wait_file(&out.join("usr1"), GUARD, "USR1 trap");
    assert_eq!(wait_exit(&c, GUARD), 0, "{}", logs(&c));
}

/// Item 4a: a worker cut off with `docker network disconnect` before the barrier: every replica
/// exits 138 after the (short) rendezvous timeout, the master naming the missing replica.
#[test]
fn worker_cut_off_before_the_barrier_fails_the_job_with_138() {
    let image = image();
    let mut s = Scene::new("cutoff", &image);
    let net = s.network();
    let tl = s.dir("tl");
    // Long enough for three containers started one by one on a loaded machine to meet.
    let extra = env_opts(&[("RANKVISOR_RENDEZVOUS_TIMEOUT", "10s")]);
    let names: Vec<String> = (0..4)
        .map(|r| {
            let mut e = extra.clone();
            e.extend(mount(&tl, "/tl"));
            e.extend(env_opts(&[("RANKVISOR_TERMINATION_LOG", &format!("/tl/{r}"))]));
            s.replica("pytest", r, 4, &net, &e, &["sh", "-c", "echo started > /tl/child-$RANK; sleep 30"])
        })
        .collect();
    // worker-2 (rank 3) never reaches the network.
    docker_ok(&["network", "disconnect", &net, &names[3]]);
    let t = Instant::now();
    for n in &names {
        docker_ok(&["start", n]);
    }
    for (r, n) in names.iter().enumerate() {
        let code = wait_exit(n, Duration::from_secs(90));
        assert_eq!(code, 138, "{n} exited {code}:\n{}", logs(n));
        assert!(!tl.join(format!("child-{r}")).exists(), "{n}: the child started although the barrier failed");
    }
    eprintln!("cut-off worker: all 4 exited 138 in {:?}", t.elapsed());
    let master = logs(&names[0]);
    let reason = std::fs::read_to_string(tl.join("0")).unwrap_or_default();
    eprintln!("master's termination log: {reason}");
    // worker-2 is replica index 3 (master 0, worker i -> i+1).
    assert!(
        reason.contains("replica indexes [3] missing"),
        "the master does not name the missing replica:\n{master}\n{reason}"
    );
    for (r, n) in names.iter().enumerate().skip(1) {
        let why = std::fs::read_to_string(tl.join(r.to_string())).unwrap_or_default();
        eprintln!("{n}'s termination log: {}", why.trim());
    }
}

/// Item 4b: under job scope, the master container killed mid-run: the workers stop their children
/// and exit 138 once the rendezvous timeout passes without a master.
#[test]
fn job_scope_master_killed_workers_stop_and_exit_138() {
    let image = image();
    let mut s = Scene::new("jobscope", &image);
    let net = s.network();
    let out = s.dir("out");
    let mut extra = env_opts(&[
        // Long enough for three containers started one by one on a loaded machine to meet.
        ("RANKVISOR_RENDEZVOUS_TIMEOUT", "10s"),
        ("RANKVISOR_RESTART_SCOPE", "job"),
        ("RANKVISOR_GRACE_PERIOD", "2s"),
    ]);
    extra.extend(mount(&out, "/out"));
    let cmd = [
        "sh",
        "-c",
        "trap 'echo term > /out/term-$RANK; exit 143' TERM; touch /out/started-$RANK; while true; do sleep 0.1; done",
    ];
    let names: Vec<String> = (0..3).map(|r| s.replica("pytest", r, 3, &net, &extra, &cmd)).collect();
    for n in &names {
        docker_ok(&["start", n]);
    }
    for r in 0..3 {
        wait_file(&out.join(format!("started-{r}")), GUARD, "children started after the barrier");
    }
    let t = Instant::now();
    docker_ok(&["kill", &names[0]]);
    for (i, n) in names.iter().enumerate().skip(1) {
        let code = wait_exit(n, Duration::from_secs(90));
        assert_eq!(code, 138, "{n} exited {code}:\n{}", logs(n));
        assert!(out.join(format!("term-{i}")).exists(), "{n}: the child was not TERMed");
    }
    eprintln!("job scope, master killed: workers exited 138 in {:?}", t.elapsed());
}

/// Item 5: a bind-mounted labels file flipped to UnschedulablePendingReboot: the container exits
/// 138 with the reason in its (bind-mounted) termination log.
#[test]
fn labels_file_flip_exits_138_with_termination_log() {
    let image = image();
    let mut s = Scene::new("labels", &image);
    let hl = s.dir("hl");
    let tl = s.dir("tl");
    let labels = hl.join("labels");
    std::fs::write(&labels, "sagemaker.amazonaws.com/node-health-status=\"Schedulable\"\n").unwrap();
    let mut opts = mount(&hl, "/hl");
    opts.extend(mount(&tl, "/tl"));
    opts.extend(env_opts(&[
        ("RANKVISOR_NODE_HEALTH", "file:/hl/labels"),
        ("RANKVISOR_TERMINATION_LOG", "/tl/termination-log"),
        ("RANKVISOR_GRACE_PERIOD", "2s"),
    ]));
    let (c, _) = s.start_child("labels", &opts, "touch /out/started; sleep 1000");
    let tmp = hl.join("labels.tmp");
    std::fs::write(&tmp, "sagemaker.amazonaws.com/node-health-status=\"UnschedulablePendingReboot\"\n").unwrap();
    std::fs::rename(&tmp, &labels).unwrap();
    let t = Instant::now();
    let code = wait_exit(&c, GUARD);
    let reason = std::fs::read_to_string(tl.join("termination-log")).unwrap_or_default();
    eprintln!("labels flip -> exited {code} in {:?}; termination log: {reason}", t.elapsed());
    assert_eq!(code, 138, "{}", logs(&c));
    assert!(reason.contains("UnschedulablePendingReboot"), "termination log: {reason:?}");
}

/// The figure: `docker start` -> the child running (the child touches a file in a bind mount; its
/// mtime is when it ran), over a few runs; printed with the image size.
#[test]
fn bench_container_start_to_child_started() {
    let image = image();
    let mut s = Scene::new("bench", &image);
    let out = s.dir("out");
    let mut samples = vec![];
    for i in 0..5 {
        let c = s.create(&format!("b{i}"), &mount(&out, "/out"), &["sh", "-c", &format!("touch /out/t{i}")]);
        let before = SystemTime::now();
        docker_ok(&["start", &c]);
        assert_eq!(wait_exit(&c, GUARD), 0, "{}", logs(&c));
        let m = std::fs::metadata(out.join(format!("t{i}"))).unwrap().modified().unwrap();
        samples.push(m.duration_since(before).unwrap_or_default());
    }
    samples.sort();
    let size: u64 = docker_ok(&["image", "inspect", "--format", "{{.Size}}", &image]).parse().unwrap();
    eprintln!(
        "FIGURE container start -> child started: median {:?}, min {:?}, max {:?} over {} runs; image {image} {:.2} MiB",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
        samples.len(),
        size as f64 / 1048576.0
    );
}

/// The probes of examples/k8s/ answer on the container's :9400 (the default --http-addr).
#[test]
fn probes_and_metrics_answer_on_9400() {
    let image = image();
    let mut s = Scene::new("probes", &image);
    let (c, _) = s.start_child("probes", &[], "touch /out/started; sleep 1000");
    let ip = docker_ok(&["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &c]);
    let addr: SocketAddr = format!("{ip}:9400").parse().unwrap_or_else(|e| panic!("container address {ip:?}: {e}"));
    let get = |path: &str| http_get_at(addr, path).unwrap_or_else(|| panic!("GET {path} on {addr}: no answer"));
    wait_until_for("/readyz to answer 200", GUARD, || http_get_at(addr, "/readyz").filter(|(code, _)| *code == 200));
    assert_eq!(get("/healthz").0, 200);
    let (code, metrics) = get("/metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("rankvisor_training_process_up 1"), "{metrics}");
    let (code, status) = get("/status");
    assert_eq!(code, 200);
    let report: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
    assert_eq!(report["state"], "Running", "{status}");
    docker_ok(&["stop", &c]);
    assert_eq!(wait_exit(&c, GUARD), 143);
}

/// images/pytorch.Dockerfile builds (with this image standing in for the PyTorch base, which
/// would come from a registry) and its entrypoint is rankvisor as PID 1.
#[test]
fn pytorch_dockerfile_adds_rankvisor_to_a_base() {
    let image = image();
    let mut s = Scene::new("pytorchdf", &image);
    let ctx = s.dir("ctx");
    let dockerfile = format!("{}/images/pytorch.Dockerfile", env!("CARGO_MANIFEST_DIR"));
    let (base, slim) = (format!("BASE={image}"), format!("RANKVISOR_IMAGE={image}-slim"));
    s.image = s.build(&ctx, &["-f", &dockerfile, "--build-arg", &base, "--build-arg", &slim]);
    let c = s.create("pytorchdf", &[], &["sh", "-c", "echo ppid=$PPID"]);
    docker_ok(&["start", &c]);
    assert_eq!(wait_exit(&c, GUARD), 0, "{}", logs(&c));
    assert!(logs(&c).contains("ppid=1"), "{}", logs(&c));
}

/// The static binary taken out of the slim image the way a user's Dockerfile takes it (one `COPY
/// --from=` line, no stage, no shell, no libc in the image), with a static busybox standing in for
/// the user's program: PID 1 is rankvisor, the program its child, its exit status the container's.
#[test]
fn a_users_from_scratch_image_copies_the_static_binary_from_the_slim_image() {
    let image = image();
    let mut s = Scene::new("copyfrom", &image);
    let ctx = s.dir("ctx");
    // images/build.sh put Debian's static busybox on this machine for the demo image.
    let busybox = std::fs::read("/bin/busybox").expect("/bin/busybox (busybox-static, which images/build.sh installs)");
    std::fs::write(ctx.join("busybox"), busybox).unwrap();
    std::fs::set_permissions(ctx.join("busybox"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dockerfile = format!(
        "FROM scratch\nCOPY --from={image}-slim /rankvisor /rankvisor\nCOPY busybox /bin/sh\n\
         ENTRYPOINT [\"/rankvisor\", \"--restart-policy\", \"Never\", \"--\"]\nCMD [\"/bin/sh\", \"-c\", \"echo ppid=$PPID; exit 3\"]\n"
    );
    std::fs::write(ctx.join("Dockerfile"), dockerfile).unwrap();
    let tag = s.build(&ctx, &[]);
    let version = docker(&["run", "--rm", "--network", "none", "--entrypoint", "/rankvisor", &tag, "--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("rankvisor {}", env!("CARGO_PKG_VERSION")),
        "{}",
        String::from_utf8_lossy(&version.stderr)
    );
    s.image = tag;
    let c = s.create("copyfrom", &["--network".into(), "none".into()], &[]);
    docker_ok(&["start", &c]);
    assert_eq!(wait_exit(&c, GUARD), 3, "the child's exit status is the container's: {}", logs(&c));
    assert!(logs(&c).contains("ppid=1"), "the child's parent is PID 1, rankvisor: {}", logs(&c));
}

/// Issue 26 in a container: with `--log-rules` the child's stdout goes through rankvisor's relay
/// to Docker's log pipe (a pipe: the relay may tee what a child writes in bulk, and writes a line
/// written now and then). `docker logs` has every byte of both, in order, and a `faultOnMatch`
/// line stops the child (143, the reason on stderr).
#[test]
fn log_rules_in_a_container_relay_every_byte_to_docker_logs_and_a_fault_stops_the_child() {
    let image = image();
    let mut s = Scene::new("logrules", &image);
    let rules = s.dir("rules");
    std::fs::write(rules.join("rules.json"), r#"[{"name": "Fatal", "logPattern": ".*FATAL.*", "faultOnMatch": true}]"#)
        .unwrap();
    let line = "step loss=0.5 and some padding to make a longer line";
    let script = format!(
        "readlink /proc/1/fd/1 > /rules/pid1-stdout; yes '{line}' | head -n 200000; i=0; while [ $i -lt 50 ]; do echo \"slow $i\"; i=$((i+1)); done; \
         printf 'FATAL: boom\\n'; exec sleep 600"
    );
    let mut opts = mount(&rules, "/rules");
    opts.extend(["--entrypoint".to_string(), "/rankvisor".to_string()]);
    let c = s.create(
        "relay",
        &opts,
        &["--log-rules", "/rules/rules.json", "--restart-policy", "Never", "--", "sh", "-c", &script],
    );
    docker_ok(&["start", &c]);
    let code = wait_exit(&c, GUARD);
    let out = docker(&["logs", &c]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code, 143, "stopped by the rule: {stderr}");
    let pid1_stdout = std::fs::read_to_string(rules.join("pid1-stdout")).unwrap();
    assert!(pid1_stdout.starts_with("pipe:["), "rankvisor's stdout in a container is a pipe: {pid1_stdout}");
    assert!(stderr.contains("LogFault_Fatal"), "{stderr}");
    let mut expected = format!("{line}\n").repeat(200_000);
    (0..50).for_each(|i| expected.push_str(&format!("slow {i}\n")));
    expected.push_str("FATAL: boom\n");
    let got = String::from_utf8_lossy(&out.stdout);
    assert_eq!(got.len(), expected.len(), "every byte reached docker logs");
    assert!(got == expected, "the bytes are the child's, in order");
}

/// A context for an image FROM `image` with this machine's Python (its interpreter, the C
/// libraries it links and its standard library's top-level modules and `encodings`: enough for
/// `python3 -S`), under /py.
fn python_image_context(ctx: &Path, image: &str) {
    let home = Path::new("/root/.pyenv/versions/3.11.7");
    assert!(home.join("bin/python3.11").exists(), "this test uses the Python at {}", home.display());
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    };
    copy(&home.join("bin/python3.11"), &ctx.join("py/bin/python3"));
    copy(&home.join("lib/libpython3.11.so.1.0"), &ctx.join("py/lib/libpython3.11.so.1.0"));
    for lib in ["libc.so.6", "libm.so.6"] {
        copy(&Path::new("/lib/x86_64-linux-gnu").join(lib), &ctx.join("glibc").join(lib));
    }
    copy(Path::new("/lib64/ld-linux-x86-64.so.2"), &ctx.join("ld/ld-linux-x86-64.so.2"));
    let stdlib = home.join("lib/python3.11");
    for entry in std::fs::read_dir(&stdlib).unwrap().flatten() {
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "py") {
            copy(&p, &ctx.join("py/lib/python3.11").join(entry.file_name()));
        }
    }
    for entry in std::fs::read_dir(stdlib.join("encodings")).unwrap().flatten() {
        if entry.path().is_file() {
            copy(&entry.path(), &ctx.join("py/lib/python3.11/encodings").join(entry.file_name()));
        }
    }
    let dockerfile = format!(
        "FROM {image}\nCOPY py/ /py/\nCOPY glibc/ /lib/x86_64-linux-gnu/\nCOPY ld/ /lib64/\n\
         ENV PYTHONHOME=/py LD_LIBRARY_PATH=/py/lib:/lib/x86_64-linux-gnu\n"
    );
    std::fs::write(ctx.join("Dockerfile"), dockerfile).unwrap();
}

/// Issue 36: rankvisor as PID 1 in Docker with the default security profile (no `SYS_PTRACE`)
/// reads its child's Python stack: `/stacks` names the function the child waits in, read by the
/// `rankvisor-stacks` the dev image carries in /bin.
#[test]
fn stacks_are_read_in_a_container_with_the_default_security_profile() {
    let image = image();
    let mut s = Scene::new("stacks", &image);
    let ctx = s.dir("ctx");
    python_image_context(&ctx, &image);
    s.image = s.build(&ctx, &[]);
    let script =
        "import time\ndef slow_here():\n    open('/out/started', 'w').close()\n    time.sleep(600)\nslow_here()\n";
    let out = s.dir("out");
    std::fs::write(out.join("hang.py"), script).unwrap();
    let c = s.create("stacks", &mount(&out, "/out"), &["/py/bin/python3", "-S", "/out/hang.py"]);
    docker_ok(&["start", &c]);
    wait_file(&out.join("started"), GUARD, "the Python child in slow_here");
    let ip = docker_ok(&["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &c]);
    let addr: SocketAddr = format!("{ip}:9400").parse().unwrap_or_else(|e| panic!("container address {ip:?}: {e}"));
    let body = wait_until_for("/stacks to name slow_here", GUARD, || {
        http_get_at(addr, "/stacks")
            .filter(|(code, body)| *code == 200 && body.contains("\"slow_here\""))
            .map(|(_, b)| b)
    });
    let snapshot: serde_json::Value = serde_json::from_str(&body).unwrap();
    let p = &snapshot["processes"][0];
    assert_eq!(p["reason"], serde_json::Value::Null, "{snapshot:#}");
    assert_eq!(p["threads"][0]["frames"][0]["line"], 4, "{snapshot:#}");
    assert!(snapshot["reader"].as_str().unwrap_or_default().starts_with("py-spy"), "{snapshot:#}");
    docker_ok(&["stop", &c]);
}
