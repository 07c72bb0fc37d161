//! Volcano's gang admission, as pure functions: a PodGroup is bound whole or not at all. Its
//! `validJobFn` (minMember against the job's pods) and the queue's capability against the
//! PodGroup's minResources; each refusal is one line that says why nothing starts.

use crate::k8s::quantity::{format_quantity, QueueCapability, Resources};

/// What Volcano is asked to place: one PodGroup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gang<'a> {
    /// The PodGroup's name (the job's).
    pub name: &'a str,
    /// The Volcano queue.
    pub queue: &'a str,
    /// The job's pods (the gang plugin's valid tasks).
    pub pods: u32,
    /// The PodGroup's minMember.
    pub min_member: u32,
    /// The PodGroup's minResources.
    pub demand: &'a Resources,
}

/// Volcano's gang plugin (`validJobFn`): a PodGroup whose minMember exceeds the job's pods never
/// has enough valid tasks, so the allocate action skips it every session and no pod is bound.
/// The one line that says so, or None when the gang can form.
pub(crate) fn gang_never_forms(gang: &Gang<'_>) -> Option<String> {
    let (valid, min) = (gang.pods, gang.min_member);
    (min > valid).then(|| {
        format!(
            "PodGroup {} has minMember {min} (spec.runPolicy.schedulingPolicy.minAvailable) but the job has {valid} pods: Volcano's gang plugin never binds them (\"Not enough valid tasks for gang-scheduling, valid: {valid}, min: {min}\"), so the PodGroup stays Inqueue and every pod Pending",
            gang.name
        )
    })
}

/// Volcano's gang admission: Ok when the gang forms and the queue holds it whole; else the line
/// saying why none of its pods starts (the PodGroup stays Inqueue).
pub(crate) fn admit(gang: &Gang<'_>, capability: Option<&QueueCapability>) -> Result<(), String> {
    if let Some(message) = gang_never_forms(gang) {
        return Err(message);
    }
    match capability.and_then(|c| c.shortfall(gang.demand)) {
        None => Ok(()),
        Some((resource, cap, need)) => Err(format!(
            "queue {} has capability {resource}={} but the job's {} pods need {resource}={}: Volcano's gang scheduling starts none of them (the PodGroup stays Inqueue)",
            gang.queue,
            format_quantity(&resource, cap),
            gang.min_member,
            format_quantity(&resource, need),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gang(pods: u32, min_member: u32, demand: &Resources) -> Gang<'_> {
        Gang { name: "pytest", queue: "default", pods, min_member, demand }
    }

    #[test]
    fn a_gang_larger_than_the_job_never_forms() {
        let demand = Resources::default();
        assert_eq!(admit(&gang(4, 4, &demand), None), Ok(()));
        let e = admit(&gang(4, 5, &demand), None).unwrap_err();
        assert!(e.contains("valid: 4, min: 5"), "{e}");
    }

    #[test]
    fn a_queue_too_small_starts_nothing_and_names_the_resource() {
        let mut demand = Resources::default();
        demand.0.insert("cpu".into(), 4000);
        let cap = QueueCapability::parse("cpu=2").unwrap();
        let e = admit(&gang(4, 4, &demand), Some(&cap)).unwrap_err();
        assert!(e.starts_with("queue default has capability cpu=2 but the job's 4 pods need cpu=4"), "{e}");
        assert_eq!(admit(&gang(4, 4, &demand), Some(&QueueCapability::parse("cpu=4").unwrap())), Ok(()));
    }
}
