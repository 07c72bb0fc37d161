use super::*;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::test_support::{read_request, self_signed, tls_server};

fn plain() -> ClientOptions {
    ClientOptions {
        roots: Roots::System,
        proxy: ProxySettings::default(),
        connect_timeout: Duration::from_secs(5),
        bearer_token_file: None,
    }
}

/// A server that hands each request's text to `tx` and answers with `answer(n)`, the n-th
/// connection's bytes (then streams `tail` forever if set).
async fn server(
    answer: impl Fn(usize) -> Vec<u8> + Send + 'static,
    endless_tail: Option<Vec<u8>>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            n += 1;
            let head = read_request(&mut s).await;
            let _ = tx.send(head);
            let answer = answer(n);
            let tail = endless_tail.clone();
            tokio::spawn(async move {
                if s.write_all(&answer).await.is_err() {
                    return;
                }
                if let Some(tail) = tail {
                    while s.write_all(&tail).await.is_ok() {}
                }
            });
        }
    });
    addr
}

const CHUNKED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut v = format!("{:x}\r\n", data.len()).into_bytes();
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v
}

#[test]
fn credentials_are_redacted() {
    assert_eq!(redact_url("http://user:pass@host:8080/r?x=1"), "http://***@host:8080/r?x=1");
    assert_eq!(redact_url("https://tok@h"), "https://***@h");
    assert_eq!(redact_url("http://a@b@host/p@q"), "http://***@host/p@q");
    assert_eq!(redact_url("http://host/p@q"), "http://host/p@q");
    assert_eq!(redact_url("http://host?u=a@b"), "http://host?u=a@b");
    assert_eq!(redact_url("not a url"), "not a url");
}

#[test]
fn proxy_settings_from_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    };
    assert_eq!(ProxySettings::from_env(env(&[])), ProxySettings::default());
    let p = ProxySettings::from_env(env(&[
        ("https_proxy", "http://p1:3128"),
        ("HTTP_PROXY", "http://p2:3128"),
        ("http_proxy", "http://ignored:1"),
        ("no_proxy", ".svc,10.0.0.0/8"),
    ]));
    assert_eq!(p.https.as_deref(), Some("http://p1:3128"));
    assert_eq!(p.http.as_deref(), Some("http://p2:3128"));
    assert_eq!(p.no_proxy.as_deref(), Some(".svc,10.0.0.0/8"));
    let p = ProxySettings::from_env(env(&[("ALL_PROXY", "http://all:1"), ("HTTPS_PROXY", " ")]));
    assert_eq!((p.https.as_deref(), p.http.as_deref()), (Some("http://all:1"), Some("http://all:1")));
}

#[test]
fn bad_settings_are_named() {
    let opts = ClientOptions {
        proxy: ProxySettings { https: Some("http://u:secret@:3128".into()), ..Default::default() },
        ..plain()
    };
    let e = HttpClient::new(opts).unwrap_err();
    assert!(matches!(&e, HttpError::Proxy { scheme: "https", .. }), "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");
    let opts = ClientOptions { roots: Roots::CaFile("/nonexistent/ca.crt".into()), ..plain() };
    let e = HttpClient::new(opts).unwrap_err().to_string();
    assert!(e.starts_with("CA file /nonexistent/ca.crt: No such file"), "{e}");
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("ca.crt"), "hello\n").unwrap();
    let e = HttpClient::new(ClientOptions { roots: Roots::CaFile(d.path().join("ca.crt")), ..plain() }).unwrap_err();
    assert_eq!(e, HttpError::Ca { path: d.path().join("ca.crt"), problem: "no PEM certificate in it".into() });
}

#[test]
fn token_is_trimmed_and_checked() {
    let d = tempfile::tempdir().unwrap();
    let file = |name: &str, content: &[u8]| {
        let p = d.path().join(name);
        std::fs::write(&p, content).unwrap();
        p
    };
    assert_eq!(read_token(&file("t1", b"abc.def\n")).unwrap(), "abc.def");
    for (name, content, problem) in [
        ("t2", &b" \n"[..], "empty"),
        ("t3", &b"a b"[..], "contains spaces or control characters"),
        ("t4", &b"\xff"[..], "not UTF-8"),
    ] {
        let p = file(name, content);
        assert_eq!(read_token(&p), Err(HttpError::Token { path: p.clone(), problem: problem.into() }));
    }
    let e = read_token(Path::new("/nonexistent/token")).unwrap_err();
    assert!(e.to_string().starts_with("bearer token file /nonexistent/token: No such file"), "{e}");
    let big = file("t5", &vec![b'a'; MAX_TOKEN_BYTES as usize + 1]);
    assert!(read_token(&big).unwrap_err().to_string().contains("larger than"));
}

#[tokio::test]
async fn token_is_reread_before_each_request() {
    let d = tempfile::tempdir().unwrap();
    let token = d.path().join("token");
    std::fs::write(&token, "first\n").unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_vec();
    let addr = server(move |_| ok.clone(), None, tx).await;
    let client = HttpClient::new(ClientOptions { bearer_token_file: Some(token.clone()), ..plain() }).unwrap();
    let url = format!("http://{addr}/x");
    for expected in ["first", "second"] {
        let resp = client.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.collect(10).await.unwrap(), Collected { bytes: b"{}".to_vec(), truncated: false });
        let head = rx.recv().await.unwrap().to_ascii_lowercase();
        assert!(head.contains(&format!("authorization: bearer {expected}\r\n")), "{head}");
        std::fs::write(&token, "second").unwrap();
    }
    std::fs::write(&token, "").unwrap();
    let e = client.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap_err();
    assert_eq!(e, HttpError::Token { path: token, problem: "empty".into() });
}

