//! HTTPS to the API server: only the configured CA is trusted, the bearer token is read from its
//! file before every request (projected tokens rotate) and never logged.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{rustls, TlsConnector};

use super::config::KubeConfig;
use super::wire::{parse_status, parse_watch_event, LineBuffer, Node, WatchEvent, MAX_LINE_BYTES};

/// Longest wait for a TCP (and TLS) connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a GET's whole answer, or for a watch's response headers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest token file read.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

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

/// A client for one API server; cheap to clone. One connection per request: the watcher makes
/// a GET and a long watch every few minutes, so pooling would buy nothing.
#[derive(Clone)]
pub struct KubeClient {
    cfg: KubeConfig,
    endpoint: Endpoint,
    tls: Option<TlsConnector>,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient").field("cfg", &self.cfg).finish_non_exhaustive()
    }
}

/// Where to connect, from the normalized `scheme://host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    https: bool,
    /// Host without IPv6 brackets (for DNS and the TLS server name).
    host: String,
    port: u16,
    /// `host[:port]` as written, for the Host header.
    authority: String,
}

fn parse_endpoint(url: &str) -> Result<Endpoint, KubeError> {
    let bad = |problem: &str| KubeError::Client { problem: format!("API server URL {url:?}: {problem}") };
    let (https, authority) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(a), _) => (true, a),
        (None, Some(a)) => (false, a),
        (None, None) => return Err(bad("expected https:// or http://")),
    };
    let default_port = if https { 443 } else { 80 };
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '[' in the host"))?;
        match after.strip_prefix(':') {
            Some(p) => (host, p.parse().map_err(|_| bad("port is not a number"))?),
            None if after.is_empty() => (host, default_port),
            None => return Err(bad("unexpected text after ']'")),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad("port is not a number"))?),
            None => (authority, default_port),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    Ok(Endpoint { https, host: host.to_string(), port, authority: authority.to_string() })
}

impl KubeClient {
    /// A client that trusts only the certificates in `cfg.ca_file` (read now).
    pub fn new(cfg: KubeConfig) -> Result<Self, KubeError> {
        let endpoint = parse_endpoint(&cfg.api_server)?;
        let tls = if endpoint.https {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_ca(&cfg.ca_file)? {
                roots.add(cert).map_err(|e| KubeError::Ca { path: cfg.ca_file.clone(), problem: e.to_string() })?;
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| KubeError::Client { problem: e.to_string() })?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Some(TlsConnector::from(Arc::new(config)))
        } else {
            tracing::warn!(url = %cfg.api_server, "plain HTTP to the Kubernetes API: the token is sent unencrypted");
            None
        };
        Ok(Self { cfg, endpoint, tls })
    }

    /// The configuration in use.
    pub fn config(&self) -> &KubeConfig {
        &self.cfg
    }

