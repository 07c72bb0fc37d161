//! Exponential backoff between attempts to reach the API server.

use std::time::Duration;

/// Doubling delays from `initial` up to `max`; `reset` after a success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// A backoff starting at `initial` (at least 1 ms) and capped at `max` (at least `initial`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Self { initial, max: max.max(initial), next: initial }
    }

    /// The delay before the next attempt; each call doubles the following one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        d
    }

    /// Back to `initial`, after a success.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(ms(100), ms(1000));
        let seen: Vec<_> = (0..7).map(|_| b.next_delay()).collect();
        assert_eq!(seen, [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000), ms(1000)]);
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
    }

    #[test]
    fn degenerate_settings_are_raised() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(b.next_delay(), ms(1));
        assert_eq!(b.next_delay(), ms(1));
        let mut b = Backoff::new(ms(500), ms(10));
        assert_eq!((b.next_delay(), b.next_delay()), (ms(500), ms(500)));
    }

    #[test]
    fn huge_values_saturate() {
        let mut b = Backoff::new(Duration::MAX / 2, Duration::MAX);
        for _ in 0..4 {
            assert!(b.next_delay() >= Duration::MAX / 2);
        }
    }
}
