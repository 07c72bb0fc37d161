//! A HyperPod container's command as rankvisor's agent mode runs it: `hyperpodrun ARGS...` is
//! `rankvisor --agent hyperpod -- torchrun ARGS...` with the agent's own flags taken out (each
//! mapped to rankvisor's, dropped with a note, or refused by name); `rankvisor --agent hyperpod
//! -- CMD...` (docs/hyperpod.md's container line) is `CMD...`; any other command runs as it is,
//! under the agent. Pure: the notes are the caller's to print.

/// The command that runs under each pod's agent, and what the agent's flags became.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct AgentCommand {
    /// The training command (the agent's child).
    pub command: Vec<String>,
    /// `--shutdown-timeout N`: the agent's wait before SIGKILL, as the launchers' grace period.
    pub shutdown_timeout: Option<u64>,
    /// What was mapped or dropped, one line each.
    pub notes: Vec<String>,
}

/// `hyperpodrun` flags that take a value and are the agent's own (not torchrun's).
const VALUED: [&str; 8] = [
    "--server-host",
    "--server-port",
    "--server-log-level",
    "--server-shutdown-timeout",
    "--shutdown-signal",
    "--shutdown-timeout",
    "--pre-train-script",
    "--post-train-script",
];

/// Agent flags rankvisor does not do (docs/hyperpod.md, "Same as hyperpodrun, and different").
const REFUSED: [(&str, &str); 4] = [
    ("--inprocess-restart", "in-process restart is not supported: remove it to use process-level restarts"),
    ("--pre-train-script", "put the script in the command instead: sh -c 'pre.sh && exec torchrun ...'"),
    ("--post-train-script", "put the script in the command instead: sh -c 'torchrun ... && post.sh'"),
    ("--shutdown-signal", "rankvisor stops with SIGTERM, then SIGKILL after the grace period: remove it"),
];

/// The command a container with `argv` runs under its agent, or why it cannot (naming the flag).
pub(crate) fn agent_command(argv: &[String]) -> Result<AgentCommand, String> {
    let program = argv.first().map(|p| p.rsplit('/').next().unwrap_or(p)).unwrap_or_default();
    match program {
        "hyperpodrun" => from_hyperpodrun(argv.get(1..).unwrap_or_default()),
        "rankvisor" => {
            let rest = argv.iter().position(|a| a == "--").map(|i| argv[i + 1..].to_vec()).unwrap_or_default();
            if rest.is_empty() {
                return Err(format!(
                    "{:?} has no command after --: expected rankvisor --agent hyperpod -- CMD...",
                    argv.join(" ")
                ));
            }
            let note =
                "the container runs rankvisor: the dry run's own launcher is that agent, and runs the command after --"
                    .to_string();
            Ok(AgentCommand { command: rest, shutdown_timeout: None, notes: vec![note] })
        }
        _ => Ok(AgentCommand { command: argv.to_vec(), ..AgentCommand::default() }),
    }
}

/// `hyperpodrun ARGS`: the agent's flags out, `torchrun` with the rest.
fn from_hyperpodrun(args: &[String]) -> Result<AgentCommand, String> {
    let mut out = AgentCommand { command: vec!["torchrun".into()], ..AgentCommand::default() };
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        // The script and its own arguments: nothing after them is hyperpodrun's.
        if !arg.starts_with("--") {
            out.command.extend(args[i - 1..].iter().cloned());
            break;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let flag = flag.replace('_', "-");
        if let Some((_, why)) = REFUSED.iter().find(|(f, _)| *f == flag) {
            return Err(format!("hyperpodrun {flag}: {why}"));
        }
        if !VALUED.contains(&flag.as_str()) {
            out.command.push(arg.clone());
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                args.get(i - 1).cloned().ok_or_else(|| format!("hyperpodrun {flag} has no value"))?
            }
        };
        match flag.as_str() {
            "--shutdown-timeout" => {
                let secs = value
                    .parse::<u64>()
                    .map_err(|_| format!("hyperpodrun --shutdown-timeout {value:?}: expected whole seconds"))?;
                out.shutdown_timeout = Some(secs);
                out.notes.push(format!("hyperpodrun --shutdown-timeout {secs}: the agent's --grace-period {secs}s"));
            }
            "--server-host" | "--server-port" => out
                .notes
                .push(format!("hyperpodrun {flag} {value}: each pod's agent listens on its own loopback port here")),
            _ => out.notes.push(format!("hyperpodrun {flag} {value}: not used by rankvisor's agent, dropped")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn hyperpodrun_becomes_torchrun_under_the_agent() {
        let c =
            agent_command(&v("hyperpodrun --nnodes=2 --server-port 9000 --nproc-per-node 1 train.py --lr 1")).unwrap();
        assert_eq!(c.command, v("torchrun --nnodes=2 --nproc-per-node 1 train.py --lr 1"));
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        assert!(c.notes[0].contains("--server-port 9000"));
        let c = agent_command(&v("/usr/local/bin/hyperpodrun --shutdown-timeout=5 train.py")).unwrap();
        assert_eq!((c.command, c.shutdown_timeout), (v("torchrun train.py"), Some(5)));
    }

    #[test]
    fn flags_rankvisor_does_not_do_are_refused_by_name() {
        let e = agent_command(&v("hyperpodrun --inprocess-restart train.py")).unwrap_err();
        assert!(e.starts_with("hyperpodrun --inprocess-restart: in-process restart is not supported"), "{e}");
        let e = agent_command(&v("hyperpodrun --pre-train-script=a.sh train.py")).unwrap_err();
        assert!(e.starts_with("hyperpodrun --pre-train-script:"), "{e}");
        let e = agent_command(&v("hyperpodrun --shutdown-timeout soon train.py")).unwrap_err();
        assert!(e.contains("\"soon\""), "{e}");
    }

    #[test]
    fn rankvisor_as_the_agent_runs_what_follows_the_double_dash_and_others_run_as_they_are() {
        let c = agent_command(&v("/rankvisor --agent hyperpod -- torchrun train.py")).unwrap();
        assert_eq!(c.command, v("torchrun train.py"));
        assert!(agent_command(&v("/rankvisor --agent hyperpod")).is_err());
        assert_eq!(agent_command(&v("python train.py")).unwrap().command, v("python train.py"));
    }
}
