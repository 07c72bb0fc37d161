//! The rank contract: what Kubeflow's training-operator injects into every replica, validated.
//!
//! `RANK` = `PET_NODE_RANK` is the replica (node) index: master 0, worker i -> i+1. `WORLD_SIZE` is
//! replicas x nprocPerNode, so the number of replicas to meet is `PET_NNODES` when set. `PET_NNODES`
//! is `min:max` for an elastic job, whose membership belongs to torchrun's own rendezvous.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

mod trainer_v2;
#[cfg(test)]
mod trainer_v2_tests;

pub use trainer_v2::{restart_attempt, train_job_of_master_addr, train_job_of_pod, Flavour, RESTART_ATTEMPT_LABEL};

/// A replica's role in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Role {
    /// Replica 0: runs the rendezvous barrier and the job view.
    Master,
    /// Every other replica.
    Worker,
}

/// How many replicas (nodes) the job has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReplicaCount {
    /// A fixed number of replicas, all of which must meet at the barrier.
    Fixed {
        /// The count.
        count: u32,
    },
    /// An elastic job (`PET_NNODES=min:max`): torchrun's c10d rendezvous owns membership.
    Elastic {
        /// Fewest replicas.
        min: u32,
        /// Most replicas.
        max: u32,
    },
}

impl ReplicaCount {
    /// The largest number of replicas the job can have.
    pub fn max(self) -> u32 {
        match self {
            Self::Fixed { count } => count,
            Self::Elastic { max, .. } => max,
        }
    }
}

/// `PET_NPROC_PER_NODE`: processes torchrun starts per node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NprocPerNode {
    /// A number.
    Count(u32),
    /// `auto`, `cpu`, `gpu`, `xpu`: torchrun decides from the hardware.
    Device(String),
}

/// The most replicas (nodes) a job may have: above the rendezvous' tested scale (98,304).
pub const MAX_REPLICAS: u32 = 131_072;
/// The most training processes a job may have (`WORLD_SIZE`).
pub const MAX_WORLD_SIZE: u32 = 1 << 24;

/// The validated rank contract of this replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankEnv {
    /// Kubeflow's replica type: from the pod name `<job>-<type>-<N>`, else Master for index 0.
    pub role: Role,
    /// Replica (node) index: `RANK` = `PET_NODE_RANK`; without them (a job with no Master) the
    /// pod name's `<job>-worker-<N>`. Index 0 leads rankvisor's barrier.
    pub replica_index: u32,
    /// Replicas in the job: `PET_NNODES`, else `WORLD_SIZE`.
    pub replica_count: ReplicaCount,
    /// `WORLD_SIZE`: total training processes; the operator sets it only when the job has a Master.
    pub world_size: Option<u32>,
    /// `MASTER_ADDR` (set with a Master).
    pub master_addr: Option<String>,
    /// `MASTER_PORT` (torch's own store; rankvisor's rendezvous listens on the next port).
    pub master_port: Option<u16>,
    /// `PET_NPROC_PER_NODE`, when set.
    pub nproc_per_node: Option<NprocPerNode>,
    /// `PET_STANDALONE` is set (an empty value counts).
    pub standalone: bool,
    /// `LOCAL_RANK`, when set.
    pub local_rank: Option<u32>,
    /// `PET_RDZV_ENDPOINT`, set for elastic jobs.
    pub rdzv_endpoint: Option<String>,
    /// Whether any rank variable was present at all (a bare `docker run` has none).
    pub injected: bool,
    /// The job has a Master: the operator injected `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`.
    pub has_master: bool,
    /// Which controller wrote the contract (`trainer-v2`: a TrainJob's five `PET_` variables).
    pub flavour: Flavour,
    /// The job's name: the PyTorchJob's or the TrainJob's, from the master's address or the pod's name.
    pub job: Option<String>,
    /// Where each value came from: a field of this struct -> the variable or name that gave it.
    pub sources: BTreeMap<&'static str, String>,
    /// What was inferred rather than read, for one INFO line at start.
    #[serde(skip)]
    pub inferred: Vec<String>,
}

