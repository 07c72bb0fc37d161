//! Running a manifest written for a cluster on this machine: `--command TYPE=CMD` stands for the
//! image's entrypoint, `--path-map IMAGE_PATH=LOCAL_PATH` maps paths inside the image onto local
//! ones, and a container whose command is rankvisor itself hands its child to the dry run's
//! launcher. The manifest is not edited: the admitted job is.

use std::path::{Path, PathBuf};

use crate::k8s::container::{Container, EnvSource};
use crate::k8s::quantity::format_quantity;
use crate::kubelet::replica::ReplicaType;
use crate::pytorchjob::PyTorchJob;
use rankvisor_core::untrusted::escape::escape;

/// What this machine offers that a manifest written for a cluster may count on: read once at the
/// edge ([`Machine::this`]), so [`localize`] stays a function of its inputs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Machine {
    /// `PATH`, where a program named without a `/` is looked up (a container's own `PATH` env
    /// value wins).
    pub path: String,
    /// Whether an NVIDIA GPU is here (`/dev/nvidiactl`): the nccl backend needs one.
    pub nvidia_gpu: bool,
}

impl Machine {
    /// This machine.
    pub(crate) fn this() -> Self {
        Self { path: std::env::var("PATH").unwrap_or_default(), nvidia_gpu: Path::new("/dev/nvidiactl").exists() }
    }
}

/// A GPU resource name (`nvidia.com/gpu`, `amd.com/gpu`, ...).
fn is_gpu_resource(name: &str) -> bool {
    name.ends_with("/gpu")
}

/// `--command TYPE=CMD`: the shell command a replica type runs instead of its image's entrypoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandOverride {
    /// Master or Worker.
    pub rtype: ReplicaType,
    /// A `sh -c` command line; the container's `args` follow as `"$@"`.
    pub command: String,
}

/// `--path-map IMAGE_PATH=LOCAL_PATH`: a path prefix inside the image and where it is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathMap {
    /// The prefix as the manifest writes it, e.g. `/workspace`.
    pub image_path: String,
    /// The local directory it stands for (absolute).
    pub local_path: String,
}

/// Read `--command TYPE=CMD` (TYPE: Master or Worker, any case).
pub(crate) fn parse_command_override(spec: &str) -> Result<CommandOverride, String> {
    let bad =
        |why: &str| format!("invalid --command {spec:?}: {why}: expected TYPE=COMMAND, e.g. Worker='python train.py'");
    let (kind, command) = spec.split_once('=').ok_or_else(|| bad("no '='"))?;
    let rtype = [ReplicaType::Master, ReplicaType::Worker]
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(kind.trim()))
        .ok_or_else(|| bad(&format!("{kind:?} is not a replica type (Master or Worker)")))?;
    if command.trim().is_empty() {
        return Err(bad("the command is empty"));
    }
    Ok(CommandOverride { rtype, command: command.to_string() })
}

/// Read `--path-map IMAGE_PATH=LOCAL_PATH`; a relative local path is taken from `cwd`.
pub(crate) fn parse_path_map(spec: &str, cwd: &Path) -> Result<PathMap, String> {
    let bad = |why: &str| {
        format!("invalid --path-map {spec:?}: {why}: expected IMAGE_PATH=LOCAL_PATH, e.g. /workspace=./examples")
    };
    let (image, local) = spec.split_once('=').ok_or_else(|| bad("no '='"))?;
    if !image.starts_with('/') || image.trim_end_matches('/').is_empty() {
        return Err(bad(&format!("{image:?} is not an absolute directory below / inside the image")));
    }
    if local.is_empty() {
        return Err(bad("the local path is empty"));
    }
    let local = cwd.join(local);
    Ok(PathMap {
        image_path: image.trim_end_matches('/').to_string(),
        local_path: local.to_string_lossy().trim_end_matches('/').to_string(),
    })
}