    /// GET `pods/NAME/status` (the whole Pod, as the status subresource returns it).
    pub async fn get_pod_status(&self, namespace: &str, pod: &str) -> Result<serde_json::Value, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/status");
        let what = format!("pod \"{namespace}/{pod}\"");
        self.report_request(Method::GET, &path, None, &format!("get pods/status of {what}"), &what).await
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
        self.report_request(Method::PATCH, &path, Some(patch), &format!("patch pods/status of {what}"), &what).await
    }

    /// POST a core/v1 Event into `namespace`.
    pub async fn create_event(
        &self,
        namespace: &str,
        event: &serde_json::Value,
    ) -> Result<serde_json::Value, KubeError> {
        let path = format!("/api/v1/namespaces/{namespace}/events");
        let action = format!("create events in namespace \"{namespace}\"");
        self.report_request(Method::POST, &path, Some(event), &action, &format!("namespace \"{namespace}\"")).await
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
        self.report_request(Method::PATCH, &path, Some(patch), &format!("patch {what}"), &what).await
    }

    /// One reporting request: a JSON body (POST as JSON, PATCH as a strategic merge patch), the
    /// answer decoded as JSON; 403 and 404 name the action and the object.
    async fn report_request(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        action: &str,
        what: &str,
    ) -> Result<serde_json::Value, KubeError> {
        let url = format!("{}{path}", self.cfg.api_server);
        let content_type =
            if method == Method::PATCH { "application/strategic-merge-patch+json" } else { "application/json" };
        let bytes = match body {
            Some(v) => Bytes::from(serde_json::to_vec(v).map_err(|e| KubeError::Client { problem: e.to_string() })?),
            None => Bytes::new(),
        };
        let (code, answer) = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let token = read_token(&self.cfg.token_file)?;
            let mut sender = self.connect(&url).await?;
            let req = Request::builder()
                .method(method)
                .uri(path)
                .header(header::HOST, self.endpoint.authority.as_str())
                .header(header::AUTHORIZATION, self.auth_header(&token)?)
                .header(header::ACCEPT, "application/json")
                .header(header::CONTENT_TYPE, content_type)
                .header(header::USER_AGENT, concat!("rankvisor/", env!("CARGO_PKG_VERSION")))
                .body(Full::new(bytes))
                .map_err(|e| KubeError::Client { problem: e.to_string() })?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| KubeError::Unreachable { url: url.clone(), problem: chain(&e) })?;
            let code = resp.status().as_u16();
            let body = http_body_util::Limited::new(resp.into_body(), MAX_LINE_BYTES).collect().await.map_err(|e| {
                KubeError::Unreachable { url: url.clone(), problem: format!("reading the answer: {}", chain(&*e)) }
            })?;
            Ok::<_, KubeError>((code, body.to_bytes()))
        })
        .await
        .map_err(|_| KubeError::Unreachable {
            url: url.clone(),
            problem: format!("no answer within {REQUEST_TIMEOUT:?}"),
        })??;
        if (200..300).contains(&code) {
            return serde_json::from_slice(&answer)
                .map_err(|e| KubeError::Decode { url, problem: format!("not JSON: {e}") });
        }
        let message = match parse_status(&answer) {
            Some(s) if !s.message.is_empty() => s.message,
            _ => String::from_utf8_lossy(answer.get(..answer.len().min(300)).unwrap_or_default()).trim().to_string(),
        };
        Err(match code {
            401 => KubeError::Unauthorized { url, token_file: self.cfg.token_file.clone() },
            403 => KubeError::ReportForbidden { action: action.to_string(), message },
            404 => KubeError::NotFound { what: what.to_string() },
            _ => KubeError::Http { url, code, message },
        })
    }

    fn auth_header(&self, token: &str) -> Result<HeaderValue, KubeError> {
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| KubeError::Token {
            path: self.cfg.token_file.clone(),
            problem: "not a valid HTTP header value".into(),
        })?;
        auth.set_sensitive(true);
        Ok(auth)
    }

    /// GET the Node.
    pub async fn get_node(&self, node: &str) -> Result<Node, KubeError> {
        let path = format!("/api/v1/nodes/{node}");
        let url = format!("{}{path}", self.cfg.api_server);
        let unreachable =
            || KubeError::Unreachable { url: url.clone(), problem: format!("no answer within {REQUEST_TIMEOUT:?}") };
        let body = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let resp = self.send(&path, node).await?;
            let limited = http_body_util::Limited::new(resp.into_body(), MAX_LINE_BYTES);
            match limited.collect().await {
                Ok(b) => Ok(b.to_bytes()),
                Err(e) => Err(KubeError::Unreachable {
                    url: url.clone(),
                    problem: format!("reading the answer: {}", chain(&*e)),
                }),
            }
        })
        .await
        .map_err(|_| unreachable())??;
        serde_json::from_slice(&body).map_err(|e| KubeError::Decode { url, problem: format!("not a Node: {e}") })
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
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, self.send(&path, node)).await.map_err(|_| {
            KubeError::Unreachable {
                url: format!("{}{path}", self.cfg.api_server),
                problem: format!("no answer within {REQUEST_TIMEOUT:?}"),
            }
        })??;
        Ok(NodeWatch {
            body: resp.into_body(),
            node: node.to_string(),
            lines: LineBuffer::default(),
            queue: VecDeque::new(),
            idle,
        })
    }

    /// Connect, send a GET with a freshly read token; non-2xx answers become errors naming the cause.
    async fn send(&self, path: &str, node: &str) -> Result<Response<Incoming>, KubeError> {
        let url = format!("{}{path}", self.cfg.api_server);
        let token = read_token(&self.cfg.token_file)?;
        let mut sender = self.connect(&url).await?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| KubeError::Token {
            path: self.cfg.token_file.clone(),
            problem: "not a valid HTTP header value".into(),
        })?;
        auth.set_sensitive(true);
        let req = Request::get(path)
            .header(header::HOST, self.endpoint.authority.as_str())
            .header(header::AUTHORIZATION, auth)
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, concat!("rankvisor/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(Bytes::new()))
            .map_err(|e| KubeError::Client { problem: e.to_string() })?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| KubeError::Unreachable { url: url.clone(), problem: chain(&e) })?;
        let code = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(resp);
        }
        let body = match tokio::time::timeout(
            REQUEST_TIMEOUT,
            http_body_util::Limited::new(resp.into_body(), 64 * 1024).collect(),
        )
        .await
        {
            Ok(Ok(b)) => b.to_bytes(),
            _ => Bytes::new(),
        };
        let status = parse_status(&body);
        let message = match &status {
            Some(s) if !s.message.is_empty() => s.message.clone(),
            _ => String::from_utf8_lossy(body.get(..body.len().min(300)).unwrap_or_default()).trim().to_string(),
        };
        Err(match code {
            401 => KubeError::Unauthorized { url, token_file: self.cfg.token_file.clone() },
            403 => KubeError::Forbidden { message },
            404 => KubeError::NodeNotFound { node: node.to_string() },
            _ => KubeError::Http { url, code, message },
        })
    }

    /// A fresh HTTP/1.1 connection (TLS when https); its driver task ends with the connection.
    async fn connect(&self, url: &str) -> Result<SendRequest<Full<Bytes>>, KubeError> {
        let unreachable = |problem: String| KubeError::Unreachable { url: url.to_string(), problem };
        let ep = &self.endpoint;
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((ep.host.as_str(), ep.port)))
            .await
            .map_err(|_| unreachable(format!("tcp connect timed out after {CONNECT_TIMEOUT:?}")))?
            .map_err(|e| unreachable(format!("tcp connect error: {e}")))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => handshake(tcp, url).await,
            Some(tls) => {
                let name = ServerName::try_from(ep.host.clone())
                    .map_err(|e| KubeError::Client { problem: format!("TLS server name {:?}: {e}", ep.host) })?;
                let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(name, tcp))
                    .await
                    .map_err(|_| unreachable(format!("TLS handshake timed out after {CONNECT_TIMEOUT:?}")))?
                    .map_err(|e| {
                        let is_tls = e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>());
                        if is_tls {
                            KubeError::Tls { url: url.to_string(), ca: self.cfg.ca_file.clone(), problem: chain(&e) }
                        } else {
                            unreachable(format!("TLS handshake: {}", chain(&e)))
                        }
                    })?;
                handshake(stream, url).await
            }
        }
    }
}