impl RankEnv {
    /// Kubeflow's replica type of this replica.
    pub fn role(&self) -> Role {
        self.role
    }

    /// True when rankvisor's own barrier must stay out of the way (elastic membership).
    pub fn is_elastic(&self) -> bool {
        matches!(self.replica_count, ReplicaCount::Elastic { .. })
    }
}

/// A rank-contract variable that is missing, malformed or inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RankError {
    /// The value does not parse.
    #[error("{var}={value:?} is invalid: expected {expected}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// What was seen.
        value: String,
        /// What was expected.
        expected: String,
    },
    /// A variable another one requires is absent.
    #[error("{var} is not set: expected {expected}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// Why it is needed.
        expected: String,
    },
    /// Two variables that must agree do not.
    #[error("{var}={value:?} disagrees with {other}={other_value:?}: expected them equal")]
    Disagree {
        /// The first variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// The other variable.
        other: &'static str,
        /// Its value.
        other_value: String,
    },
}

impl RankError {
    /// The variable the error is about.
    pub fn var(&self) -> &'static str {
        match self {
            Self::Invalid { var, .. } | Self::Missing { var, .. } | Self::Disagree { var, .. } => var,
        }
    }
}

fn invalid(var: &'static str, value: &str, expected: impl Into<String>) -> RankError {
    RankError::Invalid { var, value: value.to_string(), expected: expected.into() }
}

/// A decimal number: ASCII digits only (no sign, no spaces), at least `min`, at most `max`.
fn parse_u32(var: &'static str, value: &str, min: u32, max: u32, expected: &str) -> Result<u32, RankError> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<u32>() {
        Ok(n) if digits && n >= min && n <= max => Ok(n),
        _ => Err(invalid(var, value, expected)),
    }
}

fn parse_port(var: &'static str, value: &str) -> Result<u16, RankError> {
    const EXPECTED: &str = "a TCP port number from 1 to 65535";
    parse_u32(var, value, 1, 65535, EXPECTED).map(|p| p as u16)
}

fn parse_nnodes(value: &str) -> Result<ReplicaCount, RankError> {
    let expected = format!("a replica count from 1 to {MAX_REPLICAS}, or min:max with 1 <= min <= max");
    let num = |v: &str| {
        parse_u32("PET_NNODES", v, 1, MAX_REPLICAS, &expected).map_err(|_| invalid("PET_NNODES", value, &expected))
    };
    match value.split_once(':') {
        None => Ok(ReplicaCount::Fixed { count: num(value)? }),
        Some((a, b)) => {
            let (min, max) = (num(a)?, num(b)?);
            if min > max {
                return Err(invalid("PET_NNODES", value, expected));
            }
            Ok(ReplicaCount::Elastic { min, max })
        }
    }
}

fn parse_nproc(var: &'static str, value: &str) -> Result<NprocPerNode, RankError> {
    match value {
        "auto" | "cpu" | "gpu" | "xpu" | "cuda" => Ok(NprocPerNode::Device(value.to_string())),
        _ => Ok(NprocPerNode::Count(parse_u32(var, value, 1, 65_536, "a number >= 1, or auto, cpu, gpu, xpu")?)),
    }
}

/// A host name (RFC 1123 labels) or an IP address: what `MASTER_ADDR` may be.
pub fn is_host(value: &str) -> bool {
    if value.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    // All digits and dots is an IPv4 address or nothing (999.999.999.999 is not a name).
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return false;
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let name = value.strip_suffix('.').unwrap_or(value);
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label_ok)
}

/// A pod named as the training-operator names them: `<job>-<type>-<N>` (`replicaName`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// The job's name.
    pub job: String,
    /// Master or Worker.
    pub role: Role,
    /// The index within its replica type.
    pub index: u32,
}

