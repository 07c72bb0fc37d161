//! The PID 1 the suite runs is the image's build, not a workspace build: `scripts/test.sh` builds
//! `rankvisor` on its own (`cargo build -p rankvisor`), so the dry run's features (tokio's process
//! and signal drivers, the YAML parser), which cargo unifies across the packages one command
//! builds, never reach it. RANKVISOR_TEST_BIN names it; without it this test fails.

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Symbols only the dry run's features bring, as the debug build's symbol table spells their paths
/// (legacy mangling: `_ZN5tokio7process...`; dependencies are built without debug info, so the
/// `tokio::process` of DWARF is not there to find).
const DRY_RUN_ONLY: [&str; 3] = ["5tokio7process", "5tokio6signal4unix", "13serde_yaml_ng"];

/// Symbols of the stack reader's library (`rankvisor-stacks`), which the PID 1 runs as a subprocess.
const STACK_READER_ONLY: [&str; 2] = ["6py_spy", "13remoteprocess"];

#[test]
fn the_binary_under_test_is_the_lean_pid1_build() {
    let bin = std::env::var("RANKVISOR_TEST_BIN").ok().filter(|b| !b.is_empty()).unwrap_or_else(|| {
        panic!("RANKVISOR_TEST_BIN is not set: run `bash scripts/test.sh`, which builds the lean PID 1 on its own")
    });
    let lean = std::fs::read(&bin).unwrap_or_else(|e| panic!("RANKVISOR_TEST_BIN={bin}: {e}"));
    for needle in DRY_RUN_ONLY {
        assert!(!contains(&lean, needle), "{bin} has {needle}: it is not the lean PID 1 build");
    }
    // The stack reader's library stays in its own binary (rankvisor-stacks): never in the PID 1.
    for needle in STACK_READER_ONLY {
        assert!(!contains(&lean, needle), "{bin} has {needle}: py-spy reached the PID 1");
    }
    // The control: this package's own test build, whose features cargo unified with the dry
    // run's (a dev-dependency), has them; so the check above can fail.
    let unified = std::fs::read(env!("CARGO_BIN_EXE_rankvisor")).unwrap();
    assert!(contains(&unified, DRY_RUN_ONLY[0]), "the control lost tokio::process: the check proves nothing");
}
