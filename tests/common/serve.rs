//! A real `scopemem serve` child process for tests that kill, restart or run several of them.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A running `serve`; killed (kill -9) and reaped on drop.
pub struct Serve {
    pub child: Child,
    pub base: String,
}

impl Serve {
    /// Kill -9 and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub use super::moto::free_port;

/// Start `serve` on `<dir>/db` with the family map and `extra` config merged over the
/// defaults, and wait until it answers `/healthz`. The service's log goes to `<dir>/<name>.log`,
/// so a start that fails says why.
///
/// It listens on port 0 and the test reads the port it bound from its `serving HTTP addr=…`
/// line: a port picked beforehand can be taken by another test's server between the pick and
/// the bind, and then that server answers this one's `/healthz` (CI saw a browser test get
/// `ERR_CONNECTION_REFUSED` that way once the other test ended).
pub async fn spawn_serve(dir: &Path, name: &str, extra: Value) -> Serve {
    let path = write_config(dir, name, &extra);
    let log_path = dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    // Owned by `Serve` at once, so even a failed start is killed and reaped.
    let mut command = Command::new(crate::common::scopemem_bin());
    command
        .args(["serve", "--config", path.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(log);
    // A caller's RUST_LOG replaces the config's level: keep the line the port is read from.
    if let Some(filter) = std::env::var("RUST_LOG")
        .ok()
        .filter(|f| !f.trim().is_empty())
    {
        command.env("RUST_LOG", format!("{filter},scopemem::api::http=info"));
    }
    let mut serve = Serve {
        child: command.spawn().unwrap(),
        base: String::new(),
    };
    let client = reqwest::Client::new();
    for _ in 0..1200 {
        if serve.base.is_empty() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(addr) = bound_addr(&log) {
                serve.base = format!("http://{addr}");
            }
        }
        if !serve.base.is_empty()
            && client
                .get(format!("{}/healthz", serve.base))
                .send()
                .await
                .is_ok()
        {
            return serve;
        }
        if serve.child.try_wait().ok().flatten().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let exited = serve.child.try_wait().ok().flatten().is_some();
    // The error and its causes, not the backtrace after them.
    let head = log.split("Stack backtrace:").next().unwrap_or_default();
    let tail: Vec<&str> = head.lines().rev().take(30).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    panic!(
        "{name} did not come up (exited: {exited}); its log ends:\n{}",
        tail.join("\n")
    );
}

/// The address in a `serve` log's `serving HTTP addr=…` line, colours or not.
pub fn bound_addr(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("serving HTTP"))?;
    let plain = strip_ansi(line);
    let addr = plain.split("addr=").nth(1)?.split_whitespace().next()?;
    Some(addr.to_string())
}

/// `text` without ANSI escape sequences (`ESC [ … letter`), as tracing colours a log.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `<dir>/<name>.json`: the defaults above with `extra` merged over them. The embedder is the
/// bundled MiniLM, the model these tests' in-process hosts (`common::embedder`) share the
/// table with; the default model (e5) has its own tests (tests/e5.rs, the plugins', the
/// wheel's), and `extra` may name another.
fn write_config(dir: &Path, name: &str, extra: &Value) -> std::path::PathBuf {
    let cfg = super::merged(
        json!({
            "embedding": {"provider": "local"},
            "storage": {"db_dir": dir.join("db"), "read_consistency_ms": 500},
            "server": {"http_addr": "127.0.0.1:0"},
            "conversation_scope_map": super::family_map(),
            "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        }),
        extra,
    );
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    path
}

/// POST JSON; returns the status and the JSON body (Null when it is not JSON).
pub async fn post(client: &reqwest::Client, s: &Serve, path: &str, body: Value) -> (u16, Value) {
    let r = client
        .post(format!("{}{path}", s.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `post`, tried again (up to 5 times, after the response's 1 s Retry-After) while the
/// answer is 503 `store_busy`: what a client does when another process's erase or compaction
/// pruned the version its request read, again and again on a loaded machine.
pub async fn post_retrying_busy(
    client: &reqwest::Client,
    s: &Serve,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let mut answer = post(client, s, path, body.clone()).await;
    for _ in 0..5 {
        if answer.0 != 503 || answer.1["error"]["code"] != "store_busy" {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        answer = post(client, s, path, body.clone()).await;
    }
    answer
}

/// `POST /v1/recall` (limit 100) as `conversation`; the memories it returned. A 503
/// `store_busy` (another process's erase or compaction pruned the version it read, past the
/// read's own retries) is tried again, as a client does.
pub async fn recalled(
    client: &reqwest::Client,
    s: &Serve,
    conversation: &str,
    query: &str,
) -> Vec<Value> {
    let (status, r) = post_retrying_busy(
        client,
        s,
        "/v1/recall",
        json!({"conversation_id": conversation, "query": query, "limit": 100}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    r["memories"].as_array().cloned().unwrap_or_default()
}

/// `GET /metrics`, as its text.
pub async fn metrics(client: &reqwest::Client, s: &Serve) -> String {
    let r = client.get(format!("{}/metrics", s.base)).send().await;
    r.unwrap().text().await.unwrap()
}

/// The value of the unlabelled metric `name` in `/metrics` text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `GET /v1/status`.
pub async fn status(client: &reqwest::Client, s: &Serve) -> Value {
    client
        .get(format!("{}/v1/status", s.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
