//! `rankvisor log-rules test RULES LOG [--timestamps] [--json]`: replay a saved log through the
//! rules (docs/log-rules.md). Exit 0 once the log was replayed, whatever the rules decided; 64
//! when the rules or the log cannot be used, with the reason.

use crate::exit;
use crate::logrules::{parse_rules, replay, ReplayError, ReplayOptions};
use crate::untrusted::files::read_head;
use std::path::Path;

/// The largest rules file read (1 MiB).
const MAX_RULES_BYTES: u64 = 1 << 20;

/// Run the replay; returns the exit status.
pub fn test(rules: &Path, log: &Path, opts: ReplayOptions) -> i32 {
    let fail = |msg: String| {
        eprintln!("rankvisor log-rules test: {msg}");
        exit::CONFIG_ERROR
    };
    let text = match read_head(rules, MAX_RULES_BYTES + 1) {
        Ok(t) if t.len() as u64 > MAX_RULES_BYTES => return fail(format!("{}: larger than 1 MiB", rules.display())),
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let text = match String::from_utf8(text) {
        Ok(t) => t,
        Err(_) => return fail(format!("{}: not UTF-8 text", rules.display())),
    };
    let rules = match parse_rules(&text) {
        Ok(r) => r,
        Err(e) => return fail(format!("{}: {e}", rules.display())),
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
