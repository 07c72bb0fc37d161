use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    sup: SuperviseArgs,
}

fn args(extra: &[&str]) -> SuperviseArgs {
    let mut argv = vec!["rankvisor", "--http-addr", "off", "--node-health", "off"];
    argv.extend_from_slice(extra);
    Cmd::try_parse_from(argv).expect("valid arguments").sup
}

fn cmd() -> Vec<OsString> {
    vec!["train".into()]
}

const SEED_WORKER: &[(&str, &str)] = &[
    ("MASTER_ADDR", "pytest-master-0"),
    ("PET_MASTER_ADDR", "pytest-master-0"),
    ("MASTER_PORT", "23456"),
    ("PET_MASTER_PORT", "23456"),
    ("WORLD_SIZE", "4"),
    ("RANK", "2"),
    ("PET_NODE_RANK", "2"),
    ("PET_NPROC_PER_NODE", "auto"),
    ("PET_NNODES", "4"),
    ("POD_NAME", "pytest-worker-1"),
    ("POD_NAMESPACE", "team"),
    ("NODE_NAME", "ip-10-0-0-7"),
    ("RANKVISOR_JOB_TOKEN", "s3cret"),
];

#[test]
fn seed_000_worker() {
    let env = EnvSnapshot::of(SEED_WORKER).with_hostname("ignored");
    let c = supervise_config(&args(&[]), &cmd(), &env).unwrap();
    assert_eq!(
        c.identity,
        Identity {
            job: Some("pytest".into()),
            replica_type: Some("Worker".into()),
            rank: Some(2),
            replica_count: Some(4),
            world_size: Some(4),
            pod: Some("pytest-worker-1".into()),
            namespace: Some("team".into()),
            node: Some("ip-10-0-0-7".into()),
            flavour: Some(rank::Flavour::TrainingOperator),
            restart_attempt: None,
        }
    );
    let link = c.link.expect("a 4-replica job meets at the barrier");
    assert_eq!(link.master, ("pytest-master-0".to_string(), 23457));
    assert_eq!(link.identity.replica_index, 2);
    assert_eq!(c.inferred, Vec::<String>::new(), "nothing inferred for the seed's env");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.child.env_remove, vec![OsString::from("RANKVISOR_JOB_TOKEN")], "the token is not the child's");
}

/// setPodEnv for a Worker-only job: PET_NNODES alone; the barrier's leader is worker 0.
#[test]
fn worker_only_job_runs_with_an_inferred_barrier() {
    let env = EnvSnapshot::of(&[("PET_NNODES", "3"), ("PYTHONUNBUFFERED", "1")]).with_hostname("mnist-worker-2");
    let c = supervise_config(&args(&[]), &cmd(), &env).unwrap();
    assert_eq!((c.identity.job.as_deref(), c.identity.replica_type.as_deref()), (Some("mnist"), Some("Worker")));
    let link = c.link.expect("barrier");
    assert_eq!(link.master, ("mnist-worker-0".to_string(), DEFAULT_RENDEZVOUS_PORT));
    assert_eq!(link.identity.replica_index, 2);
    let line = c.inferred.join("; ");
    assert!(line.contains("replica index 2 from the pod name"), "{line}");
    assert!(line.contains("barrier at mnist-worker-0:23457"), "{line}");
    assert!(c.warnings.iter().any(|w| w.contains("no RANKVISOR_JOB_TOKEN")), "{:?}", c.warnings);
}

/// Outside a cluster's DNS (the dry run) Worker 0 is named: the leader is that host.
#[test]
fn a_named_rendezvous_host_is_the_leader() {
    let env = EnvSnapshot::of(&[("PET_NNODES", "3")]).with_hostname("mnist-worker-2");
    let c = supervise_config(&args(&["--rendezvous-host", "127.0.0.1", "--rendezvous-port", "40001"]), &cmd(), &env)
        .unwrap();
    assert_eq!(c.link.expect("barrier").master, ("127.0.0.1".to_string(), 40001));
    assert!(c.inferred.join("; ").contains("barrier at 127.0.0.1:40001 (--rendezvous-host"), "{:?}", c.inferred);
    let e = supervise_config(&args(&["--rendezvous-host", "http://x"]), &cmd(), &env).unwrap_err();
    assert!(e.to_string().contains("--rendezvous-host \"http://x\" is invalid"), "{e}");
}

