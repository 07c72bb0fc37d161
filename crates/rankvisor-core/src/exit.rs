//! rankvisor's own exit statuses: the one table the README documents.
//!
//! | status | meaning |
//! | --- | --- |
//! | child's code, or 128+N | the child ended and the policy does not restart it |
//! | 64 | bad configuration or environment: permanent |
//! | 126 / 127 | the command cannot be executed / was not found |
//! | 138 | gave up for a reason outside the training program (node unhealthy, rendezvous) |

use crate::signo::Signo;
use std::fmt;

/// Bad configuration or environment (flags, env, rank contract). Kubeflow's ExitCode policy treats it
/// as permanent, which is right: retrying the same configuration cannot help.
pub const CONFIG_ERROR: i32 = 64;
/// The command exists but cannot be executed (as shells report it).
pub const NOT_EXECUTABLE: i32 = 126;
/// The command was not found (as shells report it).
pub const NOT_FOUND: i32 = 127;
/// rankvisor gave up for a reason outside the training program: node unhealthy, rendezvous failed or
/// timed out. 138 (128+SIGUSR1) is the code Kubeflow's ExitCode policy reserves for retries.
pub const EXTERNAL_FAILURE: i32 = 138;

/// How a process ended, as `waitpid` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitHow {
    /// It called exit with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(Signo),
}

impl ExitHow {
    /// The shell-style status: the code, or 128+N for signal N.
    pub fn code(self) -> i32 {
        match self {
            Self::Exited(c) => c,
            Self::Signaled(s) => 128 + s.raw(),
        }
    }

    /// True only for a clean `exit(0)`.
    pub fn success(self) -> bool {
        self == Self::Exited(0)
    }
}

impl fmt::Display for ExitHow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Exited(c) => write!(f, "exited with code {c}"),
            Self::Signaled(s) => write!(f, "killed by signal {} ({})", s, s.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_shell_convention() {
        assert_eq!(ExitHow::Exited(0).code(), 0);
        assert_eq!(ExitHow::Exited(7).code(), 7);
        assert_eq!(ExitHow::Signaled(Signo::KILL).code(), 137);
        assert_eq!(ExitHow::Signaled(Signo::TERM).code(), 143);
        assert!(ExitHow::Exited(0).success());
        assert!(!ExitHow::Exited(1).success());
        assert!(!ExitHow::Signaled(Signo::TERM).success());
    }

    #[test]
    fn display_names_the_signal() {
        assert_eq!(ExitHow::Signaled(Signo::TERM).to_string(), "killed by signal 15 (SIGTERM)");
        assert_eq!(ExitHow::Exited(3).to_string(), "exited with code 3");
    }
}
