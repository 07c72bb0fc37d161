//! Stragglers named from a log metric (issue 36 item 4): each replica's latest value of one log
//! rule's captured metric (`--straggler-rule NAME`: samples/s, TFLOPs; `NAME:lower` for a step
//! time, where lower is better) is compared with the job's median; a replica whose value stays
//! worse than `--straggler-ratio` of the median for `--straggler-points` consecutive points of its
//! own is a straggler. Pure: the master feeds every point it receives and gets the verdicts.
//!
//! The median is over every replica's latest point, judged only once a majority of the job has
//! reported one (a median of the first few replicas to log says nothing about the job). A flagged
//! replica is named once; it is named again only after it caught up (a point no longer worse than
//! the ratio) and fell behind again.

use std::collections::{BTreeMap, BTreeSet};

use crate::status::straggler::NamedStraggler;

/// Which way the metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Throughput (samples/s, TFLOPs): a straggler's value is low.
    Higher,
    /// A step time (`NAME:lower`): a straggler's value is high.
    Lower,
}

/// The detector's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StragglerConfig {
    /// `--straggler-ratio` (0.75): worse than this fraction of the median's performance is behind.
    pub ratio: f64,
    /// `--straggler-points` (3): consecutive points behind before the replica is named.
    pub points: u32,
    /// Which way the metric is better.
    pub better: Better,
}

impl Default for StragglerConfig {
    fn default() -> Self {
        Self { ratio: 0.75, points: 3, better: Better::Higher }
    }
}

/// A replica named as a straggler, with the figures that named it.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    /// The replica's index.
    pub replica: u32,
    /// Its latest value.
    pub value: f64,
    /// The job's median when it was named.
    pub median: f64,
    /// Its performance relative to the median (below the ratio; 1.0 is the median's).
    pub relative: f64,
    /// Consecutive points behind.
    pub points: u32,
}

impl std::fmt::Display for Straggler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "replica {} is a straggler: its metric {} against the job's median {} ({:.2}x the median's pace) for {} points in a row",
            self.replica, self.value, self.median, self.relative, self.points
        )
    }
}

impl Straggler {
    /// This straggler as the master reports it: on `node` in `pod`, named at `named_at`.
    pub fn named(&self, node: String, pod: Option<String>, named_at: String) -> NamedStraggler {
        NamedStraggler {
            replica: self.replica,
            node,
            pod,
            value: self.value,
            median: self.median,
            relative: self.relative,
            points: self.points,
            named_at,
            message: self.to_string(),
        }
    }
}

/// One point of a replica's metric, compared by its bits (so that commands carrying it are `Eq`).
#[derive(Debug, Clone, Copy)]
pub struct Point(pub f64);

impl PartialEq for Point {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Point {}

/// The master's detector: every replica's latest point and its streak behind.
#[derive(Debug, Clone)]
pub struct Detector {
    cfg: StragglerConfig,
    /// Replicas in the job: the median waits for a majority of them.
    replicas: u32,
    latest: BTreeMap<u32, f64>,
    behind: BTreeMap<u32, u32>,
    flagged: BTreeSet<u32>,
    /// The median as last computed, and the points since: it is computed again once the points
    /// since reach a sixteenth of the replicas reporting (at least every point in a job of 16), so
    /// a point costs O(1) amortised, not O(replicas): 16,384 replicas each logging once a second
    /// would otherwise cost the master 268 million comparisons a second.
    median: Option<f64>,
    since_median: usize,
}

impl Detector {
    /// A detector for a job of `replicas` replicas that has seen nothing yet.
    pub fn new(cfg: StragglerConfig, replicas: u32) -> Self {
        Self {
            cfg,
            replicas,
            latest: BTreeMap::new(),
            behind: BTreeMap::new(),
            flagged: BTreeSet::new(),
            median: None,
            since_median: 0,
        }
    }

    /// The replicas named and not caught up since.
    pub fn flagged(&self) -> &BTreeSet<u32> {
        &self.flagged
    }

    /// Replica `replica` reported `value`: the straggler it now is, when this point names it.
    /// A value that is not a finite number is ignored.
    pub fn on_point(&mut self, replica: u32, value: f64) -> Option<Straggler> {
        if !value.is_finite() {
            return None;
        }
        self.latest.insert(replica, value);
        let quorum = (self.replicas / 2 + 1).max(2) as usize;
        if self.latest.len() < quorum {
            return None;
        }
        let median = self.median();
        let relative = relative(self.cfg.better, value, median);
        let streak = self.behind.entry(replica).or_insert(0);
        if relative >= self.cfg.ratio {
            *streak = 0;
            self.flagged.remove(&replica);
            return None;
        }
        *streak += 1;
        if *streak < self.cfg.points || self.flagged.contains(&replica) {
            return None;
        }
        self.flagged.insert(replica);
        Some(Straggler { replica, value, median, relative, points: *streak })
    }

    /// The job's median, computed again when it is due.
    fn median(&mut self) -> f64 {
        self.since_median += 1;
        match self.median {
            Some(m) if self.since_median < (self.latest.len() / 16).max(1) => m,
            _ => {
                let m = median(self.latest.values().copied().collect());
                self.median = Some(m);
                self.since_median = 0;
                m
            }
        }
    }

