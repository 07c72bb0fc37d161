//! A signal number, typed: what rankvisor receives, forwards, sends and reports.
//!
//! `nix::sys::signal::Signal` is an enum of the named signals only: it has no real-time signals
//! (SIGRTMIN..=SIGRTMAX, 32..=64 on Linux), which a PID 1 must forward as tini and dumb-init do,
//! and which can kill a child (`ExitHow::Signaled`). So rankvisor's one signal type is this
//! newtype over the kernel's number, valid in Linux's range 1..=64 only, with nix's `Signal`
//! converting into it. Pids are `nix::unistd::Pid`.

use nix::sys::signal::Signal;
use std::fmt;

/// A signal number in Linux's range 1..=64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Signo(i32);

impl Signo {
    /// SIGTERM.
    pub const TERM: Self = Self(libc::SIGTERM);
    /// SIGINT.
    pub const INT: Self = Self(libc::SIGINT);
    /// SIGKILL.
    pub const KILL: Self = Self(libc::SIGKILL);
    /// SIGUSR1 (the HyperPod agent's graceful stop).
    pub const USR1: Self = Self(libc::SIGUSR1);
    /// SIGCHLD.
    pub const CHLD: Self = Self(libc::SIGCHLD);
    /// SIGPIPE.
    pub const PIPE: Self = Self(libc::SIGPIPE);
    /// SIGHUP.
    pub const HUP: Self = Self(libc::SIGHUP);

    /// The signal numbered `n`, None outside 1..=64.
    pub const fn new(n: i32) -> Option<Self> {
        if n >= 1 && n <= 64 {
            Some(Self(n))
        } else {
            None
        }
    }

    /// The kernel's number, for the syscall edge.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// TERM and INT stop the child (forward, grace, KILL); the rest are only forwarded.
    pub fn is_shutdown(self) -> bool {
        self == Self::TERM || self == Self::INT
    }

    /// The conventional name (`SIGTERM`), `SIG<n>` for a real-time signal.
    pub fn name(self) -> String {
        match Signal::try_from(self.0) {
            Ok(s) => s.as_str().to_string(),
            Err(_) => format!("SIG{}", self.0),
        }
    }
}

impl From<Signal> for Signo {
    fn from(s: Signal) -> Self {
        Self(s as i32)
    }
}

impl TryFrom<i32> for Signo {
    type Error = i32;

    /// The number itself back when it is outside 1..=64.
    fn try_from(n: i32) -> Result<Self, i32> {
        Self::new(n).ok_or(n)
    }
}

impl<'de> serde::Deserialize<'de> for Signo {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i32::deserialize(d)?;
        Self::new(n).ok_or_else(|| serde::de::Error::custom(format!("signal number {n} is outside 1..=64")))
    }
}

impl std::str::FromStr for Signo {
    type Err = String;

    /// A signal as a user writes it: `SIGUSR1`, `USR1` (any case) or its number `10`.
    fn from_str(s: &str) -> Result<Self, String> {
        let expected = "expected a signal name such as SIGUSR1 or USR1, or a number from 1 to 64";
        if let Ok(n) = s.parse::<i32>() {
            return Self::new(n).ok_or_else(|| format!("signal number {n} is outside 1..=64: {expected}"));
        }
        let upper = s.to_ascii_uppercase();
        let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
        name.parse::<Signal>()
            .map(Self::from)
            .map_err(|_| format!("\"{}\" is not a signal: {expected}", crate::untrusted::escape(s)))
    }
}

impl fmt::Display for Signo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_linux_signal_numbers_are_signals() {
        assert_eq!(Signo::new(0), None);
        assert_eq!(Signo::new(65), None);
        assert_eq!(Signo::new(-15), None);
        assert_eq!(Signo::new(15), Some(Signo::TERM));
        assert_eq!(Signo::try_from(64).map(Signo::raw), Ok(64));
        assert_eq!(Signo::try_from(99), Err(99));
    }

    #[test]
    fn names_come_from_nix_and_real_time_signals_are_numbered() {
        assert_eq!(Signo::TERM.name(), "SIGTERM");
        assert_eq!(Signo::from(Signal::SIGUSR2).name(), "SIGUSR2");
        assert_eq!(Signo::new(40).map(Signo::name).as_deref(), Some("SIG40"));
    }

    #[test]
    fn signals_parse_by_name_or_number_and_refuse_the_rest() {
        for ok in ["SIGUSR1", "USR1", "usr1", "SigUsr1", "10"] {
            assert_eq!(ok.parse::<Signo>(), Ok(Signo::USR1), "{ok}");
        }
        assert_eq!("40".parse::<Signo>().map(Signo::raw), Ok(40));
        for (bad, want) in [
            ("0", "outside 1..=64"),
            ("65", "outside 1..=64"),
            ("SIGFOO", "\"SIGFOO\" is not a signal"),
            ("", "is not a signal"),
        ] {
            let e = bad.parse::<Signo>().unwrap_err();
            assert!(e.contains(want) && e.contains("expected a signal name"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_term_and_int_shut_down() {
        assert!(Signo::TERM.is_shutdown() && Signo::INT.is_shutdown());
        assert!(!Signo::HUP.is_shutdown() && !Signo::USR1.is_shutdown());
    }

    #[test]
    fn it_reads_and_writes_as_the_number_and_refuses_others() {
        assert_eq!(serde_json::to_string(&Signo::KILL).unwrap(), "9");
        assert_eq!(serde_json::from_str::<Signo>("15").unwrap(), Signo::TERM);
        let e = serde_json::from_str::<Signo>("70").unwrap_err().to_string();
        assert!(e.contains("70") && e.contains("1..=64"), "{e}");
    }
}
