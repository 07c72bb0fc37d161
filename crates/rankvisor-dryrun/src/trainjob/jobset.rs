//! The JobSet controller (`kubernetes-sigs/jobset` v0.12.0 `pkg/controllers`): what a failed or
//! succeeded Job does to the JobSet, as pure functions; each names the Go function it mirrors.

use super::{FailurePolicy, FailurePolicyAction, FailurePolicyRule, SuccessPolicy};

/// `FailedJobsReason`: no failurePolicy, a Job failed.
pub(crate) const FAILED_JOBS: &str = "FailedJobs";
/// `FailedJobsMessage`.
pub(crate) const FAILED_JOBS_MESSAGE: &str = "jobset failed due to one or more job failures";
/// `ReachedMaxRestartsReason`.
pub(crate) const REACHED_MAX_RESTARTS: &str = "ReachedMaxRestarts";
/// `ReachedMaxRestartsMessage`.
pub(crate) const REACHED_MAX_RESTARTS_MESSAGE: &str = "jobset failed due to reaching max number of restarts";
/// `FailJobSetActionReason`.
pub(crate) const FAIL_JOBSET_ACTION: &str = "FailJobSetFailurePolicyAction";
/// `FailJobSetActionMessage`.
pub(crate) const FAIL_JOBSET_ACTION_MESSAGE: &str = "applying FailJobSet failure policy action";
/// `AllJobsCompletedReason`.
pub(crate) const ALL_JOBS_COMPLETED: &str = "AllJobsCompleted";
/// `AllJobsCompletedMessage`.
pub(crate) const ALL_JOBS_COMPLETED_MESSAGE: &str = "jobset completed successfully";

/// A failed child Job, as the failure policy reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailedJob {
    /// The Job's name.
    pub name: String,
    /// Its `jobset.sigs.k8s.io/replicatedjob-name` label.
    pub replicated_job: String,
    /// Its `Failed` condition's reason (`BackoffLimitExceeded`, `PodFailurePolicy`, ...).
    pub reason: String,
    /// When it failed, for "the first failed job".
    pub failed_at: std::time::Duration,
}

/// What the failure policy does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FailureVerdict {
    /// The JobSet fails with this reason and message.
    Fail {
        /// `FailedJobs`, `ReachedMaxRestarts`, `FailJobSetFailurePolicyAction`.
        reason: &'static str,
        /// The message, naming the first failed Job.
        message: String,
    },
    /// Every Job is deleted and created again, with `restarts` one higher.
    Restart {
        /// Whether the restart counts towards `maxRestarts`.
        counts_towards_max: bool,
        /// The `RestartingJobSet` condition's reason: `FailurePolicy_<rule>` or `DefaultFailurePolicy`.
        reason: String,
    },
}

/// `messageWithFirstFailedJob`.
pub(crate) fn message_with_first_failed_job(message: &str, job: &str) -> String {
    format!("{message} (first failed job: {job})")
}

/// `findFirstFailedJob`: the one that failed earliest.
pub(crate) fn find_first_failed_job(failed: &[FailedJob]) -> Option<&FailedJob> {
    failed.iter().min_by_key(|j| j.failed_at)
}

/// `ruleIsApplicable`: the Job's failure reason and its ReplicatedJob match the rule (an empty
/// list matches any).
pub(crate) fn rule_is_applicable(rule: &FailurePolicyRule, job: &FailedJob) -> bool {
    (rule.on_job_failure_reasons.is_empty() || rule.on_job_failure_reasons.contains(&job.reason))
        && (rule.target_replicated_jobs.is_empty() || rule.target_replicated_jobs.contains(&job.replicated_job))
}

/// `findFirstFailedPolicyRuleAndJob`: rules in order; for the first rule any failed Job matches,
/// the earliest such Job.
pub(crate) fn find_first_failed_policy_rule_and_job<'a>(
    rules: &'a [FailurePolicyRule],
    failed: &'a [FailedJob],
) -> Option<(&'a FailurePolicyRule, &'a FailedJob)> {
    rules.iter().find_map(|rule| {
        failed.iter().filter(|j| rule_is_applicable(rule, j)).min_by_key(|j| j.failed_at).map(|j| (rule, j))
    })
}

/// `executeFailurePolicy` with its appliers: no policy fails the JobSet (`FailedJobs`); else the
/// first matching rule's action, an unmatched failure `RestartJobSet`; `RestartJobSet` past
/// `maxRestarts` (`restartsCountTowardsMax >= maxRestarts`) fails it (`ReachedMaxRestarts`).
/// None when no Job failed.
pub(crate) fn execute_failure_policy(
    policy: Option<&FailurePolicy>,
    failed: &[FailedJob],
    restarts_count_towards_max: i32,
) -> Option<FailureVerdict> {
    let first = find_first_failed_job(failed)?;
    let Some(policy) = policy else {
        return Some(FailureVerdict::Fail {
            reason: FAILED_JOBS,
            message: message_with_first_failed_job(FAILED_JOBS_MESSAGE, &first.name),
        });
    };
    let (rule, job) = match find_first_failed_policy_rule_and_job(&policy.rules, failed) {
        Some((rule, job)) => (Some(rule), job),
        None => (None, first),
    };
    let reason = rule.map_or_else(|| "DefaultFailurePolicy".to_string(), |r| format!("FailurePolicy_{}", r.name));
    Some(match rule.map_or(FailurePolicyAction::RestartJobSet, |r| r.action) {
        FailurePolicyAction::FailJobSet => FailureVerdict::Fail {
            reason: FAIL_JOBSET_ACTION,
            message: message_with_first_failed_job(FAIL_JOBSET_ACTION_MESSAGE, &job.name),
        },
        FailurePolicyAction::RestartJobSet if restarts_count_towards_max >= policy.max_restarts => {
            FailureVerdict::Fail {
                reason: REACHED_MAX_RESTARTS,
                message: message_with_first_failed_job(REACHED_MAX_RESTARTS_MESSAGE, &job.name),
            }
        }
        FailurePolicyAction::RestartJobSet => FailureVerdict::Restart { counts_towards_max: true, reason },
        FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts => {
            FailureVerdict::Restart { counts_towards_max: false, reason }
        }
    })
}

/// `numJobsExpectedToSucceed`: `Any` needs one Job; `All` every replica of every targeted
/// ReplicatedJob (`replicated`: (name, replicas)).
pub(crate) fn num_jobs_expected_to_succeed(policy: &SuccessPolicy, replicated: &[(String, u32)]) -> u32 {
    if policy.any {
        return 1;
    }
    replicated
        .iter()
        .filter(|(name, _)| policy.target_replicated_jobs.is_empty() || policy.target_replicated_jobs.contains(name))
        .map(|(_, n)| *n)
        .sum()
}

/// `executeSuccessPolicy`: the succeeded Jobs the policy targets (their ReplicatedJobs' names)
/// reach the number it expects.
pub(crate) fn execute_success_policy(
    policy: &SuccessPolicy,
    replicated: &[(String, u32)],
    succeeded: &[String],
) -> bool {
    let matching = succeeded
        .iter()
        .filter(|rj| policy.target_replicated_jobs.is_empty() || policy.target_replicated_jobs.contains(rj))
        .count();
    u32::try_from(matching).unwrap_or(u32::MAX) >= num_jobs_expected_to_succeed(policy, replicated)
}

#[cfg(test)]
mod tests;
