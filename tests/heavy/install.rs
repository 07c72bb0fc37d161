//! Installing rankvisor the ways people install tools (docs/installing.md): `cargo install` from the
//! repository (the PID 1 and the dry run beside it), and `pip install` of the wheel that carries
//! the image's static binary (maturin's binary bindings). The image's way, `COPY --from=` the slim
//! image, is in tests/heavy/container.rs.
//!
//! The cargo test reuses this build's target directory (the debug builds scripts/test.sh made), so
//! it compiles nothing new. The wheel test needs maturin (`RANKVISOR_TEST_MATURIN`, installed by
//! scripts/setup-maturin.sh) and the lean static build (images/build.sh, made by scripts/test.sh
//! before the tests); without maturin it FAILS, saying what is missing.

use crate::common;

use common::dry_run::{json_lines, DryRun};
use common::{hermetic, repo_file, TestDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The cargo that builds this test (nextest and cargo pass it on), else the one on PATH.
fn cargo() -> String {
    std::env::var("CARGO").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cargo".into())
}

/// The workspace's target directory, as the scripts find it (`cargo metadata`).
fn target_dir() -> PathBuf {
    let out = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(repo_file(""))
        .stdin(Stdio::null())
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    PathBuf::from(meta["target_directory"].as_str().expect("target_directory in cargo metadata"))
}

/// What cargo and nextest set for this test's own crate (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
/// `OUT_DIR`, ...) taken out of `c`'s environment, so a cargo that `c` runs sees the environment of
/// whoever ran the tests: build scripts such as ring's rerun when those variables change, which
/// would rebuild what scripts/test.sh has just built instead of finding it up to date.
fn outside_the_test(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        let set_for_the_test =
            ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_BIN_", "CARGO_CFG_"].iter().any(|p| k.starts_with(p))
                || [
                    "CARGO_CRATE_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                    "OUT_DIR",
                ]
                .contains(&&*k);
        if set_for_the_test {
            c.env_remove(&*k);
        }
    }
    c
}

/// `out` succeeded, else the test fails with what `what` printed.
fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PATH of `bin` and the system's directories alone: nothing the developer installed elsewhere
/// (a rankvisor in ~/.cargo/bin, say) can stand in for what the test installed.
fn path_with(bin: &Path) -> String {
    format!("{}:/usr/bin:/bin", bin.display())
}

/// The host's target triple (`rustc -vV`).
fn host() -> String {
    let rustc = std::env::var("RUSTC").ok().filter(|r| !r.is_empty()).unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc).arg("-vV").stdin(Stdio::null()).output().expect("run rustc -vV");
    let text = String::from_utf8_lossy(&out.stdout);
    let host = text.lines().find_map(|l| l.strip_prefix("host: "));
    host.unwrap_or_else(|| panic!("{rustc} -vV names no host: {text}")).to_string()
}

#[test]
fn cargo_install_of_both_packages_runs_a_dry_run_from_the_install_root() {
    let dir = TestDir::new("cargo-install");
    let root = dir.join("root");
    let target = target_dir();
    // --debug, the host as an explicit --target and this build's target directory: the dev builds
    // scripts/test.sh made are fresh, so this installs them without compiling, and what it writes
    // stays in <target dir>/<host>/debug (<target dir>/debug holds this package's test build of
    // rankvisor, which other tests run); --offline: their crates are already downloaded.
    let host = host();
    for package in [".", "crates/rankvisor-dryrun"] {
        let out = outside_the_test(&mut Command::new(cargo()))
            .args(["install", "--debug", "--locked", "--offline", "--target", &host, "--path", package, "--root"])
            .arg(&root)
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(repo_file(""))
            .stdin(Stdio::null())
            .output()
            .expect("run cargo install");
        check(&format!("cargo install --path {package}"), &out);
    }
    let bin = root.join("bin");
    for name in ["rankvisor", "rankvisor-dry-run"] {
        assert!(bin.join(name).is_file(), "cargo install put no {name} in {}", bin.display());
    }
    // `rankvisor dry-run` from the install root, as a user runs it with the root's bin on PATH: it
    // execs the rankvisor-dry-run beside it, which launches the rankvisor beside it per replica.
    let mut cmd = Command::new("rankvisor");
    hermetic(&mut cmd).env_remove("RANKVISOR_LAUNCHER").env("PATH", path_with(&bin)).current_dir(dir.path());
    let manifest = repo_file("examples/pytorchjob.yaml");
    cmd.args(["dry-run", "--output", "json", "--master-port", "0", "--timeout", "50s"]).arg(&manifest);
    let r = DryRun::new(&cmd.stdin(Stdio::null()).output().expect("run the installed rankvisor"), json_lines);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job_states(), ["Created", "Running", "Succeeded"], "{}", r.explain());
}

