//! `rankvisor dry-run --timeline FILE`: a picture of the whole run, drawn from the changes the
//! watch prints (the rows of `--output json`) and the faults injected. Pure: a [`Recording`] in,
//! SVG (or an HTML page around it) out.
//!
//! Layout: the PyTorchJob's state and the PodGroup's status on top, then one lane per pod, each a
//! bar coloured (and, where wide enough, labelled) by its STATUS over time; a restart is a
//! numbered tick on its pod's lane, an injected fault a red dashed line with its name.

use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use super::rows::{Change, WatchEventType};
use crate::runner::injection::{Fault, Injection};

/// The file kinds `--timeline` writes, from the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimelineFormat {
    /// A standalone SVG image.
    Svg,
    /// An HTML page holding the SVG (opens in any browser; hover a bar for its times).
    Html,
}

/// A `--timeline` path whose extension is neither `.svg` nor `.html`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --timeline file {path:?}: expected a name ending in .svg or .html")]
pub(crate) struct TimelineFormatError {
    /// The path as given.
    pub path: String,
}

impl TimelineFormat {
    /// The format a path asks for by its extension (`.svg`, `.html`, `.htm`, any case).
    pub(crate) fn from_path(path: &Path) -> Result<Self, TimelineFormatError> {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(Self::Svg),
            Some("html" | "htm") => Ok(Self::Html),
            _ => Err(TimelineFormatError { path: path.display().to_string() }),
        }
    }
}

/// A fault as it was injected, or a straggler as the master named it: when, on which pod, and
/// what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FaultMark {
    /// When, on the dry run's clock.
    pub at: Duration,
    /// The pod it was injected into, or the straggler's.
    pub pod: String,
    /// A short name: `fail`, `delete`, `label node-health-status=UnschedulablePendingReboot`,
    /// `straggler 0.60x`.
    pub what: String,
    /// A straggler's figures, as the master gave them (None for an injected fault).
    pub straggler: Option<String>,
}

impl FaultMark {
    /// The mark for `injection` into `pod`, injected at `at`.
    pub(crate) fn new(at: Duration, pod: String, injection: &Injection) -> Self {
        let what = match &injection.fault {
            Fault::Fail => "fail".to_string(),
            Fault::Delete => "delete".to_string(),
            Fault::Preempt => "preempt".to_string(),
            Fault::Resume => "resume".to_string(),
            Fault::Label { key, value } => {
                format!("label {}={value}", key.rsplit_once('/').map_or(key.as_str(), |(_, k)| k))
            }
        };
        Self { at, pod, what, straggler: None }
    }

    /// The mark for a straggler the master named at `at`: on its pod's lane, its pace relative to
    /// the job's median as its label, the master's figures on hover.
    pub(crate) fn straggler(at: Duration, named: &rankvisor_core::status::straggler::NamedStraggler) -> Self {
        let pod = named.pod.clone().unwrap_or_else(|| format!("replica {}", named.replica));
        Self { at, pod, what: format!("straggler {:.2}x", named.relative), straggler: Some(named.line()) }
    }
}

/// What a dry run recorded for its timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Recording {
    /// The job's name, for the title.
    pub job: String,
    /// Every change, in order, whatever `--watch` shows.
    pub changes: Vec<Change>,
    /// Every fault, in order.
    pub faults: Vec<FaultMark>,
    /// When the run ended.
    pub end: Duration,
}

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 190.0;
const RIGHT: f64 = 20.0;
const LANE: f64 = 26.0;
const BAR: f64 = 18.0;
/// Where the fault labels start (under the title), and the height of one row of them.
const LABELS_TOP: f64 = 40.0;
const LABEL_ROW: f64 = 14.0;
/// Roughly one character's width at the labels' size, to keep labels from overlapping.
const CHAR: f64 = 6.6;

/// One lane: a label and its coloured spans.
struct Lane {
    label: String,
    spans: Vec<Span>,
    /// (time, restart count) where the count went up.
    restarts: Vec<(Duration, u32)>,
    /// The RESTARTS column last seen.
    seen_restarts: Option<u32>,
}

