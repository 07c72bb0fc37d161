//! Where the API server is and how to authenticate: in-cluster defaults, every path overridable.
//!
//! Proxies: the in-cluster API server (`KUBERNETES_SERVICE_HOST`, a cluster IP that every pod
//! reaches directly) is always reached without a proxy, whatever `HTTPS_PROXY` says (it may be
//! set for the webhook, and a proxy would see the bearer token's destination at least). An
//! explicit `--kube-api-server` follows `HTTPS_PROXY`/`HTTP_PROXY` unless `NO_PROXY` names it, as
//! kubectl and client-go do.

use std::path::PathBuf;

use crate::net::client::ProxySettings;

/// The service account's mount point in every pod that has one.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The (projected, rotating) service-account token.
pub const DEFAULT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The cluster CA that signed the API server's certificate.
pub const DEFAULT_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
/// The pod's namespace.
pub const DEFAULT_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Explicit settings that take precedence over the in-cluster defaults (flags or RANKVISOR_KUBE_*).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeOverrides {
    /// The API server's base URL, e.g. `https://127.0.0.1:6443`.
    pub api_server: Option<String>,
    /// The bearer-token file.
    pub token_file: Option<PathBuf>,
    /// The CA bundle (PEM) that the API server's certificate must chain to.
    pub ca_file: Option<PathBuf>,
    /// The namespace file.
    pub namespace_file: Option<PathBuf>,
    /// Accept an `http://` API server, which gets the bearer token in clear text
    /// (`--kube-allow-insecure-http`, for tests against plain-HTTP fakes).
    pub allow_insecure_http: bool,
}

/// How to reach and authenticate to the API server. Holds paths, never the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeConfig {
    /// Base URL without a trailing slash.
    pub api_server: String,
    /// Re-read before every request: projected tokens rotate.
    pub token_file: PathBuf,
    /// PEM bundle; the only roots trusted.
    pub ca_file: PathBuf,
    /// The pod's namespace file (read by callers that need it).
    pub namespace_file: PathBuf,
    /// The proxies to reach it through (none for the in-cluster server).
    pub proxy: ProxySettings,
}

/// The API server's address cannot be determined or is not a URL this client can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeConfigError {
    /// Neither an explicit URL nor the in-cluster service variables.
    #[error(
        "no Kubernetes API server: {missing} is not set: expected in-cluster KUBERNETES_SERVICE_HOST and \
         KUBERNETES_SERVICE_PORT, or --kube-api-server (RANKVISOR_KUBE_API_SERVER)"
    )]
    NoServer {
        /// The variable that is missing.
        missing: &'static str,
    },
    /// No node name, or one that is not a Kubernetes node name.
    #[error(
        "invalid node name {value:?} (--node-name, NODE_NAME): expected this pod's spec.nodeName from the downward \
         API, a DNS subdomain such as ip-10-1-2-3.ec2.internal"
    )]
    BadNodeName {
        /// The value seen.
        value: String,
    },
    /// Plain http:// without the explicit opt-in.
    #[error(
        "--kube-api-server {value:?} (RANKVISOR_KUBE_API_SERVER) is plain http://: the service-account bearer token \
         would cross the network in clear text: expected an https:// URL, or --kube-allow-insecure-http \
         (RANKVISOR_KUBE_ALLOW_INSECURE_HTTP=true) to accept that"
    )]
    InsecureServer {
        /// The value seen.
        value: String,
    },
    /// A value that does not make a usable URL.
    #[error("invalid Kubernetes API server {value:?} (from {from}): expected {expected}")]
    BadServer {
        /// The value seen.
        value: String,
        /// Where it came from (flag or variable).
        from: &'static str,
        /// What would have been accepted.
        expected: &'static str,
    },
}

/// Check a node name before it goes into a URL: a DNS subdomain (lowercase letters, digits, `-`, `.`).
pub fn check_node_name(name: &str) -> Result<(), KubeConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(KubeConfigError::BadNodeName { value: name.to_string() })
    }
}

