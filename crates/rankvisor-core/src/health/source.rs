//! Where the node's labels come from (`--node-health`), and the file source with its watcher.
//!
//! Every source publishes [`Observation`]s on a `tokio::sync::watch` channel: the latest verdict,
//! or the error that kept it from being computed (which callers treat as unhealthy: fail closed).
//! The Kubernetes API source (`kubernetes.rs`) feeds the same channel type.
//!
//! Writers of the file should replace it atomically (write a temporary file, then rename), as the
//! kubelet does; an in-place rewrite is seen when the writer closes the file.

use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;

use super::labels_file::{parse_labels_file, LabelsFileError};
use super::verdict::{verdict, NodeVerdict};
use crate::kube::NodeSnapshot;

/// Largest labels file read; a bigger one (or `/dev/zero`) is an error, not an unbounded read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Shortest fallback poll period; shorter requests are raised to it.
pub const MIN_POLL: Duration = Duration::from_millis(10);

/// The latest word from a health source: a verdict, or why there is none (treat as unhealthy).
pub type Observation = Result<NodeVerdict, HealthError>;

/// Where the node's labels are read from (`--node-health`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeHealthSource {
    /// No health gate.
    Off,
    /// Kubernetes when running in a cluster, else off.
    Auto,
    /// A downward-API labels file, re-read on change.
    File(PathBuf),
    /// The Node object, read and watched through the Kubernetes API.
    Kubernetes,
}

/// A `--node-health` value that is none of the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --node-health value {value:?}: expected off, auto, file:PATH or kubernetes")]
pub struct NodeHealthSourceError {
    /// The value seen.
    pub value: String,
}

impl FromStr for NodeHealthSource {
    type Err = NodeHealthSourceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "auto" => Ok(Self::Auto),
            "kubernetes" => Ok(Self::Kubernetes),
            _ => match s.strip_prefix("file:") {
                Some(path) if !path.is_empty() => Ok(Self::File(PathBuf::from(path))),
                _ => Err(NodeHealthSourceError { value: s.to_string() }),
            },
        }
    }
}

impl fmt::Display for NodeHealthSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::Auto => f.write_str("auto"),
            Self::File(path) => write!(f, "file:{}", path.display()),
            Self::Kubernetes => f.write_str("kubernetes"),
        }
    }
}

impl NodeHealthSource {
    /// Replace `Auto` by what it means here: `Kubernetes` in a cluster, else `Off`.
    pub fn resolve_auto(self, in_cluster: bool) -> Self {
        match self {
            Self::Auto if in_cluster => Self::Kubernetes,
            Self::Auto => Self::Off,
            other => other,
        }
    }
}

/// Why a health source has no verdict right now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthError {
    /// The labels file is missing, unreadable, not a regular file, too large or not UTF-8.
    #[error("node labels file {path}: {problem}: expected a readable downward-API labels file")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What went wrong (the OS error, or which limit was crossed).
        problem: String,
    },
    /// The labels file does not follow the `key="value"` format.
    #[error("node labels file {path}: {error}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line at fault.
        error: LabelsFileError,
    },
    /// The Node could not be read or watched through the Kubernetes API.
    #[error("node {node:?} from the Kubernetes API: {error}")]
    Kubernetes {
        /// The node.
        node: String,
        /// Why.
        error: crate::kube::KubeError,
    },
    /// The Node was deleted while being watched.
    #[error("node {node:?} was deleted from the Kubernetes API")]
    NodeDeleted {
        /// The node.
        node: String,
    },
}

/// Read the labels file once and judge the node (synchronous; the file is small).
pub fn read_file_verdict(path: &Path, require: bool) -> Observation {
    let text = read_bounded(path).map_err(|problem| HealthError::Unreadable { path: path.to_path_buf(), problem })?;
    let labels =
        parse_labels_file(&text).map_err(|error| HealthError::Malformed { path: path.to_path_buf(), error })?;
    Ok(verdict(&NodeSnapshot::from_labels(labels), require))
}

/// Opened non-blocking so that a FIFO at `path` cannot hang the caller; only regular files are read.
fn read_bounded(path: &Path) -> Result<String, String> {
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 (at byte {})", e.utf8_error().valid_up_to()))
}

/// Watch the labels file and publish a new observation each time the verdict (or error) changes.
///
/// Must be called inside a tokio runtime with IO and time enabled (`enable_all`). The inotify watch exists before this returns, so no
/// change made after the call is missed. The task ends when every receiver is dropped.
/// `poll` (at least [`MIN_POLL`]) re-reads the file as a fallback for changes inotify cannot
/// see (a parent directory created later, a writer that never closes the file).
pub fn spawn_file_watcher(path: PathBuf, require: bool, poll: Duration) -> watch::Receiver<Observation> {
    spawn_watcher(path, require, poll, true).0
}