struct Span {
    from: Duration,
    to: Option<Duration>,
    state: &'static str,
}

fn colour(state: &str) -> &'static str {
    match state {
        "Pending" | "Created" => "#bdbdbd",
        "ContainerCreating" => "#90caf9",
        "Inqueue" => "#ffca28",
        "Running" => "#43a047",
        "Error" | "Failed" => "#e53935",
        "CrashLoopBackOff" | "Restarting" => "#fb8c00",
        "Suspended" => "#9e9e9e",
        "Completed" | "Succeeded" => "#3949ab",
        "Terminating" => "#8d6e63",
        _ => "#eeeeee",
    }
}

const LEGEND: [&str; 7] =
    ["Pending", "ContainerCreating", "Running", "Error", "CrashLoopBackOff", "Completed", "Terminating"];

/// Escape text for XML character data and attribute values.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// The lanes, in the order their objects first appear: job, PodGroup, then the pods.
fn lanes(rec: &Recording) -> Vec<Lane> {
    let mut lanes: Vec<(String, Lane)> = Vec::new();
    for change in &rec.changes {
        // A batch Job's state shows in its JobSet's and its pods' lanes.
        let Some((key, label, state, restarts)) = change.row.lane() else { continue };
        let i = match lanes.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                lanes.push((key, Lane { label, spans: Vec::new(), restarts: Vec::new(), seen_restarts: None }));
                lanes.len() - 1
            }
        };
        let lane = &mut lanes[i].1;
        if let Some(open) = lane.spans.last_mut().filter(|s| s.to.is_none()) {
            open.to = Some(change.at);
        }
        if let Some(n) = restarts {
            // Only a rise is a restart: a recreated pod starts again at 0.
            if lane.seen_restarts.is_some_and(|before| n > before) {
                lane.restarts.push((change.at, n));
            }
            lane.seen_restarts = Some(n);
        }
        if change.event != WatchEventType::Deleted {
            if let Some(state) = state {
                lane.spans.push(Span { from: change.at, to: None, state });
            }
        }
    }
    let mut out: Vec<Lane> = lanes.into_iter().map(|(_, l)| l).collect();
    // Job and PodGroup first, then pods, each group in order of appearance.
    out.sort_by_key(|l| u8::from(!(l.label.starts_with("PyTorchJob ") || l.label.starts_with("PodGroup "))));
    out
}

/// A tick spacing giving at most ~12 ticks over `end`.
fn tick_step(end: Duration) -> Duration {
    let total = end.as_secs_f64().max(1.0);
    let steps = [0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];
    let pick = steps.into_iter().find(|s| total / s <= 12.0).unwrap_or(7200.0);
    Duration::from_secs_f64(pick)
}

/// The recording as a standalone SVG document.
pub(crate) fn render_svg(rec: &Recording) -> String {
    let lanes = lanes(rec);
    let (layout, label_rows) = Layout::new(rec, lanes.len());
    let mut s = String::with_capacity(16 * 1024);
    write_header(&mut s, rec, &layout);
    write_grid(&mut s, &layout);
    for (i, lane) in lanes.iter().enumerate() {
        write_lane(&mut s, &layout, i, lane);
    }
    write_faults(&mut s, &layout, &rec.faults, &label_rows, &lanes);
    write_legend(&mut s, &layout);
    s.push_str("</svg>\n");
    s
}

/// Where the picture's parts go: the time scale, and the lanes' and the axis' heights.
struct Layout {
    /// The time the picture spans.
    end: Duration,
    /// Pixels per second.
    scale: f64,
    /// The first lane's top, under the fault labels.
    top: f64,
    /// The time axis, under the last lane.
    axis_y: f64,
}

impl Layout {
    /// The layout of `rec` with `lanes` lanes, and for each fault where its label goes: its row,
    /// and whether it runs leftwards from its line (near the right edge).
    fn new(rec: &Recording, lanes: usize) -> (Self, Vec<(usize, bool)>) {
        let last_change = rec.changes.iter().map(|c| c.at).max().unwrap_or_default();
        let last_fault = rec.faults.iter().map(|f| f.at).max().unwrap_or_default();
        let end = rec.end.max(last_change).max(last_fault).max(Duration::from_millis(500));
        let scale = (WIDTH - LEFT - RIGHT) / end.as_secs_f64();
        let mut layout = Self { end, scale, top: 0.0, axis_y: 0.0 };
        let (rows, label_rows) = layout.fault_label_rows(&rec.faults);
        layout.top = LABELS_TOP + LABEL_ROW * rows as f64 + 12.0;
        layout.axis_y = layout.lane_y(lanes) + 6.0;
        (layout, label_rows)
    }

