//! Kubeflow's own example manifests (the training-operator's `examples/pytorch/`, release-1.9), as
//! the job shapes re-written in `tests/kubeflow_examples/`, through `rankvisor dry-run`: each one
//! either runs (with `--command` where the image's entrypoint is needed, `--path-map` where a path
//! inside the image is) or the dry run says in ONE line what a local run cannot do, and exits 64.
//! No torch here: `tests/heavy/training.rs` runs sendrecv, the elastic echo and cpu-demo with real torch.

use std::path::{Path, PathBuf};

use crate::common;
use common::dry_run::{json_lines, DryRun};
use common::{rankvisor, repo_file, TestDir};

/// A manifest of `tests/kubeflow_examples/`.
fn manifest(name: &str) -> PathBuf {
    let path = repo_file(&format!("tests/kubeflow_examples/{name}"));
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// What a refused or warned run prints, read from its stderr.
impl DryRun {
    /// The non-empty lines of stderr.
    fn lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| !l.trim().is_empty()).collect()
    }

    /// The one line a refused run prints, checked to be the only one and to contain `want`.
    fn one_line(&self, want: &str) -> &str {
        assert_eq!(self.code, 64, "exit 64: a job that cannot run here: {}", self.explain());
        let lines = self.lines();
        let [line] = lines.as_slice() else { panic!("one line expected: {}", self.explain()) };
        assert!(line.contains(want), "{want:?} in {line:?}");
        line
    }

    /// The `warning: not emulated here:` lines.
    fn warnings(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.contains("warning: not emulated here:")).collect()
    }
}

/// `rankvisor dry-run --output json ARGS... MANIFEST` in `cwd`, on a free master port, with `PATH`
/// set to `path` when given (what a user's shell would have).
fn dry_run(manifest: &Path, cwd: &Path, path: Option<&str>, args: &[&str]) -> DryRun {
    let mut cmd = rankvisor();
    cmd.args(["dry-run", "--output", "json", "--master-port", "0", "--timeout", "60s"]).args(args).arg(manifest);
    cmd.current_dir(cwd);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    DryRun::new(&cmd.output().expect("run rankvisor dry-run"), json_lines)
}

/// A `bin/` in `dir` holding stand-ins for the images' programs (`python`, `python3`, `torchrun`),
/// so the dry run gets past them to what it says about the rest; none of them is run here.
fn image_programs(dir: &TestDir) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    for p in ["python", "python3", "torchrun"] {
        dir.script(&format!("bin/{p}"), "exit 99");
    }
    bin.display().to_string()
}

/// A local stand-in for the mnist image's script: prints what it was given and the operator's env.
const MNIST_STANDIN: &str = "import os, sys\nprint('MNIST', ' '.join(sys.argv[1:]), 'RANK=' + os.environ['RANK'], 'WORLD_SIZE=' + os.environ['WORLD_SIZE'])\n";

