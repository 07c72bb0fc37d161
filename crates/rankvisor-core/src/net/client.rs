//! The one HTTP client of rankvisor (the Kubernetes API, the webhook): `reqwest` over rustls with
//! the ring provider, HTTP/1.1, no redirects, and nothing read without a bound.
//!
//! - Roots: only a given CA bundle (the in-cluster CA for the API server), or the system's bundle.
//! - A bearer token re-read from its file before every request (projected tokens rotate).
//! - Connect timeout for every connection, an overall deadline per request (headers and collected
//!   body), an idle timeout per line of a streamed body.
//! - Bodies are read with a bound: `collect` keeps at most N bytes, `lines` refuses a line longer
//!   than its limit; a hostile or broken server costs at most that much memory.
//! - Proxies only as given (`ProxySettings`, usually from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`
//!   read once by the caller): reqwest's own reading of the environment is turned off.

use crate::lines::{LineSplitter, Overlong};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use reqwest::Method;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio::time::{timeout_at, Instant};

/// Largest token file read.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// The certificates a server's certificate must chain to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// Only the PEM certificates in this file, read once at construction.
    CaFile(PathBuf),
    /// The system's bundle, read once at construction (`SSL_CERT_FILE`, `SSL_CERT_DIR`, else
    /// `/etc/ssl/certs` and the usual places). An image `FROM scratch` has none.
    System,
}

/// Proxies, as `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` give them. The default is no proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxySettings {
    /// The proxy for `https://` URLs (tunneled with CONNECT).
    pub https: Option<String>,
    /// The proxy for `http://` URLs.
    pub http: Option<String>,
    /// Hosts reached directly: comma-separated names (a leading `.` or `*.` matches subdomains),
    /// IP addresses and CIDR blocks; `*` means every host.
    pub no_proxy: Option<String>,
}

impl ProxySettings {
    /// The settings curl and Go would read: `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, each also in
    /// lower case, `ALL_PROXY` as the fallback for both; empty values count as unset.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let var = |names: &[&str]| names.iter().find_map(|n| env(n).filter(|v| !v.trim().is_empty()));
        let all = var(&["ALL_PROXY", "all_proxy"]);
        Self {
            https: var(&["HTTPS_PROXY", "https_proxy"]).or_else(|| all.clone()),
            http: var(&["HTTP_PROXY", "http_proxy"]).or(all),
            no_proxy: var(&["NO_PROXY", "no_proxy"]),
        }
    }
}

/// How a client is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Whom to trust for https.
    pub roots: Roots,
    /// Proxies to use (none by default).
    pub proxy: ProxySettings,
    /// Longest wait for a TCP connection, and for a TLS handshake.
    pub connect_timeout: Duration,
    /// A file holding a bearer token, read before every request and sent as `Authorization`.
    pub bearer_token_file: Option<PathBuf>,
}

