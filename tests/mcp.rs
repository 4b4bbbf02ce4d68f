//! MCP (docs/design.md section 8): the conversation comes from `_meta`, scopes stay isolated.
//!
//! Raw JSON-RPC tests pin the wire contract cheaply; the `python_sdk_*` tests drive a real MCP
//! client (the official Python `mcp` SDK, tests/mcp_client.py) against `scopemem mcp` over stdio
//! and against `/mcp` on the HTTP server. They need the venv from scripts/setup-mcp-client.sh
//! (`make test` runs it) and fail, rather than skip, without it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const UNMAPPED: &str = "default:GroupMessage:99999";

/// Newline-delimited JSON-RPC over an in-memory pipe to `serve_io`.
struct RawClient {
    writer: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>>,
    next_id: u64,
}

impl RawClient {
    async fn send(&mut self, msg: Value) {
        let mut line = msg.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    /// Send a request and return its response (result or error object), skipping notifications.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("response within 60 s")
                .unwrap()
                .expect("server closed the stream");
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    async fn call(&mut self, tool: &str, arguments: Value, meta: Option<Value>) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        let r = self.request("tools/call", params).await;
        assert!(r.get("error").is_none(), "protocol error: {r}");
        r["result"].clone()
    }
}

async fn raw_session(host: Arc<scopemem::host::PluginHost>) -> RawClient {
    let (client, server) = tokio::io::duplex(1 << 16);
    let (sr, sw) = tokio::io::split(server);
    tokio::spawn(scopemem::api::mcp::serve_io(host, sr, sw));
    let (cr, cw) = tokio::io::split(client);
    let mut c = RawClient {
        writer: cw,
        lines: BufReader::new(cr).lines(),
        next_id: 0,
    };
    let init = c
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw-test", "version": "0"}}),
        )
        .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "scopemem", "{init}");
    assert_eq!(
        init["result"]["serverInfo"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(init["result"]["instructions"]
        .as_str()
        .unwrap_or("")
        .contains("_meta"));
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    c
}

fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn mcp_remember_is_redacted_before_it_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(config(dir.path(), family_map())).await);
    let mut c = raw_session(host.clone()).await;
    let r = c
        .call(
            "core_memory_remember",
            json!({"content": "我的手机号13812345678，记住", "tags": ["bob@example.com"]}),
            Some(json!({"conversation_id": FAMILY})),
        )
        .await;
    assert!(!is_error(&r), "{r}");
    let memory = &r["structuredContent"]["memory"];
    assert_eq!(memory["content"], "我的手机号[REDACTED_PHONE]，记住", "{r}");
    assert_eq!(memory["tags"], json!(["[REDACTED_EMAIL]"]), "{r}");
    let stored = host
        .memory()
        .store()
        .get_by_ids(&[memory["id"].as_str().unwrap().to_string()], None)
        .await
        .unwrap();
    assert_eq!(stored[0].content, "我的手机号[REDACTED_PHONE]，记住");
}

/// An incognito conversation's remember over MCP is a normal result saying `"stored": false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_jsonrpc_incognito_remember_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), family_map());
    cfg.incognito = vec![UNMAPPED.to_string()];
    let host = Arc::new(host(cfg).await);
    let mut c = raw_session(host.clone()).await;
    let r = c
        .call(
            "core_memory_remember",
            json!({"content": "off the record"}),
            Some(json!({"conversation_id": UNMAPPED})),
        )
        .await;
    assert!(!is_error(&r), "{r}");
    assert_eq!(
        r["structuredContent"],
        json!({"memory": null, "stored": false, "deduplicated": false})
    );
    assert_eq!(rows(&host).await, 0);
    let r = c
        .call(
            "core_memory_remember",
            json!({"content": "on the record"}),
            Some(json!({"conversation_id": FAMILY})),
        )
        .await;
    assert_eq!(r["structuredContent"]["stored"], true, "{r}");
    assert_eq!(rows(&host).await, 1);
}

#[tokio::test]
async fn raw_jsonrpc_conversation_comes_only_from_meta() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(config(dir.path(), family_map())).await);
    let mut c = raw_session(host.clone()).await;

    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "core_memory_recall",
            "core_memory_remember",
            "core_memory_update"
        ]
    );
    for t in tools["result"]["tools"].as_array().unwrap() {
        let host_spec = host.tools().into_iter().find(|s| s.name == t["name"]);
        assert_eq!(t["inputSchema"], host_spec.unwrap().input_schema);
    }

    let r = c
        .call(
            "core_memory_remember",
            json!({"content": "Grandma likes orchids"}),
            Some(json!({"conversation_id": FAMILY})),
        )
        .await;
    assert!(!is_error(&r), "{r}");
    let written: Value = serde_json::from_str(&text(&r)).unwrap();
    assert_eq!(written["memory"]["memory_scope"], "家人");
    assert_eq!(r["structuredContent"], written);

    let r = c
        .call(
            "core_memory_remember",
            json!({"content": "standup at 9:30"}),
            Some(json!({"vscode.conversationId": UNMAPPED, "persona": "nobody-mapped"})),
        )
        .await;
    assert_eq!(r["structuredContent"]["memory"]["memory_scope"], "public");

    // Without a conversation id: a readable tool error, not a protocol error, and no row.
    for meta in [
        None,
        Some(json!({})),
        Some(json!({"conversationId": FAMILY})),
    ] {
        let r = c
            .call(
                "core_memory_remember",
                json!({"content": "orphan"}),
                meta.clone(),
            )
            .await;
        assert!(is_error(&r), "{meta:?}: {r}");
        assert!(text(&r).starts_with("missing_conversation_id: "), "{r}");
        assert_eq!(
            r["structuredContent"]["error"]["code"],
            "missing_conversation_id"
        );
    }
    let r = c
        .call(
            "core_memory_remember",
            json!({"content": "orphan"}),
            Some(json!({"conversation_id": " \t "})),
        )
        .await;
    assert!(text(&r).starts_with("invalid_conversation_id: "), "{r}");
    assert_eq!(rows(&host).await, 2);

    let r = c
        .call(
            "core_memory_recall",
            json!({"query": "what flowers", "limit": 10}),
            Some(json!({"conversation_id": UNMAPPED})),
        )
        .await;
    let contents: Vec<&str> = r["structuredContent"]["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["standup at 9:30"]);

    let unknown = c
        .request(
            "tools/call",
            json!({"name": "nope", "arguments": {}, "_meta": {"conversation_id": FAMILY}}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_http_initialize_and_call_on_mcp_endpoint() {
    let http = serve_http().await;
    let base = http.base.clone();
    let client = reqwest::Client::new();
    let post = |body: Value| {
        client
            .post(format!("{base}/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
    };
    let r = post(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw-http", "version": "0"}}}))
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], "scopemem", "{body}");

    let r = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "core_memory_remember", "arguments": {"content": "Grandma likes orchids"},
                   "_meta": {"conversation_id": FAMILY}}}))
    .await
    .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["result"]["structuredContent"]["memory"]["memory_scope"], "家人",
        "{body}"
    );
    let r = post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "core_memory_remember", "arguments": {"content": "orphan"}}}))
    .await
    .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(rows(&http.host).await, 1);

    stop_http(http.stop, http.server).await;
}

