//! Every backoff in rankvisor, on one doubling sequence ([`doubling`]):
//! - [`BackoffConfig`], the kubelet's crash-loop backoff for the child (and the dry run's emulated
//!   kubelet): the first restart after a crash is immediate, then an initial delay doubling up to
//!   a cap, reset after healthy running (seed 000: Error -> Running within 1 s, then about 10 s,
//!   then about 20 s); no jitter, as the kubelet;
//! - [`Backoff`], the retry backoff of every network client (the Kubernetes API, the webhook, a
//!   worker dialling the master): the same doubling with a cap, reset after a success, and
//!   jittered so that thousands of replicas that lost the same server at the same moment do not
//!   all come back to it at the same moment.

use std::time::Duration;

/// `initial` x 2^`step`, at most `max` (no overflow: a huge step is the cap).
pub fn doubling(initial: Duration, max: Duration, step: u32) -> Duration {
    let factor = 1u32.checked_shl(step.min(31)).unwrap_or(u32::MAX);
    initial.checked_mul(factor).unwrap_or(max).min(max)
}

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
        doubling(self.initial, self.max, step - 1).max(MIN_DELAY)
    }
}

/// Share of each delay that is randomized by default: a delay is drawn from `(base/2, base]`.
pub const DEFAULT_JITTER: f64 = 0.5;

/// Doubling delays from `initial` up to `max`, each shortened by a random share of at most
/// `jitter`; `reset` after a success.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    /// Attempts since the last reset: the next delay's base is `initial` x 2^`step`.
    step: u32,
    /// In `[0, 1]`: 0 gives the exact doubling sequence.
    jitter: f64,
}

impl Backoff {
    /// A backoff starting at `initial` (at least 1 ms) and capped at `max` (at least `initial`),
    /// with the default jitter.
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Self { initial, max: max.max(initial), step: 0, jitter: DEFAULT_JITTER }
    }

    /// The same with another jitter share, clamped to `[0, 1]` (NaN counts as 0).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() { 0.0 } else { jitter.clamp(0.0, 1.0) };
        self
    }

    /// The delay before the next attempt, with a random jitter; each call doubles the base of
    /// the following one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_with(uniform())
    }

    /// `next_delay` with the random draw given: `u` in `[0, 1)` (clamped) shortens the base by
    /// `base * jitter * u`. `u = 0` gives the base itself.
    pub fn next_delay_with(&mut self, u: f64) -> Duration {
        let base = doubling(self.initial, self.max, self.step);
        self.step = self.step.saturating_add(1);
        let u = if u.is_nan() { 0.0 } else { u.clamp(0.0, 1.0) };
        // Near Duration::MAX the f64 round trip may not fit: then no cut.
        let cut = Duration::try_from_secs_f64(base.as_secs_f64() * self.jitter * u).unwrap_or_default();
        // At least 1 ms, so that jitter never turns a retry into a busy loop.
        base.saturating_sub(cut).max(Duration::from_millis(1))
    }

    /// Back to `initial`, after a success.
    pub fn reset(&mut self) {
        self.step = 0;
    }
}

/// A uniform draw in `[0, 1)` from the OS; 0.5 if the OS has no randomness to give.
fn uniform() -> f64 {
    match getrandom::u64() {
        // The top 53 bits make an exact f64 in [0, 1).
        Ok(r) => (r >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
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
        let seen: Vec<_> = (0..7).map(|_| b.next_delay_with(0.0)).collect();
        assert_eq!(seen, [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000), ms(1000)]);
        b.reset();
        assert_eq!(b.next_delay_with(0.0), ms(100));
        assert_eq!(b.next_delay_with(0.0), ms(200));
    }

    #[test]
    fn jitter_shortens_within_its_share() {
        let mut b = Backoff::new(ms(1000), ms(8000));
        assert_eq!(b.next_delay_with(0.0), ms(1000), "u = 0: the base");
        assert_eq!(b.next_delay_with(0.5), ms(1500), "2000 cut by 2000 * 0.5 * 0.5");
        assert_eq!(b.next_delay_with(1.0), ms(2000), "4000 cut by half at most");
        assert_eq!(b.next_delay_with(0.25), ms(7000), "the cap, cut by an eighth");
        let mut full = Backoff::new(ms(1000), ms(1000)).with_jitter(1.0);
        assert_eq!(full.next_delay_with(1.0), ms(1), "a full cut still waits 1 ms");
        let mut none = Backoff::new(ms(1000), ms(1000)).with_jitter(0.0);
        assert_eq!(none.next_delay_with(0.9), ms(1000));
    }

    #[test]
    fn random_delays_stay_within_bounds_and_spread() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let mut b = Backoff::new(ms(1000), ms(1000));
            let d = b.next_delay();
            assert!(d > ms(500) && d <= ms(1000), "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 100, "200 draws gave only {} distinct delays", seen.len());
    }

    #[test]
    fn out_of_range_draws_and_shares_are_clamped() {
        let mut b = Backoff::new(ms(1000), ms(1000));
        assert_eq!(b.next_delay_with(-3.0), ms(1000));
        assert_eq!(b.next_delay_with(7.0), ms(500));
        assert_eq!(b.next_delay_with(f64::NAN), ms(1000));
        let mut b = Backoff::new(ms(1000), ms(1000)).with_jitter(5.0);
        assert_eq!(b.next_delay_with(0.5), ms(500));
        let mut b = Backoff::new(ms(1000), ms(1000)).with_jitter(f64::NAN);
        assert_eq!(b.next_delay_with(0.5), ms(1000));
    }

    #[test]
    fn degenerate_settings_are_raised() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(b.next_delay_with(0.0), ms(1));
        assert_eq!(b.next_delay_with(0.0), ms(1));
        let mut b = Backoff::new(ms(500), ms(10));
        assert_eq!((b.next_delay_with(0.0), b.next_delay_with(0.0)), (ms(500), ms(500)));
    }

    #[test]
    fn huge_values_saturate() {
        let mut b = Backoff::new(Duration::MAX / 2, Duration::MAX);
        for _ in 0..4 {
            assert!(b.next_delay_with(0.0) >= Duration::MAX / 2);
        }
        assert!(b.next_delay_with(1.0) >= Duration::MAX / 8);
        let mut b = Backoff::new(Duration::MAX, Duration::MAX).with_jitter(1.0);
        assert!(b.next_delay_with(0.999) >= Duration::from_millis(1));
    }
}

#[cfg(test)]
mod kubelet_tests {
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
