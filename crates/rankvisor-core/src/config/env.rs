//! Every environment variable rankvisor reads, read once: the snapshot is taken at start and
//! handed to the configuration, so no module looks at the process environment behind its back.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

/// The process environment (and the two host facts that stand in for it), captured once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    vars: BTreeMap<String, String>,
    /// Variables whose value is not UTF-8 (their names are UTF-8).
    not_utf8: BTreeMap<String, Vec<u8>>,
    /// `/proc/sys/kernel/hostname`, when readable (a pod's hostname is its name).
    hostname: Option<String>,
    /// The in-cluster service-account token file exists.
    service_account: bool,
}

/// A variable whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value} is not valid UTF-8: expected text")]
pub struct NotUtf8 {
    /// The variable.
    pub var: String,
    /// Its bytes, escaped.
    pub value: String,
}

/// Where Kubernetes mounts a pod's service-account token.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

impl EnvSnapshot {
    /// Read the process environment and the host facts now.
    pub fn capture() -> Self {
        let mut snap = Self::from_os(std::env::vars_os());
        snap.hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty());
        snap.service_account = Path::new(SERVICE_ACCOUNT_TOKEN).exists();
        snap
    }

    /// A snapshot of these variables only (tests, and the environment part of `capture`).
    pub fn from_os(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let mut snap = Self::default();
        for (k, v) in vars {
            let Ok(k) = k.into_string() else { continue };
            match v.into_string() {
                Ok(v) => {
                    snap.vars.insert(k, v);
                }
                Err(v) => {
                    snap.not_utf8.insert(k, std::os::unix::ffi::OsStringExt::into_vec(v));
                }
            }
        }
        snap
    }

    /// A snapshot of these pairs (tests).
    pub fn of(pairs: &[(&str, &str)]) -> Self {
        Self::from_os(pairs.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))))
    }

    /// The same snapshot with this hostname (tests).
    pub fn with_hostname(mut self, hostname: &str) -> Self {
        self.hostname = Some(hostname.to_string());
        self
    }

    /// The same snapshot, in a cluster or not (tests).
    pub fn with_service_account(mut self, present: bool) -> Self {
        self.service_account = present;
        self
    }

    /// The variable's value (UTF-8 only: see [`EnvSnapshot::check_utf8`]).
    pub fn get(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// True when the variable is in the environment at all (any value, UTF-8 or not, or empty).
    pub fn is_set(&self, name: &str) -> bool {
        self.vars.contains_key(name) || self.not_utf8.contains_key(name)
    }

    /// The variable's value, None when unset or empty.
    pub fn non_empty(&self, name: &str) -> Option<String> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// A lookup closure over the snapshot, for the pure parsers that take one.
    pub fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        move |k| self.get(k)
    }

    /// The node's hostname.
    pub fn hostname(&self) -> Option<&str> {
        self.hostname.as_deref()
    }

    /// In a cluster: the API server's address is injected and the service-account token mounted.
    pub fn in_cluster(&self) -> bool {
        self.vars.contains_key("KUBERNETES_SERVICE_HOST") && self.service_account
    }

    /// Fail on the first variable rankvisor reads (a `RANKVISOR_` option, the rank contract, the
    /// downward API) whose value is not UTF-8: such a value must never count as unset.
    pub fn check_utf8(&self) -> Result<(), NotUtf8> {
        let read_by_us = |k: &str| {
            k.starts_with("RANKVISOR_")
                || k.starts_with("PET_")
                || matches!(
                    k,
                    "RANK"
                        | "WORLD_SIZE"
                        | "MASTER_ADDR"
                        | "MASTER_PORT"
                        | "LOCAL_RANK"
                        | "POD_NAME"
                        | "POD_NAMESPACE"
                        | "NODE_NAME"
                        | "HOSTNAME"
                )
        };
        match self.not_utf8.iter().find(|(k, _)| read_by_us(k)) {
            Some((k, v)) => Err(NotUtf8 { var: k.clone(), value: format!("\"{}\"", v.escape_ascii()) }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn reads_once_and_answers_from_the_copy() {
        let env = EnvSnapshot::of(&[("RANK", "1"), ("POD_NAMESPACE", "")]).with_hostname("pytest-worker-0");
        assert_eq!(env.get("RANK").as_deref(), Some("1"));
        assert_eq!(env.get("POD_NAMESPACE").as_deref(), Some(""));
        assert_eq!(env.non_empty("POD_NAMESPACE"), None);
        assert_eq!(env.hostname(), Some("pytest-worker-0"));
        assert!(!env.in_cluster());
        let k8s = EnvSnapshot::of(&[("KUBERNETES_SERVICE_HOST", "10.0.0.1")]).with_service_account(true);
        assert!(k8s.in_cluster());
    }

    #[test]
    fn a_non_utf8_value_we_read_is_an_error_not_unset() {
        let bad = |k: &str| {
            EnvSnapshot::from_os([(OsString::from(k), OsString::from_vec(vec![b'a', 0xff])), ("X".into(), "y".into())])
        };
        for k in ["RANK", "RANKVISOR_JOB_TOKEN", "PET_NNODES", "NODE_NAME"] {
            let e = bad(k).check_utf8().unwrap_err();
            assert_eq!(e.var, k);
            assert!(e.to_string().contains("is not valid UTF-8: expected text"), "{e}");
        }
        assert_eq!(bad("LANG").check_utf8(), Ok(()), "variables we never read are not our business");
    }
}