    /// Each fault label goes in the first row where it does not overlap the previous one: how
    /// many rows, and each label's (row, leftwards).
    fn fault_label_rows(&self, faults: &[FaultMark]) -> (usize, Vec<(usize, bool)>) {
        let mut row_ends: Vec<f64> = Vec::new();
        let mut label_rows = Vec::with_capacity(faults.len());
        for fault in faults {
            let fx = self.x(fault.at);
            let width = (fault.what.chars().count() + fault.pod.chars().count() + 3) as f64 * CHAR;
            let start = if fx + width > WIDTH - RIGHT { fx - width } else { fx };
            let row = row_ends.iter().position(|end| *end < start).unwrap_or(row_ends.len());
            if row == row_ends.len() {
                row_ends.push(0.0);
            }
            row_ends[row] = start + width + 8.0;
            label_rows.push((row, start < fx));
        }
        (row_ends.len(), label_rows)
    }

    fn x(&self, d: Duration) -> f64 {
        LEFT + d.as_secs_f64() * self.scale
    }

    fn lane_y(&self, i: usize) -> f64 {
        self.top + i as f64 * LANE
    }
}

/// The document's start: its size, title and background.
fn write_header(s: &mut String, rec: &Recording, layout: &Layout) {
    let height = layout.axis_y + 64.0;
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="12">"#
    );
    let title = format!("rankvisor dry-run: PyTorchJob {} ({})", rec.job, secs(layout.end));
    let _ = writeln!(s, r#"<title>{}</title>"#, xml(&title));
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ =
        writeln!(s, r##"<text x="10" y="22" font-size="15" font-weight="bold" fill="#212121">{}</text>"##, xml(&title));
}

/// The grid lines and the time axis' labels.
fn write_grid(s: &mut String, layout: &Layout) {
    let axis_y = layout.axis_y;
    let step = tick_step(layout.end);
    let mut t = Duration::ZERO;
    while t <= layout.end {
        let tx = layout.x(t);
        let _ = writeln!(
            s,
            r##"<line class="tick" x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{axis_y:.1}" stroke="#e0e0e0"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="#616161">{}</text>"##,
            layout.top - 4.0,
            layout.axis_y + 14.0,
            xml(&format!("{}s", t.as_secs_f64()))
        );
        t += step;
    }
}

/// Lane `i`: its label, a bar per state, a marker per restart.
fn write_lane(s: &mut String, layout: &Layout, i: usize, lane: &Lane) {
    let y = layout.lane_y(i);
    let class =
        if lane.label.starts_with("PyTorchJob ") || lane.label.starts_with("PodGroup ") { "object" } else { "pod" };
    let _ = writeln!(s, r#"<g class="lane {class}" data-name="{}">"#, xml(&lane.label));
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#212121">{}</text>"##,
        LEFT - 8.0,
        y + BAR - 5.0,
        xml(&lane.label)
    );
    for span in &lane.spans {
        let to = span.to.unwrap_or(layout.end);
        let (x0, x1) = (layout.x(span.from), layout.x(to));
        let w = (x1 - x0).max(1.0);
        let _ = writeln!(
            s,
            r##"<rect class="state" data-state="{st}" x="{x0:.1}" y="{y:.1}" width="{w:.1}" height="{BAR}" fill="{c}"><title>{t}</title></rect>"##,
            st = span.state,
            c = colour(span.state),
            t = xml(&format!("{}: {} from {} to {}", lane.label, span.state, secs(span.from), secs(to))),
        );
        if w > span.state.len() as f64 * 7.0 + 6.0 {
            let fill = if matches!(span.state, "Pending" | "Created" | "ContainerCreating" | "Inqueue") {
                "#212121"
            } else {
                "#ffffff"
            };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-size="11" fill="{fill}">{}</text>"#,
                x0 + 3.0,
                y + BAR - 5.0,
                span.state
            );
        }
    }
    for (at, n) in &lane.restarts {
        let rx = layout.x(*at);
        let _ = writeln!(
            s,
            r##"<g class="restart" data-restarts="{n}"><title>{}</title><path d="M{rx:.1},{:.1} l-5,-7 h10 z" fill="#212121"/><text x="{rx:.1}" y="{:.1}" font-size="9" text-anchor="middle" fill="#212121">{n}</text></g>"##,
            xml(&format!("{}: restart {n} at {}", lane.label, secs(*at))),
            y,
            y - 8.0,
        );
    }
    let _ = writeln!(s, "</g>");
}