/// `word` with a mapped prefix replaced: the whole word, or the value after `=` (`--data=/x`).
fn map_word(word: &str, maps: &[PathMap]) -> String {
    let (head, path) = match word.split_once('=') {
        Some((h, p)) if !word.starts_with('/') => (format!("{h}="), p),
        _ => (String::new(), word),
    };
    for m in maps {
        if let Some(rest) = path.strip_prefix(m.image_path.as_str()) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{head}{}{rest}", m.local_path);
            }
        }
    }
    word.to_string()
}

/// Whether a command runs rankvisor itself (`/rankvisor ... -- CHILD`, as examples/k8s does).
fn runs_rankvisor(argv: &[String]) -> bool {
    argv.first().is_some_and(|a| Path::new(a).file_name().is_some_and(|n| n == "rankvisor"))
}

/// Apply the overrides to every replica type; returns the notes to print, or why a replica type
/// cannot run here (one line, naming what a local run cannot do and the flag that helps).
pub(crate) fn localize(
    job: &mut PyTorchJob,
    commands: &[CommandOverride],
    maps: &[PathMap],
    cwd: &Path,
    machine: &Machine,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    for spec in [job.master.as_mut(), job.worker.as_mut()].into_iter().flatten() {
        let rtype = spec.rtype;
        let gpus: Vec<String> = spec
            .resources
            .0
            .iter()
            .filter(|(name, n)| is_gpu_resource(name) && **n > 0)
            .map(|(name, n)| format!("{}: {}", escape(name), format_quantity(name, *n)))
            .collect();
        let c: &mut Container = &mut spec.container;
        let overridden = commands.iter().rev().find(|o| o.rtype == rtype);
        if let Some(o) = overridden {
            c.command = if c.args.is_empty() {
                vec!["sh".into(), "-c".into(), o.command.clone()]
            } else {
                vec!["sh".into(), "-c".into(), format!("{} \"$@\"", o.command), "sh".into()]
            };
        }
        let argv = c.argv();
        if runs_rankvisor(&argv) {
            let split = argv.iter().position(|a| a == "--");
            let child: Vec<String> = split.map(|i| argv[i + 1..].to_vec()).unwrap_or_default();
            let options = split.map(|i| argv[1..i].join(" ")).unwrap_or_default();
            notes.push(format!(
                "{rtype}'s command is rankvisor itself ({}): the dry run's launcher takes its place (its own options{} are not used)",
                argv[0],
                if options.is_empty() { String::new() } else { format!(" {options}") }
            ));
            c.command = child;
            c.args = Vec::new();
        }
        if !maps.is_empty() {
            c.command = c.command.iter().map(|w| map_word(w, maps)).collect();
            c.args = c.args.iter().map(|w| map_word(w, maps)).collect();
            c.working_dir = c.working_dir.as_deref().map(|w| map_word(w, maps));
            for (_, source) in &mut c.env {
                if let EnvSource::Value(v) = source {
                    *v = map_word(v, maps);
                }
            }
        }
        // Without `command` the image's ENTRYPOINT runs (with `args` as its arguments).
        if c.command.is_empty() {
            return Err(format!(
                "replica type {rtype} runs the entrypoint of image {:?}, which the dry run cannot run (it pulls no image): give its command with --command {rtype}='...'",
                c.image
            ));
        }
        // A command given on the command line is the user's to get right.
        if overridden.is_none() {
            if let Some(missing) = missing_file(c, cwd, machine) {
                return Err(missing.explain(rtype, &c.image));
            }
        }
        // The backend is in the container's args, which no flag replaces: say so before it
        // crash-loops on "NCCL is not available".
        if let Some(word) =
            c.argv().iter().find(|w| *w == "nccl" || w.ends_with("=nccl")).filter(|_| !machine.nvidia_gpu)
        {
            let asks = if gpus.is_empty() { String::new() } else { format!(" (it asks for {})", gpus.join(", ")) };
            return Err(format!(
                "replica type {rtype} uses the nccl backend ({word:?} in its command){asks}, which needs an NVIDIA GPU, and this machine has none: a local run can use gloo on CPU, not nccl"
            ));
        }
    }
    Ok(notes)
}

