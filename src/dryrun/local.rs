//! Running a manifest written for a cluster on this machine: `--command TYPE=CMD` stands for the
//! image's entrypoint, `--path-map IMAGE_PATH=LOCAL_PATH` maps paths inside the image onto local
//! ones, and a container whose command is rankvisor itself hands its child to the dry run's
//! launcher. The manifest is not edited: the admitted job is.

use std::path::Path;

use super::pytorchjob::{Container, EnvSource, PyTorchJob, ReplicaType};

/// `--command TYPE=CMD`: the shell command a replica type runs instead of its image's entrypoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOverride {
    /// Master or Worker.
    pub rtype: ReplicaType,
    /// A `sh -c` command line; the container's `args` follow as `"$@"`.
    pub command: String,
}

/// `--path-map IMAGE_PATH=LOCAL_PATH`: a path prefix inside the image and where it is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathMap {
    /// The prefix as the manifest writes it, e.g. `/workspace`.
    pub image_path: String,
    /// The local directory it stands for (absolute).
    pub local_path: String,
}

/// Read `--command TYPE=CMD` (TYPE: Master or Worker, any case).
pub fn parse_command_override(spec: &str) -> Result<CommandOverride, String> {
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
pub fn parse_path_map(spec: &str, cwd: &Path) -> Result<PathMap, String> {
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
/// cannot run here.
pub fn localize(
    job: &mut PyTorchJob,
    commands: &[CommandOverride],
    maps: &[PathMap],
    cwd: &Path,
) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    for spec in [job.master.as_mut(), job.worker.as_mut()].into_iter().flatten() {
        let rtype = spec.rtype;
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
        if let Some(missing) = missing_file(c, cwd).filter(|_| overridden.is_none()) {
            return Err(format!(
                "replica type {rtype} runs {missing}, which is not on this machine (a path inside image {:?}?): map its directory with --path-map IMAGE_DIR=LOCAL_DIR, or give the command with --command {rtype}='...'",
                c.image
            ));
        }
    }
    Ok(notes)
}

/// The program or the Python script a container runs, if it names a file this machine lacks:
/// an absolute program path, or the first `*.py` word (relative ones from `workingDir`, else
/// from `cwd`, as the image's WORKDIR is unknown here).
fn missing_file(c: &Container, cwd: &Path) -> Option<String> {
    let argv = c.argv();
    let base = c.working_dir.as_deref().map_or_else(|| cwd.to_path_buf(), |w| cwd.join(w));
    let program = argv.first().filter(|p| p.starts_with('/')).cloned();
    // A shell's `-c` string is not a path: only a word that is one file name counts.
    let script = argv.iter().skip(1).find(|w| w.ends_with(".py") && !w.contains(['=', ' ', '\t', '\n'])).cloned();
    [program, script].into_iter().flatten().find(|w| !base.join(w).exists())
}

#[cfg(test)]
mod tests {
    use super::super::manifest::parse_job;
    use super::*;

    const IMAGE_ONLY: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: echo\nspec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n          containers:\n            - name: pytorch\n              image: kubeflow/pytorch-elastic-example-echo\n              args: [\"--rdzv_backend=c10d\", \"/workspace/echo.py\"]\n              workingDir: /workspace\n";

    #[test]
    fn a_missing_entrypoint_is_named_with_the_flag_that_gives_it() {
        let mut job = parse_job(IMAGE_ONLY, "echo.yaml").unwrap();
        let e = localize(&mut job, &[], &[], Path::new("/")).unwrap_err();
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
        let dir = std::env::temp_dir().join(format!("rankvisor-localize-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("examples")).unwrap();
        std::fs::write(dir.join("examples/echo.py"), "").unwrap();
        let maps = [parse_path_map("/workspace=examples", &dir).unwrap()];
        assert!(localize(&mut job, &commands, &maps, &dir).unwrap().is_empty());
        let src = dir.display().to_string();
        let c = &job.worker.as_ref().unwrap().container;
        let echo = format!("{src}/examples/echo.py");
        assert_eq!(c.argv(), ["sh", "-c", "torchrun \"$@\"", "sh", "--rdzv_backend=c10d", echo.as_str()]);
        assert_eq!(c.working_dir, Some(format!("{src}/examples")));
        assert_eq!(map_word("--data=/workspace/d", &maps), format!("--data={src}/examples/d"));
        let with_command = IMAGE_ONLY.replace("args:", "command: [python]\n              args:");
        let mut unmapped = parse_job(&with_command, "echo.yaml").unwrap();
        let e = localize(&mut unmapped, &[], &[], &dir).unwrap_err();
        assert!(e.contains("runs /workspace/echo.py, which is not on this machine"), "{e}");
        let shell = IMAGE_ONLY.replace("args:", "command: [sh, -c, \"python missing.py\"]\n              args:");
        let mut shell = parse_job(&shell, "echo.yaml").unwrap();
        let maps = [parse_path_map("/workspace=examples", &dir).unwrap()];
        assert!(localize(&mut shell, &[], &maps, &dir).is_ok(), "a -c string is not a file name");
        let _ = std::fs::remove_dir_all(dir);
        assert_eq!(map_word("/workspaces/x", &maps), "/workspaces/x", "a prefix ends at a path separator");
    }

    #[test]
    fn rankvisor_as_the_command_hands_its_child_to_the_launcher() {
        let text = include_str!("../../examples/k8s/pytorchjob.yaml");
        let mut job = parse_job(text, "pytorchjob.yaml").unwrap();
        let notes = localize(&mut job, &[], &[], Path::new("/")).unwrap();
        assert_eq!(job.master.as_ref().unwrap().container.argv(), ["sh", "-c", "sleep 30s"]);
        assert!(notes[0].contains("rankvisor itself (/rankvisor)"), "{notes:?}");
        assert!(notes[0].contains("--restart-policy OnFailure --grace-period 30s"), "{notes:?}");
    }

    #[test]
    fn bad_flags_name_the_value_and_the_form() {
        assert!(parse_command_override("Launcher=x").unwrap_err().contains("\"Launcher\" is not a replica type"));
        assert!(parse_command_override("Worker").unwrap_err().contains("expected TYPE=COMMAND"));
        assert!(parse_path_map("workspace=.", Path::new("/")).unwrap_err().contains("not an absolute directory"));
        assert!(parse_path_map("/=.", Path::new("/")).is_err(), "/ would map every path");
    }
}