type Server = tokio::task::JoinHandle<std::io::Result<()>>;

struct Http {
    base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: Server,
    host: Arc<scopemem::host::PluginHost>,
    dir: tempfile::TempDir,
}

async fn serve_http() -> Http {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(config(dir.path(), family_map())).await);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(scopemem::api::http::serve(
        host.clone(),
        listener,
        async move {
            let _ = rx.await;
        },
    ));
    Http {
        base: format!("http://{addr}"),
        stop: tx,
        server,
        host,
        dir,
    }
}

/// Graceful shutdown must not hang on MCP clients (no lingering SSE streams).
async fn stop_http(stop: tokio::sync::oneshot::Sender<()>, server: Server) {
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("HTTP server stops within 60 s after MCP use")
        .unwrap()
        .unwrap();
}

/// The venv's python; a missing venv is a set-up error, never a silent skip.
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("SCOPEMEM_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/scopemem/venv")))
        .expect("SCOPEMEM_VENV or HOME must be set");
    let python = venv.join("bin/python");
    assert!(
        python.is_file(),
        "no MCP client venv at {} (SCOPEMEM_VENV): run `bash scripts/setup-mcp-client.sh` \
         (`make test` does) to install the Python mcp SDK the MCP tests use",
        venv.display()
    );
    python
}

/// Run tests/mcp_client.py to completion (killed after 5 min); output goes to files so a chatty
/// server cannot fill a pipe. Returns the script's final JSON line.
fn run_client(dir: &Path, args: &[&str]) -> Value {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out_path = dir.join("client.stdout");
    let err_path = dir.join("client.stderr");
    let mut child = Command::new(&python)
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let status = common::wait_or_kill(&mut child, Duration::from_secs(300));
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let ok = status.is_some_and(|s| s.success());
    assert!(
        ok,
        "mcp_client.py {args:?} failed ({status:?})\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or("");
    let summary: Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("bad summary line {last:?}: {e}\n{stderr}"));
    assert_eq!(summary["ok"], true, "{summary}");
    eprintln!("mcp_client.py {}: {summary}", args[0]);
    summary
}

#[test]
fn python_sdk_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("scopemem.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec_pretty(&json!({
            "conversation_scope_map": family_map(),
            "storage": {"db_dir": dir.path().join("lancedb").to_string_lossy()},
            "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        }))
        .unwrap(),
    )
    .unwrap();
    // SCOPEMEM_MCP_BENCH=N also times N recall round trips (reported, never asserted).
    let bench = std::env::var("SCOPEMEM_MCP_BENCH").unwrap_or_else(|_| "0".into());
    let summary = run_client(
        dir.path(),
        &[
            "stdio",
            "--server",
            crate::common::scopemem_bin(),
            "--config",
            &cfg.to_string_lossy(),
            "--bench",
            &bench,
        ],
    );
    // Every refused call (no / invalid conversation id, scope arguments) wrote nothing: the
    // store holds exactly the rows the successful calls reported. `scopemem mcp` ran the
    // default config, so the table holds the default model's (e5's) vectors.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let host = scopemem::host::PluginHost::start_with(
            config(dir.path(), family_map()),
            None,
            common::e5(),
        )
        .await
        .expect("host starts");
        assert_eq!(
            rows(&host).await as u64,
            summary["remembered"].as_u64().unwrap()
        );
        let (scope, hits) = recall(&host, UNMAPPED, "birthday dinner").await;
        assert_eq!(scope, "public");
        assert!(
            hits.iter().all(|(s, _)| s.as_deref() == Some("public")),
            "{hits:?}"
        );
        host.shutdown().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_streamable_http() {
    let http = serve_http().await;
    let path = http.dir.path().to_path_buf();
    let url = format!("{}/mcp", http.base);
    let summary = tokio::task::spawn_blocking(move || run_client(&path, &["http", "--url", &url]))
        .await
        .unwrap();
    assert_eq!(summary["remembered"], 3);
    assert_eq!(rows(&http.host).await, 3, "a refused call wrote a row");
    stop_http(http.stop, http.server).await;
}
