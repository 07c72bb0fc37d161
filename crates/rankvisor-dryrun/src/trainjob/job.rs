//! Kubernetes' Job controller (`pkg/controller/job`), the rules a TrainJob's Indexed Job follows,
//! as pure functions; each names the Go function it mirrors.

use super::{PodFailureAction, PodFailurePolicyRule, NODE};
use rankvisor_core::policy::RestartPolicy;

/// The Job's `Failed` reason when failed pods or container restarts reach `backoffLimit`.
pub(crate) const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
/// Its message.
pub(crate) const BACKOFF_LIMIT_MESSAGE: &str = "Job has reached the specified backoff limit";
/// The Job's `Failed` reason when a `podFailurePolicy` FailJob rule matched.
pub(crate) const POD_FAILURE_POLICY: &str = "PodFailurePolicy";

/// A pod of the Job as the controller counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CountedPod {
    /// Phase Pending or Running (not Succeeded, Failed, or being deleted).
    pub active: bool,
    /// The container's `restartCount` (the kubelet's restarts in this pod).
    pub restart_count: u32,
}

/// `matchPodFailurePolicy` for a failed pod whose `node` container ended with `exit_code`: the
/// first rule whose `onExitCodes` match decides (FailJob with its message, Ignore, Count); no
/// match counts. A zero exit code never matches (`isOnExitCodesOperatorMatching` skips it).
pub(crate) fn match_pod_failure_policy(
    rules: &[PodFailurePolicyRule],
    namespace: &str,
    pod: &str,
    exit_code: i32,
) -> (PodFailureAction, Option<String>) {
    if exit_code == 0 {
        return (PodFailureAction::Count, None);
    }
    for (index, rule) in rules.iter().enumerate() {
        if rule.container_name.as_deref().is_some_and(|c| c != NODE) {
            continue;
        }
        if rule.values.contains(&exit_code) != rule.operator_in {
            continue;
        }
        let message = (rule.action == PodFailureAction::FailJob).then(|| {
            format!(
                "Container {NODE} for pod {namespace}/{pod} failed with exit code {exit_code} matching FailJob rule at index {index}"
            )
        });
        return (rule.action, message);
    }
    (PodFailureAction::Count, None)
}

/// `pastBackoffLimitOnFailure`: under `restartPolicy: OnFailure`, the restart counts of the
/// containers of the active pods, summed, reach `backoffLimit` (`> 0` when it is 0).
pub(crate) fn past_backoff_limit_on_failure(policy: RestartPolicy, backoff_limit: i32, pods: &[CountedPod]) -> bool {
    if policy != RestartPolicy::OnFailure {
        return false;
    }
    let restarts: i64 = pods.iter().filter(|p| p.active).map(|p| i64::from(p.restart_count)).sum();
    if backoff_limit == 0 {
        restarts > 0
    } else {
        restarts >= i64::from(backoff_limit)
    }
}

/// `syncJob`'s `exceedsBackoffLimit`: the failed pods (those a podFailurePolicy Ignore rule left
/// out are not counted) are more than `backoffLimit`.
pub(crate) fn exceeds_backoff_limit(failed: u32, backoff_limit: i32) -> bool {
    i64::from(failed) > i64::from(backoff_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(action: PodFailureAction, operator_in: bool, values: &[i32]) -> PodFailurePolicyRule {
        PodFailurePolicyRule { action, container_name: None, operator_in, values: values.to_vec() }
    }

    #[test]
    fn match_pod_failure_policy_takes_the_first_matching_rule() {
        let rules = [rule(PodFailureAction::Ignore, true, &[137]), rule(PodFailureAction::FailJob, true, &[3, 42])];
        assert_eq!(match_pod_failure_policy(&rules, "ns", "p", 137), (PodFailureAction::Ignore, None));
        let (action, message) = match_pod_failure_policy(&rules, "ns", "p", 42);
        assert_eq!(action, PodFailureAction::FailJob);
        assert_eq!(
            message.as_deref(),
            Some("Container node for pod ns/p failed with exit code 42 matching FailJob rule at index 1")
        );
        assert_eq!(match_pod_failure_policy(&rules, "ns", "p", 1), (PodFailureAction::Count, None), "no rule: counted");
        let not_in = [rule(PodFailureAction::FailJob, false, &[1])];
        assert_eq!(match_pod_failure_policy(&not_in, "ns", "p", 2).0, PodFailureAction::FailJob);
        assert_eq!(match_pod_failure_policy(&not_in, "ns", "p", 1).0, PodFailureAction::Count);
        assert_eq!(match_pod_failure_policy(&not_in, "ns", "p", 0).0, PodFailureAction::Count, "0 never matches");
        let other = [PodFailurePolicyRule {
            container_name: Some("sidecar".into()),
            ..rule(PodFailureAction::FailJob, true, &[1])
        }];
        assert_eq!(match_pod_failure_policy(&other, "ns", "p", 1).0, PodFailureAction::Count);
    }

    #[test]
    fn past_backoff_limit_on_failure_sums_the_restarts_of_active_pods() {
        let p = |active, restart_count| CountedPod { active, restart_count };
        let on = RestartPolicy::OnFailure;
        assert!(!past_backoff_limit_on_failure(on, 6, &[p(true, 3), p(true, 2)]));
        assert!(past_backoff_limit_on_failure(on, 6, &[p(true, 3), p(true, 3)]), "shared by every node");
        assert!(!past_backoff_limit_on_failure(on, 6, &[p(true, 3), p(false, 9)]), "only active pods count");
        assert!(past_backoff_limit_on_failure(on, 0, &[p(true, 1)]));
        assert!(!past_backoff_limit_on_failure(on, 0, &[p(true, 0)]));
        assert!(!past_backoff_limit_on_failure(RestartPolicy::Never, 0, &[p(true, 5)]));
    }

    #[test]
    fn exceeds_backoff_limit_is_more_failed_pods_than_the_limit() {
        assert!(!exceeds_backoff_limit(6, 6));
        assert!(exceeds_backoff_limit(7, 6));
        assert!(exceeds_backoff_limit(1, 0));
    }
}