impl KubeConfig {
    /// Resolve the configuration from the overrides, then the in-cluster variables (`env`) and paths.
    /// `env` is also where the proxy variables are read (see the module's note on proxies).
    pub fn resolve(
        overrides: &KubeOverrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<KubeConfig, KubeConfigError> {
        let (api_server, proxy) = match &overrides.api_server {
            Some(url) => (normalize_url(url, "--kube-api-server")?, ProxySettings::from_env(&env)),
            None => (in_cluster_url(&env)?, ProxySettings::default()),
        };
        if api_server.starts_with("http://") && !overrides.allow_insecure_http {
            return Err(KubeConfigError::InsecureServer { value: api_server });
        }
        Ok(KubeConfig {
            proxy,
            api_server,
            token_file: overrides.token_file.clone().unwrap_or_else(|| DEFAULT_TOKEN_FILE.into()),
            ca_file: overrides.ca_file.clone().unwrap_or_else(|| DEFAULT_CA_FILE.into()),
            namespace_file: overrides.namespace_file.clone().unwrap_or_else(|| DEFAULT_NAMESPACE_FILE.into()),
        })
    }

    /// The pod's namespace, if the namespace file is readable and not empty.
    pub fn namespace(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.namespace_file).ok()?;
        let ns = text.trim();
        (!ns.is_empty()).then(|| ns.to_string())
    }
}

/// `https://HOST:PORT` from the variables the kubelet injects; IPv6 hosts get brackets.
fn in_cluster_url(env: &impl Fn(&str) -> Option<String>) -> Result<String, KubeConfigError> {
    let nonempty =
        |k: &'static str| env(k).filter(|v| !v.trim().is_empty()).ok_or(KubeConfigError::NoServer { missing: k });
    let host = nonempty("KUBERNETES_SERVICE_HOST")?;
    let port = nonempty("KUBERNETES_SERVICE_PORT")?;
    let port: u16 = port.trim().parse().map_err(|_| KubeConfigError::BadServer {
        value: port.clone(),
        from: "KUBERNETES_SERVICE_PORT",
        expected: "a TCP port number",
    })?;
    let host = host.trim();
    if host.contains(['/', '@', ' ', '?', '#']) {
        return Err(KubeConfigError::BadServer {
            value: host.to_string(),
            from: "KUBERNETES_SERVICE_HOST",
            expected: "a host name or IP address",
        });
    }
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    Ok(format!("https://{host}:{port}"))
}

