//! `rankvisor-dry-run` run on its own, as `rankvisor dry-run` execs it (the root package's tests
//! drive whole jobs through `rankvisor dry-run`): what it says about a command line or a manifest
//! it cannot run, and its exit codes.

use std::process::{Command, Output, Stdio};

fn dry_run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rankvisor-dry-run"))
        .args(args)
        .env_remove("RANKVISOR_LAUNCHER")
        .stdin(Stdio::null())
        .output()
        .expect("run rankvisor-dry-run")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unknown_option_exits_64_naming_it_and_the_usage() {
    let out = dry_run(&["--no-such-option", "job.yaml"]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("'--no-such-option'"), "the option is not named: {err}");
    assert!(err.contains("Usage: rankvisor dry-run"), "no usage line: {err}");
    assert!(
        out.stdout.is_empty(),
        "a refused command line printed objects: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_manifest_that_cannot_be_read_exits_64_naming_its_path() {
    let dir = std::env::temp_dir().join(format!("rankvisor-dry-run-cli-{}", std::process::id()));
    let missing = dir.join("no-such-job.yaml");
    let out = dry_run(&[missing.to_str().expect("a UTF-8 temp dir")]);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("cannot read manifest {}", missing.display())), "the path is not named: {err}");
}

#[test]
fn help_exits_0_with_the_exit_codes() {
    let out = dry_run(&["--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Exit 0 Succeeded, 1 Failed"), "the help does not give the exit codes: {text}");
}
