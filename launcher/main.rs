//! The rankvisor binary, as a table of contents: block signals, read the environment once, parse
//! the command line, set up logging, run one subcommand, exit with its status.

mod arena;
mod cli;

use clap::Parser;
use cli::{Cli, Sub};
use rankvisor::config::{self, EnvSnapshot};
use rankvisor::{app, exit, logging, process};

/// Start-up's allocations come from a bump arena (see `arena.rs`): no `mmap`/`munmap` per page of
/// musl's allocator while clap, tracing and the runtime set up.
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
    let termination_log = app::termination_path(cli.sup.termination_log.clone(), &env);
    let code = match cli.sub {
        Some(Sub::Env { json }) => app::env::run(json, &env),
        Some(Sub::CheckNode(args)) => app::check_node::run(&args, &env),
        #[cfg(feature = "dry-run")]
        Some(Sub::DryRun(args)) => app::dry_run::run(args, &signals),
        None => match config::supervise_config(&cli.sup, &cli.command, &env) {
            Ok(cfg) => app::supervise::run(cfg, &env, signals),
            Err(e) => app::config_error(&e.to_string(), termination_log),
        },
    };
    std::process::exit(code);
}

/// clap's help and version exit 0; any other parse error is a configuration error (64), written
/// to the termination log too.
fn usage_error(e: &clap::Error, env: &EnvSnapshot) -> i32 {
    use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
    // The image's lean PID 1 build leaves the dry run out (`--no-default-features`): say so
    // instead of clap's "unexpected argument 'dry-run' found".
    let first = if cfg!(not(feature = "dry-run")) && std::env::args_os().nth(1).is_some_and(|a| a == "dry-run") {
        let why = "this rankvisor is the lean PID 1 build (the image's), without `dry-run`: run the dry run \
                   with a default build (`cargo build`, or `cargo install --path .`)";
        eprintln!("error: {why}");
        why.to_string()
    } else {
        let _ = e.print();
        if matches!(e.kind(), DisplayHelp | DisplayVersion) {
            return 0;
        }
        e.to_string().lines().next().unwrap_or_default().trim_start_matches("error: ").to_string()
    };
    if let Some(path) = app::termination_path(None, env) {
        let _ = rankvisor::termination::write_message(&path, &format!("configuration error: {first}"));
    }
    exit::CONFIG_ERROR
}