/// ElasticEnvVarGenerator: torchrun's rendezvous owns membership, no barrier.
#[test]
fn elastic_job_has_no_barrier() {
    let env = EnvSnapshot::of(&[
        ("PET_RDZV_ENDPOINT", "echo-worker-0:23456"),
        ("PET_RDZV_BACKEND", "c10d"),
        ("PET_NNODES", "1:3"),
        ("POD_NAME", "echo-worker-1"),
    ]);
    let c = supervise_config(&args(&[]), &cmd(), &env).unwrap();
    assert!(c.link.is_none());
    assert!(c.inferred.join("; ").contains("elastic job (PET_NNODES=1:3)"), "{:?}", c.inferred);
}

/// A local multi-process run: no pod names, the job is MASTER_ADDR:MASTER_PORT.
#[test]
fn local_run_derives_the_job_from_the_master_address() {
    let env =
        EnvSnapshot::of(&[("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500"), ("WORLD_SIZE", "2"), ("RANK", "1")])
            .with_hostname("laptop");
    let c = supervise_config(&args(&[]), &cmd(), &env).unwrap();
    assert_eq!(c.link.expect("barrier").identity.job, "127.0.0.1:29500");
}

#[test]
fn bad_values_name_the_culprit() {
    let env = EnvSnapshot::of(SEED_WORKER);
    let e = |extra: &[&str]| supervise_config(&args(extra), &cmd(), &env).unwrap_err().to_string();
    assert!(e(&["--job-name", ""]).contains("--job-name (RANKVISOR_JOB_NAME) \"\" is invalid"));
    assert!(e(&["--backoff-initial", "20s", "--backoff-max", "10s"]).contains("--backoff-max"));
    assert!(e(&["--rendezvous-timeout", "0s"]).contains("--rendezvous-timeout is 0s"));
    let no_cmd = supervise_config(&args(&[]), &[], &env).unwrap_err().to_string();
    assert!(no_cmd.starts_with("no command to supervise"), "{no_cmd}");
    let empty_token = EnvSnapshot::of(&[
        ("RANKVISOR_JOB_TOKEN", ""),
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "m"),
        ("MASTER_PORT", "1"),
    ]);
    let t = supervise_config(&args(&[]), &cmd(), &empty_token).unwrap_err().to_string();
    assert!(t.contains("RANKVISOR_JOB_TOKEN is set but empty"), "{t}");
}

#[test]
fn a_non_utf8_token_is_a_configuration_error() {
    use std::os::unix::ffi::OsStringExt;
    let env = EnvSnapshot::from_os([
        (OsString::from("RANKVISOR_JOB_TOKEN"), OsString::from_vec(vec![0xff, 0xfe])),
        ("RANK".into(), "1".into()),
        ("WORLD_SIZE".into(), "2".into()),
        ("MASTER_ADDR".into(), "m".into()),
        ("MASTER_PORT".into(), "1".into()),
    ]);
    let e = supervise_config(&args(&[]), &cmd(), &env).unwrap_err().to_string();
    assert!(e.starts_with("RANKVISOR_JOB_TOKEN="), "{e}");
}

#[test]
fn choices_are_enums() {
    let a = args(&[
        "--unhealthy-node",
        "wait",
        "--rendezvous",
        "off",
        "--kube-events",
        "off",
        "--restart-policy",
        "ExitCode",
    ]);
    assert_eq!((a.unhealthy_node, a.rendezvous, a.kube_events), (UnhealthyNode::Wait, OnOff::Off, OnOffAuto::Off));
    assert_eq!(a.restart_policy, crate::policy::RestartPolicy::ExitCode);
    let bad = Cmd::try_parse_from(["rankvisor", "--unhealthy-node", "later"]).err().unwrap().to_string();
    assert!(bad.contains("later") && bad.contains("exit") && bad.contains("wait"), "{bad}");
}

/// `--kube-events auto`: on only in a cluster with the downward API's POD_NAME and
/// POD_NAMESPACE; `on` without them is an error naming both.
#[test]
fn kube_events_auto_on_off() {
    let pod = [("POD_NAME", "j-worker-0"), ("POD_NAMESPACE", "team"), ("KUBERNETES_SERVICE_HOST", "10.0.0.1")];
    let in_cluster = EnvSnapshot::of(&pod).with_service_account(true);
    let t = kube_events_target(OnOffAuto::Auto, &in_cluster).unwrap().unwrap();
    assert_eq!((t.pod.as_str(), t.namespace.as_str(), t.best_effort), ("j-worker-0", "team", true));
    assert_eq!(kube_events_target(OnOffAuto::Auto, &EnvSnapshot::of(&pod)).unwrap(), None, "no service account");
    assert_eq!(kube_events_target(OnOffAuto::Off, &in_cluster).unwrap(), None);
    assert!(!kube_events_target(OnOffAuto::On, &EnvSnapshot::of(&pod)).unwrap().unwrap().best_effort);
    let e = kube_events_target(OnOffAuto::On, &EnvSnapshot::of(&[])).unwrap_err().to_string();
    assert!(e.contains("POD_NAME") && e.contains("POD_NAMESPACE"), "{e}");
}

