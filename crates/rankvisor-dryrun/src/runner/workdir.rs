//! The dry run's private directory: each replica's node labels file and termination log.

use std::path::{Path, PathBuf};

/// A private directory for the replicas' labels files and termination logs, removed at the end.
#[derive(Debug)]
pub(crate) struct WorkDir(PathBuf);

impl WorkDir {
    pub(crate) fn create() -> Result<Self, String> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let path = base.join(format!("rankvisor-dry-run-{}-{attempt}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(Self(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create a work directory in {}: {e}", base.display())),
            }
        }
        Err(format!("cannot create a work directory in {}: every name is taken", base.display()))
    }

    pub(crate) fn labels(&self, pod: &str) -> PathBuf {
        self.0.join(format!("{pod}.labels"))
    }

    pub(crate) fn termination_log(&self, pod: &str) -> PathBuf {
        self.0.join(format!("{pod}.termination-log"))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Replace `path` by a file holding `text`, so a reader sees the old or the new file, never half.
pub(crate) fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_replaced_whole() {
        let dir = WorkDir::create().unwrap();
        let path = dir.labels("p");
        write_atomically(&path, "a=\"1\"\n").unwrap();
        write_atomically(&path, "a=\"2\"\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a=\"2\"\n");
        let root = dir.0.clone();
        drop(dir);
        assert!(!root.exists(), "the work directory is removed");
    }
}