async fn handshake<S>(io: S, url: &str) -> Result<SendRequest<Full<Bytes>>, KubeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| KubeError::Unreachable { url: url.to_string(), problem: chain(&e) })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// An open watch on one Node.
pub struct NodeWatch {
    body: Incoming,
    node: String,
    lines: LineBuffer,
    queue: VecDeque<Vec<u8>>,
    idle: Duration,
}

impl NodeWatch {
    /// The next event; `Ok(None)` when the server ended the stream cleanly.
    pub async fn next(&mut self) -> Result<Option<WatchEvent>, KubeError> {
        loop {
            if let Some(line) = self.queue.pop_front() {
                return parse_watch_event(&line)
                    .map(Some)
                    .map_err(|e| KubeError::Watch { node: self.node.clone(), problem: e.to_string() });
            }
            let frame = match tokio::time::timeout(self.idle, self.body.frame()).await {
                Err(_) => return Err(self.broke(format!("no data for {:?}", self.idle))),
                Ok(Some(Err(e))) => return Err(self.broke(format!("connection lost: {}", chain(&e)))),
                Ok(None) if self.lines.has_partial() => {
                    return Err(self.broke("the stream ended in the middle of an event".into()))
                }
                Ok(None) => return Ok(None),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                let lines = self.lines.push(&data).map_err(|e| self.broke(e.to_string()))?;
                self.queue.extend(lines);
            }
        }
    }

    fn broke(&self, problem: String) -> KubeError {
        KubeError::Watch { node: self.node.clone(), problem }
    }
}