/// Why a request, or setting up the client, failed. Text only, so that it can be compared and
/// cloned; never holds the token, and URLs in it have their credentials redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The CA file is missing, unreadable or holds no PEM certificate.
    #[error("CA file {path}: {problem}: expected a PEM bundle")]
    Ca {
        /// The CA file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// A proxy setting is not a URL.
    #[error("proxy {value:?} for {scheme} URLs: {problem}: expected a URL such as http://proxy:3128")]
    Proxy {
        /// `http` or `https`.
        scheme: &'static str,
        /// The value, credentials redacted.
        value: String,
        /// What went wrong.
        problem: String,
    },
    /// The client could not be built.
    #[error("cannot set up the HTTP client: {problem}")]
    Setup {
        /// What went wrong.
        problem: String,
    },
    /// The token file is missing, unreadable, empty or not a token.
    #[error("bearer token file {path}: {problem}")]
    Token {
        /// The token file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// The URL cannot be requested.
    #[error("invalid URL {url:?}: {problem}")]
    Url {
        /// The URL, credentials redacted.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The TLS handshake failed: the certificate is not trusted, wrong name, expired...
    #[error("TLS handshake failed: {problem}")]
    Tls {
        /// rustls's reason.
        problem: String,
    },
    /// No connection (refused, no route, DNS, proxy refused).
    #[error("cannot connect: {problem}")]
    Connect {
        /// What went wrong.
        problem: String,
    },
    /// No answer (or no more of it) in time.
    #[error("no answer within {after:?}")]
    Timeout {
        /// The limit.
        after: Duration,
    },
    /// The connection broke while sending or receiving.
    #[error("connection lost: {problem}")]
    Transfer {
        /// What went wrong.
        problem: String,
    },
    /// A streamed line grew beyond its limit.
    #[error("a line longer than {limit} bytes: refused, the limit keeps memory bounded")]
    LineTooLong {
        /// The limit.
        limit: usize,
    },
    /// The body ended in the middle of a line.
    #[error("the body ended in the middle of a line")]
    EndedMidLine,
}

/// A request body and its media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// An HTTP/1.1 client; cheap to clone (connections are pooled and shared).
#[derive(Clone)]
pub struct HttpClient {
    inner: reqwest::Client,
    token_file: Option<PathBuf>,
    roots_loaded: usize,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("token_file", &self.token_file)
            .field("roots_loaded", &self.roots_loaded)
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// Build a client: reads the CA (or system) roots now.
    pub fn new(opts: ClientOptions) -> Result<Self, HttpError> {
        let (tls, roots_loaded) = tls_config(&opts.roots)?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(opts.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("rankvisor/", env!("CARGO_PKG_VERSION")));
        let no_proxy = opts.proxy.no_proxy.as_deref().and_then(reqwest::NoProxy::from_string);
        for (scheme, value) in [("https", &opts.proxy.https), ("http", &opts.proxy.http)] {
            let Some(value) = value else { continue };
            let bad = |problem: String| HttpError::Proxy { scheme, value: redact_url(value), problem };
            let parsed = reqwest::Url::parse(value.trim()).map_err(|e| bad(e.to_string()))?;
            if !matches!(parsed.scheme(), "http" | "https" | "socks5" | "socks5h") || parsed.host_str().is_none() {
                return Err(bad("not an http(s):// URL with a host".into()));
            }
            let proxy = if scheme == "https" { reqwest::Proxy::https(parsed) } else { reqwest::Proxy::http(parsed) };
            let proxy = proxy.map_err(|e| bad(chain(&e.without_url())))?;
            builder = builder.proxy(proxy.no_proxy(no_proxy.clone()));
        }
        let inner = builder.build().map_err(|e| HttpError::Setup { problem: chain(&e.without_url()) })?;
        Ok(Self { inner, token_file: opts.bearer_token_file, roots_loaded })
    }

    /// How many trusted root certificates were loaded (0: https cannot succeed).
    pub fn roots_loaded(&self) -> usize {
        self.roots_loaded
    }

    /// Send a request with a freshly read token (if any); `timeout` bounds the wait for the
    /// response's headers and, later, `Response::collect`.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
        timeout: Duration,
    ) -> Result<Response, HttpError> {
        let deadline = Instant::now() + timeout;
        let parsed =
            reqwest::Url::parse(url).map_err(|e| HttpError::Url { url: redact_url(url), problem: e.to_string() })?;
        let mut req = self.inner.request(method, parsed).header(reqwest::header::ACCEPT, "application/json");
        if let Some(path) = &self.token_file {
            // bearer_auth marks the header sensitive: it never shows in a Debug.
            req = req.bearer_auth(read_token(path)?);
        }
        if let Some(b) = body {
            req = req.header(reqwest::header::CONTENT_TYPE, b.content_type).body(b.bytes);
        }
        match timeout_at(deadline, req.send()).await {
            Err(_) => Err(HttpError::Timeout { after: timeout }),
            Ok(Err(e)) => Err(classify(e)),
            Ok(Ok(resp)) => Ok(Response { inner: resp, deadline, timeout }),
        }
    }
}

/// An answer whose body has not been read yet.
#[derive(Debug)]
pub struct Response {
    inner: reqwest::Response,
    deadline: Instant,
    timeout: Duration,
}

/// A body read with a bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// At most the limit's worth of bytes.
    pub bytes: Vec<u8>,
    /// The body was longer: the rest was not read (and the connection is dropped).
    pub truncated: bool,
}

