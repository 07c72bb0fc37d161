//! Restart policies, as Kubernetes and Kubeflow's training-operator define them.

use crate::exit::ExitHow;
use std::fmt;
use std::str::FromStr;

/// When a finished child is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
pub enum RestartPolicy {
    /// Never restart.
    #[value(name = "Never")]
    Never,
    /// Restart after a failure (non-zero exit, signal, hang).
    #[value(name = "OnFailure")]
    OnFailure,
    /// Restart after every exit, success included.
    #[value(name = "Always")]
    Always,
    /// Kubeflow's policy: restart only for a retryable exit code (>= 128: killed by a signal, or a
    /// code of 128+N such as rankvisor's own 138); every code below 128 is permanent.
    #[value(name = "ExitCode")]
    ExitCode,
}

/// Whether Kubeflow's ExitCode policy retries a container that exited with `code`: the
/// training-operator's `IsRetryableExitCode` (`pkg/util/train/train_util.go`, since v1.7) is
/// `exitCode >= 128`. Codes below 128 are the program's own verdict and are permanent.
pub fn is_retryable_exit_code(code: i32) -> bool {
    code >= 128
}

impl RestartPolicy {
    /// Whether a child that ended this way (`hung`: stopped by hang detection) is started again.
    pub fn should_restart(self, how: ExitHow, hung: bool) -> bool {
        let failed = hung || !how.success();
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::OnFailure => failed,
            // A hang is outside the program, like a kubelet kill after a failed liveness probe (137).
            Self::ExitCode => failed && (hung || is_retryable_exit_code(how.code())),
        }
    }
}

impl FromStr for RestartPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "Never" => Ok(Self::Never),
            "OnFailure" => Ok(Self::OnFailure),
            "Always" => Ok(Self::Always),
            "ExitCode" => Ok(Self::ExitCode),
            _ => Err(format!("restart policy {s:?} is invalid: expected Never, OnFailure, Always or ExitCode")),
        }
    }
}

impl fmt::Display for RestartPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Which children a failure restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
pub enum RestartScope {
    /// Only this replica's child (what seed 000 measured for PyTorchJobs).
    Replica,
    /// Every replica's child, in a new rendezvous generation (torchrun's worker-group behaviour).
    Job,
}

impl FromStr for RestartScope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "replica" => Ok(Self::Replica),
            "job" => Ok(Self::Job),
            _ => Err(format!("restart scope {s:?} is invalid: expected replica or job")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RestartPolicy::*;

    #[test]
    fn exhaustive_decisions() {
        let ok = ExitHow::Exited(0);
        for code in 0..=255 {
            let how = ExitHow::Exited(code);
            assert!(!Never.should_restart(how, false));
            assert!(Always.should_restart(how, false));
            assert_eq!(OnFailure.should_restart(how, false), code != 0, "OnFailure {code}");
            // IsRetryableExitCode: exitCode >= 128.
            assert_eq!(ExitCode.should_restart(how, false), code >= 128, "ExitCode {code}");
        }
        for sig in (1..=64).filter_map(crate::signo::Signo::new) {
            let how = ExitHow::Signaled(sig);
            assert!(OnFailure.should_restart(how, false));
            // A signal death is 128+N: always retryable.
            assert!(ExitCode.should_restart(how, false), "signal {sig}");
        }
        // A hung child is a failure even when it exits 0 once stopped.
        for p in [OnFailure, Always, ExitCode] {
            assert!(p.should_restart(ok, true), "{p}");
        }
        assert!(!Never.should_restart(ok, true));
        assert!(ExitCode.should_restart(ExitHow::Exited(1), true));
    }

    #[test]
    fn parse_names_the_value() {
        assert_eq!("ExitCode".parse::<RestartPolicy>(), Ok(ExitCode));
        let e = "onfailure".parse::<RestartPolicy>().unwrap_err();
        assert_eq!(e, "restart policy \"onfailure\" is invalid: expected Never, OnFailure, Always or ExitCode");
        assert_eq!("job".parse::<RestartScope>(), Ok(RestartScope::Job));
        assert!("pod".parse::<RestartScope>().unwrap_err().contains("\"pod\""));
    }
}