/// [`spawn_file_watcher`], optionally without inotify so tests can prove the poll alone works.
fn spawn_watcher(
    path: PathBuf,
    require: bool,
    poll: Duration,
    use_inotify: bool,
) -> (watch::Receiver<Observation>, tokio::task::JoinHandle<()>) {
    let mut notifier = FileNotifier::new(&path, use_inotify);
    notifier.refresh();
    let (tx, rx) = watch::channel(read_file_verdict(&path, require));
    let task = tokio::spawn(async move {
        let poll = poll.max(MIN_POLL);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                _ = ticker.tick() => {}
                relevant = notifier.next_batch() => if !relevant { continue },
            }
            // Re-arm before reading: a change after the read then raises a new event.
            notifier.refresh();
            let observation = read_file_verdict(&path, require);
            tx.send_if_modified(|current| {
                let changed = *current != observation;
                if changed {
                    *current = observation;
                }
                changed
            });
        }
    });
    (rx, task)
}

/// The inotify fd, with the `AsRawFd` that `AsyncFd` needs.
struct InotifyFd(Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Events in the parent directory cover every way the file changes: in-place writes (close),
/// replacement by rename, deletion, and the kubelet's `..data` symlink swap. IN_MODIFY is left
/// out so that a half-written file is not read; IN_OPEN/IN_ACCESS so that our reads are silent.
const DIR_EVENTS: AddWatchFlags = AddWatchFlags::IN_CLOSE_WRITE
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CREATE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR);

/// The watch on the file itself follows symlinks, so a target in another directory is covered.
const FILE_EVENTS: AddWatchFlags = AddWatchFlags::IN_CLOSE_WRITE
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF);

/// inotify watches on the file's parent directory and on the file (its symlink target).
struct FileNotifier {
    inotify: Option<AsyncFd<InotifyFd>>,
    path: PathBuf,
    dir: PathBuf,
    file_name: Option<std::ffi::OsString>,
    dir_wd: Option<WatchDescriptor>,
    file_wd: Option<WatchDescriptor>,
}

impl FileNotifier {
    fn new(path: &Path, use_inotify: bool) -> Self {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let inotify = if use_inotify {
            match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(io::Error::from).and_then(|i| {
                // SAFETY: InotifyFd owns its fd for its whole life and always returns that fd.
                unsafe { AsyncFd::register_with_interest(InotifyFd(i), Interest::READABLE) }.map_err(io::Error::from)
            }) {
                Ok(fd) => Some(fd),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "inotify unavailable: node labels file is polled only");
                    None
                }
            }
        } else {
            None
        };
        Self {
            inotify,
            path: path.to_path_buf(),
            dir,
            file_name: path.file_name().map(|n| n.to_os_string()),
            dir_wd: None,
            file_wd: None,
        }
    }

    /// (Re)establish the watches; missing paths are retried at the next event or poll.
    fn refresh(&mut self) {
        let Some(fd) = &self.inotify else { return };
        let inotify = &fd.get_ref().0;
        if self.dir_wd.is_none() {
            self.dir_wd = inotify.add_watch(&self.dir, DIR_EVENTS).ok();
        }
        // The file may be a new inode now (replaced by rename): watch the current one only.
        let new_file_wd = inotify.add_watch(&self.path, FILE_EVENTS).ok();
        if let Some(old) = self.file_wd {
            if Some(old) != new_file_wd && Some(old) != self.dir_wd {
                let _ = inotify.rm_watch(old);
            }
        }
        self.file_wd = new_file_wd;
    }

    /// Wait for the next batch of inotify events; true if the file may have changed.
    /// Without inotify this never returns, leaving the poll to do the work.
    async fn next_batch(&mut self) -> bool {
        let Some(fd) = &self.inotify else {
            return std::future::pending().await;
        };
        let mut events = Vec::new();
        let failure = match fd.readable().await {
            Ok(mut guard) => loop {
                match guard.try_io(|inner| inner.get_ref().0.read_events().map_err(io::Error::from)) {
                    Ok(Ok(batch)) => events.extend(batch),
                    Ok(Err(e)) => break Some(e),
                    Err(_would_block) => break None,
                }
            },
            Err(e) => Some(e),
        };
        if let Some(e) = failure {
            tracing::warn!(path = %self.path.display(), error = %e, "inotify failed: node labels file is polled only");
            self.inotify = None;
            return true;
        }
        let mut relevant = false;
        for event in events {
            relevant |= self.note(&event);
        }
        relevant
    }

    /// Keep the watch bookkeeping up to date; true unless the event cannot change the file's content.
    fn note(&mut self, event: &InotifyEvent) -> bool {
        if event.mask.contains(AddWatchFlags::IN_IGNORED) {
            if Some(event.wd) == self.dir_wd {
                self.dir_wd = None;
            }
            if Some(event.wd) == self.file_wd {
                self.file_wd = None;
            }
        }
        // A regular file just created is still empty: its IN_CLOSE_WRITE will follow.
        let created_here = Some(event.wd) == self.dir_wd
            && event.mask.contains(AddWatchFlags::IN_CREATE)
            && event.name.is_some()
            && event.name == self.file_name;
        !(created_here && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_file()))
    }
}

#[cfg(test)]
mod tests;
