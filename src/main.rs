//! The rankvisor binary, the lean PID 1, as a table of contents: block signals, read the environment
//! once, parse the command line, set up logging, run one subcommand, exit with its status.
//! `rankvisor dry-run` is a separate program (`rankvisor-dry-run`, found beside this one or on
//! PATH), run git-style.

mod arena;
mod cli;

use clap::Parser;
use cli::{Cli, LogRulesSub, Sub};
use rankvisor_core::config::{self, EnvSnapshot};
use rankvisor_core::{app, exit, logging, process, termination};

/// Start-up's allocations come from a bump arena (see `arena.rs`): no `mmap`/`munmap` per page of
/// musl's allocator while clap, tracing and the runtime set up. Without it launch + exit takes
/// 25-32% more CPU time than `tini -s` (with it 5-10%), past the 10% that PID 1 is allowed (side by
/// side in scripts/bench.sh; docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: arena::Arena<{ arena::ARENA_BYTES }, { arena::ARENA_MAX_BLOCK }> = arena::Arena::new();

fn main() {
    // Before anything can start a thread: every thread must inherit the blocked mask.
    let signals = match process::block_signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("[rankvisor] ERROR cannot block signals: {e}");
            std::process::exit(exit::CONFIG_ERROR);
        }
    };
    if std::env::args_os().nth(1).is_some_and(|a| a == "dry-run") {
        std::process::exit(dry_run(&signals));
    }
    let env = EnvSnapshot::capture();
    // Before clap reads RANKVISOR_* itself: a value that is not UTF-8 is named, never "unset".
    if let Err(e) = env.check_utf8() {
        logging::init(logging::LogFormat::Text, tracing::Level::INFO);
        std::process::exit(app::config_error(&e.to_string(), app::termination_path(None, &env)));
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => std::process::exit(usage_error(&e, &env)),
    };
    logging::init(cli.global.log_format, cli.global.log_level);
    if cli.sub.is_some() {
        // The subcommands are ordinary programs: a TERM or a ^C stops them as it stops any.
        let original = Some(&signals.original);
        let _ = nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, original, None);
    }
    let termination_log = app::termination_path(cli.sup.termination_log.clone(), &env);
    let code = match cli.sub {
        Some(Sub::Env { json }) => app::env::run(json, &env),
        Some(Sub::CheckNode(args)) => app::check_node::run(&args, &env),
        Some(Sub::LogRules(LogRulesSub::Test { rules, log, timestamps, json })) => {
            app::log_rules::test(&rules, &log, rankvisor_core::logrules::ReplayOptions { timestamps, json })
        }
        None => match config::supervise_config(&cli.sup, &cli.command, &env) {
            Ok(cfg) => app::supervise::run(cfg, &env, signals),
            Err(e) => app::config_error(&e.to_string(), termination_log),
        },
    };
    std::process::exit(code);
}

/// clap's help and version exit 0; any other parse error is a configuration error (64), written
/// to the termination log too, a bad value named by where it came from (flag or variable).
fn usage_error(e: &clap::Error, env: &EnvSnapshot) -> i32 {
    use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
    if matches!(e.kind(), DisplayHelp | DisplayVersion) {
        let _ = e.print();
        return 0;
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let text = config::args::error_text(e, <Cli as clap::CommandFactory>::command(), &argv, |k| env.get(k));
    eprint!("{text}");
    let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
    if let Some(path) = app::termination_path(None, env) {
        let _ = termination::write_message(&path, &format!("configuration error: {first}"));
    }
    exit::CONFIG_ERROR
}

/// `rankvisor dry-run ARGS...`: exec `rankvisor-dry-run ARGS...` (beside this binary, else on
/// PATH), telling it this binary is the launcher. Returns only on failure: 64 when the dry run is
/// not installed (an image ships PID 1 alone), 126 when it cannot be executed.
fn dry_run(signals: &process::Signals) -> i32 {
    use std::os::unix::process::CommandExt;
    const NAME: &str = "rankvisor-dry-run";
    let me = std::env::current_exe().ok();
    let beside = me.as_ref().and_then(|p| p.parent()).map(|d| d.join(NAME)).filter(|p| p.is_file());
    let program = beside.map(std::ffi::OsString::from).unwrap_or_else(|| NAME.into());
    // The dry run is an ordinary program: it gets the signal mask this process inherited.
    let _ = nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&signals.original), None);
    let mut cmd = std::process::Command::new(&program);
    cmd.args(std::env::args_os().skip(2));
    if let Some(me) = &me {
        if std::env::var_os("RANKVISOR_LAUNCHER").is_none() {
            cmd.env("RANKVISOR_LAUNCHER", me);
        }
    }
    let e = cmd.exec();
    if e.kind() == std::io::ErrorKind::NotFound {
        let dir = me.as_ref().and_then(|p| p.parent()).map_or_else(|| "?".into(), |d| d.display().to_string());
        eprintln!(
            "error: `rankvisor dry-run` runs the {NAME} binary, which is neither in {dir} nor on PATH: this \
             rankvisor is the PID 1 alone (as an image ships it); install the dry run with \
             `cargo install --path crates/rankvisor-dryrun`"
        );
        exit::CONFIG_ERROR
    } else {
        eprintln!("error: cannot run {}: {e}", std::path::Path::new(&program).display());
        exit::NOT_EXECUTABLE
    }
}
