//! HTTPS to the API server through the shared HTTP client (`crate::net::client`): only the
//! configured CA is trusted, the bearer token is read from its file before every request
//! (projected tokens rotate) and never logged, nor is any answer's body that could echo it.

use std::path::PathBuf;
use std::time::Duration;

use crate::net::client::{self, Body, BodyLines, ClientOptions, HttpClient, HttpError, Method, Roots};

use super::config::KubeConfig;
use super::wire::{parse_status, parse_watch_event, Node, WatchEvent, WireError, MAX_LINE_BYTES};

/// Longest wait for a TCP (and TLS) connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a GET's whole answer, or for a watch's response headers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Most of a refusal's body read (for its `Status` message).
const MAX_REFUSAL_BYTES: usize = 64 * 1024;
/// Longest server message kept in an error.
const MAX_MESSAGE_CHARS: usize = 300;

/// Why a request to the API server failed. Carries text only, so that it can be compared and
/// cloned into health observations; the token never appears in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    /// The token file is missing, unreadable or empty.
    #[error("service-account token file {path}: {problem}: expected a file holding a bearer token")]
    Token {
        /// The token file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// The CA file is missing, unreadable or holds no PEM certificate.
    #[error("Kubernetes CA file {path}: {problem}: expected a PEM bundle with the cluster CA")]
    Ca {
        /// The CA file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// The HTTPS client could not be set up.
    #[error("cannot set up the HTTPS client: {problem}")]
    Client {
        /// What went wrong.
        problem: String,
    },
    /// The server's certificate is not trusted (wrong CA, wrong host name, expired...).
    #[error("TLS with the Kubernetes API at {url} failed: {problem}: expected a server certificate issued by the CA in {ca} for this address")]
    Tls {
        /// The URL requested.
        url: String,
        /// The CA file used.
        ca: PathBuf,
        /// The TLS library's reason.
        problem: String,
    },
    /// No connection, a connection cut, or no answer in time.
    #[error("cannot reach the Kubernetes API at {url}: {problem}")]
    Unreachable {
        /// The URL requested.
        url: String,
        /// What went wrong.
        problem: String,
    },
    /// 401: the server does not accept the token.
    #[error("the Kubernetes API at {url} rejected the token from {token_file} (401 Unauthorized): expected a valid service-account token")]
    Unauthorized {
        /// The URL requested.
        url: String,
        /// Where the token came from.
        token_file: PathBuf,
    },
    /// 403: RBAC does not allow the request.
    #[error("the Kubernetes API refused access (403 Forbidden): {message}: expected RBAC that grants get and watch on nodes to this service account (a ClusterRole and ClusterRoleBinding)")]
    Forbidden {
        /// The server's message (who cannot do what).
        message: String,
    },
    /// 404: no Node of that name.
    #[error("node {node:?} not found in the Kubernetes API (404): expected --node-name (NODE_NAME, from the downward API's spec.nodeName) to name this pod's node")]
    NodeNotFound {
        /// The node asked for.
        node: String,
    },
    /// Any other unexpected HTTP status.
    #[error("the Kubernetes API at {url} answered {code}: {message}")]
    Http {
        /// The URL requested.
        url: String,
        /// The HTTP status.
        code: u16,
        /// The server's message, or the start of the body.
        message: String,
    },
    /// 403 on a reporting request (events, the Pod's status): RBAC does not allow it.
    #[error("the Kubernetes API refused to {action} (403 Forbidden): {message}: expected a Role bound to this service account granting create and patch on events and get and patch on pods/status")]
    ReportForbidden {
        /// What was attempted, e.g. `create events in namespace "ns"`.
        action: String,
        /// The server's message (who cannot do what).
        message: String,
    },
    /// 404 on a reporting request: the Pod or Event named does not exist.
    #[error("{what} not found in the Kubernetes API (404)")]
    NotFound {
        /// What was asked for, e.g. `pod "ns/name"`.
        what: String,
    },
    /// A 2xx answer that is not what was asked for.
    #[error("unexpected answer from the Kubernetes API at {url}: {problem}")]
    Decode {
        /// The URL requested.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The watch stream broke: cut mid-event, silent for too long, or not events.
    #[error("watch of node {node:?} broke: {problem}")]
    Watch {
        /// The node watched.
        node: String,
        /// What happened.
        problem: String,
    },
}

/// A client for one API server; cheap to clone (connections are pooled).
#[derive(Clone)]
pub struct KubeClient {
    cfg: KubeConfig,
    http: HttpClient,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

/// What a 403 or a 404 means for the request at hand.
#[derive(Debug, Clone, Copy)]
enum Subject<'a> {
    /// Reading the Node (health).
    Node(&'a str),
    /// Events and the Pod's status (reporting).
    Report { action: &'a str, what: &'a str },
}

impl KubeClient {
    /// A client that trusts only the certificates in `cfg.ca_file` (read now; not for http://).
    pub fn new(cfg: KubeConfig) -> Result<Self, KubeError> {
        let https = cfg.api_server.starts_with("https://");
        if !https {
            // KubeConfig::resolve refuses http:// unless allow_insecure_http said so.
            tracing::warn!(url = %cfg.api_server, "plain HTTP to the Kubernetes API (--kube-allow-insecure-http): the token is sent unencrypted");
        }
        let opts = ClientOptions {
            roots: Roots::CaFile(cfg.ca_file.clone()),
            proxy: cfg.proxy.clone(),
            connect_timeout: CONNECT_TIMEOUT,
            bearer_token_file: Some(cfg.token_file.clone()),
        };
        let http = match HttpClient::new(opts) {
            Ok(h) => h,
            // Plain http needs no CA: do not insist on a readable one.
            Err(HttpError::Ca { .. }) if !https => HttpClient::new(ClientOptions {
                roots: Roots::System,
                proxy: cfg.proxy.clone(),
                connect_timeout: CONNECT_TIMEOUT,
                bearer_token_file: Some(cfg.token_file.clone()),
            })
            .map_err(setup_error)?,
            Err(e) => return Err(setup_error(e)),
        };
        Ok(Self { cfg, http })
    }

    /// The configuration in use.
    pub fn config(&self) -> &KubeConfig {
        &self.cfg
    }

    /// GET `pods/NAME/status` (the whole Pod, as the status subresource returns it).
    pub async fn get_pod_status(&self, namespace: &str, pod: &str) -> Result<serde_json::Value, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/status");
        let what = format!("pod \"{namespace}/{pod}\"");
        let action = format!("get pods/status of {what}");
        self.json(Method::GET, &path, None, Subject::Report { action: &action, what: &what }).await
    }

    /// Strategic-merge PATCH of `pods/NAME/status` (e.g. one of its conditions, merged by type).
    pub async fn patch_pod_status(
        &self,
        namespace: &str,
        pod: &str,
        patch: &serde_json::Value,
    ) -> Result<serde_json::Value, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/status");
        let what = format!("pod \"{namespace}/{pod}\"");
        let action = format!("patch pods/status of {what}");
        self.json(Method::PATCH, &path, Some(patch), Subject::Report { action: &action, what: &what }).await
    }

    /// POST a core/v1 Event into `namespace`.
    pub async fn create_event(
        &self,
        namespace: &str,
        event: &serde_json::Value,
    ) -> Result<serde_json::Value, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/events");
        let action = format!("create events in namespace \"{namespace}\"");
        let what = format!("namespace \"{namespace}\"");
        self.json(Method::POST, &path, Some(event), Subject::Report { action: &action, what: &what }).await
    }

    /// Strategic-merge PATCH of the Event `name` (its count and lastTimestamp, as kubelet aggregates).
    pub async fn patch_event(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<serde_json::Value, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/events/{name}");
        let what = format!("event \"{namespace}/{name}\"");
        let action = format!("patch {what}");
        self.json(Method::PATCH, &path, Some(patch), Subject::Report { action: &action, what: &what }).await
    }

    /// GET the Node.
    pub async fn get_node(&self, node: &str) -> Result<Node, KubeError> {
        let path = format!("/api/v1/nodes/{node}");
        let value = self.json(Method::GET, &path, None, Subject::Node(node)).await?;
        serde_json::from_value(value)
            .map_err(|e| KubeError::Decode { url: self.url(&path), problem: self.scrub(&format!("not a Node: {e}")) })
    }

    /// Start watching the Node from `resource_version`; the server ends the stream after
    /// `timeout_seconds`, and silence for `idle` counts as a dropped stream.
    pub async fn watch_node(
        &self,
        node: &str,
        resource_version: &str,
        timeout_seconds: u64,
        idle: Duration,
    ) -> Result<NodeWatch, KubeError> {
        let path = format!(
            "/api/v1/nodes?watch=true&fieldSelector=metadata.name%3D{node}&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={timeout_seconds}",
            query_escape(resource_version),
        );
        let resp = self.send(Method::GET, &path, None, Subject::Node(node)).await?;
        Ok(NodeWatch { lines: resp.lines(MAX_LINE_BYTES), node: node.to_string(), idle })
    }

    /// One request whose answer is JSON (at most MAX_LINE_BYTES of it). A POST body goes as
    /// JSON, a PATCH as a strategic merge patch.
    async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        subject: Subject<'_>,
    ) -> Result<serde_json::Value, KubeError> {
        let url = self.url(path);
        let resp = self.send(method, path, body, subject).await?;
        let got = resp.collect(MAX_LINE_BYTES).await.map_err(|e| self.http_error(&url, e))?;
        if got.truncated {
            return Err(KubeError::Decode { url, problem: format!("an answer larger than {MAX_LINE_BYTES} bytes") });
        }
        serde_json::from_slice(&got.bytes)
            .map_err(|e| KubeError::Decode { url, problem: self.scrub(&format!("not JSON: {e}")) })
    }

    /// The one request path: a fresh token, the body, and non-2xx answers turned into errors
    /// that name the cause (the server's `Status` message, never the raw body).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        subject: Subject<'_>,
    ) -> Result<client::Response, KubeError> {
        let url = self.url(path);
        let body = match body {
            None => None,
            Some(v) => Some(Body {
                content_type: if method == Method::PATCH {
                    "application/strategic-merge-patch+json"
                } else {
                    "application/json"
                },
                bytes: serde_json::to_vec(v).map_err(|e| KubeError::Client { problem: e.to_string() })?,
            }),
        };
        let resp = self.http.send(method, &url, body, REQUEST_TIMEOUT).await.map_err(|e| self.http_error(&url, e))?;
        let code = resp.status();
        if (200..300).contains(&code) {
            return Ok(resp);
        }
        let message = match resp.collect(MAX_REFUSAL_BYTES).await {
            Ok(got) => self.refusal_message(&got.bytes),
            Err(_) => String::new(),
        };
        Err(match (code, subject) {
            (401, _) => KubeError::Unauthorized { url, token_file: self.cfg.token_file.clone() },
            (403, Subject::Node(_)) => KubeError::Forbidden { message },
            (404, Subject::Node(node)) => KubeError::NodeNotFound { node: node.to_string() },
            (403, Subject::Report { action, .. }) => KubeError::ReportForbidden { action: action.to_string(), message },
            (404, Subject::Report { what, .. }) => KubeError::NotFound { what: what.to_string() },
            _ => KubeError::Http { url, code, message },
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cfg.api_server)
    }

    /// The `Status` message of a refusal, cut and scrubbed; any other body is not shown (a
    /// proxy or a broken server may echo the request, token included).
    fn refusal_message(&self, body: &[u8]) -> String {
        match parse_status(body) {
            Some(s) if !s.message.is_empty() => {
                let cut: String = s.message.chars().take(MAX_MESSAGE_CHARS).collect();
                self.scrub(&cut)
            }
            _ if body.is_empty() => "(no body)".into(),
            _ => format!("(a body of {} bytes that is not a Kubernetes Status, not shown)", body.len()),
        }
    }

    /// Text from the server with the current token, should it appear, replaced.
    fn scrub(&self, text: &str) -> String {
        match client::read_token(&self.cfg.token_file) {
            Ok(token) if text.contains(&token) => text.replace(&token, "***"),
            _ => text.to_string(),
        }
    }

    fn http_error(&self, url: &str, e: HttpError) -> KubeError {
        let unreachable = |problem: String| KubeError::Unreachable { url: url.to_string(), problem };
        match e {
            HttpError::Token { path, problem } => KubeError::Token { path, problem },
            HttpError::Tls { problem } => {
                KubeError::Tls { url: url.to_string(), ca: self.cfg.ca_file.clone(), problem }
            }
            HttpError::Connect { problem } => unreachable(problem),
            HttpError::Timeout { after } => unreachable(format!("no answer within {after:?}")),
            HttpError::Transfer { problem } => unreachable(format!("reading the answer: {problem}")),
            other => setup_error(other),
        }
    }
}