/// Each fault: a dashed red line from its label down through its pod's lane; each straggler the
/// same, dotted orange.
fn write_faults(s: &mut String, layout: &Layout, faults: &[FaultMark], label_rows: &[(usize, bool)], lanes: &[Lane]) {
    for (fault, &(row, leftwards)) in faults.iter().zip(label_rows) {
        let (class, colour, dashes, sign, title) = match &fault.straggler {
            None => (
                "fault",
                "#b71c1c",
                "4 2",
                "\u{26a1}",
                format!("injected at {}: {} {}", secs(fault.at), fault.what, fault.pod),
            ),
            Some(figures) => {
                ("straggler", "#e65100", "1 2", "\u{25bc}", format!("named at {}: {figures}", secs(fault.at)))
            }
        };
        let fx = layout.x(fault.at);
        let label_y = LABELS_TOP + LABEL_ROW * row as f64 + 10.0;
        // From its label down through the pod's own lane (all lanes if the pod has none).
        let bottom =
            lanes.iter().position(|l| l.label == fault.pod).map_or(layout.axis_y, |i| layout.lane_y(i) + BAR + 4.0);
        let (tx, anchor) = if leftwards { (fx - 3.0, "end") } else { (fx + 3.0, "start") };
        let _ = writeln!(
            s,
            r##"<g class="{class}" data-pod="{p}"><title>{t}</title><line x1="{fx:.1}" y1="{:.1}" x2="{fx:.1}" y2="{bottom:.1}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dashes}"/><text x="{tx:.1}" y="{label_y:.1}" text-anchor="{anchor}" font-size="11" font-weight="bold" fill="{colour}">{w}</text></g>"##,
            label_y - 10.0,
            p = xml(&fault.pod),
            t = xml(&title),
            w = xml(&format!("{sign} {} {}", fault.what, fault.pod)),
        );
    }
}

/// The colours' legend, and the restart's and the fault's.
fn write_legend(s: &mut String, layout: &Layout) {
    let mut lx = LEFT;
    let ly = layout.axis_y + 34.0;
    for state in LEGEND {
        let _ = writeln!(
            s,
            r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{ly:.1}" fill="#424242">{state}</text>"##,
            ly - 10.0,
            colour(state),
            lx + 16.0,
        );
        lx += 16.0 + state.len() as f64 * 7.0 + 14.0;
    }
    let _ = writeln!(
        s,
        r##"<path d="M{:.1},{:.1} l-5,-7 h10 z" fill="#212121"/><text x="{:.1}" y="{:.1}" fill="#424242">restart (its count); red dashed line: injected fault; orange dotted: straggler named; job: Created grey, Running green, Succeeded blue, Failed red</text>"##,
        LEFT + 5.0,
        ly + 21.0,
        LEFT + 16.0,
        ly + 20.0
    );
}

/// The recording as an HTML page holding the SVG.
pub(crate) fn render_html(rec: &Recording) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>rankvisor dry-run: {}</title></head>\n<body style=\"margin:1rem\">\n{}</body>\n</html>\n",
        xml(&rec.job),
        render_svg(rec)
    )
}

