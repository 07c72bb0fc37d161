//! Helpers for Rust training programs that run under rankvisor: their rank contract and their
//! heartbeat. No torch here: the tch smoke trainer (`examples/smoke_train.rs`) uses it, and so can
//! any Rust trainer, without linking libtorch into rankvisor.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use rankvisor_core::rank::{parse_rank_env, RankEnv, RankError};

/// What a training process needs to know about itself, read from the environment rankvisor gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainerEnv {
    /// The validated rank contract (`RANK`, `WORLD_SIZE`, `MASTER_*`, `PET_*`).
    pub rank: RankEnv,
    /// `RANKVISOR_RESTART_COUNT` (else `TORCHELASTIC_RESTART_COUNT`): 0 on the first start.
    pub restart_count: u32,
    /// `RANKVISOR_HEARTBEAT_FILE`, when rankvisor watches one.
    pub heartbeat_file: Option<PathBuf>,
}

impl TrainerEnv {
    /// This process's shard index: `RANK` (one training process per replica).
    pub fn shard(&self) -> u32 {
        self.rank.replica_index
    }

    /// How many shards the data is split into: `WORLD_SIZE`.
    pub fn shards(&self) -> u32 {
        self.rank.world_size.unwrap_or_else(|| self.rank.replica_count.max())
    }

    /// True when this start follows a failure or a hang: the trainer should resume, not begin.
    pub fn is_restart(&self) -> bool {
        self.restart_count > 0
    }
}

/// A trainer's environment that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrainerEnvError {
    /// The rank contract is broken.
    #[error(transparent)]
    Rank(#[from] RankError),
    /// The restart count does not parse.
    #[error("{var}={value:?} is invalid: expected a restart count >= 0")]
    RestartCount {
        /// The variable.
        var: &'static str,
        /// What was seen.
        value: String,
    },
    /// The heartbeat path is empty.
    #[error("RANKVISOR_HEARTBEAT_FILE is set but empty: expected a file path")]
    EmptyHeartbeatFile,
}

/// Read a trainer's environment through `lookup` (the process env in production, a map in tests).
pub fn trainer_env(lookup: impl Fn(&str) -> Option<String>) -> Result<TrainerEnv, TrainerEnvError> {
    let rank = parse_rank_env(&lookup)?;
    let restart_count = match ["RANKVISOR_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"]
        .into_iter()
        .find_map(|var| lookup(var).map(|value| (var, value)))
    {
        Some((var, value)) => value
            .parse::<u32>()
            .ok()
            .filter(|_| value.trim() == value)
            .ok_or(TrainerEnvError::RestartCount { var, value })?,
        None => 0,
    };
    let heartbeat_file = match lookup("RANKVISOR_HEARTBEAT_FILE") {
        Some(p) if p.is_empty() => return Err(TrainerEnvError::EmptyHeartbeatFile),
        Some(p) => Some(PathBuf::from(p)),
        None => None,
    };
    Ok(TrainerEnv { rank, restart_count, heartbeat_file })
}

/// Read a trainer's environment from this process's environment.
pub fn trainer_env_from_process() -> Result<TrainerEnv, TrainerEnvError> {
    trainer_env(|k| std::env::var(k).ok())
}

/// Training progress as rankvisor reads it from the heartbeat file.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    /// Optimizer steps done.
    pub step: u64,
    /// The latest loss (a non-finite loss is written as `null`).
    pub loss: f64,
    /// The step of the newest checkpoint on disk, if any.
    pub checkpoint_step: Option<u64>,
}

/// The heartbeat's text: one JSON object, `{"step":..,"loss":..,"checkpoint_step":..}`.
pub fn heartbeat_json(progress: &Progress) -> String {
    // A struct of numbers and options always serializes (NaN becomes null).
    serde_json::to_string(progress).unwrap_or_else(|_| format!("{{\"step\":{}}}", progress.step))
}