impl PodName {
    /// Parse `<job>-master-<N>` / `<job>-worker-<N>`; None for any other name.
    pub fn parse(pod: &str) -> Option<Self> {
        let (rest, index) = pod.rsplit_once('-')?;
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let index = index.parse().ok()?;
        let (job, role) = if let Some(j) = rest.strip_suffix("-master") {
            (j, Role::Master)
        } else {
            (rest.strip_suffix("-worker")?, Role::Worker)
        };
        (!job.is_empty()).then(|| Self { job: job.to_string(), role, index })
    }
}

/// Read and validate the rank contract through `lookup` (the environment snapshot in production,
/// a map in tests); the pod's name is `POD_NAME`, else `HOSTNAME`.
pub fn parse_rank_env(lookup: impl Fn(&str) -> Option<String>) -> Result<RankEnv, RankError> {
    let pod = lookup("POD_NAME").filter(|p| !p.is_empty()).or_else(|| lookup("HOSTNAME").filter(|p| !p.is_empty()));
    parse_rank_env_of_pod(lookup, pod.as_deref())
}

/// An agent's assignment (HyperPod's `/start`) checked as the contract checks the environment it
/// becomes: `PET_NNODES`, `PET_NODE_RANK`, `PET_MASTER_ADDR` and `PET_MASTER_PORT`, the port left
/// unset when it is 0 (the agent's reading of an empty one), which only one replica may do.
pub fn check_assignment(rank: i64, nnodes: i64, master_addr: &str, master_port: i64) -> Result<(), RankError> {
    let port = (master_port != 0).then(|| master_port.to_string());
    let lookup = |k: &str| match k {
        "PET_NNODES" => Some(nnodes.to_string()),
        "PET_NODE_RANK" => Some(rank.to_string()),
        "PET_MASTER_ADDR" => Some(master_addr.to_string()),
        "PET_MASTER_PORT" => port.clone(),
        _ => None,
    };
    parse_rank_env_of_pod(lookup, None).map(drop)
}

/// Read and validate the rank contract, as the training-operator writes it (`setPodEnv` in
/// `pkg/controller.v1/pytorch/envvar.go`, `elastic.go`): `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`,
/// `RANK` and `PET_NODE_RANK` only when the job has a Master; `PET_NNODES` always (`min:max` or
/// the Worker count with an `elasticPolicy`); `PET_RDZV_*` with an `elasticPolicy`. Whatever the
/// operator leaves out is inferred (the replica index from the pod's name `pod`); only values
/// that disagree are errors.
pub fn parse_rank_env_of_pod(lookup: impl Fn(&str) -> Option<String>, pod: Option<&str>) -> Result<RankEnv, RankError> {
    let get = |k: &str| lookup(k);
    let raw = Raw::read(&get)?;
    let mut inferred = Vec::new();
    let world_size = raw.world_size()?;
    let replica_count = raw.replica_count(world_size)?;
    let max = replica_count.max();
    let pod_name = pod.and_then(PodName::parse);
    let replica_index = raw.replica_index(&get, max, pod, pod_name.as_ref(), &mut inferred)?;
    let role = match &pod_name {
        Some(p) => p.role,
        None if replica_index == 0 && raw.has_master => Role::Master,
        None if !raw.has_master && raw.injected => Role::Worker,
        None if replica_index == 0 => Role::Master,
        None => Role::Worker,
    };
    let nproc_per_node = get("PET_NPROC_PER_NODE").map(|v| parse_nproc("PET_NPROC_PER_NODE", &v)).transpose()?;
    raw.check_world_size(nproc_per_node.as_ref(), replica_count, world_size)?;
    let master_port = raw.check_master(&get, replica_count)?;
    if !raw.has_master && raw.injected {
        inferred.push(
            "no MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK (the operator sets them only for a job with a Master)"
                .into(),
        );
    }
    let local_rank =
        get("LOCAL_RANK").map(|v| parse_u32("LOCAL_RANK", &v, 0, u32::MAX, "a number >= 0")).transpose()?;
    let flavour = trainer_v2::flavour(&get);
    let mut sources = raw.sources(&get, max, pod, pod_name.is_some());
    if master_port.is_some() {
        sources.insert("master_port", master_port_var(&get).to_string());
    }
    if nproc_per_node.is_some() {
        sources.insert("nproc_per_node", "PET_NPROC_PER_NODE".to_string());
    }
    if let Some(from) = job_name_source(raw.master_addr.as_deref(), pod) {
        sources.insert("job", from);
    }
    sources.insert("flavour", flavour_source(flavour).to_string());
    let job = derive_job_name(raw.master_addr.as_deref(), pod);

    Ok(RankEnv {
        role,
        replica_index,
        replica_count,
        world_size,
        master_addr: raw.master_addr,
        master_port,
        nproc_per_node,
        standalone: get("PET_STANDALONE").is_some(),
        local_rank,
        rdzv_endpoint: raw.rdzv_endpoint,
        injected: raw.injected,
        has_master: raw.has_master,
        flavour,
        job,
        sources,
        inferred,
    })
}

