//! The TrainJob controller's status (`trainjob_controller.go`, the JobSet plugin's `Status`): its
//! conditions, set as `meta.SetStatusCondition` does, and the STATE column kubectl prints
//! (`.status.conditions[-1:].type`: the last condition in the list, true or not).

use serde::Serialize;

/// `TrainJobSuspended`'s reasons and messages.
pub(crate) const SUSPENDED: (&str, &str) = ("Suspended", "TrainJob is suspended");
/// The Suspended condition turned False on resume.
pub(crate) const RESUMED: (&str, &str) = ("Resumed", "TrainJob is resumed");
/// `TrainJobDeadlineExceededReason` and its message.
pub(crate) const DEADLINE_EXCEEDED: (&str, &str) = ("DeadlineExceeded", "TrainJob exceeded its active deadline");

/// A TrainJob condition's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum ConditionType {
    /// `Suspended`.
    Suspended,
    /// `Complete`: the JobSet's `Completed`, copied.
    Complete,
    /// `Failed`: the JobSet's `Failed` copied, or the deadline.
    Failed,
}

impl ConditionType {
    /// The type as the API spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Suspended => "Suspended",
            Self::Complete => "Complete",
            Self::Failed => "Failed",
        }
    }
}

/// One `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Condition {
    /// `type`.
    pub kind: ConditionType,
    /// `status`: True or False.
    pub status: bool,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// `meta.SetStatusCondition`: a condition of a type already there is updated in place (keeping
/// its position), a new one is appended. Returns whether anything changed.
pub(crate) fn set_status_condition(conditions: &mut Vec<Condition>, new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.kind == new.kind) {
        Some(c) if *c == new => false,
        Some(c) => {
            *c = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// `setSuspendedCondition`: True while `spec.suspend`; False (`Resumed`) once resumed after being
/// True; otherwise nothing.
pub(crate) fn set_suspended_condition(conditions: &mut Vec<Condition>, suspend: bool) -> bool {
    let was_true = conditions.iter().any(|c| c.kind == ConditionType::Suspended && c.status);
    let ((reason, message), status) = match (suspend, was_true) {
        (true, _) => (SUSPENDED, true),
        (false, true) => (RESUMED, false),
        (false, false) => return false,
    };
    let new = Condition { kind: ConditionType::Suspended, status, reason: reason.into(), message: message.into() };
    set_status_condition(conditions, new)
}

/// `IsTrainJobFinished`: Complete or Failed is True.
pub(crate) fn is_train_job_finished(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| c.status && matches!(c.kind, ConditionType::Complete | ConditionType::Failed))
}

/// The STATE column and `fields.state`: the type of the last condition in the list
/// (`.status.conditions[-1:].type`); blank with none.
pub(crate) fn state(conditions: &[Condition]) -> Option<ConditionType> {
    conditions.last().map(|c| c.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(kind: ConditionType, reason: &str) -> Condition {
        Condition { kind, status: true, reason: reason.into(), message: String::new() }
    }

    #[test]
    fn set_suspended_condition_true_then_resumed_false_in_place() {
        let mut c = Vec::new();
        assert!(!set_suspended_condition(&mut c, false), "never suspended: no condition");
        assert!(set_suspended_condition(&mut c, true));
        assert_eq!((c[0].status, c[0].reason.as_str()), (true, "Suspended"));
        assert!(!set_suspended_condition(&mut c, true));
        assert!(set_suspended_condition(&mut c, false));
        assert_eq!((c.len(), c[0].status, c[0].reason.as_str()), (1, false, "Resumed"));
        assert_eq!(state(&c), Some(ConditionType::Suspended), "kubectl's STATE is the last condition, true or not");
    }

    #[test]
    fn set_status_condition_appends_new_types_and_state_is_the_last() {
        let mut c = Vec::new();
        assert_eq!(state(&c), None);
        set_suspended_condition(&mut c, true);
        set_suspended_condition(&mut c, false);
        assert!(set_status_condition(&mut c, done(ConditionType::Complete, "AllJobsCompleted")));
        assert_eq!(state(&c), Some(ConditionType::Complete));
        assert!(is_train_job_finished(&c));
        assert!(!is_train_job_finished(&c[..1]));
    }
}
