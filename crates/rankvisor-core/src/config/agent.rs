//! `--agent hyperpod`: what agent mode changes in the configuration. The operator owns restarts and
//! the rendezvous: each attempt runs once (restart policy Never, replica scope; the agent machine
//! starts every attempt) and its assignment comes from `/start`, so rankvisor's barrier is off.

use super::args::SuperviseArgs;
use crate::policy::{RestartPolicy, RestartScope};
use crate::replica::child::SupervisorConfig;
use std::net::SocketAddr;

/// Agent mode's address, with the supervisor set for it; None without `--agent`.
pub(super) fn apply(
    a: &SuperviseArgs,
    supervisor: &mut SupervisorConfig,
    inferred: &mut Vec<String>,
) -> Option<SocketAddr> {
    a.agent?;
    supervisor.policy = RestartPolicy::Never;
    supervisor.scope = RestartScope::Replica;
    inferred.push(format!(
        "agent hyperpod on {}: each attempt starts on the operator's /start; --restart-policy and the rendezvous \
         do not apply",
        a.agent_addr
    ));
    Some(a.agent_addr)
}

/// The replica machine's mode: the agent's, or a plain replica with its side of the rendezvous
/// and, for a master under job scope, how long it waits for its workers once its child succeeded.
pub fn replica_mode(cfg: &super::SuperviseConfig) -> crate::replica::Mode {
    use crate::replica::Mode;
    if cfg.agent.is_some() {
        return Mode::Agent;
    }
    let link = cfg.link.as_ref().map(crate::replica::JobLinkConfig::role);
    let linger =
        super::linger_limit_of(cfg.supervisor.scope, &cfg.link).filter(|_| link == Some(crate::rank::Role::Master));
    Mode::Plain { link, linger }
}

#[cfg(test)]
mod tests {
    use crate::config::{args::SuperviseArgs, supervise_config, EnvSnapshot};
    use crate::policy::RestartPolicy;
    use crate::rank::Role;
    use crate::replica::Mode;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        sup: SuperviseArgs,
    }

    #[test]
    fn agent_mode_runs_each_attempt_once_without_rankvisors_barrier() {
        // A 4-replica job's environment would meet at rankvisor's barrier; under the agent it does not.
        let job = [("PET_NNODES", "4"), ("RANK", "2"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "1")];
        let env = EnvSnapshot::of(&job);
        let argv = ["rankvisor", "--node-health", "off", "--restart-policy", "Always", "--agent", "hyperpod"];
        let a = Cmd::try_parse_from(argv).unwrap().sup;
        let c = supervise_config(&a, &["train".into()], &env).unwrap();
        assert_eq!((c.supervisor.policy, c.link.is_none()), (RestartPolicy::Never, true));
        assert_eq!(c.agent, Some("0.0.0.0:8080".parse().unwrap()));
        assert!(c.inferred.iter().any(|l| l.contains("--restart-policy")), "{:?}", c.inferred);
        assert_eq!(super::replica_mode(&c), Mode::Agent);
        let plain = Cmd::try_parse_from(&argv[..5]).unwrap().sup;
        let c = supervise_config(&plain, &["train".into()], &env).unwrap();
        assert_eq!((c.supervisor.policy, c.agent, c.link.is_some()), (RestartPolicy::Always, None, true));
        assert_eq!(super::replica_mode(&c), Mode::Plain { link: Some(Role::Worker), linger: None });
    }

    /// Review finding #18: the linger is computed in config, for a master under job scope only.
    #[test]
    fn a_master_under_job_scope_lingers_for_its_workers() {
        let job = [("PET_NNODES", "2"), ("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "1")];
        let env = EnvSnapshot::of(&job);
        let mode = |scope: &str| {
            let argv = ["rankvisor", "--node-health", "off", "--restart-scope", scope];
            let a = Cmd::try_parse_from(argv).unwrap().sup;
            super::replica_mode(&supervise_config(&a, &["train".into()], &env).unwrap())
        };
        let Mode::Plain { link: Some(Role::Master), linger: Some(limit) } = mode("job") else {
            panic!("{:?}", mode("job"))
        };
        assert!(limit > std::time::Duration::ZERO);
        assert_eq!(mode("replica"), Mode::Plain { link: Some(Role::Master), linger: None });
    }
}
