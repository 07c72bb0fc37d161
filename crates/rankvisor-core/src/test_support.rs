//! Test support shared by the unit tests of several modules: the peers they talk to over loopback
//! (an HTTP request reader, a self-signed TLS server). Temporary directories are `tempfile`'s.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Reads one request head (and its announced body), returns it as text.
pub(crate) async fn read_request(s: &mut (impl AsyncReadExt + Unpin)) -> String {
    read_request_or_eof(s).await.expect("the client closed before a whole request")
}

/// One request's text (head and announced body), or None when the client closes first.
pub(crate) async fn read_request_or_eof(s: &mut (impl AsyncReadExt + Unpin)) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await.unwrap();
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_string))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= len {
                return Some(text);
            }
        }
    }
}

/// A self-signed certificate for 127.0.0.1 and localhost: (certificate PEM, server config).
pub(crate) fn self_signed() -> (String, rustls::ServerConfig) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let der = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], der)
        .unwrap();
    (cert.pem(), config)
}

/// An https server answering every request 200 `{}`; each request's text goes to `tx`.
pub(crate) async fn tls_server(
    config: rustls::ServerConfig,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else { return };
                let _ = tx.send(read_request(&mut tls).await);
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}
