//! The kubelet's crash-loop backoff: the first restart after a crash is immediate, then an initial
//! delay doubling up to a cap, reset after healthy running (seed 000: Error -> Running within 1 s,
//! then about 10 s, then about 20 s).

use std::time::Duration;

/// Backoff settings (defaults are the kubelet's own numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Delay before the first restart.
    pub initial: Duration,
    /// The cap.
    pub max: Duration,
    /// A child that ran this long without failing resets the delay to `initial`.
    pub reset: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self { initial: Duration::from_secs(10), max: Duration::from_secs(300), reset: Duration::from_secs(600) }
    }
}

/// The shortest delay between two restarts after the first: a child that crashes at once with
/// `--backoff-initial 0s` must not make rankvisor spin (hundreds of forks a second).
pub const MIN_DELAY: Duration = Duration::from_millis(10);

impl BackoffConfig {
    /// The delay before restart number `step` (0-based since the last reset): none for the first,
    /// then initial x 2^(step-1), at most `max`, at least [`MIN_DELAY`].
    pub fn delay(&self, step: u32) -> Duration {
        if step == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl((step - 1).min(31)).unwrap_or(u32::MAX);
        self.initial.checked_mul(factor).unwrap_or(self.max).min(self.max).max(MIN_DELAY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_sequence() {
        let b = BackoffConfig::default();
        let secs: Vec<u64> = (0..9).map(|i| b.delay(i).as_secs()).collect();
        assert_eq!(secs, [0, 10, 20, 40, 80, 160, 300, 300, 300], "the first restart is immediate");
        assert_eq!(b.delay(1000), Duration::from_secs(300));
    }

    #[test]
    fn the_issue_example_and_zero() {
        let b = BackoffConfig {
            initial: Duration::from_millis(200),
            max: Duration::from_millis(800),
            reset: Duration::from_secs(1),
        };
        let ms: Vec<u128> = (0..6).map(|i| b.delay(i).as_millis()).collect();
        assert_eq!(ms, [0, 200, 400, 800, 800, 800]);
        let zero = BackoffConfig { initial: Duration::ZERO, ..b };
        assert_eq!(zero.delay(0), Duration::ZERO);
        assert_eq!(zero.delay(7), MIN_DELAY, "a floor after the first restart");
    }
}