#[tokio::test]
async fn an_endless_body_is_cut_at_the_limit() {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let addr = server(|_| CHUNKED_HEAD.to_vec(), Some(chunk(&[b'x'; 16 * 1024])), tx).await;
    let client = HttpClient::new(plain()).unwrap();
    let url = format!("http://{addr}/");
    let body = Body { content_type: "application/json", bytes: b"{}".to_vec() };
    let resp = client.send(Method::POST, &url, Some(body), Duration::from_secs(30)).await.unwrap();
    let got = resp.collect(64 * 1024).await.unwrap();
    assert!(got.truncated);
    assert_eq!(got.bytes.len(), 64 * 1024);
}

#[tokio::test]
async fn an_endless_line_is_refused_naming_the_limit() {
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut first = CHUNKED_HEAD.to_vec();
    first.extend(chunk(b"{\"ok\":1}\n"));
    let addr = server(move |_| first.clone(), Some(chunk(&[b'x'; 16 * 1024])), tx).await;
    let client = HttpClient::new(plain()).unwrap();
    let resp = client.send(Method::GET, &format!("http://{addr}/"), None, Duration::from_secs(5)).await.unwrap();
    let mut lines = resp.lines(1024 * 1024);
    let idle = Duration::from_secs(30);
    assert_eq!(lines.next_line(idle).await.unwrap(), Some(b"{\"ok\":1}".to_vec()));
    assert_eq!(lines.next_line(idle).await, Err(HttpError::LineTooLong { limit: 1024 * 1024 }));
}

#[tokio::test]
async fn a_body_cut_mid_line_and_a_silent_one_are_errors() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        for n in 1.. {
            let (mut s, _) = listener.accept().await.unwrap();
            read_request(&mut s).await;
            // The first answer ends cleanly mid-line (and the connection with it); the
            // second goes silent.
            let mut answer = if n == 1 {
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()
            } else {
                CHUNKED_HEAD.to_vec()
            };
            answer.extend(chunk(b"{\"partial"));
            if n == 1 {
                answer.extend_from_slice(b"0\r\n\r\n");
            }
            s.write_all(&answer).await.unwrap();
            held.push(s);
        }
    });
    let client = HttpClient::new(plain()).unwrap();
    let url = format!("http://{addr}/");
    let resp = client.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap();
    assert_eq!(resp.lines(100).next_line(Duration::from_secs(30)).await, Err(HttpError::EndedMidLine));
    let resp = client.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap();
    let idle = Duration::from_millis(100);
    assert_eq!(resp.lines(100).next_line(idle).await, Err(HttpError::Timeout { after: idle }));
}

#[tokio::test]
async fn refused_connections_are_connect_errors() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = HttpClient::new(plain()).unwrap();
    let url = format!("http://user:secret@127.0.0.1:{port}/");
    let e = client.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, HttpError::Connect { .. }), "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[tokio::test]
async fn https_trusts_only_the_given_ca() {
    let (pem, config) = self_signed();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let addr = tls_server(config, tx).await;
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("ca.crt"), &pem).unwrap();
    let url = format!("https://{addr}/x");
    let trusting = HttpClient::new(ClientOptions { roots: Roots::CaFile(d.path().join("ca.crt")), ..plain() }).unwrap();
    let resp = trusting.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap();
    assert_eq!((resp.status(), resp.collect(10).await.unwrap().bytes), (200, b"{}".to_vec()));
    // Another CA: refused, and the error says it is the certificate.
    let (other, _) = self_signed();
    std::fs::write(d.path().join("other.crt"), &other).unwrap();
    let wary = HttpClient::new(ClientOptions { roots: Roots::CaFile(d.path().join("other.crt")), ..plain() }).unwrap();
    let e = wary.send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(&e, HttpError::Tls { problem } if problem.contains("certificate")), "{e}");
}

/// A proxy that answers every request itself: what it received tells which URL was asked.
#[tokio::test]
async fn proxies_are_used_unless_no_proxy_says_otherwise() {
    let (ptx, mut prx) = tokio::sync::mpsc::unbounded_channel();
    let ok = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n".to_vec();
    let ok2 = ok.clone();
    let proxy = server(move |_| ok.clone(), None, ptx).await;
    let (dtx, mut drx) = tokio::sync::mpsc::unbounded_channel();
    let direct = server(move |_| ok2.clone(), None, dtx).await;
    let with = |no_proxy: Option<&str>| {
        let proxy = ProxySettings {
            http: Some(format!("http://{proxy}")),
            https: None,
            no_proxy: no_proxy.map(str::to_string),
        };
        HttpClient::new(ClientOptions { proxy, ..plain() }).unwrap()
    };
    let url = format!("http://{direct}/hook");
    let resp = with(None).send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap();
    assert_eq!(resp.status(), 204);
    let head = prx.recv().await.unwrap();
    assert!(head.starts_with(&format!("GET {url} HTTP/1.1")), "the proxy gets the absolute URL: {head}");
    let resp = with(Some("127.0.0.1")).send(Method::GET, &url, None, Duration::from_secs(5)).await.unwrap();
    assert_eq!(resp.status(), 204);
    assert!(drx.recv().await.unwrap().starts_with("GET /hook HTTP/1.1"));
    assert!(prx.try_recv().is_err(), "NO_PROXY: not through the proxy");
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<TcpStream>();
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let _ = held_tx.send(s);
    });
    let client = HttpClient::new(plain()).unwrap();
    let limit = Duration::from_millis(200);
    let e = client.send(Method::GET, &format!("http://{addr}/"), None, limit).await.unwrap_err();
    assert_eq!(e, HttpError::Timeout { after: limit });
    drop(held_rx);
}