/// A file a container runs that this machine lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Missing {
    /// An absolute path (a program or a script inside the image).
    Absolute(String),
    /// A script relative to the working directory: the image's WORKDIR is not this one.
    Relative {
        /// The script as written.
        script: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// A program named without a `/` that is on no directory of `PATH`.
    NotOnPath(String),
}

impl Missing {
    /// One line; the manifest's words escaped (they come from outside).
    fn explain(&self, rtype: ReplicaType, image: &str) -> String {
        let command = format!("give the command with --command {rtype}='...'");
        match self {
            Self::Absolute(path) => format!(
                "replica type {rtype} runs {}, which is not on this machine (a path inside image {image:?}?): map its directory with --path-map IMAGE_DIR=LOCAL_DIR, or {command}",
                escape(path)
            ),
            Self::Relative { script, dir } => format!(
                "replica type {rtype} runs {script} from its working directory (image {image:?}'s WORKDIR, unknown here), and {} has no {script}: run the dry run in the directory that holds it, or {command}",
                escape(&dir.display().to_string()),
                script = escape(script)
            ),
            Self::NotOnPath(program) => format!(
                "replica type {rtype} runs {}, which is on no directory of this machine's PATH (a program of image {image:?}): put it on PATH (a venv's bin/, say), or {command}",
                escape(program)
            ),
        }
    }
}

