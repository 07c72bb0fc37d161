//! `rankvisor log-rules test RULES LOG [--timestamps] [--json]`: replay a saved log through the
//! rules (docs/log-rules.md). Exit 0 once the log was replayed, whatever the rules decided; 64
//! when the rules or the log cannot be used, with the reason.

use crate::exit;
use crate::logrules::{read_rules_file, replay, ReplayError, ReplayOptions};
use std::path::Path;

/// Run the replay; returns the exit status.
pub fn test(rules: &Path, log: &Path, opts: ReplayOptions) -> i32 {
    let fail = |msg: String| {
        eprintln!("rankvisor log-rules test: {msg}");
        exit::CONFIG_ERROR
    };
    let rules = match read_rules_file(rules) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let input: Box<dyn std::io::Read> = if log.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        match std::fs::File::open(log) {
            Ok(f) => Box::new(f),
            Err(e) => return fail(format!("{}: {e}", log.display())),
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = replay(std::sync::Arc::new(rules), input, opts, &mut out);
    let flushed = std::io::Write::flush(&mut out);
    match result.map_err(|e| (e, log)).and_then(|()| flushed.map_err(|e| (ReplayError::Io(e), log))) {
        Ok(()) => 0,
        Err((ReplayError::Io(e), _)) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err((e, log)) => fail(format!("{}: {e}", log.display())),
    }
}
