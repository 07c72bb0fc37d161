//! The job's stacks grouped: replicas whose training process waits in the same frames form one
//! group, largest first, so the replica that is not where the others are stands out.

use super::model::StacksSummary;
use serde::{Deserialize, Serialize};

/// Replicas whose summaries share one signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackGroup {
    /// The replicas' indices, ascending.
    pub replicas: Vec<u32>,
    /// The shared signature (the main thread's frames, innermost first).
    pub signature: Vec<String>,
}

/// The master's gathering: every replica's summary and the groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStacks {
    /// When the master asked (RFC 3339).
    pub taken_at: String,
    /// Why (`asked`, or the hang that caused a job restart).
    pub why: String,
    /// How long the gathering took, in milliseconds.
    pub elapsed_ms: u64,
    /// The groups, largest first.
    pub groups: Vec<StackGroup>,
    /// The one-line summary ([`render_groups`]).
    pub summary: String,
    /// Each replica's summary, by replica index.
    pub replicas: Vec<(u32, StacksSummary)>,
}

/// Group `replicas` (index, summary) by signature: largest group first, ties by lowest replica.
pub fn group(replicas: &[(u32, StacksSummary)]) -> Vec<StackGroup> {
    let mut groups: Vec<StackGroup> = Vec::new();
    let mut sorted: Vec<&(u32, StacksSummary)> = replicas.iter().collect();
    sorted.sort_by_key(|(i, _)| *i);
    let mut index: std::collections::HashMap<Vec<String>, usize> = std::collections::HashMap::new();
    for (i, s) in sorted {
        let sig = s.signature();
        match index.get(&sig) {
            Some(&g) => groups[g].replicas.push(*i),
            None => {
                index.insert(sig.clone(), groups.len());
                groups.push(StackGroup { replicas: vec![*i], signature: sig });
            }
        }
    }
    groups.sort_by(|a, b| b.replicas.len().cmp(&a.replicas.len()).then(a.replicas[0].cmp(&b.replicas[0])));
    groups
}

/// Frames of a signature shown in the one-line summary.
const SHOWN_FRAMES: usize = 3;
/// Replica indices listed for a group.
const SHOWN_REPLICAS: usize = 8;
/// Groups shown in the one-line summary.
const SHOWN_GROUPS: usize = 8;

/// `3 replicas (0, 1, 3): all_reduce (distributed_c10d.py:2501) <- train_step (train.py:88); replica
/// 2: slow_here (train.py:40) <- main (train.py:95)`: each group's replicas and its innermost frames.
pub fn render_groups(groups: &[StackGroup]) -> String {
    if groups.is_empty() {
        return "no replica answered".to_string();
    }
    let one = |g: &StackGroup| {
        let who = match g.replicas.as_slice() {
            [r] => format!("replica {r}"),
            all => {
                let mut shown: Vec<String> = all.iter().take(SHOWN_REPLICAS).map(u32::to_string).collect();
                if all.len() > SHOWN_REPLICAS {
                    shown.push("...".into());
                }
                format!("{} replicas ({})", all.len(), shown.join(", "))
            }
        };
        let frames: Vec<&str> = g.signature.iter().take(SHOWN_FRAMES).map(String::as_str).collect();
        format!("{who}: {}", frames.join(" <- "))
    };
    let mut parts: Vec<String> = groups.iter().take(SHOWN_GROUPS).map(one).collect();
    if groups.len() > SHOWN_GROUPS {
        parts.push(format!("{} more groups", groups.len() - SHOWN_GROUPS));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(frames: &[&str]) -> StacksSummary {
        StacksSummary {
            taken_at: "t".into(),
            why: "asked".into(),
            pid: Some(1),
            frames: frames.iter().map(|f| f.to_string()).collect(),
            top: format!("pid 1 in {}", frames.first().unwrap_or(&"")),
        }
    }

    #[test]
    fn the_odd_replica_is_named_apart_from_the_largest_group() {
        let wait = ["all_reduce (distributed_c10d.py:2501)", "train_step (train.py:88)", "main (train.py:95)"];
        let slow = ["slow_here (train.py:40)", "train_step (train.py:87)", "main (train.py:95)"];
        let replicas = vec![(3, summary(&wait)), (2, summary(&slow)), (0, summary(&wait)), (1, summary(&wait))];
        let groups = group(&replicas);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].replicas, [0, 1, 3]);
        assert_eq!(groups[1].replicas, [2]);
        assert_eq!(
            render_groups(&groups),
            "3 replicas (0, 1, 3): all_reduce (distributed_c10d.py:2501) <- train_step (train.py:88) <- main \
             (train.py:95); replica 2: slow_here (train.py:40) <- train_step (train.py:87) <- main (train.py:95)"
        );
    }

    #[test]
    fn ties_go_to_the_lowest_replica_and_big_groups_are_cut() {
        let replicas: Vec<(u32, StacksSummary)> =
            (0..20).map(|i| (i, summary(&[if i % 2 == 0 { "a (x.py:1)" } else { "b (x.py:2)" }]))).collect();
        let groups = group(&replicas);
        assert_eq!(groups[0].signature, ["a (x.py:1)"]);
        let text = render_groups(&groups);
        assert!(
            text.starts_with("10 replicas (0, 2, 4, 6, 8, 10, 12, 14, ...): a (x.py:1); 10 replicas (1, "),
            "{text}"
        );
        assert_eq!(render_groups(&[]), "no replica answered");
        let many: Vec<(u32, StacksSummary)> = (0..12).map(|i| (i, summary(&[&format!("f{i} (x.py:1)")]))).collect();
        assert!(render_groups(&group(&many)).ends_with("; 4 more groups"));
    }

    #[test]
    fn replicas_without_python_group_by_state_not_pid() {
        let mut a = summary(&[]);
        a.top = "pid 10 (sleep) S (sleeping) in hrtimer_nanosleep: not a Python process".into();
        let mut b = a.clone();
        b.top = "pid 99 (sleep) S (sleeping) in hrtimer_nanosleep: not a Python process".into();
        let groups = group(&[(0, a), (1, b)]);
        assert_eq!(groups.len(), 1);
        assert_eq!(
            render_groups(&groups),
            "2 replicas (0, 1): (sleep) S (sleeping) in hrtimer_nanosleep: not a Python process"
        );
    }
}