/// Write `progress` to `path` atomically (temp file in the same directory, then rename), so
/// rankvisor never reads a half-written object.
pub fn write_heartbeat(path: &Path, progress: &Progress) -> std::io::Result<()> {
    let file_name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("heartbeat path {}: expected a file name", path.display()),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(heartbeat_json(progress).as_bytes())?;
        f.write_all(b"\n")?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankvisor_core::heartbeat::parse_progress;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    const WORKER_2: [(&str, &str); 6] = [
        ("RANK", "2"),
        ("PET_NODE_RANK", "2"),
        ("WORLD_SIZE", "4"),
        ("PET_NNODES", "4"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "23456"),
    ];

    #[test]
    fn a_bare_process_is_shard_0_of_1_on_its_first_start() {
        let t = trainer_env(env(&[])).unwrap();
        assert_eq!((t.shard(), t.shards(), t.restart_count, t.is_restart()), (0, 1, 0, false));
        assert_eq!(t.heartbeat_file, None);
    }

    #[test]
    fn the_operator_contract_gives_the_shard_and_rankvisor_the_restart_and_heartbeat() {
        let mut pairs = WORKER_2.to_vec();
        pairs.extend([("RANKVISOR_RESTART_COUNT", "3"), ("RANKVISOR_HEARTBEAT_FILE", "/tmp/hb.json")]);
        let t = trainer_env(env(&pairs)).unwrap();
        assert_eq!((t.shard(), t.shards(), t.restart_count, t.is_restart()), (2, 4, 3, true));
        assert_eq!(t.heartbeat_file, Some(PathBuf::from("/tmp/hb.json")));
    }

    #[test]
    fn torchelastic_restart_count_is_read_when_rankvisors_is_absent() {
        let t = trainer_env(env(&[("TORCHELASTIC_RESTART_COUNT", "1")])).unwrap();
        assert_eq!(t.restart_count, 1);
        let t = trainer_env(env(&[("TORCHELASTIC_RESTART_COUNT", "1"), ("RANKVISOR_RESTART_COUNT", "2")])).unwrap();
        assert_eq!(t.restart_count, 2, "rankvisor's own count wins");
    }

    #[test]
    fn bad_values_name_the_variable_and_the_value() {
        let e = trainer_env(env(&[("RANKVISOR_RESTART_COUNT", "-1")])).unwrap_err();
        assert_eq!(e.to_string(), "RANKVISOR_RESTART_COUNT=\"-1\" is invalid: expected a restart count >= 0");
        let e = trainer_env(env(&[("TORCHELASTIC_RESTART_COUNT", " 1")])).unwrap_err();
        assert!(e.to_string().starts_with("TORCHELASTIC_RESTART_COUNT=\" 1\""), "{e}");
        let e = trainer_env(env(&[("RANKVISOR_HEARTBEAT_FILE", "")])).unwrap_err();
        assert_eq!(e, TrainerEnvError::EmptyHeartbeatFile);
        let mut pairs = WORKER_2.to_vec();
        pairs[1] = ("PET_NODE_RANK", "1");
        let e = trainer_env(env(&pairs)).unwrap_err();
        assert!(matches!(e, TrainerEnvError::Rank(RankError::Disagree { var: "RANK", .. })), "{e}");
        assert!(e.to_string().contains("PET_NODE_RANK=\"1\""), "{e}");
    }

    #[test]
    fn the_heartbeat_is_the_json_object_rankvisor_reads_as_progress() {
        let text = heartbeat_json(&Progress { step: 40, loss: 0.25, checkpoint_step: Some(30) });
        let p = parse_progress(&text).expect("a JSON object");
        assert_eq!(
            (p["step"].as_u64(), p["loss"].as_f64(), p["checkpoint_step"].as_u64()),
            (Some(40), Some(0.25), Some(30))
        );
        let text = heartbeat_json(&Progress { step: 1, loss: f64::NAN, checkpoint_step: None });
        let p = parse_progress(&text).expect("a JSON object even with a NaN loss");
        assert!(p["loss"].is_null() && p["checkpoint_step"].is_null(), "{text}");
    }

    #[test]
    fn write_heartbeat_replaces_the_file_whole_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("rv-trainer-hb-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hb.json");
        std::fs::write(&path, "a much longer stale content that must not survive at the end").unwrap();
        let ino_before = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        write_heartbeat(&path, &Progress { step: 7, loss: 1.5, checkpoint_step: None }).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(parse_progress(&text).unwrap()["step"], 7, "{text}");
        let ino_after = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        assert_ne!(ino_before, ino_after, "a rename, not an in-place write");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [std::ffi::OsString::from("hb.json")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn write_heartbeat_reports_an_unusable_path_instead_of_panicking() {
        let missing = std::env::temp_dir().join(format!("rv-no-such-dir-{}", std::process::id())).join("hb");
        let p = Progress { step: 0, loss: 0.0, checkpoint_step: None };
        assert!(write_heartbeat(&missing, &p).is_err());
        assert!(write_heartbeat(Path::new("/"), &p).is_err());
    }
}