/// An explicit URL: http(s) scheme, a host, no path beyond `/`, no query; trailing slash removed.
fn normalize_url(value: &str, from: &'static str) -> Result<String, KubeConfigError> {
    let bad = |expected| KubeConfigError::BadServer { value: value.to_string(), from, expected };
    let v = value.trim().trim_end_matches('/');
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"))
        .ok_or_else(|| bad("an https:// URL such as https://10.96.0.1:443"))?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("scheme://host[:port] with no path, query or credentials"));
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn in_cluster_defaults() {
        let c = KubeConfig::resolve(
            &KubeOverrides::default(),
            env(&[("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("KUBERNETES_SERVICE_PORT", "443")]),
        )
        .unwrap();
        assert_eq!(c.api_server, "https://10.96.0.1:443");
        assert_eq!(c.token_file, PathBuf::from(DEFAULT_TOKEN_FILE));
        assert_eq!(c.ca_file, PathBuf::from(DEFAULT_CA_FILE));
        assert_eq!(c.namespace_file, PathBuf::from(DEFAULT_NAMESPACE_FILE));
    }

    #[test]
    fn ipv6_host_gets_brackets() {
        let c = KubeConfig::resolve(
            &KubeOverrides::default(),
            env(&[("KUBERNETES_SERVICE_HOST", "fd00::1"), ("KUBERNETES_SERVICE_PORT", "6443")]),
        )
        .unwrap();
        assert_eq!(c.api_server, "https://[fd00::1]:6443");
    }

    #[test]
    fn missing_variables_are_named() {
        let e = KubeConfig::resolve(&KubeOverrides::default(), env(&[])).unwrap_err();
        assert_eq!(e, KubeConfigError::NoServer { missing: "KUBERNETES_SERVICE_HOST" });
        assert!(e.to_string().contains("--kube-api-server"), "{e}");
        let e = KubeConfig::resolve(&KubeOverrides::default(), env(&[("KUBERNETES_SERVICE_HOST", "h")])).unwrap_err();
        assert_eq!(e, KubeConfigError::NoServer { missing: "KUBERNETES_SERVICE_PORT" });
        let e = KubeConfig::resolve(
            &KubeOverrides::default(),
            env(&[("KUBERNETES_SERVICE_HOST", " "), ("KUBERNETES_SERVICE_PORT", "443")]),
        )
        .unwrap_err();
        assert_eq!(e, KubeConfigError::NoServer { missing: "KUBERNETES_SERVICE_HOST" });
    }

    #[test]
    fn bad_in_cluster_values_are_named() {
        let e = KubeConfig::resolve(
            &KubeOverrides::default(),
            env(&[("KUBERNETES_SERVICE_HOST", "h"), ("KUBERNETES_SERVICE_PORT", "https")]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid Kubernetes API server \"https\" (from KUBERNETES_SERVICE_PORT): expected a TCP port number"
        );
        let e = KubeConfig::resolve(
            &KubeOverrides::default(),
            env(&[("KUBERNETES_SERVICE_HOST", "evil/x"), ("KUBERNETES_SERVICE_PORT", "1")]),
        )
        .unwrap_err();
        assert!(matches!(e, KubeConfigError::BadServer { from: "KUBERNETES_SERVICE_HOST", .. }), "{e}");
    }

    #[test]
    fn overrides_win() {
        let o = KubeOverrides {
            api_server: Some("https://127.0.0.1:16443/".into()),
            token_file: Some("/t".into()),
            ca_file: Some("/c".into()),
            namespace_file: Some("/n".into()),
            allow_insecure_http: false,
        };
        let c = KubeConfig::resolve(&o, env(&[])).unwrap();
        assert_eq!(
            c,
            KubeConfig {
                api_server: "https://127.0.0.1:16443".into(),
                token_file: "/t".into(),
                ca_file: "/c".into(),
                namespace_file: "/n".into(),
                proxy: ProxySettings::default(),
            }
        );
        let o = KubeOverrides {
            api_server: Some("http://127.0.0.1:8080".into()),
            allow_insecure_http: true,
            ..Default::default()
        };
        assert_eq!(KubeConfig::resolve(&o, env(&[])).unwrap().api_server, "http://127.0.0.1:8080");
    }

    #[test]
    fn plain_http_needs_the_opt_in() {
        let o = KubeOverrides { api_server: Some("http://10.0.0.5:8080/".into()), ..Default::default() };
        let e = KubeConfig::resolve(&o, env(&[])).unwrap_err();
        assert_eq!(e, KubeConfigError::InsecureServer { value: "http://10.0.0.5:8080".into() });
        let text = e.to_string();
        assert!(text.contains("\"http://10.0.0.5:8080\"") && text.contains("--kube-allow-insecure-http"), "{text}");
    }

    #[test]
    fn proxies_apply_to_an_explicit_server_only() {
        let vars = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("NO_PROXY", "collector.local"),
        ]);
        let in_cluster = KubeConfig::resolve(&KubeOverrides::default(), &vars).unwrap();
        assert_eq!(in_cluster.proxy, ProxySettings::default(), "the service IP is reached directly");
        let o = KubeOverrides { api_server: Some("https://api.example:6443".into()), ..Default::default() };
        let explicit = KubeConfig::resolve(&o, &vars).unwrap();
        assert_eq!(explicit.proxy.https.as_deref(), Some("http://proxy:3128"));
        assert_eq!(explicit.proxy.no_proxy.as_deref(), Some("collector.local"));
    }

    #[test]
    fn bad_urls_are_refused() {
        for bad in ["127.0.0.1:6443", "ftp://x", "https://", "https://h/api", "https://u:p@h", "https://h?x=1"] {
            let o = KubeOverrides { api_server: Some(bad.into()), ..Default::default() };
            let e = KubeConfig::resolve(&o, env(&[])).unwrap_err();
            assert!(
                matches!(&e, KubeConfigError::BadServer { value, from: "--kube-api-server", .. } if value == bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn node_names_are_checked() {
        for good in ["n1", "ip-10-1-2-3.ec2.internal", "a"] {
            assert_eq!(check_node_name(good), Ok(()), "{good}");
        }
        let long = "a".repeat(254);
        for bad in ["", "N1", "-a", "a-", "a/b", "a b", "a?x=1", "a%2F", long.as_str()] {
            assert_eq!(check_node_name(bad), Err(KubeConfigError::BadNodeName { value: bad.into() }), "{bad}");
        }
        assert!(check_node_name("").unwrap_err().to_string().contains("spec.nodeName"));
    }

    #[test]
    fn namespace_is_read_trimmed() {
        let dir = std::env::temp_dir().join(format!("rv-kube-ns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("namespace");
        std::fs::write(&f, "team-a\n").unwrap();
        let o = KubeOverrides {
            api_server: Some("https://h".into()),
            namespace_file: Some(f.clone()),
            ..Default::default()
        };
        let c = KubeConfig::resolve(&o, env(&[])).unwrap();
        assert_eq!(c.namespace().as_deref(), Some("team-a"));
        std::fs::write(&f, " \n").unwrap();
        assert_eq!(c.namespace(), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.namespace(), None);
    }
}
