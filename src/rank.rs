//! The rank contract: what Kubeflow's training-operator injects into every replica, validated.
//!
//! `RANK` = `PET_NODE_RANK` is the replica (node) index: master 0, worker i -> i+1. `WORLD_SIZE` is
//! replicas x nprocPerNode, so the number of replicas to meet is `PET_NNODES` when set. `PET_NNODES`
//! is `min:max` for an elastic job, whose membership belongs to torchrun's own rendezvous.

use serde::Serialize;
use std::fmt;

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

/// The validated rank contract of this replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankEnv {
    /// Replica (node) index: `RANK` = `PET_NODE_RANK`.
    pub replica_index: u32,
    /// Replicas in the job: `PET_NNODES`, else `WORLD_SIZE`.
    pub replica_count: ReplicaCount,
    /// `WORLD_SIZE`: total training processes.
    pub world_size: u32,
    /// `MASTER_ADDR`, required when there is more than one replica.
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
}

impl RankEnv {
    /// Master for replica 0, else Worker.
    pub fn role(&self) -> Role {
        if self.replica_index == 0 {
            Role::Master
        } else {
            Role::Worker
        }
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

fn invalid(var: &'static str, value: &str, expected: impl Into<String>) -> RankError {
    RankError::Invalid { var, value: value.to_string(), expected: expected.into() }
}

fn parse_u32(var: &'static str, value: &str, min: u32, expected: &str) -> Result<u32, RankError> {
    match value.trim().parse::<u32>() {
        Ok(n) if n >= min && value.trim() == value => Ok(n),
        _ => Err(invalid(var, value, expected)),
    }
}

fn parse_port(var: &'static str, value: &str) -> Result<u16, RankError> {
    match value.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(var, value, "a TCP port number from 1 to 65535")),
    }
}

fn parse_nnodes(value: &str) -> Result<ReplicaCount, RankError> {
    const EXPECTED: &str = "a replica count >= 1, or min:max with 1 <= min <= max";
    match value.split_once(':') {
        None => Ok(ReplicaCount::Fixed { count: parse_u32("PET_NNODES", value, 1, EXPECTED)? }),
        Some((a, b)) => {
            let min = parse_u32("PET_NNODES", a, 1, EXPECTED).map_err(|_| invalid("PET_NNODES", value, EXPECTED))?;
            let max = parse_u32("PET_NNODES", b, 1, EXPECTED).map_err(|_| invalid("PET_NNODES", value, EXPECTED))?;
            if min > max {
                return Err(invalid("PET_NNODES", value, EXPECTED));
            }
            Ok(ReplicaCount::Elastic { min, max })
        }
    }
}

fn parse_nproc(value: &str) -> Result<NprocPerNode, RankError> {
    match value {
        "auto" | "cpu" | "gpu" | "xpu" | "cuda" => Ok(NprocPerNode::Device(value.to_string())),
        _ => {
            Ok(NprocPerNode::Count(parse_u32("PET_NPROC_PER_NODE", value, 1, "a number >= 1, or auto, cpu, gpu, xpu")?))
        }
    }
}