impl Response {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.inner.status().as_u16()
    }

    /// Read the body up to `limit` bytes, before the request's deadline. A longer body is cut
    /// (`truncated`), never buffered whole.
    pub async fn collect(mut self, limit: usize) -> Result<Collected, HttpError> {
        let mut bytes = Vec::new();
        loop {
            let chunk = match timeout_at(self.deadline, self.inner.chunk()).await {
                Err(_) => return Err(HttpError::Timeout { after: self.timeout }),
                Ok(Err(e)) => return Err(classify(e)),
                Ok(Ok(None)) => return Ok(Collected { bytes, truncated: false }),
                Ok(Ok(Some(c))) => c,
            };
            let room = limit.saturating_sub(bytes.len());
            if chunk.len() > room {
                bytes.extend_from_slice(chunk.get(..room).unwrap_or_default());
                return Ok(Collected { bytes, truncated: true });
            }
            bytes.extend_from_slice(&chunk);
        }
    }

    /// Read the body as a stream of lines of at most `max_line` bytes (no deadline: a stream
    /// may last; each `next_line` has its own idle limit).
    pub fn lines(self, max_line: usize) -> BodyLines {
        BodyLines { inner: self.inner, splitter: LineSplitter::new(max_line, Overlong::Refuse), ready: VecDeque::new() }
    }
}

/// A body read line by line (newline-delimited JSON, e.g. a Kubernetes watch).
#[derive(Debug)]
pub struct BodyLines {
    inner: reqwest::Response,
    splitter: LineSplitter,
    ready: VecDeque<Vec<u8>>,
}

impl BodyLines {
    /// The next non-blank line, without its newline; `Ok(None)` when the body ended cleanly.
    /// Silence for `idle` is a `Timeout`.
    pub async fn next_line(&mut self, idle: Duration) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            if let Some(line) = self.ready.pop_front() {
                return Ok(Some(line));
            }
            match tokio::time::timeout(idle, self.inner.chunk()).await {
                Err(_) => return Err(HttpError::Timeout { after: idle }),
                Ok(Err(e)) => return Err(classify(e)),
                Ok(Ok(None)) if !is_blank(self.splitter.pending()) => return Err(HttpError::EndedMidLine),
                Ok(Ok(None)) => return Ok(None),
                Ok(Ok(Some(chunk))) => {
                    let lines = self.splitter.push(&chunk).map_err(|e| HttpError::LineTooLong { limit: e.limit })?;
                    self.ready.extend(lines.into_iter().filter(|l| !is_blank(l)));
                }
            }
        }
    }
}

/// Only white space (a keep-alive newline between JSON lines).
fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// `scheme://***@host/...` for a URL with credentials; other text unchanged. For logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://***@{}{tail}", authority.get(at + 1..).unwrap_or_default()),
        None => url.to_string(),
    }
}

/// The TLS settings: ring, TLS 1.2 and 1.3, HTTP/1.1 by ALPN, only the given roots.
fn tls_config(roots: &Roots) -> Result<(rustls::ClientConfig, usize), HttpError> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Roots::CaFile(path) => {
            for cert in read_ca(path)? {
                store.add(cert).map_err(|e| HttpError::Ca { path: path.clone(), problem: e.to_string() })?;
            }
        }
        Roots::System => {
            // Unreadable entries are skipped; with none at all, every handshake names the cause.
            let found = rustls_native_certs::load_native_certs();
            let (_added, _ignored) = store.add_parsable_certificates(found.certs);
        }
    }
    let loaded = store.len();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::Setup { problem: e.to_string() })?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, loaded))
}

/// The CA certificates of a PEM bundle.
fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let err = |problem: String| HttpError::Ca { path: path.to_path_buf(), problem };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The token, trimmed; read fresh each time because the kubelet rotates projected tokens.
pub fn read_token(path: &Path) -> Result<String, HttpError> {
    use std::io::Read;
    let err = |problem: String| HttpError::Token { path: path.to_path_buf(), problem };
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

/// Which kind of failure a reqwest error is; its text without the URL (which may carry
/// credentials: callers name the URL themselves, redacted).
fn classify(e: reqwest::Error) -> HttpError {
    if let Some(problem) = rustls_cause(&e) {
        return HttpError::Tls { problem };
    }
    let (connect, timeout) = (e.is_connect(), e.is_timeout());
    let problem = chain(&e.without_url());
    match (connect, timeout) {
        (true, _) => HttpError::Connect { problem },
        (false, true) => HttpError::Transfer { problem: format!("timed out: {problem}") },
        _ => HttpError::Transfer { problem },
    }
}

/// rustls's own error somewhere in the chain. An io::Error's `source` skips the error it wraps
/// (and the TLS stack nests io::Errors), so those are opened with `get_ref`.
fn rustls_cause(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return Some(r.to_string());
        }
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// Every message in the error's source chain, without repeats: reqwest's own says little.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        let msg = err.to_string();
        if !parts.iter().any(|p| p.contains(&msg)) {
            parts.push(msg);
        }
        cur = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests;