/// examples/pytorch/simple.yaml: the script is inside the image; `--path-map` puts a local one in
/// its place and the job runs.
#[test]
fn simple_names_the_image_path_then_runs_with_path_map() {
    let dir = TestDir::new("kf-simple");
    let r = dry_run(&manifest("simple.yaml"), dir.path(), None, &[]);
    let line = r.one_line("replica type Master runs /opt/pytorch-mnist/mnist.py, which is not on this machine");
    assert!(line.contains("--path-map IMAGE_DIR=LOCAL_DIR"), "{line}");

    std::fs::write(dir.join("mnist.py"), MNIST_STANDIN).expect("write mnist.py");
    let map = format!("/opt/pytorch-mnist={}", dir.path().display());
    let r = dry_run(&manifest("simple.yaml"), dir.path(), None, &["--path-map", &map]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert!(r.stderr.contains("pytorch-simple-master-0 | MNIST --epochs=1 RANK=0 WORLD_SIZE=2"), "{}", r.explain());
    assert!(r.stderr.contains("pytorch-simple-worker-0 | MNIST --epochs=1 RANK=1 WORLD_SIZE=2"), "{}", r.explain());
    assert!(r.warnings().is_empty(), "imagePullPolicy needs no warning: {}", r.explain());
}

/// mnist2's sample job (master, April 2024): as simple, plus a Kueue queue label named as not
/// emulated in the one warning line.
#[test]
fn mnist2_runs_with_path_map_and_names_its_kueue_label() {
    let dir = TestDir::new("kf-mnist2");
    let r = dry_run(&manifest("mnist2.yaml"), dir.path(), None, &[]);
    r.one_line("replica type Master runs /opt/pytorch-mnist/mnist.py, which is not on this machine");

    std::fs::write(dir.join("mnist.py"), MNIST_STANDIN).expect("write mnist.py");
    let map = format!("/opt/pytorch-mnist={}", dir.path().display());
    let r = dry_run(&manifest("mnist2.yaml"), dir.path(), None, &["--path-map", &map]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert!(r.stderr.contains("pytorch-simple-worker-0 | MNIST --epochs=1 RANK=1 WORLD_SIZE=2"), "{}", r.explain());
    let warnings = r.warnings();
    let [w] = warnings.as_slice() else { panic!("one warning line: {}", r.explain()) };
    assert!(w.contains("metadata.labels[kueue.x-k8s.io/queue-name] (Kueue's admission"), "{w}");
}

/// mnist v1 gloo: no command (the image's entrypoint); `--command` gives it, the container's
/// args follow it, and the GPU limit is named in the one warning line (gloo runs on CPU).
#[test]
fn mnist_gloo_names_the_entrypoint_then_runs_with_command_and_its_args() {
    let dir = TestDir::new("kf-mnist-gloo");
    let r = dry_run(&manifest("mnist_gloo.yaml"), dir.path(), None, &[]);
    let line = r.one_line(
        "replica type Master runs the entrypoint of image \"kubeflow/pytorch-dist-mnist:latest\", which the dry run cannot run",
    );
    assert!(line.contains("--command Master='...'"), "{line}");

    let r = dry_run(
        &manifest("mnist_gloo.yaml"),
        dir.path(),
        None,
        &["--command", "Master=echo entrypoint", "--command", "Worker=echo entrypoint"],
    );
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    for pod in ["pytorch-dist-mnist-gloo-master-0", "pytorch-dist-mnist-gloo-worker-0"] {
        assert!(r.stderr.contains(&format!("{pod} | entrypoint --backend gloo")), "{pod}: {}", r.explain());
    }
    let warnings = r.warnings();
    let [w] = warnings.as_slice() else { panic!("one warning line: {}", r.explain()) };
    assert!(w.contains("resources.limits[nvidia.com/gpu]"), "{w}");
}

/// mnist v1 nccl: the entrypoint first; given with `--command`, nccl needs an NVIDIA GPU, which
/// this machine either has (the job runs) or lacks (one line, exit 64).
#[test]
fn mnist_nccl_names_the_entrypoint_then_the_gpu_nccl_needs() {
    let dir = TestDir::new("kf-mnist-nccl");
    let r = dry_run(&manifest("mnist_nccl.yaml"), dir.path(), None, &[]);
    r.one_line("replica type Master runs the entrypoint of image \"kubeflow/pytorch-dist-mnist:latest\"");

    let commands = ["--command", "Master=echo entrypoint", "--command", "Worker=echo entrypoint"];
    let r = dry_run(&manifest("mnist_nccl.yaml"), dir.path(), None, &commands);
    if Path::new("/dev/nvidiactl").exists() {
        assert_eq!(r.code, 0, "this machine has an NVIDIA GPU: {}", r.explain());
        assert!(r.stderr.contains("pytorch-dist-mnist-nccl-master-0 | entrypoint --backend nccl"), "{}", r.explain());
    } else {
        let line = r.one_line("replica type Master uses the nccl backend (\"nccl\" in its command) (it asks for nvidia.com/gpu: 1), which needs an NVIDIA GPU, and this machine has none");
        assert!(line.contains("a local run can use gloo on CPU, not nccl"), "{line}");
    }
}

/// smoke-dist sendrecv: the image's entrypoint runs the test; `--command` gives it (the run with
/// real torch is in tests/heavy/training.rs).
#[test]
fn sendrecv_names_the_entrypoint_and_the_flag_that_gives_it() {
    let dir = TestDir::new("kf-sendrecv");
    let r = dry_run(&manifest("sendrecv.yaml"), dir.path(), None, &[]);
    let line = r.one_line(
        "replica type Master runs the entrypoint of image \"kubeflow/pytorch-dist-sendrecv-test:latest\", which the dry run cannot run (it pulls no image): give its command with --command Master='...'",
    );
    assert!(!line.contains("Worker"), "the first replica type that cannot run is named: {line}");
}

/// elastic echo: `./echo.py` from the image's WORKDIR, which is not this directory; run in
/// tests/kubeflow_examples/ it starts as is (with real torch in tests/heavy/training.rs). Without python
/// on PATH that is the one line.
#[test]
fn elastic_echo_names_the_script_outside_this_directory_or_python_off_the_path() {
    let dir = TestDir::new("kf-echo");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let r = dry_run(&manifest("elastic_echo.yaml"), dir.path(), Some(&empty.display().to_string()), &[]);
    let line = r.one_line("replica type Worker runs python, which is on no directory of this machine's PATH");
    assert!(line.contains("(a program of image \"kubeflow/pytorch-elastic-example-echo:latest\")"), "{line}");

    let bin = image_programs(&dir);
    let r = dry_run(&manifest("elastic_echo.yaml"), dir.path(), Some(&bin), &[]);
    r.one_line(&format!(
        "replica type Worker runs ./echo.py from its working directory (image \"kubeflow/pytorch-elastic-example-echo:latest\"'s WORKDIR, unknown here), and {} has no ./echo.py: run the dry run in the directory that holds it",
        dir.path().display()
    ));
}

/// elastic imagenet: the script and dataset are inside the image (one line); with its command
/// given, the Worker-only elastic job runs and the HPA's metrics are named in the one warning line.
#[test]
fn elastic_imagenet_names_the_image_script_and_its_hpa_metrics() {
    let dir = TestDir::new("kf-imagenet");
    let bin = image_programs(&dir);
    let r = dry_run(&manifest("elastic_imagenet.yaml"), dir.path(), Some(&bin), &[]);
    r.one_line("replica type Worker runs /workspace/examples/imagenet.py, which is not on this machine (a path inside image \"kubeflow/pytorch-elastic-example-imagenet:latest\"?)");

    let r =
        dry_run(&manifest("elastic_imagenet.yaml"), dir.path(), None, &["--command", "Worker=echo \"$PET_NNODES\""]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
    assert!(r.stderr.contains("elastic-example-imagenet-worker-1 | 1:3"), "PET_NNODES=min:max: {}", r.explain());
    let warnings = r.warnings();
    let [w] = warnings.as_slice() else { panic!("one warning line: {}", r.explain()) };
    assert!(w.contains("spec.elasticPolicy.metrics (the operator's HorizontalPodAutoscaler)"), "{w}");
}

/// cpu-demo: `torchrun demo.py`: torchrun must be on PATH and demo.py in the directory the dry
/// run starts in (the image's WORKDIR is /); each missing piece is one line.
#[test]
fn cpu_demo_names_torchrun_off_the_path_then_the_script_outside_this_directory() {
    let dir = TestDir::new("kf-cpu-demo");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let r = dry_run(&manifest("cpu_demo.yaml"), dir.path(), Some(&empty.display().to_string()), &[]);
    let line = r.one_line("replica type Master runs torchrun, which is on no directory of this machine's PATH (a program of image \"pytorch-cpu:py3.8\"): put it on PATH (a venv's bin/, say), or give the command with --command Master='...'");
    assert!(!line.contains("demo.py"), "{line}");

    let bin = image_programs(&dir);
    let r = dry_run(&manifest("cpu_demo.yaml"), dir.path(), Some(&bin), &[]);
    r.one_line(&format!("replica type Master runs demo.py from its working directory (image \"pytorch-cpu:py3.8\"'s WORKDIR, unknown here), and {} has no demo.py", dir.path().display()));
}

/// deepspeed-demo: the script is at the image's root and the job asks for GPUs: one line.
#[test]
fn deepspeed_demo_names_the_script_inside_the_image() {
    let dir = TestDir::new("kf-deepspeed");
    let bin = image_programs(&dir);
    let r = dry_run(&manifest("deepspeed_demo.yaml"), dir.path(), Some(&bin), &[]);
    r.one_line("replica type Master runs /train_bert_ds.py, which is not on this machine (a path inside image \"kubeflow/pytorch-deepspeed-demo:latest\"?)");
}

/// Every manifest of tests/kubeflow_examples/ is covered above and names its upstream source and
/// licence in its header.
#[test]
fn every_modelled_example_names_its_source_and_licence() {
    let dir = repo_file("tests/kubeflow_examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("tests/kubeflow_examples")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cpu_demo.yaml",
            "deepspeed_demo.yaml",
            "elastic_echo.yaml",
            "elastic_imagenet.yaml",
            "mnist2.yaml",
            "mnist_gloo.yaml",
            "mnist_nccl.yaml",
            "sendrecv.yaml",
            "simple.yaml"
        ]
    );
    for name in names {
        let text = std::fs::read_to_string(dir.join(&name)).expect("manifest");
        let header: String = text.lines().take_while(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n");
        for want in ["Models examples/pytorch/", "Kubeflow training-operator", "Apache-2.0", "not a copy"] {
            assert!(header.contains(want), "{name}'s header names {want:?}: {header}");
        }
    }
}