/// Read and validate the rank contract through `lookup` (the process env in production, a map in tests).
pub fn parse_rank_env(lookup: impl Fn(&str) -> Option<String>) -> Result<RankEnv, RankError> {
    let get = |k: &str| lookup(k);
    let rank_raw = get("RANK");
    let world_raw = get("WORLD_SIZE");
    let node_rank_raw = get("PET_NODE_RANK");
    let nnodes_raw = get("PET_NNODES");
    let injected = rank_raw.is_some() || world_raw.is_some() || node_rank_raw.is_some() || nnodes_raw.is_some();

    let world_size = match &world_raw {
        Some(v) => parse_u32("WORLD_SIZE", v, 1, "a number of processes >= 1")?,
        None if injected => {
            return Err(RankError::Missing {
                var: "WORLD_SIZE",
                expected: "the total number of training processes, set with RANK".into(),
            })
        }
        None => 1,
    };
    let replica_count = match &nnodes_raw {
        Some(v) => parse_nnodes(v)?,
        None => ReplicaCount::Fixed { count: world_size },
    };
    let max = replica_count.max();
    let range = format!("a replica index from 0 to {} (replicas: {max})", max.saturating_sub(1));
    let replica_index = match (&rank_raw, &node_rank_raw) {
        (Some(r), Some(n)) => {
            let ri = parse_u32("RANK", r, 0, &range)?;
            let ni = parse_u32("PET_NODE_RANK", n, 0, &range)?;
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
        (Some(r), None) => parse_u32("RANK", r, 0, &range)?,
        (None, Some(n)) => parse_u32("PET_NODE_RANK", n, 0, &range)?,
        (None, None) if injected && max > 1 => {
            return Err(RankError::Missing {
                var: "RANK",
                expected: format!("this replica's index from 0 to {}", max - 1),
            })
        }
        (None, None) => 0,
    };
    if replica_index >= max {
        let (var, value) = match (&rank_raw, &node_rank_raw) {
            (Some(r), _) => ("RANK", r.clone()),
            (None, Some(n)) => ("PET_NODE_RANK", n.clone()),
            (None, None) => ("RANK", replica_index.to_string()),
        };
        return Err(invalid(var, &value, range));
    }

    let nproc_per_node = get("PET_NPROC_PER_NODE").map(|v| parse_nproc(&v)).transpose()?;
    if let (Some(NprocPerNode::Count(k)), ReplicaCount::Fixed { count }, Some(w)) =
        (&nproc_per_node, replica_count, &world_raw)
    {
        if nnodes_raw.is_some() && u64::from(*k) * u64::from(count) != u64::from(world_size) {
            return Err(invalid(
                "WORLD_SIZE",
                w,
                format!("PET_NNODES x PET_NPROC_PER_NODE = {count} x {k} = {}", u64::from(*k) * u64::from(count)),
            ));
        }
    }

    let master_addr = agree("MASTER_ADDR", get("MASTER_ADDR"), "PET_MASTER_ADDR", get("PET_MASTER_ADDR"))?;
    if let Some(a) = &master_addr {
        if a.is_empty() || a.chars().any(char::is_whitespace) {
            return Err(invalid("MASTER_ADDR", a, "a host name or IP address"));
        }
    }
    let port_raw = agree("MASTER_PORT", get("MASTER_PORT"), "PET_MASTER_PORT", get("PET_MASTER_PORT"))?;
    let master_port = port_raw.as_deref().map(|p| parse_port("MASTER_PORT", p)).transpose()?;
    let is_elastic = matches!(replica_count, ReplicaCount::Elastic { .. });
    let rdzv_endpoint = get("PET_RDZV_ENDPOINT").filter(|v| !v.is_empty());
    if max > 1 && !is_elastic {
        if master_addr.is_none() {
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
    let local_rank = get("LOCAL_RANK").map(|v| parse_u32("LOCAL_RANK", &v, 0, "a number >= 0")).transpose()?;

    Ok(RankEnv {
        replica_index,
        replica_count,
        world_size,
        master_addr,
        master_port,
        nproc_per_node,
        standalone: get("PET_STANDALONE").is_some(),
        local_rank,
        rdzv_endpoint,
        injected,
    })
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
pub fn derive_job_name(master_addr: Option<&str>, pod_name: Option<&str>) -> Option<String> {
    let from_master = master_addr.and_then(|a| {
        let host = a.split('.').next().unwrap_or(a);
        host.strip_suffix("-master-0").filter(|j| !j.is_empty())
    });
    let from_pod = || {
        pod_name.and_then(|p| {
            let (rest, index) = p.rsplit_once('-')?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            rest.strip_suffix("-master").or_else(|| rest.strip_suffix("-worker")).filter(|j| !j.is_empty())
        })
    };
    from_master.or_else(from_pod).map(str::to_string)
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
        writeln!(f, "world size:     {}", self.world_size)?;
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<RankEnv, RankError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        parse_rank_env(|k| m.get(k).cloned())
    }

    /// Seed 000's master env, exactly as `kubectl describe pod pytest-master-0` showed it.
    const SEED_MASTER: &[(&str, &str)] = &[
        ("PYTHONUNBUFFERED", "1"),
        ("MASTER_PORT", "23456"),
        ("PET_MASTER_PORT", "23456"),
        ("MASTER_ADDR", "pytest-master-0"),
        ("PET_MASTER_ADDR", "pytest-master-0"),
        ("WORLD_SIZE", "4"),
        ("RANK", "0"),
        ("PET_NODE_RANK", "0"),
        ("PET_NPROC_PER_NODE", "auto"),
        ("PET_NNODES", "4"),
    ];

    fn with(over: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v: Vec<_> = SEED_MASTER.iter().copied().filter(|(k, _)| !over.iter().any(|(o, _)| o == k)).collect();
        v.extend(over.iter().copied().filter(|(_, val)| *val != "<unset>"));
        v
    }

    #[test]
    fn seed_master_and_worker() {
        let m = env(SEED_MASTER).unwrap();
        assert_eq!(m.role(), Role::Master);
        assert_eq!(m.replica_count, ReplicaCount::Fixed { count: 4 });
        assert_eq!(m.world_size, 4);
        assert_eq!(m.master_addr.as_deref(), Some("pytest-master-0"));
        assert_eq!(m.master_port, Some(23456));
        assert_eq!(m.nproc_per_node, Some(NprocPerNode::Device("auto".into())));
        let w = env(&with(&[("RANK", "3"), ("PET_NODE_RANK", "3")])).unwrap();
        assert_eq!(w.role(), Role::Worker);
        assert_eq!(w.replica_index, 3);
    }

    #[test]
    fn nothing_injected_is_a_single_replica() {
        let e = env(&[]).unwrap();
        assert_eq!(e.replica_index, 0);
        assert_eq!(e.replica_count, ReplicaCount::Fixed { count: 1 });
        assert!(!e.injected);
        let one = env(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap();
        assert_eq!(one.replica_count, ReplicaCount::Fixed { count: 1 });
        assert!(one.master_addr.is_none());
    }

    #[test]
    fn several_processes_per_node_count_replicas_from_nnodes() {
        let e = env(&with(&[("WORLD_SIZE", "16"), ("PET_NPROC_PER_NODE", "4"), ("RANK", "3"), ("PET_NODE_RANK", "3")]))
            .unwrap();
        assert_eq!(e.replica_count, ReplicaCount::Fixed { count: 4 });
        assert_eq!(e.world_size, 16);
        let err = env(&with(&[("WORLD_SIZE", "15"), ("PET_NPROC_PER_NODE", "4")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "WORLD_SIZE=\"15\" is invalid: expected PET_NNODES x PET_NPROC_PER_NODE = 4 x 4 = 16"
        );
    }

    #[test]
    fn elastic_nnodes() {
        let e = env(&with(&[
            ("PET_NNODES", "2:4"),
            ("RANK", "3"),
            ("PET_NODE_RANK", "3"),
            ("PET_RDZV_ENDPOINT", "pytest-master-0:23456"),
        ]))
        .unwrap();
        assert_eq!(e.replica_count, ReplicaCount::Elastic { min: 2, max: 4 });
        assert!(e.is_elastic());
        assert_eq!(e.rdzv_endpoint.as_deref(), Some("pytest-master-0:23456"));
        for bad in ["4:2", "0:2", "a:2", "2:", ":", "2:3:4"] {
            let err = env(&with(&[("PET_NNODES", bad)])).unwrap_err();
            assert!(err.to_string().starts_with(&format!("PET_NNODES=\"{bad}\" is invalid")), "{err}");
        }
    }

    #[test]
    fn standalone_may_be_empty() {
        assert!(env(&with(&[("PET_STANDALONE", "")])).unwrap().standalone);
        assert!(!env(SEED_MASTER).unwrap().standalone);
    }

    #[test]
    fn every_bad_input_names_variable_value_and_expectation() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("RANK", "4"), ("PET_NODE_RANK", "4")],
                "RANK=\"4\" is invalid: expected a replica index from 0 to 3 (replicas: 4)",
            ),
            (
                &[("RANK", "-1"), ("PET_NODE_RANK", "<unset>")],
                "RANK=\"-1\" is invalid: expected a replica index from 0 to 3 (replicas: 4)",
            ),
            (&[("RANK", "one")], "RANK=\"one\" is invalid"),
            (&[("WORLD_SIZE", "0")], "WORLD_SIZE=\"0\" is invalid: expected a number of processes >= 1"),
            (&[("WORLD_SIZE", "four")], "WORLD_SIZE=\"four\" is invalid"),
            (&[("WORLD_SIZE", "<unset>")], "WORLD_SIZE is not set"),
            (
                &[("MASTER_PORT", "70000"), ("PET_MASTER_PORT", "70000")],
                "MASTER_PORT=\"70000\" is invalid: expected a TCP port number from 1 to 65535",
            ),
            (&[("MASTER_PORT", "0"), ("PET_MASTER_PORT", "0")], "MASTER_PORT=\"0\" is invalid"),
            (&[("MASTER_PORT", "http"), ("PET_MASTER_PORT", "http")], "MASTER_PORT=\"http\" is invalid"),
            (&[("RANK", "1")], "RANK=\"1\" disagrees with PET_NODE_RANK=\"0\": expected them equal"),
            (&[("MASTER_ADDR", "a")], "MASTER_ADDR=\"a\" disagrees with PET_MASTER_ADDR=\"pytest-master-0\""),
            (&[("MASTER_PORT", "1")], "MASTER_PORT=\"1\" disagrees with PET_MASTER_PORT=\"23456\""),
            (
                &[("MASTER_ADDR", "<unset>"), ("PET_MASTER_ADDR", "<unset>")],
                "MASTER_ADDR is not set: expected the master's address, since the job has 4 replicas",
            ),
            (&[("MASTER_PORT", "<unset>"), ("PET_MASTER_PORT", "<unset>")], "MASTER_PORT is not set"),
            (
                &[("MASTER_ADDR", "a b"), ("PET_MASTER_ADDR", "a b")],
                "MASTER_ADDR=\"a b\" is invalid: expected a host name or IP address",
            ),
            (
                &[("PET_NPROC_PER_NODE", "0")],
                "PET_NPROC_PER_NODE=\"0\" is invalid: expected a number >= 1, or auto, cpu, gpu, xpu",
            ),
            (&[("PET_NPROC_PER_NODE", "many")], "PET_NPROC_PER_NODE=\"many\" is invalid"),
            (&[("PET_NNODES", "0")], "PET_NNODES=\"0\" is invalid"),
            (&[("PET_NNODES", "x")], "PET_NNODES=\"x\" is invalid"),
            (&[("LOCAL_RANK", "x")], "LOCAL_RANK=\"x\" is invalid: expected a number >= 0"),
            (&[("RANK", " 1"), ("PET_NODE_RANK", "<unset>")], "RANK=\" 1\" is invalid"),
        ];
        for (over, want) in cases {
            let err = env(&with(over)).unwrap_err().to_string();
            assert!(err.starts_with(want), "for {over:?}: got {err:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn missing_rank_with_several_replicas() {
        let e = env(&[("WORLD_SIZE", "2"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "1")]).unwrap_err();
        assert_eq!(e.to_string(), "RANK is not set: expected this replica's index from 0 to 1");
    }

    #[test]
    fn job_name_from_master_addr_or_pod_name() {
        assert_eq!(derive_job_name(Some("pytest-master-0"), None).as_deref(), Some("pytest"));
        assert_eq!(derive_job_name(Some("my-job-master-0.default.svc"), None).as_deref(), Some("my-job"));
        assert_eq!(derive_job_name(Some("127.0.0.1"), Some("pytest-worker-2")).as_deref(), Some("pytest"));
        assert_eq!(derive_job_name(Some("10.0.0.1"), Some("a-b-master-0")).as_deref(), Some("a-b"));
        assert_eq!(derive_job_name(Some("-master-0"), None), None);
        assert_eq!(derive_job_name(Some("10.0.0.1"), Some("pytest-worker-x")), None);
        assert_eq!(derive_job_name(None, Some("pytest-launcher-0")), None);
        assert_eq!(derive_job_name(None, Some("worker-0")), None);
        assert_eq!(derive_job_name(None, None), None);
    }

    #[test]
    fn pet_only_env_is_enough() {
        let e =
            env(&[("WORLD_SIZE", "2"), ("PET_NODE_RANK", "1"), ("PET_MASTER_ADDR", "m"), ("PET_MASTER_PORT", "29500")])
                .unwrap();
        assert_eq!(e.replica_index, 1);
        assert_eq!(e.master_addr.as_deref(), Some("m"));
        assert_eq!(e.master_port, Some(29500));
    }
}