/// `--node-health auto`: kubernetes in a cluster with NODE_NAME, else off (with a warning
/// when in a cluster without NODE_NAME).
#[test]
fn node_health_auto() {
    let cluster = EnvSnapshot::of(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")]).with_service_account(true);
    let with_node = |n: Option<&str>| {
        let mut argv = vec!["rankvisor"];
        if let Some(n) = n {
            argv.extend(["--node-name", n]);
        }
        Cmd::try_parse_from(argv).unwrap().sup.kube
    };
    let mut w = Vec::new();
    let s = health_settings(&NodeHealthSource::Auto, false, false, &with_node(Some("n1")), &cluster, &mut w);
    assert_eq!((s.source, w.len()), (NodeHealthSource::Kubernetes, 0));
    let s = health_settings(&NodeHealthSource::Auto, false, true, &with_node(None), &cluster, &mut w);
    assert_eq!((s.source, s.wait), (NodeHealthSource::Off, true));
    assert!(w[0].contains("NODE_NAME is not set"), "{w:?}");
    let s =
        health_settings(&NodeHealthSource::Auto, false, false, &with_node(Some("n1")), &EnvSnapshot::of(&[]), &mut w);
    assert_eq!(s.source, NodeHealthSource::Off, "outside a cluster");
}

#[test]
fn the_child_gets_local_rank_defaults_only_where_unset_and_never_the_token() {
    let vars = |c: &ChildCommand| {
        c.env
            .iter()
            .map(|(k, v)| (k.to_str().unwrap().to_string(), v.to_str().unwrap().to_string()))
            .collect::<Vec<_>>()
    };
    let prog = OsString::from("train");
    let bare = child_command(&prog, &[], None, &EnvSnapshot::of(&[]));
    assert_eq!(vars(&bare), [("LOCAL_RANK".into(), "0".into()), ("LOCAL_WORLD_SIZE".into(), "1".into())]);
    assert_eq!(bare.env_remove, [OsString::from("RANKVISOR_JOB_TOKEN")]);
    // torchrun (or the user) set them: theirs stand, even empty or not UTF-8.
    let set = EnvSnapshot::from_os([
        (OsString::from("LOCAL_RANK"), OsString::new()),
        (OsString::from("LOCAL_WORLD_SIZE"), std::os::unix::ffi::OsStringExt::from_vec(vec![0xff])),
    ]);
    let hb = std::path::Path::new("/tmp/beat");
    let c = child_command(&prog, &[], Some(hb), &set);
    assert_eq!(vars(&c), [("RANKVISOR_HEARTBEAT_FILE".into(), "/tmp/beat".into())]);
}

/// The restart scope is read once, into the supervisor (the link is handed the same when it
/// starts: the rendezvous settings have no copy of it).
#[test]
fn the_restart_scope_is_read_once_into_the_supervisor() {
    let env = EnvSnapshot::of(SEED_WORKER).with_hostname("ignored");
    for (flag, want) in [(None, RestartScope::Replica), (Some("job"), RestartScope::Job)] {
        let extra: Vec<&str> = flag.map(|f| vec!["--restart-scope", f]).unwrap_or_default();
        let c = supervise_config(&args(&extra), &cmd(), &env).unwrap();
        assert_eq!(c.supervisor.scope, want);
        assert!(c.link.is_some(), "the seed's worker meets the others");
    }
}

#[test]
fn the_checkpoint_signal_and_its_grace_half_the_grace_period_by_default() {
    assert_eq!(supervisor_config(&args(&[])).unwrap().checkpoint, None, "off unless asked for");
    let c = supervisor_config(&args(&["--checkpoint-signal", "SIGUSR1"])).unwrap();
    assert_eq!(c.checkpoint, Some(CheckpointConfig { signal: Signo::USR1, grace: Duration::from_secs(15) }));
    let c =
        supervisor_config(&args(&["--checkpoint-signal", "usr2", "--checkpoint-grace", "5s", "--grace-period", "60s"]))
            .unwrap();
    assert_eq!(c.checkpoint.map(|c| (c.signal.name(), c.grace)), Some(("SIGUSR2".into(), Duration::from_secs(5))));
    // The master's link carries the window of its fan-out.
    let env = EnvSnapshot::of(SEED_WORKER).with_hostname("ignored");
    let c = supervise_config(&args(&["--checkpoint-signal", "10"]), &cmd(), &env).unwrap();
    assert_eq!(c.link.and_then(|l| l.checkpoint), Some(Duration::from_secs(15)));
}

#[test]
fn a_bad_checkpoint_setting_names_the_option_and_what_was_expected() {
    let cases: [(&[&str], &str); 5] = [
        (&["--checkpoint-grace", "5s"], "--checkpoint-grace (5s) needs --checkpoint-signal"),
        (&["--checkpoint-signal", "KILL"], "--checkpoint-signal SIGKILL cannot be caught"),
        (&["--checkpoint-signal", "SIGSTOP"], "--checkpoint-signal SIGSTOP cannot be caught"),
        (
            &["--checkpoint-signal", "USR1", "--checkpoint-grace", "30s"],
            "must be positive and shorter than --grace-period (30s)",
        ),
        (&["--checkpoint-signal", "USR1", "--checkpoint-grace", "0s"], "--checkpoint-grace (0ns) must be positive"),
    ];
    for (argv, want) in cases {
        let e = supervisor_config(&args(argv)).unwrap_err().to_string();
        assert!(e.contains(want), "{argv:?}: {e}");
    }
    let e = Cmd::try_parse_from(["rankvisor", "--checkpoint-signal", "SIGNOPE"]).err().unwrap().to_string();
    assert!(e.contains("\"SIGNOPE\" is not a signal: expected a signal name such as SIGUSR1"), "{e}");
}

#[test]
fn the_straggler_rule_must_be_a_log_rule_that_captures_a_metric() {
    use crate::rendezvous::straggler::Better;
    let rules = crate::logrules::parse_rules(
        r#"[{"name": "throughput", "logPattern": ".*samples/s (\\S+)", "metricThreshold": 0, "operator": "lt"},
            {"name": "alive", "logPattern": ".*step", "expectedRecurringFrequencyInSeconds": 60}]"#,
    )
    .unwrap();
    let s = straggler_settings(&args(&["--straggler-rule", "throughput"]), Some(&rules)).unwrap().unwrap();
    assert_eq!((s.rule.as_str(), s.detector.ratio, s.detector.points), ("throughput", 0.75, 3));
    assert_eq!((s.detector.better, s.action), (Better::Higher, super::super::args::StragglerAction::Report));
    let argv = ["--straggler-rule", "throughput:lower", "--straggler-ratio", "0.5", "--straggler-points", "5"];
    let s = straggler_settings(&args(&argv), Some(&rules)).unwrap().unwrap();
    assert_eq!((s.detector.better, s.detector.ratio, s.detector.points), (Better::Lower, 0.5, 5));
    assert_eq!(straggler_settings(&args(&[]), Some(&rules)).unwrap(), None);
    let restart = ["--straggler-rule", "throughput", "--straggler-action", "restart"];
    let s = straggler_settings(&args(&restart), Some(&rules)).unwrap().unwrap();
    assert_eq!(s.action, super::super::args::StragglerAction::Restart);
    let cases: [(&[&str], bool, &str); 6] = [
        (&["--straggler-rule", "throughput"], false, "--straggler-rule needs --log-rules"),
        (
            &["--straggler-rule", "nope"],
            true,
            "\"nope\" names no rule of --log-rules: expected one of throughput, alive",
        ),
        (&["--straggler-rule", "alive"], true, "\"alive\": the rule has no metric"),
        (&["--straggler-rule", "throughput:upper"], true, "unknown suffix \"upper\": expected NAME or NAME:lower"),
        (&["--straggler-rule", "throughput", "--straggler-ratio", "1.5"], true, "--straggler-ratio 1.5 is invalid"),
        (&["--straggler-rule", "throughput", "--straggler-points", "0"], true, "--straggler-points 0 is invalid"),
    ];
    for (argv, with_rules, want) in cases {
        let e = straggler_settings(&args(argv), with_rules.then_some(&rules)).unwrap_err().to_string();
        assert!(e.contains(want), "{argv:?}: {e}");
    }
}