/// How to get what the wheel test needs.
const HOW_TO_WHEEL: &str = "run `bash scripts/test.sh`, which installs maturin with `bash scripts/setup-maturin.sh` \
                            and exports RANKVISOR_TEST_MATURIN";

#[test]
fn pip_install_of_the_wheel_puts_the_images_binary_in_a_fresh_venv() {
    let maturin = std::env::var("RANKVISOR_TEST_MATURIN")
        .ok()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| panic!("RANKVISOR_TEST_MATURIN is not set: {HOW_TO_WHEEL}"));
    assert!(Path::new(&maturin).is_file(), "RANKVISOR_TEST_MATURIN={maturin}: no such file: {HOW_TO_WHEEL}");
    let dir = TestDir::new("wheel");

    // The wheel, built the one way the project builds it (it also checks that the wheel's binary
    // is the image's, byte for byte).
    let out = outside_the_test(&mut Command::new("bash"))
        .arg(repo_file("images/build.sh"))
        .arg("--wheel")
        .arg(dir.join("dist"))
        .env("RANKVISOR_MATURIN", &maturin)
        .current_dir(repo_file(""))
        .stdin(Stdio::null())
        .output()
        .expect("run images/build.sh --wheel");
    check("images/build.sh --wheel", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let wheel = PathBuf::from(stdout.lines().last().unwrap_or_default());
    let name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let version = env!("CARGO_PKG_VERSION");
    // One static binary for every x86_64 Linux: pip on glibc and on musl systems both take it.
    assert!(
        name.starts_with(&format!("rankvisor-{version}-py3-none-"))
            && name.contains("manylinux_2_17_x86_64")
            && name.contains("musllinux_1_2_x86_64"),
        "wheel {}: expected rankvisor-{version}-py3-none-<manylinux_2_17 and musllinux_1_2 x86_64>.whl",
        wheel.display()
    );

    // A fresh venv, the wheel installed from the file alone (no index, no network).
    let venv = dir.join("venv");
    let out = Command::new("python3").args(["-m", "venv"]).arg(&venv).stdin(Stdio::null()).output().unwrap();
    check("python3 -m venv", &out);
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", "--quiet"])
        .arg(&wheel)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    check("pip install of the wheel", &out);
    let installed = venv.join("bin/rankvisor");
    let image_binary = target_dir().join("image/rankvisor");
    let same = std::fs::read(&installed).ok() == std::fs::read(&image_binary).ok();
    assert!(same, "{} is not the image's binary {}", installed.display(), image_binary.display());

    // From the venv as an activated venv has it: its bin first on PATH.
    let rankvisor = |args: &[&str]| {
        let mut c = Command::new("rankvisor");
        hermetic(&mut c).env("PATH", path_with(&venv.join("bin"))).args(args).stdin(Stdio::null());
        c.output().expect("run the venv's rankvisor")
    };
    let out = rankvisor(&["--version"]);
    check("rankvisor --version", &out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("rankvisor {version}"));

    // It supervises the venv's python: the child's output and exit status come through.
    let script = "import sys; print('child prefix', sys.prefix); sys.exit(3)";
    let out = rankvisor(&["--restart-policy", "Never", "--", "python", "-c", script]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("child prefix {}", venv.display())), "the child is the venv's python: {text}");

    // The wheel is the PID 1 alone: `rankvisor dry-run` says how to install the dry run.
    let out = rankvisor(&["dry-run", "job.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("cargo install --path crates/rankvisor-dryrun"), "{err}");
}