/// The program or the Python script a container runs, if it names a file this machine lacks:
/// the program (absolute, relative to the working directory, or looked up on `PATH`), or the
/// first `*.py` word (a relative one from `workingDir`, else from `cwd`, as the image's WORKDIR is
/// unknown here).
fn missing_file(c: &Container, cwd: &Path, machine: &Machine) -> Option<Missing> {
    let argv = c.argv();
    let base = c.working_dir.as_deref().map_or_else(|| cwd.to_path_buf(), |w| cwd.join(w));
    let missing = |word: &str| {
        if word.starts_with('/') {
            Missing::Absolute(word.to_string())
        } else {
            Missing::Relative { script: word.to_string(), dir: base.clone() }
        }
    };
    let program = argv.first()?;
    if program.contains('/') {
        if !base.join(program).exists() {
            return Some(missing(program));
        }
    } else {
        let path = c
            .env
            .iter()
            .rev()
            .find_map(|(k, v)| match v {
                EnvSource::Value(v) if k == "PATH" => Some(v.as_str()),
                _ => None,
            })
            .unwrap_or(&machine.path);
        if !path.split(':').filter(|d| !d.is_empty()).any(|d| base.join(d).join(program).is_file()) {
            return Some(Missing::NotOnPath(program.clone()));
        }
    }
    // A shell's `-c` string is not a path: only a word that is one file name counts.
    let script = argv.iter().skip(1).find(|w| w.ends_with(".py") && !w.contains(['=', ' ', '\t', '\n']))?;
    (!base.join(script).exists()).then(|| missing(script))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytorchjob::admission::parse_job;

    /// A scratch directory with a `bin/` of (empty) programs, and a machine whose PATH is it.
    fn machine(name: &str, programs: &[&str]) -> (PathBuf, Machine) {
        let dir = std::env::temp_dir().join(format!("rankvisor-localize-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        for p in programs {
            std::fs::write(dir.join("bin").join(p), "").unwrap();
        }
        let path = format!("/nonexistent:{}", dir.join("bin").display());
        (dir, Machine { path, nvidia_gpu: false })
    }

    const IMAGE_ONLY: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: echo\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: kubeflow/pytorch-elastic-example-echo\n              args: [\"--rdzv_backend=c10d\", \"/workspace/echo.py\"]\n              workingDir: /workspace\n";

    #[test]
    fn a_missing_entrypoint_is_named_with_the_flag_that_gives_it() {
        let mut job = parse_job(IMAGE_ONLY, "echo.yaml").unwrap();
        let e = localize(&mut job, &[], &[], Path::new("/"), &Machine::default()).unwrap_err();
        assert!(
            e.contains("replica type Worker runs the entrypoint of image \"kubeflow/pytorch-elastic-example-echo\""),
            "{e}"
        );
        assert!(e.contains("--command Worker='...'"), "{e}");
    }

    #[test]
    fn a_command_takes_the_entrypoints_place_and_paths_are_mapped() {
        let mut job = parse_job(IMAGE_ONLY, "echo.yaml").unwrap();
        let commands = [parse_command_override("worker=torchrun").unwrap()];
        let (dir, here) = machine("command", &["python", "sh"]);
        std::fs::create_dir_all(dir.join("examples")).unwrap();
        std::fs::write(dir.join("examples/echo.py"), "").unwrap();
        let maps = [parse_path_map("/workspace=examples", &dir).unwrap()];
        assert!(localize(&mut job, &commands, &maps, &dir, &here).unwrap().is_empty());
        let src = dir.display().to_string();
        let c = &job.worker.as_ref().unwrap().container;
        let echo = format!("{src}/examples/echo.py");
        assert_eq!(c.argv(), ["sh", "-c", "torchrun \"$@\"", "sh", "--rdzv_backend=c10d", echo.as_str()]);
        assert_eq!(c.working_dir, Some(format!("{src}/examples")));
        assert_eq!(map_word("--data=/workspace/d", &maps), format!("--data={src}/examples/d"));
        let with_command = IMAGE_ONLY.replace("args:", "command: [python]\n              args:");
        let mut unmapped = parse_job(&with_command, "echo.yaml").unwrap();
        let e = localize(&mut unmapped, &[], &[], &dir, &here).unwrap_err();
        assert!(e.contains("runs /workspace/echo.py, which is not on this machine"), "{e}");
        let shell = IMAGE_ONLY.replace("args:", "command: [sh, -c, \"python missing.py\"]\n              args:");
        let mut shell = parse_job(&shell, "echo.yaml").unwrap();
        let maps = [parse_path_map("/workspace=examples", &dir).unwrap()];
        assert!(localize(&mut shell, &[], &maps, &dir, &here).is_ok(), "a -c string is not a file name");
        let _ = std::fs::remove_dir_all(dir);
        assert_eq!(map_word("/workspaces/x", &maps), "/workspaces/x", "a prefix ends at a path separator");
    }

    #[test]
    fn rankvisor_as_the_command_hands_its_child_to_the_launcher() {
        let text = include_str!("../../../../examples/k8s/pytorchjob.yaml");
        let mut job = parse_job(text, "pytorchjob.yaml").unwrap();
        let (dir, here) = machine("rankvisor", &["sh"]);
        let notes = localize(&mut job, &[], &[], Path::new("/"), &here).unwrap();
        let _ = std::fs::remove_dir_all(dir);
        assert_eq!(job.master.as_ref().unwrap().container.argv(), ["sh", "-c", "sleep 30s"]);
        assert!(notes[0].contains("rankvisor itself (/rankvisor)"), "{notes:?}");
        assert!(notes[0].contains("--restart-policy OnFailure --grace-period 30s"), "{notes:?}");
    }

    /// Kubeflow's cpu-demo and elastic echo shapes: `torchrun demo.py`, `python ... ./echo.py`.
    const TORCHRUN_JOB: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: demo\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 1\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: pytorch-cpu\n              command: [torchrun, demo.py]\n";

    #[test]
    fn a_program_off_the_path_or_a_script_outside_this_directory_is_named_with_what_helps() {
        let (dir, here) = machine("path", &["python"]);
        let mut job = parse_job(TORCHRUN_JOB, "demo.yaml").unwrap();
        let e = localize(&mut job, &[], &[], &dir, &here).unwrap_err();
        assert_eq!(
            e,
            "replica type Worker runs torchrun, which is on no directory of this machine's PATH (a program of image \"pytorch-cpu\"): put it on PATH (a venv's bin/, say), or give the command with --command Worker='...'"
        );
        // The container's own PATH wins over the machine's.
        let own_path = TORCHRUN_JOB.replace(
            "command: [torchrun, demo.py]",
            &format!(
                "command: [torchrun, demo.py]\n              env: [{{name: PATH, value: \"{}\"}}]",
                dir.join("bin").display()
            ),
        );
        std::fs::write(dir.join("bin/torchrun"), "").unwrap();
        let mut job = parse_job(&own_path, "demo.yaml").unwrap();
        let e = localize(&mut job, &[], &[], &dir, &Machine::default()).unwrap_err();
        assert_eq!(
            e,
            format!("replica type Worker runs demo.py from its working directory (image \"pytorch-cpu\"'s WORKDIR, unknown here), and {} has no demo.py: run the dry run in the directory that holds it, or give the command with --command Worker='...'", dir.display())
        );
        std::fs::write(dir.join("demo.py"), "").unwrap();
        let mut job = parse_job(&own_path, "demo.yaml").unwrap();
        assert_eq!(localize(&mut job, &[], &[], &dir, &Machine::default()), Ok(Vec::new()));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn nccl_without_a_gpu_is_named_and_with_one_it_runs() {
        // mnist v1's nccl shape, its entrypoint given with --command.
        let text = TORCHRUN_JOB.replace(
            "command: [torchrun, demo.py]",
            "args: [--backend, nccl]\n              resources: {limits: {nvidia.com/gpu: 1}}",
        );
        let commands = [parse_command_override("Worker=python train.py").unwrap()];
        let (dir, mut here) = machine("nccl", &[]);
        let mut job = parse_job(&text, "nccl.yaml").unwrap();
        assert_eq!(
            localize(&mut job, &commands, &[], &dir, &here).unwrap_err(),
            "replica type Worker uses the nccl backend (\"nccl\" in its command) (it asks for nvidia.com/gpu: 1), which needs an NVIDIA GPU, and this machine has none: a local run can use gloo on CPU, not nccl"
        );
        here.nvidia_gpu = true;
        let mut job = parse_job(&text, "nccl.yaml").unwrap();
        assert_eq!(localize(&mut job, &commands, &[], &dir, &here), Ok(Vec::new()));
        let gloo = text.replace("nccl]", "gloo]");
        here.nvidia_gpu = false;
        let mut job = parse_job(&gloo, "gloo.yaml").unwrap();
        assert_eq!(localize(&mut job, &commands, &[], &dir, &here), Ok(Vec::new()), "gloo runs on CPU");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_missing_files_name_is_escaped() {
        let (dir, here) = machine("escape", &[]);
        let text = TORCHRUN_JOB.replace("command: [torchrun, demo.py]", "command: [\"tor\\x1b[2Jch\\nrun\"]");
        let mut job = parse_job(&text, "demo.yaml").unwrap();
        let e = localize(&mut job, &[], &[], &dir, &here).unwrap_err();
        assert!(e.starts_with("replica type Worker runs tor\\u{1b}[2Jch\\nrun, which is on no directory"), "{e}");
        assert!(!e.contains(['\n', '\x1b']), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn bad_flags_name_the_value_and_the_form() {
        assert!(parse_command_override("Launcher=x").unwrap_err().contains("\"Launcher\" is not a replica type"));
        assert!(parse_command_override("Worker").unwrap_err().contains("expected TYPE=COMMAND"));
        assert!(parse_path_map("workspace=.", Path::new("/")).unwrap_err().contains("not an absolute directory"));
        assert!(parse_path_map("/=.", Path::new("/")).is_err(), "/ would map every path");
    }
}
