//! The Kubernetes termination message: one line saying why rankvisor gave up, which
//! `kubectl describe pod` shows.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The kubelet reads at most 4096 bytes of the termination message.
const MAX_BYTES: usize = 4096;

/// Where Kubernetes mounts the termination log, when it exists.
pub fn default_path() -> Option<PathBuf> {
    let p = Path::new("/dev/termination-log");
    p.exists().then(|| p.to_path_buf())
}

/// The message as written: one line (every control or invisible character, of an outside value
/// inside it say, is escaped; backslashes are left alone, as values are usually escaped once
/// already), cut to the kubelet's limit on a character boundary, newline-terminated.
pub fn one_line(message: &str) -> String {
    let escaped = crate::untrusted::escape_hidden(message);
    let mut end = escaped.len().min(MAX_BYTES - 1);
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n", &escaped[..end])
}

/// A descriptor held back for the termination message: when rankvisor gives up because its
/// descriptor table is full (a restart that failed with EMFILE), the message still gets written.
static RESERVE: Mutex<Option<File>> = Mutex::new(None);

/// Hold one descriptor in reserve for [`write_message`] (call once, before the child starts).
pub fn reserve_descriptor() {
    if let (Ok(f), Ok(mut reserve)) = (File::open("/dev/null"), RESERVE.try_lock()) {
        *reserve = Some(f);
    }
}

/// Replace the file's content with `message` as [`one_line`] writes it. Only a regular file is
/// written (as /dev/termination-log is): a FIFO, device or directory there is refused at once,
/// never waited on. Out of descriptors, the reserved one is given up and the write tried again.
pub fn write_message(path: &Path, message: &str) -> std::io::Result<()> {
    let write = || crate::untrusted::files::replace_regular(path, one_line(message).as_bytes());
    match write() {
        Err(e) if e.is_out_of_descriptors() => {
            // try_lock: the panic hook writes here too, and must never wait.
            let released = RESERVE.try_lock().ok().and_then(|mut r| r.take()).is_some();
            if released {
                Ok(write()?)
            } else {
                Err(e.into())
            }
        }
        r => Ok(r?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_is_held_in_reserve_and_kept_while_others_are_free() {
        reserve_descriptor();
        assert!(RESERVE.lock().unwrap().is_some(), "a descriptor is held");
        let p = std::env::temp_dir().join(format!("rv-term-reserve-{}", std::process::id()));
        write_message(&p, "fine").unwrap();
        assert!(RESERVE.lock().unwrap().is_some(), "kept while descriptors are there");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "fine\n");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn writes_and_caps() {
        let p = std::env::temp_dir().join(format!("rv-term-{}", std::process::id()));
        write_message(&p, "child exited with code 1").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "child exited with code 1\n");
        write_message(&p, &"é".repeat(5000)).unwrap();
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.len() <= MAX_BYTES);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn the_message_stays_one_line_whatever_it_quotes() {
        let forged = "node n1\n[rankvisor] ERROR forged\r\x1b[2K";
        assert_eq!(one_line(forged), "node n1\\n[rankvisor] ERROR forged\\r\\u{1b}[2K\n");
        assert_eq!(one_line("already escaped: a\\nb"), "already escaped: a\\nb\n", "not escaped twice");
        assert_eq!(one_line(forged).lines().count(), 1);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let p = std::env::temp_dir().join(format!("rv-term-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = write_message(&p, "x").unwrap_err().to_string();
        assert!(e.contains("is a FIFO (named pipe): expected a regular file"), "{e}");
        std::fs::remove_file(&p).unwrap();
    }
}