/// The contract's variables as read, the two spellings of the master's address and port agreed.
struct Raw {
    rank: Option<String>,
    world: Option<String>,
    node_rank: Option<String>,
    nnodes: Option<String>,
    rdzv_endpoint: Option<String>,
    /// An elasticPolicy: torchrun's c10d rendezvous owns membership (PET_NNODES may then be the
    /// Worker count alone, not every replica).
    elastic_policy: bool,
    master_addr: Option<String>,
    port: Option<String>,
    has_master: bool,
    injected: bool,
}

impl Raw {
    fn read(get: &impl Fn(&str) -> Option<String>) -> Result<Self, RankError> {
        let rdzv_endpoint = get("PET_RDZV_ENDPOINT").filter(|v| !v.is_empty());
        let rdzv_backend = get("PET_RDZV_BACKEND").filter(|v| !v.is_empty());
        let master_addr = agree("MASTER_ADDR", get("MASTER_ADDR"), "PET_MASTER_ADDR", get("PET_MASTER_ADDR"))?;
        let port = agree("MASTER_PORT", get("MASTER_PORT"), "PET_MASTER_PORT", get("PET_MASTER_PORT"))?;
        let (rank, world, node_rank, nnodes) =
            (get("RANK"), get("WORLD_SIZE"), get("PET_NODE_RANK"), get("PET_NNODES"));
        let has_master = rank.is_some() || world.is_some() || master_addr.is_some() || port.is_some();
        let injected = has_master || node_rank.is_some() || nnodes.is_some() || rdzv_endpoint.is_some();
        let elastic_policy = rdzv_endpoint.is_some() || rdzv_backend.is_some();
        Ok(Self {
            rank,
            world,
            node_rank,
            nnodes,
            rdzv_endpoint,
            elastic_policy,
            master_addr,
            port,
            has_master,
            injected,
        })
    }

    /// `WORLD_SIZE`, required with `RANK`.
    fn world_size(&self) -> Result<Option<u32>, RankError> {
        match &self.world {
            Some(v) => {
                let expected = format!("a number of processes from 1 to {MAX_WORLD_SIZE}");
                parse_u32("WORLD_SIZE", v, 1, MAX_WORLD_SIZE, &expected).map(Some)
            }
            None if self.rank.is_some() => Err(RankError::Missing {
                var: "WORLD_SIZE",
                expected: "the total number of training processes, set with RANK".into(),
            }),
            None => Ok(None),
        }
    }

