//! rankvisor's own log lines: on stderr, each marked as rankvisor's, so they stand out among the
//! child's output (which passes through untouched). Text by default, JSON for log shippers.

use std::fmt;
use std::str::FromStr;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `[rankvisor] INFO message key=value`.
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("log format {s:?} is invalid: expected text or json")),
        }
    }
}

/// Parse a log level name (error, warn, info, debug, trace).
pub fn parse_level(s: &str) -> Result<Level, String> {
    Level::from_str(s).map_err(|_| format!("log level {s:?} is invalid: expected error, warn, info, debug or trace"))
}

struct Marked;

impl<S, N> FormatEvent<S, N> for Marked
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        write!(w, "[rankvisor] {} ", event.metadata().level())?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Install the global subscriber. Safe to call once; later calls are ignored.
pub fn init(format: LogFormat, level: Level) {
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(level).with_ansi(false);
    let _ = match format {
        LogFormat::Text => builder.event_format(Marked).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).with_target(false).try_init(),
    };
}
