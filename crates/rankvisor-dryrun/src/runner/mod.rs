//! The I/O: the event loop ([`event_loop`]: processes, timers, signals) and what it decides
//! purely about the run itself ([`run`]); one launcher's command line and status lines
//! ([`launcher`]) and its process ([`launcher_process`]), what a killed launcher leaves
//! ([`orphans`]), the replicas' output ([`output`]), the run's setup ([`setup`], [`ports`],
//! [`workdir`]), fault injection ([`injection`]) and the local stand-ins for an image
//! ([`local`]: `--command`, `--path-map`); a HyperPod job's calls to its agents ([`agents`]).

pub(crate) mod agents;
pub(crate) mod event_loop;
pub(crate) mod injection;
pub(crate) mod launcher;
pub(crate) mod launcher_process;
pub(crate) mod local;
pub(crate) mod orphans;
pub(crate) mod output;
pub(crate) mod ports;
pub(crate) mod run;
pub(crate) mod setup;
pub(crate) mod workdir;
