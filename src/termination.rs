//! The Kubernetes termination message: one line saying why rankvisor gave up, which
//! `kubectl describe pod` shows.

use std::path::{Path, PathBuf};

/// The kubelet reads at most 4096 bytes of the termination message.
const MAX_BYTES: usize = 4096;

/// Where Kubernetes mounts the termination log, when it exists.
pub fn default_path() -> Option<PathBuf> {
    let p = Path::new("/dev/termination-log");
    p.exists().then(|| p.to_path_buf())
}

/// Replace the file's content with `message` (cut to the kubelet's limit on a char boundary).
pub fn write_message(path: &Path, message: &str) -> std::io::Result<()> {
    let mut end = message.len().min(MAX_BYTES - 1);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    std::fs::write(path, format!("{}\n", &message[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
