//! The HyperPod operator's restart decision, as a pure function of its counters and the job's
//! `runPolicy`: a process-level restart (PLR: every agent stopped and started again, the pods
//! kept) or a full job restart (JLR: every pod recreated), or the job fails.
//!
//! How the counters combine is not public; the emulation (docs/hyperpod.md, "emulated, not
//! verified"): the counters of `restartStatus` count within the evaluation window
//! (`evalPeriodSeconds`), which starts at the window's first fault and is renewed, counters at 0,
//! by the first fault after it expired; a fault whose pod or node is gone is a JLR at once;
//! otherwise a PLR while fewer than `numRestartBeforeFullJobRestart` PLRs happened in the window
//! since the last JLR, then a JLR while fewer than `maxFullJobRestarts` JLRs happened in the
//! window, then Failed; `jobMaxRetryCount` bounds the restarts of either kind over the job's life.

use std::time::Duration;

use super::HpRunPolicy;

/// The kind of a restart (`latestFaultyPodInstanceList.restartType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartType {
    /// Process-level restart: `/stop`, then `/start` with the next `faultCount`.
    Plr,
    /// Full job restart: the pods recreated.
    Jlr,
}

impl RestartType {
    /// As the CRD's status spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Plr => "PLR",
            Self::Jlr => "JLR",
        }
    }
}

/// `status.restartCount` and `status.restartStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RestartCounters {
    /// `restartCount`: restarts of either kind over the job's life.
    pub total: u32,
    /// `restartStatus.currentEvalPeriod`: when the window started (None: no fault yet).
    pub window_start: Option<Duration>,
    /// `restartStatus.restartCount`: PLRs in the window since the last JLR.
    pub plr_in_window: u32,
    /// `restartStatus.fullJobRestartCount`: JLRs in the window.
    pub jlr_in_window: u32,
}

/// What the operator does about a fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Restart (the counters already count it).
    Restart(RestartType),
    /// Fail the job: the condition's reason and message.
    Fail {
        /// The condition's reason.
        reason: &'static str,
        /// Its message, naming the limit.
        message: String,
    },
}

/// Decide about a fault at `now`; `pod_lost`: its pod, container or node is gone (only a JLR
/// recreates it). Counts the restart it decides.
pub(crate) fn decide(c: &mut RestartCounters, policy: &HpRunPolicy, now: Duration, pod_lost: bool) -> Decision {
    let limits = policy.restart_limits;
    let expired = match (c.window_start, limits) {
        (Some(start), Some(l)) => now.saturating_sub(start) >= l.eval_period,
        (None, _) => true,
        (Some(_), None) => false,
    };
    if expired {
        *c = RestartCounters { window_start: Some(now), plr_in_window: 0, jlr_in_window: 0, ..*c };
    }
    if let Some(max) = policy.job_max_retry_count.filter(|m| c.total >= *m) {
        let message = format!("the job restarted {} times: spec.runPolicy.jobMaxRetryCount is {max}", c.total);
        return Decision::Fail { reason: "JobMaxRetryCountExceeded", message };
    }
    let plr_spent = limits.and_then(|l| l.plr_before_jlr).is_some_and(|n| c.plr_in_window >= n);
    let kind = if pod_lost || plr_spent { RestartType::Jlr } else { RestartType::Plr };
    if kind == RestartType::Jlr {
        if let Some(max) = limits.and_then(|l| l.max_full_job_restarts).filter(|m| c.jlr_in_window >= *m) {
            let period = limits.map_or(0, |l| l.eval_period.as_secs());
            let message = format!(
                "{} full job restarts within {period}s: spec.runPolicy.restartPolicy.maxFullJobRestarts is {max}",
                c.jlr_in_window
            );
            return Decision::Fail { reason: "MaxFullJobRestartsExceeded", message };
        }
        c.jlr_in_window += 1;
        c.plr_in_window = 0;
    } else {
        c.plr_in_window += 1;
    }
    c.total += 1;
    Decision::Restart(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyperpodjob::RestartLimits;

    const S: Duration = Duration::from_secs(1);

    fn policy(plr: Option<u32>, jlr: Option<u32>, period: u64) -> HpRunPolicy {
        HpRunPolicy {
            restart_limits: Some(RestartLimits {
                eval_period: Duration::from_secs(period),
                plr_before_jlr: plr,
                max_full_job_restarts: jlr,
            }),
            ..HpRunPolicy::default()
        }
    }

    #[test]
    fn plrs_then_jlrs_then_failed_within_one_window() {
        let p = policy(Some(2), Some(1), 3600);
        let mut c = RestartCounters::default();
        assert_eq!(decide(&mut c, &p, S, false), Decision::Restart(RestartType::Plr));
        assert_eq!(decide(&mut c, &p, 2 * S, false), Decision::Restart(RestartType::Plr));
        assert_eq!(decide(&mut c, &p, 3 * S, false), Decision::Restart(RestartType::Jlr));
        assert_eq!((c.total, c.plr_in_window, c.jlr_in_window), (3, 0, 1));
        assert_eq!(decide(&mut c, &p, 4 * S, false), Decision::Restart(RestartType::Plr), "PLRs again after a JLR");
        assert_eq!(decide(&mut c, &p, 5 * S, false), Decision::Restart(RestartType::Plr));
        match decide(&mut c, &p, 6 * S, false) {
            Decision::Fail { reason, message } => {
                assert_eq!(reason, "MaxFullJobRestartsExceeded");
                assert!(message.contains("maxFullJobRestarts is 1"), "{message}");
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn a_window_that_expired_resets_the_counters_but_not_the_total() {
        let p = policy(Some(1), Some(0), 10);
        let mut c = RestartCounters::default();
        assert_eq!(decide(&mut c, &p, S, false), Decision::Restart(RestartType::Plr));
        assert_eq!(c.window_start, Some(S));
        assert_eq!(decide(&mut c, &p, 12 * S, false), Decision::Restart(RestartType::Plr), "a new window");
        assert_eq!((c.total, c.plr_in_window, c.window_start), (2, 1, Some(12 * S)));
        assert!(matches!(decide(&mut c, &p, 13 * S, false), Decision::Fail { .. }), "no JLR allowed");
    }

    #[test]
    fn a_lost_pod_is_a_jlr_and_job_max_retry_count_bounds_all() {
        let p = HpRunPolicy { job_max_retry_count: Some(2), ..HpRunPolicy::default() };
        let mut c = RestartCounters::default();
        assert_eq!(decide(&mut c, &p, S, true), Decision::Restart(RestartType::Jlr));
        assert_eq!(decide(&mut c, &p, 2 * S, false), Decision::Restart(RestartType::Plr));
        match decide(&mut c, &p, 3 * S, false) {
            Decision::Fail { reason, message } => {
                assert_eq!(reason, "JobMaxRetryCountExceeded");
                assert_eq!(message, "the job restarted 2 times: spec.runPolicy.jobMaxRetryCount is 2");
            }
            d => panic!("{d:?}"),
        }
    }
}