    /// A replica that left (its pod recreated, or restarted as a straggler): its points are
    /// forgotten, and it is judged afresh.
    pub fn forget(&mut self, replica: u32) {
        self.latest.remove(&replica);
        self.behind.remove(&replica);
        self.flagged.remove(&replica);
        self.median = None;
    }
}

/// Performance relative to the median: 1.0 at the median, below 1.0 behind it.
fn relative(better: Better, value: f64, median: f64) -> f64 {
    match better {
        Better::Higher if median > 0.0 => value / median,
        Better::Lower if value > 0.0 => median / value,
        // A zero median throughput, or a zero step time: nobody is behind it.
        _ => 1.0,
    }
}

/// The median of non-empty `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    let n = values.len();
    let mid = n / 2;
    let (_, &mut upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    if n % 2 == 1 {
        return upper;
    }
    let lower = values[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lower + upper) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*): noise without a dependency.
    struct Noise(u64);

    impl Noise {
        /// Uniform in [-1, 1).
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
            (x as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }
    }

    #[test]
    fn one_replica_of_8_at_0_6x_is_named_within_3_points() {
        let mut d = Detector::new(StragglerConfig::default(), 8);
        let mut named = Vec::new();
        for round in 1..=5u32 {
            for replica in 0..8 {
                let value = if replica == 5 { 60.0 } else { 100.0 };
                if let Some(s) = d.on_point(replica, value) {
                    named.push((round, s));
                }
            }
        }
        assert_eq!(named.len(), 1, "named once: {named:?}");
        let (round, s) = &named[0];
        assert_eq!(*round, 3, "at its third point");
        assert_eq!(s, &Straggler { replica: 5, value: 60.0, median: 100.0, relative: 0.6, points: 3 });
        assert_eq!(
            s.to_string(),
            "replica 5 is a straggler: its metric 60 against the job's median 100 (0.60x the median's pace) for 3 points in a row"
        );
    }

    #[test]
    fn a_balanced_job_of_64_with_10_percent_noise_flags_nothing_in_1000_points() {
        let mut d = Detector::new(StragglerConfig::default(), 64);
        let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
        for _ in 0..1000 {
            for replica in 0..64 {
                let value = 100.0 * (1.0 + 0.1 * noise.next());
                assert_eq!(d.on_point(replica, value), None, "replica {replica} at {value}");
            }
        }
        assert!(d.flagged().is_empty());
    }

    #[test]
    fn at_16384_replicas_with_noise_the_slow_one_alone_is_named_at_its_third_point() {
        let n = 16_384;
        let mut d = Detector::new(StragglerConfig::default(), n);
        let mut noise = Noise(7);
        let mut named = Vec::new();
        for round in 1..=4 {
            for replica in 0..n {
                let base = if replica == 9_000 { 50.0 } else { 100.0 };
                if let Some(s) = d.on_point(replica, base * (1.0 + 0.1 * noise.next())) {
                    named.push((round, s.replica));
                }
            }
        }
        assert_eq!(named, [(3, 9_000)]);
    }

    #[test]
    fn a_step_time_is_better_lower() {
        let cfg = StragglerConfig { better: Better::Lower, ..StragglerConfig::default() };
        let mut d = Detector::new(cfg, 4);
        let mut named = None;
        for _ in 0..3 {
            for replica in 0..4 {
                // Replica 2's steps take 1.5x as long: 0.67x the pace.
                let step = if replica == 2 { 1.5 } else { 1.0 };
                named = named.or(d.on_point(replica, step));
            }
        }
        let s = named.expect("named");
        assert_eq!((s.replica, s.median), (2, 1.0));
        assert!((s.relative - 1.0 / 1.5).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn a_streak_breaks_on_a_point_at_pace_and_a_recovered_replica_is_named_again() {
        let mut d = Detector::new(StragglerConfig::default(), 4);
        let mut feed = |slow: f64| -> Option<Straggler> {
            let mut out = None;
            for replica in 0..4 {
                out = out.or(d.on_point(replica, if replica == 1 { slow } else { 100.0 }));
            }
            out
        };
        assert_eq!(feed(50.0), None);
        assert_eq!(feed(50.0), None);
        assert_eq!(feed(80.0), None, "at pace again: the streak starts over");
        assert_eq!(feed(50.0), None);
        assert_eq!(feed(50.0), None);
        assert!(feed(50.0).is_some(), "three in a row");
        assert_eq!(feed(50.0), None, "named once");
        assert_eq!(feed(100.0), None);
        assert_eq!((feed(50.0), feed(50.0)), (None, None));
        assert!(feed(50.0).is_some(), "behind again after catching up");
    }

    #[test]
    fn the_median_waits_for_a_majority_and_bad_values_are_ignored() {
        let mut d = Detector::new(StragglerConfig { points: 1, ..StragglerConfig::default() }, 8);
        for replica in 0..4 {
            assert_eq!(d.on_point(replica, if replica == 0 { 1.0 } else { 100.0 }), None, "4 of 8: no quorum");
        }
        assert_eq!(d.on_point(4, f64::NAN), None);
        assert_eq!(d.on_point(4, f64::INFINITY), None);
        assert_eq!(d.on_point(4, 100.0), None, "5 of 8, at the median");
        assert_eq!(d.on_point(0, 1.0).map(|s| s.replica), Some(0), "judged once a majority reported");
        d.forget(0);
        assert!(!d.flagged().contains(&0));
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
        assert_eq!(median(vec![5.0]), 5.0);
        assert_eq!(relative(Better::Higher, 5.0, 0.0), 1.0);
    }
}
