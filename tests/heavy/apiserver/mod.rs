//! A real etcd + kube-apiserver for the tests, from `scripts/k8s/` (the binary is built and cached
//! by `scripts/k8s/build-apiserver.sh`; `scripts/test.sh` exports its path). Each instance has its
//! own directory and ports and is stopped on drop; on a panic its directory (with logs/) is kept.
//! Declared once in `tests/heavy/main.rs`, for the test modules that need it; each uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

use crate::common::consecutive_ports;

/// Three loopback ports (API, etcd client, etcd peer) no other test process is handed: see
/// tests/common/ports.rs (bind(0)-then-drop would race with parallel tests).
pub fn free_ports() -> [u16; 3] {
    let first = consecutive_ports(3);
    [first, first + 1, first + 2]
}

/// etcd + kube-apiserver on loopback.
pub struct ApiServer {
    /// Its directory: `env`, `pki/`, `logs/`.
    pub dir: PathBuf,
    bin: String,
    ports: [u16; 3],
    env: HashMap<String, String>,
}

impl ApiServer {
    /// Start one, named `name` in its directory; fails loudly when the binary is missing.
    pub fn start(name: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let bin = std::env::var("RANKVISOR_TEST_KUBE_APISERVER").unwrap_or_default();
        assert!(
            !bin.is_empty() && Path::new(&bin).is_file(),
            "RANKVISOR_TEST_KUBE_APISERVER={bin:?} is not a kube-apiserver binary: run the tests with \
             `bash scripts/test.sh`, or build it with `bash scripts/k8s/build-apiserver.sh` and export its path"
        );
        let dir = std::env::temp_dir().join(format!(
            "rv-apiserver-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Self { dir, bin, ports: free_ports(), env: HashMap::new() };
        s.run_start();
        let text = std::fs::read_to_string(s.dir.join("env")).unwrap();
        s.env = text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect();
        s
    }

    /// (Re)start it with `scripts/k8s/start-apiserver.sh`: after `stop(true)` only the API server
    /// restarts, keeping etcd's data and re-reading the token file.
    pub fn run_start(&self) {
        let t = Instant::now();
        let out = Command::new("bash")
            .arg(format!("{ROOT}/scripts/k8s/start-apiserver.sh"))
            .arg(&self.bin)
            .arg(&self.dir)
            .env("API_PORT", self.ports[0].to_string())
            .env("ETCD_PORT", self.ports[1].to_string())
            .env("ETCD_PEER_PORT", self.ports[2].to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "start-apiserver.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        eprintln!("kube-apiserver ready in {:?}", t.elapsed());
    }

    fn stop_command(&self, apiserver_only: bool) -> Command {
        let mut c = Command::new("bash");
        c.arg(format!("{ROOT}/scripts/k8s/stop-apiserver.sh")).arg(&self.dir);
        if apiserver_only {
            c.arg("--apiserver-only");
        }
        c
    }

    /// Stop the API server (and etcd unless `apiserver_only`).
    pub fn stop(&self, apiserver_only: bool) {
        assert!(self.stop_command(apiserver_only).status().unwrap().success());
    }

    /// A value of its env file (KUBE_URL, KUBE_CA, KUBE_ADMIN_TOKEN, the test tokens).
    pub fn get(&self, key: &str) -> &str {
        self.env.get(key).map(String::as_str).unwrap_or_else(|| panic!("{key} missing from the env file"))
    }

    /// A file in `dir` holding the token named `key` in the env file, for `--kube-token-file`.
    pub fn token_file(&self, dir: &Path, key: &str) -> PathBuf {
        let p = dir.join(format!("token-{key}"));
        std::fs::write(&p, format!("{}\n", self.get(key))).unwrap();
        p
    }

    /// `method` `path` as the admin (curl), with an optional body of `content_type`; returns the
    /// HTTP status and the answer's text.
    pub fn request(&self, method: &str, path: &str, content_type: &str, body: Option<&str>) -> (u16, String) {
        let mut c = Command::new("curl");
        c.args(["-sS", "--cacert", self.get("KUBE_CA"), "-X", method, "-w", "\n%{http_code}"])
            .args(["-H", &format!("Authorization: Bearer {}", self.get("KUBE_ADMIN_TOKEN"))]);
        if body.is_some() {
            c.args(["-H", &format!("Content-Type: {content_type}"), "--data-binary", "@-"]);
        }
        let out = c
            .arg(format!("{}{path}", self.get("KUBE_URL")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                if let (Some(b), Some(mut stdin)) = (body, child.stdin.take()) {
                    stdin.write_all(b.as_bytes())?;
                }
                child.wait_with_output()
            })
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (answer, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), answer.to_string())
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.stop_command(false).status();
        if std::thread::panicking() {
            eprintln!("keeping {} (logs/) for inspection", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