/// Every message in the error's source chain, without repeats: reqwest's own says little.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        let msg = err.to_string();
        if !parts.iter().any(|p| p.contains(&msg)) {
            parts.push(msg);
        }
        cur = err.source();
    }
    if parts.is_empty() {
        return e.to_string();
    }
    parts.join(": ")
}

/// The token, trimmed; read fresh each time because the kubelet rotates projected tokens.
fn read_token(path: &Path) -> Result<String, KubeError> {
    use std::io::Read;
    let err = |problem: String| KubeError::Token { path: path.to_path_buf(), problem };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_BYTES + 1).read_to_end(&mut bytes).map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 > MAX_TOKEN_BYTES {
        return Err(err(format!("larger than {MAX_TOKEN_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| err("not UTF-8".into()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(err("empty".into()));
    }
    if token.chars().any(|c| c.is_control() || c == ' ') {
        return Err(err("contains spaces or control characters".into()));
    }
    Ok(token.to_string())
}

/// The CA certificates, parsed once at start.
fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, KubeError> {
    let err = |problem: String| KubeError::Ca { path: path.to_path_buf(), problem };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in it".into()));
    }
    Ok(certs)
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

    /// A file under a per-test directory, removed with the guard.
    struct Tmp(PathBuf);

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    fn temp(name: &str, content: &[u8]) -> Tmp {
        let dir = std::env::temp_dir().join(format!("rv-kube-client-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        Tmp(p)
    }

    #[test]
    fn token_is_trimmed_and_checked() {
        assert_eq!(read_token(&temp("t1", b"abc.def\n").0).unwrap(), "abc.def");
        for (name, content, problem) in [
            ("t2", &b" \n"[..], "empty"),
            ("t3", &b"a b"[..], "contains spaces or control characters"),
            ("t4", &b"\xff"[..], "not UTF-8"),
        ] {
            let t = temp(name, content);
            assert_eq!(read_token(&t.0), Err(KubeError::Token { path: t.0.clone(), problem: problem.into() }));
        }
        let missing = PathBuf::from("/nonexistent/token");
        let e = read_token(&missing).unwrap_err();
        assert!(e.to_string().starts_with("service-account token file /nonexistent/token: No such file"), "{e}");
        let big = temp("t5", &vec![b'a'; MAX_TOKEN_BYTES as usize + 1]);
        assert!(read_token(&big.0).unwrap_err().to_string().contains("larger than"));
    }

    #[test]
    fn errors_never_show_the_token() {
        let t = temp("t6", b"secret-token-value");
        let e = KubeError::Unauthorized { url: "https://h".into(), token_file: t.0.clone() };
        assert!(!e.to_string().contains("secret-token-value"));
        assert!(!format!("{e:?}").contains("secret-token-value"));
    }

    #[test]
    fn ca_file_problems_are_named() {
        let e = read_ca(Path::new("/nonexistent/ca.crt")).unwrap_err();
        assert!(e.to_string().starts_with("Kubernetes CA file /nonexistent/ca.crt: No such file"), "{e}");
        let t = temp("ca-empty", b"hello\n");
        let e = read_ca(&t.0).unwrap_err();
        assert_eq!(e, KubeError::Ca { path: t.0.clone(), problem: "no PEM certificate in it".into() });
    }

    #[test]
    fn endpoints_parse() {
        let ep = |u: &str| parse_endpoint(u).map(|e| (e.https, e.host, e.port, e.authority));
        assert_eq!(ep("https://10.96.0.1"), Ok((true, "10.96.0.1".into(), 443, "10.96.0.1".into())));
        assert_eq!(ep("https://h:6443"), Ok((true, "h".into(), 6443, "h:6443".into())));
        assert_eq!(ep("http://127.0.0.1:8080"), Ok((false, "127.0.0.1".into(), 8080, "127.0.0.1:8080".into())));
        assert_eq!(ep("https://[fd00::1]:6443"), Ok((true, "fd00::1".into(), 6443, "[fd00::1]:6443".into())));
        assert_eq!(ep("https://[fd00::1]"), Ok((true, "fd00::1".into(), 443, "[fd00::1]".into())));
        for bad in ["ftp://h", "https://h:x", "https://[fd00::1", "https://[::1]x", "https://:443"] {
            assert!(matches!(parse_endpoint(bad), Err(KubeError::Client { .. })), "{bad}");
        }
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
