//! What the operator observes besides the kubelet's events: each agent's state (its `/status`),
//! a node's labels (HyperPod's health labels), a pod's agent gone.

use std::collections::BTreeMap;
use std::time::Duration;

use rankvisor_core::exit::ExitHow;
use rankvisor_core::health::{summary, verdict};
use rankvisor_core::kube::NodeSnapshot;
use rankvisor_core::status::AgentState;

use super::{HyperPodController, Phase};
use crate::kubelet::cluster::{ClusterAction, Outcome, Step};
use crate::kubelet::replica::ReplicaId;
use crate::render::rows::WatchEventType;

impl HyperPodController {
    /// `pod`'s agent is in `state` (`reason`: its `/status` reason when FAULTED).
    pub(crate) fn agent_seen(
        &mut self,
        now: Duration,
        pod: ReplicaId,
        state: AgentState,
        reason: Option<String>,
    ) -> Step {
        let mut step = Step::default();
        let Some(i) = self.kubelet.live(pod) else { return step };
        if self.kubelet.pods[i].agent == Some(state) {
            return step;
        }
        let p = &mut self.kubelet.pods[i];
        p.agent = Some(state);
        // The container runs once its agent serves: READY, 1/1.
        if state != AgentState::Init && p.status() != crate::render::rows::PodStatus::Running {
            p.child_running(0);
        }
        self.kubelet.sync(i, now, WatchEventType::Modified, &mut step);
        self.on_agent_state(now, pod, state, reason, &mut step);
        self.sync_job(now, &mut step);
        step
    }

    fn on_agent_state(
        &mut self,
        now: Duration,
        pod: ReplicaId,
        state: AgentState,
        reason: Option<String>,
        step: &mut Step,
    ) {
        match state {
            AgentState::Ready => self.start_when_ready(now, step),
            AgentState::Running => self.running_when_all_run(now, step),
            AgentState::Faulted if !self.job.is_spare(pod) => {
                self.fault(&[pod], reason.unwrap_or_else(|| "WorkerCrash".into()), false, now, step);
            }
            AgentState::Completed if self.start_sent && self.all_ranked(AgentState::Completed) => {
                let message = format!("every one of the {} agents completed", self.job.replicas);
                self.finish(Outcome::Succeeded, "Completed", message, now, step);
            }
            _ => {}
        }
    }

    /// `pod`'s node now has `labels`: a node HyperPod's labels call unhealthy is a NodeFault
    /// (the Event), and the pod moves off it at the full job restart that follows.
    pub(crate) fn node_labelled(&mut self, now: Duration, pod: ReplicaId, labels: &BTreeMap<String, String>) -> Step {
        let mut step = Step::default();
        let Some(i) = self.kubelet.live(pod) else { return step };
        let snapshot = NodeSnapshot { labels: labels.clone(), ..NodeSnapshot::default() };
        let v = verdict(&snapshot, false);
        if v.healthy || self.faulted_nodes.contains(&pod) || matches!(self.phase, Phase::Finished(_)) {
            return step;
        }
        let node = self.kubelet.pods[i].node.clone().unwrap_or_else(|| self.kubelet.config.node.clone());
        self.faulted_nodes.push(pod);
        let message = format!("Event: Warning NodeFault: Found unhealthy node {node} ({})", summary(&v));
        step.actions.push(ClusterAction::Note { message });
        self.fault(&[pod], "NodeFault".into(), true, now, &mut step);
        self.sync_job(now, &mut step);
        step
    }

    /// `pod`'s launcher (its agent, the container's PID 1) ended: gone if it was being deleted
    /// (all gone in a full job restart: recreated), else a fault unless the job is finished.
    pub(crate) fn on_launcher_exit(&mut self, pod: ReplicaId, status: ExitHow, now: Duration, step: &mut Step) {
        let finished = matches!(self.phase, Phase::Finished(_));
        let deleting = self.kubelet.live(pod).is_some_and(|i| self.kubelet.pods[i].deleting);
        self.kubelet.launcher_exited(pod, status, now, true, step);
        if let Some(i) = self.kubelet.live(pod) {
            self.kubelet.pods[i].agent = None;
            if finished && self.job.run_policy.clean_pod_policy != super::CleanPodPolicy::None {
                self.kubelet.remove(i, now, step);
            }
        }
        if finished {
            return;
        }
        if !deleting {
            let reason = if status.code() == 138 { "NodeFault" } else { "PodFailed" };
            return self.fault(&[pod], reason.into(), true, now, step);
        }
        let all_gone = self.job.pods().into_iter().all(|id| self.kubelet.live(id).is_none());
        if all_gone && matches!(self.phase, Phase::Restarting(_)) {
            self.create_pods(now, step);
        }
    }
}