    /// `PET_NNODES`, else `WORLD_SIZE`, else one.
    fn replica_count(&self, world_size: Option<u32>) -> Result<ReplicaCount, RankError> {
        Ok(match (&self.nnodes, world_size) {
            (Some(v), _) => match parse_nnodes(v)? {
                ReplicaCount::Fixed { count } if self.elastic_policy => {
                    ReplicaCount::Elastic { min: count, max: count }
                }
                c => c,
            },
            (None, Some(w)) => {
                if w > MAX_REPLICAS {
                    return Err(invalid(
                        "WORLD_SIZE",
                        &w.to_string(),
                        format!("at most {MAX_REPLICAS} replicas without PET_NNODES"),
                    ));
                }
                ReplicaCount::Fixed { count: w }
            }
            (None, None) => ReplicaCount::Fixed { count: 1 },
        })
    }

    /// `RANK` and `PET_NODE_RANK` (agreeing), else the pod's name in a job without a Master, else
    /// 0; below `max`, and agreeing with an Indexed Job's completion index.
    fn replica_index(
        &self,
        get: &impl Fn(&str) -> Option<String>,
        max: u32,
        pod: Option<&str>,
        pod_name: Option<&PodName>,
        inferred: &mut Vec<String>,
    ) -> Result<u32, RankError> {
        let range = format!("a replica index from 0 to {} (replicas: {max})", max.saturating_sub(1));
        let index = match (&self.rank, &self.node_rank) {
            (Some(r), Some(n)) => {
                let ri = parse_u32("RANK", r, 0, u32::MAX, &range)?;
                let ni = parse_u32("PET_NODE_RANK", n, 0, u32::MAX, &range)?;
                if ri != ni {
                    return Err(RankError::Disagree {
                        var: "RANK",
                        value: r.clone(),
                        other: "PET_NODE_RANK",
                        other_value: n.clone(),
                    });
                }
                ri
            }
            (Some(r), None) => parse_u32("RANK", r, 0, u32::MAX, &range)?,
            (None, Some(n)) => parse_u32("PET_NODE_RANK", n, 0, u32::MAX, &range)?,
            (None, None) if self.has_master && max > 1 => {
                return Err(RankError::Missing {
                    var: "RANK",
                    expected: format!("this replica's index from 0 to {}", max - 1),
                })
            }
            (None, None) => match pod_name {
                // No Master: the operator numbers the Workers from 0 (`replicaName`).
                Some(p) if !self.has_master && max > 1 => {
                    inferred.push(format!("replica index {} from the pod name {:?}", p.index, pod.unwrap_or_default()));
                    p.index
                }
                _ => 0,
            },
        };
        // An Indexed Job's pod gets its completion index too; Trainer v2's PET_NODE_RANK reads it.
        if let (Some(completion), Some(n)) = (get("JOB_COMPLETION_INDEX"), &self.node_rank) {
            if completion != *n {
                return Err(RankError::Disagree {
                    var: "JOB_COMPLETION_INDEX",
                    value: completion,
                    other: "PET_NODE_RANK",
                    other_value: n.clone(),
                });
            }
        }
        if index >= max {
            let (var, value) = match (&self.rank, &self.node_rank) {
                (Some(r), _) => ("RANK", r.clone()),
                (None, Some(n)) => ("PET_NODE_RANK", n.clone()),
                (None, None) => ("POD_NAME", pod.unwrap_or_default().to_string()),
            };
            return Err(invalid(var, &value, range));
        }
        Ok(index)
    }

