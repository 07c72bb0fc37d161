//! The JobSet controller's failure and success rules, one test per Go function.

use std::time::Duration;

use super::*;

fn failed(name: &str, reason: &str, at: u64) -> FailedJob {
    FailedJob {
        name: name.into(),
        replicated_job: "node".into(),
        reason: reason.into(),
        failed_at: Duration::from_secs(at),
    }
}

fn rule(name: &str, action: FailurePolicyAction, reasons: &[&str], targets: &[&str]) -> FailurePolicyRule {
    FailurePolicyRule {
        name: name.into(),
        action,
        on_job_failure_reasons: reasons.iter().map(|s| s.to_string()).collect(),
        target_replicated_jobs: targets.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn execute_failure_policy_without_a_policy_fails_the_jobset_with_failed_jobs() {
    let jobs = [failed("tj-node-0", "BackoffLimitExceeded", 5)];
    assert_eq!(
        execute_failure_policy(None, &jobs, 0),
        Some(FailureVerdict::Fail {
            reason: "FailedJobs",
            message: "jobset failed due to one or more job failures (first failed job: tj-node-0)".into()
        })
    );
    assert_eq!(execute_failure_policy(None, &[], 0), None, "nothing failed");
}

#[test]
fn restart_job_set_action_applier_counts_until_max_restarts() {
    let policy = FailurePolicy { max_restarts: 2, rules: vec![] };
    let jobs = [failed("tj-node-0", "BackoffLimitExceeded", 5)];
    let restart = Some(FailureVerdict::Restart { counts_towards_max: true, reason: "DefaultFailurePolicy".into() });
    assert_eq!(execute_failure_policy(Some(&policy), &jobs, 0), restart, "an unmatched failure restarts");
    assert_eq!(execute_failure_policy(Some(&policy), &jobs, 1), restart);
    assert_eq!(
        execute_failure_policy(Some(&policy), &jobs, 2),
        Some(FailureVerdict::Fail {
            reason: "ReachedMaxRestarts",
            message: "jobset failed due to reaching max number of restarts (first failed job: tj-node-0)".into()
        })
    );
    let zero = FailurePolicy::default();
    assert!(
        matches!(
            execute_failure_policy(Some(&zero), &jobs, 0),
            Some(FailureVerdict::Fail { reason: "ReachedMaxRestarts", .. })
        ),
        "maxRestarts defaults to 0: the first failure fails"
    );
}

#[test]
fn find_first_failed_policy_rule_and_job_tries_rules_in_order() {
    let rules = [
        rule("never", FailurePolicyAction::FailJobSet, &["DeadlineExceeded"], &[]),
        rule("exit", FailurePolicyAction::FailJobSet, &["PodFailurePolicy"], &["node"]),
        rule("any", FailurePolicyAction::RestartJobSetAndIgnoreMaxRestarts, &[], &[]),
    ];
    let jobs = [failed("a", "BackoffLimitExceeded", 3), failed("b", "PodFailurePolicy", 4)];
    let (r, j) = find_first_failed_policy_rule_and_job(&rules, &jobs).unwrap();
    assert_eq!((r.name.as_str(), j.name.as_str()), ("exit", "b"));
    let policy = FailurePolicy { max_restarts: 0, rules: rules.to_vec() };
    assert_eq!(
        execute_failure_policy(Some(&policy), &jobs, 0),
        Some(FailureVerdict::Fail {
            reason: "FailJobSetFailurePolicyAction",
            message: "applying FailJobSet failure policy action (first failed job: b)".into()
        })
    );
    let only_backoff = [failed("a", "BackoffLimitExceeded", 3)];
    assert_eq!(
        execute_failure_policy(Some(&policy), &only_backoff, 5),
        Some(FailureVerdict::Restart { counts_towards_max: false, reason: "FailurePolicy_any".into() }),
        "RestartJobSetAndIgnoreMaxRestarts ignores the limit"
    );
}

#[test]
fn rule_is_applicable_matches_reasons_and_target_replicated_jobs() {
    let job = failed("a", "BackoffLimitExceeded", 1);
    assert!(rule_is_applicable(&rule("r", FailurePolicyAction::FailJobSet, &[], &[]), &job));
    assert!(rule_is_applicable(
        &rule("r", FailurePolicyAction::FailJobSet, &["BackoffLimitExceeded"], &["node"]),
        &job
    ));
    assert!(!rule_is_applicable(&rule("r", FailurePolicyAction::FailJobSet, &["PodFailurePolicy"], &[]), &job));
    assert!(!rule_is_applicable(&rule("r", FailurePolicyAction::FailJobSet, &[], &["launcher"]), &job));
}

#[test]
fn find_first_failed_job_is_the_earliest() {
    let jobs = [failed("late", "x", 9), failed("early", "x", 2)];
    assert_eq!(find_first_failed_job(&jobs).unwrap().name, "early");
}

#[test]
fn execute_success_policy_all_and_any() {
    let replicated = [("node".to_string(), 1), ("launcher".to_string(), 1)];
    let all = SuccessPolicy { any: false, target_replicated_jobs: vec![] };
    assert_eq!(num_jobs_expected_to_succeed(&all, &replicated), 2);
    assert!(!execute_success_policy(&all, &replicated, &["node".into()]));
    assert!(execute_success_policy(&all, &replicated, &["node".into(), "launcher".into()]));
    let any = SuccessPolicy { any: true, target_replicated_jobs: vec!["launcher".into()] };
    assert!(!execute_success_policy(&any, &replicated, &["node".into()]), "not a target");
    assert!(execute_success_policy(&any, &replicated, &["launcher".into()]));
    let targeted = SuccessPolicy { any: false, target_replicated_jobs: vec!["node".into()] };
    assert_eq!(num_jobs_expected_to_succeed(&targeted, &replicated), 1);
}