/// A client that cannot be built: the CA file's problems name the file.
fn setup_error(e: HttpError) -> KubeError {
    match e {
        HttpError::Ca { path, problem } => KubeError::Ca { path, problem },
        HttpError::Token { path, problem } => KubeError::Token { path, problem },
        other => KubeError::Client { problem: other.to_string() },
    }
}

/// An open watch on one Node.
pub struct NodeWatch {
    lines: BodyLines,
    node: String,
    idle: Duration,
}

impl NodeWatch {
    /// The next event; `Ok(None)` when the server ended the stream cleanly.
    pub async fn next(&mut self) -> Result<Option<WatchEvent>, KubeError> {
        let line = match self.lines.next_line(self.idle).await {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(None),
            Err(HttpError::Timeout { .. }) => return Err(self.broke(format!("no data for {:?}", self.idle))),
            Err(HttpError::EndedMidLine) => return Err(self.broke("the stream ended in the middle of an event".into())),
            Err(HttpError::LineTooLong { .. }) => return Err(self.broke(WireError::TooLong.to_string())),
            Err(HttpError::Transfer { problem } | HttpError::Connect { problem }) => {
                return Err(self.broke(format!("connection lost: {problem}")))
            }
            Err(e) => return Err(self.broke(e.to_string())),
        };
        parse_watch_event(&line).map(Some).map_err(|e| self.broke(e.to_string()))
    }