    /// `WORLD_SIZE` against `PET_NNODES` x `PET_NPROC_PER_NODE` (nprocPerNode 1 when unset).
    fn check_world_size(
        &self,
        nproc_per_node: Option<&NprocPerNode>,
        replica_count: ReplicaCount,
        world_size: Option<u32>,
    ) -> Result<(), RankError> {
        let (ReplicaCount::Fixed { count }, Some(w), Some(ws), Some(n)) =
            (replica_count, &self.world, world_size, &self.nnodes)
        else {
            return Ok(());
        };
        match nproc_per_node {
            Some(NprocPerNode::Count(k)) => {
                let want = u64::from(*k) * u64::from(count);
                if want != u64::from(ws) {
                    return Err(invalid(
                        "WORLD_SIZE",
                        w,
                        format!("PET_NNODES x PET_NPROC_PER_NODE = {count} x {k} = {want}"),
                    ));
                }
            }
            // Without PET_NPROC_PER_NODE the operator's nprocPerNode is 1: WORLD_SIZE is the replica count.
            None if ws < count => {
                return Err(RankError::Disagree {
                    var: "WORLD_SIZE",
                    value: w.clone(),
                    other: "PET_NNODES",
                    other_value: n.clone(),
                })
            }
            _ => {}
        }
        Ok(())
    }

    /// The master's address (a host) and port, both required for a fixed job of several replicas
    /// with a Master; the port, parsed.
    fn check_master(
        &self,
        get: &impl Fn(&str) -> Option<String>,
        replica_count: ReplicaCount,
    ) -> Result<Option<u16>, RankError> {
        if let Some(a) = &self.master_addr {
            if !is_host(a) {
                return Err(invalid(master_addr_var(get), a, "a host name or IP address"));
            }
        }
        let master_port = match &self.port {
            Some(p) => Some(parse_port(master_port_var(get), p)?),
            None => None,
        };
        let max = replica_count.max();
        let is_elastic = matches!(replica_count, ReplicaCount::Elastic { .. });
        if max > 1 && !is_elastic && self.has_master {
            if self.master_addr.is_none() {
                return Err(RankError::Missing {
                    var: "MASTER_ADDR",
                    expected: format!("the master's address, since the job has {max} replicas"),
                });
            }
            if master_port.is_none() {
                return Err(RankError::Missing {
                    var: "MASTER_PORT",
                    expected: format!("the master's port, since the job has {max} replicas"),
                });
            }
        }
        Ok(master_port)
    }

    /// Where the index, the count, the world size and the master's address came from.
    fn sources(
        &self,
        get: &impl Fn(&str) -> Option<String>,
        max: u32,
        pod: Option<&str>,
        pod_named: bool,
    ) -> BTreeMap<&'static str, String> {
        let mut sources = BTreeMap::new();
        let index_from = match (&self.rank, &self.node_rank) {
            (Some(_), _) => "RANK".to_string(),
            (None, Some(_)) => "PET_NODE_RANK".to_string(),
            (None, None) if !self.has_master && max > 1 && pod_named => {
                format!("the pod name {:?}", pod.unwrap_or_default())
            }
            (None, None) => "default (one replica)".to_string(),
        };
        sources.insert("replica_index", index_from);
        let count_from = match (&self.nnodes, &self.world) {
            (Some(_), _) => "PET_NNODES",
            (None, Some(_)) => "WORLD_SIZE",
            (None, None) => "default (one replica)",
        };
        sources.insert("replica_count", count_from.to_string());
        if self.world.is_some() {
            sources.insert("world_size", "WORLD_SIZE".to_string());
        }
        if self.master_addr.is_some() {
            sources.insert("master_addr", master_addr_var(get).to_string());
        }
        sources
    }
}

/// Why the contract is of its flavour, for `env --json`'s `sources`.
fn flavour_source(flavour: Flavour) -> &'static str {
    match flavour {
        Flavour::None => "no rank variable is set",
        Flavour::TrainingOperator => "MASTER_ADDR, RANK, WORLD_SIZE or PET_RDZV_* (the training-operator sets them)",
        Flavour::TrainerV2 => {
            "PET_MASTER_ADDR without MASTER_ADDR, RANK or WORLD_SIZE (Trainer v2's five PET_ variables)"
        }
    }
}