/// The recording in `format`.
pub(crate) fn render(rec: &Recording, format: TimelineFormat) -> String {
    match format {
        TimelineFormat::Svg => render_svg(rec),
        TimelineFormat::Html => render_html(rec),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::replica::ReplicaId;
    use crate::pytorchjob::admission::parse_job;
    use crate::render::rows::{JobRow, JobState, PodGroupPhase, PodGroupRow, PodRow, PodStatus, Row};
    use crate::runner::injection::parse_injection;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn job(at: u64, state: Option<JobState>) -> Change {
        let row = Row::Job(JobRow { name: "pytest".into(), state, age: ms(at) });
        Change { at: ms(at), event: if at == 0 { WatchEventType::Added } else { WatchEventType::Modified }, row }
    }

    fn podgroup(at: u64, status: Option<PodGroupPhase>, event: WatchEventType) -> Change {
        let row = Row::PodGroup(PodGroupRow {
            name: "pytest".into(),
            status,
            min_member: 2,
            runnings: 0,
            age: ms(at),
            queue: "default".into(),
        });
        Change { at: ms(at), event, row }
    }

    fn pod(at: u64, replica: ReplicaId, status: PodStatus, restarts: u32, event: WatchEventType) -> Change {
        let row = Row::Pod(PodRow {
            name: format!("pytest-{replica}"),
            replica,
            ready: status == PodStatus::Running,
            status,
            restarts,
            last_restart_ago: None,
            age: ms(at),
            node: Some("localhost".into()),
            restart_attempt: None,
            agent: None,
        });
        Change { at: ms(at), event, row }
    }

    /// Seed 000's "one worker fails" run, as the controller reports it: worker-0 fails twice.
    fn worker_fails() -> Recording {
        use PodStatus::*;
        use WatchEventType::*;
        let (m, w) = (ReplicaId::MASTER, ReplicaId::worker(0));
        let changes = vec![
            job(0, None),
            podgroup(0, None, Added),
            pod(0, m, Pending, 0, Added),
            pod(0, w, Pending, 0, Added),
            podgroup(5, Some(PodGroupPhase::Inqueue), Modified),
            job(10, Some(JobState::Created)),
            pod(20, m, ContainerCreating, 0, Modified),
            pod(20, w, ContainerCreating, 0, Modified),
            podgroup(30, Some(PodGroupPhase::Running), Modified),
            pod(100, m, Running, 0, Modified),
            job(100, Some(JobState::Running)),
            pod(110, w, Running, 0, Modified),
            pod(1100, w, Error, 0, Modified),
            pod(1300, w, CrashLoopBackOff, 1, Modified),
            pod(2100, w, Running, 1, Modified),
            pod(3100, w, Error, 1, Modified),
            pod(3100, m, Completed, 0, Modified),
            job(3100, Some(JobState::Succeeded)),
            podgroup(3100, Some(PodGroupPhase::Running), Deleted),
            pod(3300, w, CrashLoopBackOff, 2, Modified),
        ];
        Recording { job: "pytest".into(), changes, faults: Vec::new(), end: ms(3500) }
    }

    /// A minimal XML well-formedness check: balanced tags, quoted unique attributes, no raw `<`
    /// or stray `&` in text or values.
    fn assert_well_formed(doc: &str) {
        fn text_ok(t: &str) {
            assert!(!t.contains('<'), "raw < in {t:?}");
            for (i, _) in t.match_indices('&') {
                let rest = &t[i..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].iter().any(|e| rest.starts_with(e)),
                    "stray & in {t:?}"
                );
            }
        }
        let mut stack: Vec<String> = Vec::new();
        let mut rest = doc;
        while let Some(lt) = rest.find('<') {
            text_ok(&rest[..lt]);
            let after = &rest[lt + 1..];
            let gt = after.find('>').expect("a tag is closed");
            let tag = &after[..gt];
            rest = &after[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name.trim()), "closing tag");
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let (name, mut attrs) = tag.split_once(char::is_whitespace).unwrap_or((tag, ""));
            assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()), "tag name {name:?}");
            let mut keys = Vec::new();
            loop {
                attrs = attrs.trim_start();
                if attrs.is_empty() {
                    break;
                }
                let (key, value) = attrs.split_once("=\"").unwrap_or_else(|| panic!("unquoted attribute in <{tag}>"));
                let end = value.find('"').expect("attribute value closed");
                text_ok(&value[..end].replace('>', ""));
                assert!(!keys.contains(&key), "duplicate attribute {key} in <{tag}>");
                keys.push(key);
                attrs = &value[end + 1..];
            }
            if !self_closing {
                stack.push(name.to_string());
            }
        }
        text_ok(rest);
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    fn lane_names(svg: &str) -> Vec<&str> {
        svg.split("data-name=\"").skip(1).map(|s| s.split('"').next().unwrap()).collect()
    }

    #[test]
    fn one_lane_per_pod_under_the_job_and_the_podgroup() {
        let svg = render_svg(&worker_fails());
        assert_well_formed(&svg);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert_eq!(lane_names(&svg), ["PyTorchJob pytest", "PodGroup pytest", "pytest-master-0", "pytest-worker-0"]);
        assert_eq!(svg.matches("class=\"lane pod\"").count(), 2);
        let worker = svg.split("data-name=\"pytest-worker-0\"").nth(1).unwrap().split("</g>\n").next().unwrap();
        let states: Vec<&str> = worker.split("data-state=\"").skip(1).map(|s| s.split('"').next().unwrap()).collect();
        assert_eq!(
            states,
            [
                "Pending",
                "ContainerCreating",
                "Running",
                "Error",
                "CrashLoopBackOff",
                "Running",
                "Error",
                "CrashLoopBackOff"
            ]
        );
        let job = svg.split("data-name=\"PyTorchJob pytest\"").nth(1).unwrap().split("</g>\n").next().unwrap();
        assert!(job.contains("data-state=\"Succeeded\""), "{job}");
        assert!(job.contains("PyTorchJob pytest: Running from 0.1s to 3.1s"), "{job}");
    }

    #[test]
    fn restarts_are_marked_with_their_count_and_a_deleted_podgroup_ends() {
        let svg = render_svg(&worker_fails());
        let worker =
            svg.split("data-name=\"pytest-worker-0\"").nth(1).unwrap().split("</g>\n<g class=\"lane").next().unwrap();
        assert!(worker.contains("data-restarts=\"1\"") && worker.contains("data-restarts=\"2\""), "{worker}");
        assert!(worker.contains("pytest-worker-0: restart 2 at 3.3s"), "{worker}");
        let master = svg.split("data-name=\"pytest-master-0\"").nth(1).unwrap().split("</g>\n").next().unwrap();
        assert!(!master.contains("data-restarts"), "the master never restarted: {master}");
        let pg = svg.split("data-name=\"PodGroup pytest\"").nth(1).unwrap().split("</g>\n").next().unwrap();
        assert!(pg.contains("PodGroup pytest: Running from 0.0s to 3.1s"), "deleted at 3.1s: {pg}");
    }

    #[test]
    fn a_recreated_pod_is_a_gap_then_a_fresh_start_not_a_restart() {
        use PodStatus::*;
        let w = ReplicaId::worker(1);
        let mut rec = Recording { job: "pytest".into(), end: ms(4000), ..Recording::default() };
        rec.changes = vec![
            pod(0, w, Running, 2, WatchEventType::Added),
            pod(1000, w, Terminating, 2, WatchEventType::Modified),
            pod(1500, w, Terminating, 2, WatchEventType::Deleted),
            pod(1600, w, Pending, 0, WatchEventType::Added),
            pod(2000, w, Running, 0, WatchEventType::Modified),
        ];
        let svg = render_svg(&rec);
        assert_well_formed(&svg);
        assert!(svg.contains("pytest-worker-1: Terminating from 1.0s to 1.5s"), "{svg}");
        assert!(svg.contains("pytest-worker-1: Pending from 1.6s to 2.0s"), "{svg}");
        assert!(!svg.contains("restart 0"), "recreation is not a restart: {svg}");
        assert_eq!(lane_names(&svg), ["pytest-worker-1"], "one lane for the pod, whatever its incarnations");
    }

    #[test]
    fn injected_faults_are_marked_on_their_pod() {
        let job = parse_job(include_str!("../../../../examples/pytorchjob.yaml"), "pytorchjob.yaml").unwrap();
        let mut rec = worker_fails();
        for spec in ["fail:worker-0@1s", "label:worker-0@2s=UnschedulablePendingReboot"] {
            let i = parse_injection(spec, &job).unwrap();
            rec.faults.push(FaultMark::new(i.at, job.pod_name(i.replica), &i));
        }
        assert_eq!(rec.faults[1].what, "label node-health-status=UnschedulablePendingReboot");
        let svg = render_svg(&rec);
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<g class=\"fault\" data-pod=\"pytest-worker-0\">").count(), 2);
        assert!(svg.contains("injected at 1.0s: fail pytest-worker-0"), "{svg}");
        assert!(svg.contains("\u{26a1} label node-health-status=UnschedulablePendingReboot pytest-worker-0"));
    }

    /// A straggler the master named is a mark on its pod's lane: its pace as the label, the
    /// master's figures (escaped) on hover, apart from the injected faults' colour.
    #[test]
    fn a_named_straggler_is_marked_on_its_pod_with_its_figures() {
        use rankvisor_core::rendezvous::straggler::Straggler;
        let mut rec = worker_fails();
        let s = Straggler { replica: 2, value: 60.0, median: 100.0, relative: 0.6, points: 3 };
        let named = s.named("node<&>".into(), Some("pytest-worker-1".into()), "t".into());
        rec.faults.push(FaultMark::straggler(ms(1500), &named));
        let svg = render_svg(&rec);
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<g class=\"straggler\" data-pod=\"pytest-worker-1\">").count(), 1, "{svg}");
        assert!(svg.contains("\u{25bc} straggler 0.60x pytest-worker-1"), "{svg}");
        assert!(
            svg.contains("named at 1.5s: replica 2 is a straggler: its metric 60 against the job&apos;s median 100"),
            "{svg}"
        );
        assert!(svg.contains("(pod pytest-worker-1, node node&lt;&amp;&gt;)"), "escaped: {svg}");
        assert!(!svg.contains("<g class=\"fault\""), "not an injected fault: {svg}");
    }

    #[test]
    fn names_from_the_manifest_are_escaped() {
        let mut rec = worker_fails();
        rec.job = "a<b>&\"c'".into();
        rec.faults.push(FaultMark { at: ms(5), pod: "p<&>".into(), what: "label k=\"v\"&".into(), straggler: None });
        let svg = render_svg(&rec);
        assert_well_formed(&svg);
        assert!(svg.contains("PyTorchJob a&lt;b&gt;&amp;&quot;c&apos;"), "{svg}");
        let html = render_html(&rec);
        assert!(html.starts_with("<!doctype html>") && html.contains(&svg), "the page holds the same SVG");
        assert!(html.contains("<title>rankvisor dry-run: a&lt;b&gt;"));
    }

    #[test]
    fn an_empty_run_still_draws() {
        let svg = render_svg(&Recording::default());
        assert_well_formed(&svg);
        assert!(lane_names(&svg).is_empty());
    }

    #[test]
    fn the_format_comes_from_the_extension() {
        assert_eq!(TimelineFormat::from_path(Path::new("run.svg")), Ok(TimelineFormat::Svg));
        assert_eq!(TimelineFormat::from_path(Path::new("out/Run.HTML")), Ok(TimelineFormat::Html));
        assert_eq!(TimelineFormat::from_path(Path::new("run.htm")), Ok(TimelineFormat::Html));
        let e = TimelineFormat::from_path(Path::new("run.png")).unwrap_err();
        assert_eq!(e.to_string(), "invalid --timeline file \"run.png\": expected a name ending in .svg or .html");
        assert!(TimelineFormat::from_path(Path::new("svg")).is_err());
    }

    #[test]
    fn ticks_stay_few() {
        for (secs, step) in
            [(1.0, 0.5), (3.5, 0.5), (7.0, 1.0), (20.0, 2.0), (50.0, 5.0), (300.0, 30.0), (5000.0, 600.0)]
        {
            assert_eq!(tick_step(Duration::from_secs_f64(secs)), Duration::from_secs_f64(step), "{secs}s");
        }
    }
}