    fn broke(&self, problem: String) -> KubeError {
        KubeError::Watch { node: self.node.clone(), problem }
    }
}

/// Resource versions are opaque strings; escape anything but unreserved characters.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::{KubeConfig, KubeOverrides};

    /// A client for an http:// server that is never contacted, with its token in a file.
    fn client(name: &str, token: &str) -> (KubeClient, PathBuf) {
        let dir = std::env::temp_dir().join(format!("rv-kube-client-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), token).unwrap();
        let overrides = KubeOverrides {
            api_server: Some("http://127.0.0.1:1".into()),
            token_file: Some(dir.join("token")),
            allow_insecure_http: true,
            ..Default::default()
        };
        let cfg = KubeConfig::resolve(&overrides, |_| None).unwrap();
        (KubeClient::new(cfg).unwrap(), dir)
    }

    #[test]
    fn errors_never_show_the_token() {
        let (c, dir) = client("t6", "secret-token-value\n");
        let e = KubeError::Unauthorized { url: "https://h".into(), token_file: dir.join("token") };
        assert!(!e.to_string().contains("secret-token-value"));
        assert!(!format!("{e:?}").contains("secret-token-value"));
        assert!(!format!("{c:?}").contains("secret-token-value"));
        let echo = br#"{"kind":"Status","message":"bad header Authorization: Bearer secret-token-value"}"#;
        assert_eq!(c.refusal_message(echo), "bad header Authorization: Bearer ***");
        let raw = b"GET /api/v1/nodes/n1\r\nAuthorization: Bearer secret-token-value\r\n";
        let m = c.refusal_message(raw);
        assert!(!m.contains("secret") && m.contains("not a Kubernetes Status"), "{m}");
        assert_eq!(c.refusal_message(b""), "(no body)");
        let long = format!(r#"{{"kind":"Status","message":"{}"}}"#, "x".repeat(1000));
        assert_eq!(c.refusal_message(long.as_bytes()).len(), MAX_MESSAGE_CHARS);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_missing_ca_is_named_for_https_only() {
        let cfg = |url: &str, allow| {
            let o = KubeOverrides {
                api_server: Some(url.into()),
                ca_file: Some("/nonexistent/ca.crt".into()),
                allow_insecure_http: allow,
                ..Default::default()
            };
            KubeConfig::resolve(&o, |_| None).unwrap()
        };
        let e = KubeClient::new(cfg("https://127.0.0.1:6443", false)).unwrap_err();
        assert!(matches!(&e, KubeError::Ca { path, .. } if path == std::path::Path::new("/nonexistent/ca.crt")), "{e}");
        assert!(e.to_string().starts_with("Kubernetes CA file /nonexistent/ca.crt: No such file"), "{e}");
        assert!(KubeClient::new(cfg("http://127.0.0.1:8080", true)).is_ok());
    }

    #[tokio::test]
    async fn unreachable_and_token_problems_are_named() {
        let (c, dir) = client("t7", "tok");
        let e = c.get_node("n1").await.unwrap_err();
        assert!(matches!(&e, KubeError::Unreachable { url, .. } if url == "http://127.0.0.1:1/api/v1/nodes/n1"), "{e}");
        std::fs::write(dir.join("token"), "").unwrap();
        let e = c.get_node("n1").await.unwrap_err();
        assert_eq!(e, KubeError::Token { path: dir.join("token"), problem: "empty".into() });
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn resource_versions_are_escaped() {
        assert_eq!(query_escape("12345"), "12345");
        assert_eq!(query_escape("a&b=c d"), "a%26b%3Dc%20d");
    }

    #[test]
    fn messages_name_the_cause() {
        let f = KubeError::Forbidden { message: "nodes \"n1\" is forbidden: User \"x\" cannot get".into() };
        assert!(f.to_string().contains("403 Forbidden"));
        assert!(f.to_string().contains("get and watch on nodes"));
        let n = KubeError::NodeNotFound { node: "n9".into() };
        assert!(n.to_string().contains("\"n9\" not found") && n.to_string().contains("NODE_NAME"));
    }
}