/// Where [`derive_job_name`] finds the job's name, said as the variable or name it reads.
fn job_name_source(master_addr: Option<&str>, pod: Option<&str>) -> Option<String> {
    let host = master_addr.map(|a| a.split('.').next().unwrap_or(a));
    if host.and_then(|h| h.strip_suffix("-master-0")).is_some_and(|j| !j.is_empty()) {
        return Some("MASTER_ADDR (<job>-master-0)".into());
    }
    if master_addr.and_then(train_job_of_master_addr).is_some() {
        return Some("PET_MASTER_ADDR (<trainjob>-node-0-0.<trainjob>)".into());
    }
    match pod {
        Some(p) if PodName::parse(p).is_some() => Some(format!("the pod name {p:?} (<job>-<type>-<N>)")),
        Some(p) if train_job_of_pod(p).is_some() => Some(format!("the pod name {p:?} (<trainjob>-node-0-<k>)")),
        _ => None,
    }
}

/// The variable `MASTER_ADDR`'s value came from (the PET_ copy when only it is set).
fn master_addr_var(get: &impl Fn(&str) -> Option<String>) -> &'static str {
    if get("MASTER_ADDR").is_some() {
        "MASTER_ADDR"
    } else {
        "PET_MASTER_ADDR"
    }
}

fn master_port_var(get: &impl Fn(&str) -> Option<String>) -> &'static str {
    if get("MASTER_PORT").is_some() {
        "MASTER_PORT"
    } else {
        "PET_MASTER_PORT"
    }
}

fn agree(
    var: &'static str,
    value: Option<String>,
    other: &'static str,
    other_value: Option<String>,
) -> Result<Option<String>, RankError> {
    match (value, other_value) {
        (Some(a), Some(b)) if a != b => Err(RankError::Disagree { var, value: a, other, other_value: b }),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

/// The job's name as the training-operator spells its pods: `MASTER_ADDR` is `<job>-master-0`
/// (a service name, possibly with a namespace or domain after a dot), else `POD_NAME` is
/// `<job>-master-0` or `<job>-worker-<i>`. None when neither fits (then `--job-name` is needed).
///
/// A TrainJob's the same way: `PET_MASTER_ADDR` is `<trainjob>-node-0-0.<trainjob>`, the hostname
/// `<trainjob>-node-0-<k>`.
pub fn derive_job_name(master_addr: Option<&str>, pod_name: Option<&str>) -> Option<String> {
    let from_master = master_addr.and_then(|a| {
        let host = a.split('.').next().unwrap_or(a);
        host.strip_suffix("-master-0")
            .filter(|j| !j.is_empty())
            .map(str::to_string)
            .or_else(|| train_job_of_master_addr(a))
    });
    from_master
        .or_else(|| pod_name.and_then(PodName::parse).map(|p| p.job))
        .or_else(|| pod_name.and_then(train_job_of_pod).map(|(job, _)| job))
}

impl fmt::Display for RankEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = match self.replica_count {
            ReplicaCount::Fixed { count } => count.to_string(),
            ReplicaCount::Elastic { min, max } => format!("{min}:{max} (elastic)"),
        };
        writeln!(f, "role:           {:?}", self.role())?;
        writeln!(f, "replica index:  {}", self.replica_index)?;
        writeln!(f, "replicas:       {count}")?;
        writeln!(f, "world size:     {}", self.world_size.map_or_else(|| "- (no Master)".into(), |w| w.to_string()))?;
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        writeln!(f, "master addr:    {}", opt(&self.master_addr))?;
        writeln!(f, "master port:    {}", opt(&self.master_port.map(|p| p.to_string())))?;
        let nproc = match &self.nproc_per_node {
            Some(NprocPerNode::Count(n)) => n.to_string(),
            Some(NprocPerNode::Device(d)) => d.clone(),
            None => "-".into(),
        };
        writeln!(f, "nproc per node: {nproc}")?;
        writeln!(f, "standalone:     {}", self.standalone)?;
        writeln!(f, "rdzv endpoint:  {}", opt(&self.rdzv_endpoint))?;
        write!(f, "injected:       {}", self.injected)
    }
}

#[cfg(test)]
mod tests;
