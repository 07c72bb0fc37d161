//! The kubelet's crash-loop backoff: an initial delay, doubling, capped, reset after healthy running.

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

impl BackoffConfig {
    /// The delay before restart number `step` (0-based): initial x 2^step, at most `max`.
    pub fn delay(&self, step: u32) -> Duration {
        let factor = 1u32.checked_shl(step.min(31)).unwrap_or(u32::MAX);
        self.initial.checked_mul(factor).unwrap_or(self.max).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_sequence() {
        let b = BackoffConfig::default();
        let secs: Vec<u64> = (0..8).map(|i| b.delay(i).as_secs()).collect();
        assert_eq!(secs, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.delay(1000), Duration::from_secs(300));
    }

    #[test]
    fn the_issue_example_and_zero() {
        let b = BackoffConfig {
            initial: Duration::from_millis(200),
            max: Duration::from_millis(800),
            reset: Duration::from_secs(1),
        };
        let ms: Vec<u128> = (0..5).map(|i| b.delay(i).as_millis()).collect();
        assert_eq!(ms, [200, 400, 800, 800, 800]);
        let zero = BackoffConfig { initial: Duration::ZERO, ..b };
        assert_eq!(zero.delay(7), Duration::ZERO);
    }
}
