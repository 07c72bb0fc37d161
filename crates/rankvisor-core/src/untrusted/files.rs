//! Files named by the user or written by the child (heartbeat file, termination log): opened
//! with `O_NONBLOCK` so that a FIFO or a device can never hang the supervisor in `open`, and only
//! used when they turn out to be regular files; reads stop at a bound.

use std::fs::{File, FileType, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::escape::escape;

/// A file rankvisor cannot use.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Something that is not a regular file is at the path.
    #[error("{} is {kind}: expected a regular file", shown(path))]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What is there ("a FIFO", "a directory", ...).
        kind: &'static str,
    },
    /// Opening, reading or writing failed.
    #[error("{}: {source}", shown(path))]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl FileError {
    /// The process (EMFILE) or the system (ENFILE) has no descriptor left.
    pub fn is_out_of_descriptors(&self) -> bool {
        matches!(self, Self::Io { source, .. } if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)))
    }
}

impl From<FileError> for std::io::Error {
    fn from(e: FileError) -> Self {
        let kind = match &e {
            FileError::NotRegular { .. } => std::io::ErrorKind::InvalidInput,
            FileError::Io { source, .. } => source.kind(),
        };
        std::io::Error::new(kind, e.to_string())
    }
}

fn shown(path: &Path) -> String {
    escape(&path.to_string_lossy()).into_owned()
}

/// What a file type is, for messages.
pub fn kind(ft: FileType) -> &'static str {
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
    move |source| FileError::Io { path: path.to_path_buf(), source }
}

fn ensure_regular(path: &Path, ft: FileType) -> Result<(), FileError> {
    if ft.is_file() {
        Ok(())
    } else {
        Err(FileError::NotRegular { path: path.to_path_buf(), kind: kind(ft) })
    }
}

/// Ok when nothing is at `path` yet or a regular file is: for checking an option at start.
pub fn regular_or_absent(path: &Path) -> Result<(), FileError> {
    match std::fs::metadata(path) {
        Ok(m) => ensure_regular(path, m.file_type()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

const FLAGS: i32 = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;

/// Open `path` for reading without blocking, refusing anything but a regular file.
pub fn open_regular(path: &Path) -> Result<File, FileError> {
    let file = OpenOptions::new().read(true).custom_flags(FLAGS).open(path).map_err(io(path))?;
    ensure_regular(path, file.metadata().map_err(io(path))?.file_type())?;
    Ok(file)
}

/// At most the first `max` bytes of the regular file at `path` (never the rest of a huge file).
pub fn read_head(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).map_err(io(path))?;
    Ok(bytes)
}

/// Replace the content of the regular file at `path` (created if absent) with `bytes`, without
/// ever blocking: a FIFO, device, socket or directory there is refused before it is opened (and
/// again after, should it have been swapped in between).
pub fn replace_regular(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    regular_or_absent(path)?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(FLAGS)
        .open(path)
        .map_err(io(path))?;
    ensure_regular(path, file.metadata().map_err(io(path))?.file_type())?;
    // Truncate only once it is known to be a regular file.
    file.set_len(0).map_err(io(path))?;
    file.write_all(bytes).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rv-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mkfifo(path: &Path) {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }

    #[test]
    fn a_fifo_is_refused_at_once_for_reading_and_writing() {
        let d = dir("fifo");
        let fifo = d.join("fifo");
        mkfifo(&fifo);
        let e = read_head(&fifo, 10).unwrap_err().to_string();
        assert!(e.ends_with("fifo is a FIFO (named pipe): expected a regular file"), "{e}");
        let e = replace_regular(&fifo, b"x").unwrap_err().to_string();
        assert!(e.contains("is a FIFO (named pipe): expected a regular file"), "{e}");
        assert!(regular_or_absent(&fifo).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn directories_and_devices_are_refused() {
        let d = dir("kinds");
        assert!(read_head(&d, 10).unwrap_err().to_string().contains("is a directory"));
        let e = replace_regular(Path::new("/dev/null"), b"x").unwrap_err().to_string();
        assert!(e.contains("/dev/null is a character device: expected a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn regular_files_are_read_up_to_the_bound_and_replaced() {
        let d = dir("regular");
        let p = d.join("f");
        assert!(regular_or_absent(&p).is_ok(), "absent is fine");
        replace_regular(&p, b"a longer first content").unwrap();
        replace_regular(&p, b"short").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"short");
        assert_eq!(read_head(&p, 3).unwrap(), b"sho");
        assert!(regular_or_absent(&p).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
