//! "Only the machine's user gets in" (docs/design.md 8b): the Host check, the bearer token and the
//! refusal to listen openly without a token, on the real router (real model, real LanceDB in a
//! tempdir) driven in-process with `oneshot`, plus the real binary for the bind check.
//!
//! Decision pinned here: the `Bearer` scheme name is case-insensitive (RFC 7235 section 2.1), so
//! `bearer <token>` is accepted; the token itself is compared exactly.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use common::*;
use scopemem::config::{Config, AUTH_TOKEN_ENV};
use scopemem::host::PluginHost;
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "tok-9f3c1e7a-Do-Not-Leak-4b2d";

struct App {
    router: Router,
    host: Arc<PluginHost>,
    _dir: tempfile::TempDir,
}

/// The real router over a real host whose `server.*` is `server`.
async fn app(server: Value) -> App {
    assert!(
        std::env::var_os(AUTH_TOKEN_ENV).is_none(),
        "unset {AUTH_TOKEN_ENV} to run these tests: it would override every test's token"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_value(&json!({
        "conversation_scope_map": family_map(),
        "storage": {"db_dir": dir.path().join("lancedb").to_string_lossy()},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        "server": server,
    }))
    .expect("test config is valid")
    .config;
    let host = Arc::new(common::host(config).await);
    App {
        router: scopemem::api::http::router(host.clone()),
        host,
        _dir: dir,
    }
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// One request through the router: `host`/`auth` are the raw header values (None: absent).
async fn send(
    app: &App,
    method: &str,
    path: &str,
    host: Option<&str>,
    auth: Option<&str>,
    body: Option<&Value>,
) -> Reply {
    let json = [("content-type", "application/json")];
    let extra: &[(&str, &str)] = if body.is_some() { &json } else { &[] };
    send_with(app, method, path, host, auth, extra, body).await
}

/// [`send`] with `extra` headers instead of the JSON content type a body otherwise gets.
async fn send_with(
    app: &App,
    method: &str,
    path: &str,
    host: Option<&str>,
    auth: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&Value>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(h) = host {
        req = req.header("host", h);
    }
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    if path == "/mcp" {
        req = req.header("accept", "application/json, text/event-stream");
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let req = match body {
        Some(b) => req.body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let resp = app.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn mcp_initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "security-test", "version": "0"}}})
}

fn mcp_remember(content: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "core_memory_remember", "arguments": {"content": content},
                   "_meta": {"conversation_id": FAMILY}}})
}

/// Every kind of route: the JSON API (the operator page's read endpoints included), the tool
/// registry, MCP (a write), metrics, and a path that is no route (the fallback, standing in for
/// any route added later). The page's static files are covered in tests/ui.rs.
fn guarded_routes() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/status", None),
        (
            "POST",
            "/v1/recall",
            Some(json!({"conversation_id": FAMILY, "query": "orchids"})),
        ),
        (
            "POST",
            "/v1/remember",
            Some(json!({"conversation_id": FAMILY, "content": "refused write over HTTP"})),
        ),
        (
            "POST",
            "/v1/forget",
            Some(json!({"conversation_id": FAMILY})),
        ),
        ("GET", "/v1/tools", None),
        ("GET", "/metrics", None),
        ("POST", "/mcp", Some(mcp_initialize())),
        ("POST", "/mcp", Some(mcp_remember("refused write over MCP"))),
        ("GET", "/v1/scope_map", None),
        ("POST", "/v1/consolidation/next", Some(json!({}))),
        (
            "POST",
            "/v1/consolidation/answer",
            Some(json!({"pass_id": "pass-x", "error": "refused"})),
        ),
        (
            "POST",
            "/v1/memories/browse",
            Some(json!({"conversation_id": FAMILY})),
        ),
        ("GET", "/no-such-route", None),
        ("GET", "/ui/no-such-file", None),
    ]
}

/// Contents recalled for FAMILY, asked the legitimate way.
async fn family_contents(app: &App, auth: Option<&str>) -> Vec<String> {
    let r = send(
        app,
        "POST",
        "/v1/recall",
        Some("localhost:8787"),
        auth,
        Some(&json!({"conversation_id": FAMILY, "query": "what does grandma like", "limit": 100})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let mut contents: Vec<String> = r.json()["memories"]
        .as_array()
        .expect("memories array")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    contents.sort();
    contents
}

#[tokio::test]
async fn foreign_or_missing_host_gets_403_everywhere_but_healthz_and_changes_nothing() {
    let app = app(json!({})).await;
    let r = send(
        &app,
        "POST",
        "/v1/remember",
        Some("127.0.0.1:8787"),
        None,
        Some(&json!({"conversation_id": FAMILY, "content": "Grandma likes orchids"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    for host in [Some("evil.example"), Some("attacker.com:8787"), None] {
        for (method, path, body) in guarded_routes() {
            let r = send(&app, method, path, host, None, body.as_ref()).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{method} {path} with Host {host:?}: {}",
                r.body
            );
            let err = &r.json()["error"];
            assert_eq!(err["code"], "forbidden_host", "{}", r.body);
            assert!(
                err["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("server.allowed_hosts"),
                "the message says how to allow a name: {}",
                r.body
            );
        }
        let r = send(&app, "GET", "/healthz", host, None, None).await;
        assert_eq!(r.status, StatusCode::OK, "healthz stays open: {}", r.body);
        assert_eq!(r.json()["status"], "ok");
    }

    // Neither refused remember (HTTP, MCP) wrote, and the refused forget deleted nothing.
    assert_eq!(
        family_contents(&app, None).await,
        ["Grandma likes orchids"],
        "refused requests must not change the store"
    );
    assert_eq!(rows(&app.host).await, 1);
}

#[tokio::test]
async fn loopback_names_are_accepted_with_any_port_and_case() {
    let app = app(json!({})).await;
    for host in ["localhost:8787", "127.0.0.1", "[::1]:1234", "LOCALHOST"] {
        let r = send(&app, "GET", "/v1/status", Some(host), None, None).await;
        assert_eq!(r.status, StatusCode::OK, "{host}: {}", r.body);
        assert!(r.json()["rows"].is_u64(), "{}", r.body);
        let r = send(&app, "GET", "/metrics", Some(host), None, None).await;
        assert_eq!(r.status, StatusCode::OK, "{host}: {}", r.body);
        let r = send(
            &app,
            "POST",
            "/mcp",
            Some(host),
            None,
            Some(&mcp_initialize()),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{host}: {}", r.body);
        assert_eq!(r.json()["result"]["serverInfo"]["name"], "scopemem");
    }
    // A write over MCP through the guard lands (the refusal test's control).
    let r = send(
        &app,
        "POST",
        "/mcp",
        Some("[::1]:8787"),
        None,
        Some(&mcp_remember("Grandma likes tulips")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(family_contents(&app, None).await, ["Grandma likes tulips"]);
}

#[tokio::test]
async fn allowed_hosts_entries_with_and_without_port() {
    let app = app(json!({"allowed_hosts": ["memory.lan", "Box.LAN:8787"]})).await;
    for (host, ok) in [
        ("memory.lan", true),
        ("memory.lan:9999", true),
        ("MEMORY.LAN", true),
        ("box.lan:8787", true),
        ("BOX.lan:8787", true),
        ("box.lan", false),
        ("box.lan:8788", false),
        ("sub.memory.lan", false),
        ("other.lan", false),
        ("localhost:1", true),
    ] {
        let want = if ok {
            StatusCode::OK
        } else {
            StatusCode::FORBIDDEN
        };
        let r = send(&app, "GET", "/v1/status", Some(host), None, None).await;
        assert_eq!(r.status, want, "/v1/status with Host {host}: {}", r.body);
        // /mcp agrees: rmcp's own Host check knows the same names.
        let r = send(
            &app,
            "POST",
            "/mcp",
            Some(host),
            None,
            Some(&mcp_initialize()),
        )
        .await;
        assert_eq!(r.status, want, "/mcp with Host {host}: {}", r.body);
    }
}

#[tokio::test]
async fn token_is_required_everywhere_but_healthz() {
    let app = app(json!({"auth_token": TOKEN})).await;
    let right = format!("Bearer {TOKEN}");
    let wrong_token = format!("Bearer {TOKEN}x");
    let truncated = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let basic = format!("Basic {TOKEN}");
    let bad: [Option<&str>; 6] = [
        None,
        Some(&wrong_token),
        Some(&truncated),
        Some(&basic),
        Some(TOKEN),
        Some("Bearer "),
    ];
    for auth in bad {
        for (method, path, body) in guarded_routes() {
            let r = send(&app, method, path, Some("localhost"), auth, body.as_ref()).await;
            assert_eq!(
                r.status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with Authorization {auth:?}: {}",
                r.body
            );
            assert_eq!(r.json()["error"]["code"], "unauthorized", "{}", r.body);
            let challenge = r
                .headers
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            assert!(challenge.starts_with("Bearer"), "{challenge:?}");
        }
    }
    // Nothing the refused requests carried was written (or deleted: there was nothing yet).
    assert_eq!(rows(&app.host).await, 0);

    // /healthz needs neither a token nor a known Host.
    let r = send(&app, "GET", "/healthz", Some("evil.example"), None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // It says a token is needed (so the operator page asks for one), never which.
    assert_eq!(r.json(), json!({"status": "ok", "auth": "token"}));

    // The right token opens every route; the scheme name is case-insensitive.
    for auth in [
        right.as_str(),
        &format!("bearer {TOKEN}"),
        &format!("BEARER  {TOKEN}"),
    ] {
        let r = send(
            &app,
            "GET",
            "/v1/status",
            Some("localhost"),
            Some(auth),
            None,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{auth}: {}", r.body);
    }
    let r = send(
        &app,
        "GET",
        "/metrics",
        Some("localhost"),
        Some(&right),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains("scopemem_"), "{}", r.body);
    let r = send(
        &app,
        "POST",
        "/mcp",
        Some("localhost"),
        Some(&right),
        Some(&mcp_initialize()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "scopemem");

    // A token does not replace the Host check.
    let r = send(
        &app,
        "GET",
        "/v1/status",
        Some("evil.example"),
        Some(&right),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);

    // The refused remember wrote nothing; the same write with the token does.
    let remember = json!({"conversation_id": FAMILY, "content": "Grandma likes peonies"});
    let r = send(
        &app,
        "POST",
        "/v1/remember",
        Some("localhost"),
        Some(&wrong_token),
        Some(&remember),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(family_contents(&app, Some(&right)).await.is_empty());
    let r = send(
        &app,
        "POST",
        "/v1/remember",
        Some("localhost"),
        Some(&right),
        Some(&remember),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        family_contents(&app, Some(&right)).await,
        ["Grandma likes peonies"]
    );
}

/// A `tracing` writer into memory, to read what the guard logs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        self.0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn the_token_never_shows_in_status_metrics_errors_or_logs() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    common::log_capture_baseline();
    // This test's runtime is current-thread, so the guard's logging happens on this thread.
    let _logging = tracing::subscriber::set_default(subscriber);

    let app = app(json!({"auth_token": TOKEN})).await;
    let right = format!("Bearer {TOKEN}");
    remember(&app.host, FAMILY, "Grandma likes orchids").await;
    let mut bodies = Vec::new();
    for path in ["/v1/status", "/metrics"] {
        let r = send(&app, "GET", path, Some("localhost"), Some(&right), None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        bodies.push((path, r.body));
    }
    let r = send(&app, "GET", "/healthz", None, None, None).await;
    bodies.push(("/healthz", r.body));
    // Refusals: a near-miss token, the right token from a foreign Host.
    let near = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let r = send(
        &app,
        "GET",
        "/v1/status",
        Some("localhost"),
        Some(&near),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    bodies.push(("401", r.body));
    let r = send(
        &app,
        "GET",
        "/metrics",
        Some("evil.example"),
        Some(&right),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    bodies.push(("403", r.body));

    assert!(
        bodies[0].1.contains("\"rows\"") && bodies[1].1.contains("scopemem_"),
        "status and metrics answered: {bodies:?}"
    );
    let secret_part = &TOKEN[4..TOKEN.len() - 1];
    for (what, body) in &bodies {
        assert!(
            !body.contains(secret_part),
            "{what} shows the token: {body}"
        );
    }
    let logs = logs.text();
    assert!(
        logs.contains("refused HTTP request") && logs.contains("evil.example"),
        "the refusals are logged (with the Host): {logs}"
    );
    assert!(
        logs.contains("/v1/status"),
        "refusals name the path: {logs}"
    );
    assert!(
        !logs.contains(secret_part),
        "the logs show the token: {logs}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn write_config(dir: &std::path::Path, http_addr: &str) -> std::path::PathBuf {
    let cfg = dir.join("config.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec(&json!({
            "storage": {"db_dir": dir.join("db")},
            "server": {"http_addr": http_addr},
        }))
        .unwrap(),
    )
    .unwrap();
    cfg
}

#[test]
fn serve_refuses_an_open_address_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    for addr in ["0.0.0.0:0", "[::]:0"] {
        let cfg = write_config(dir.path(), addr);
        let stderr_path = dir.path().join("stderr.log");
        let started = Instant::now();
        let mut child = Running(
            Command::new(crate::common::scopemem_bin())
                .args(["serve", "--config", cfg.to_str().unwrap()])
                .env_remove(AUTH_TOKEN_ENV)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&stderr_path).unwrap())
                .spawn()
                .expect("run scopemem"),
        );
        // A serve that does not refuse would run forever: give up (and kill it) after 30 s.
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > Duration::from_secs(30) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        drop(child);
        let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        let status = status.unwrap_or_else(|| panic!("{addr}: serve is still running: {err}"));
        assert!(!status.success(), "{addr}: must not start: {err}");
        assert!(
            err.contains("server.auth_token") && err.contains(AUTH_TOKEN_ENV),
            "{addr}: the error names the key and the variable: {err}"
        );
        assert!(
            !dir.path().join("db").exists(),
            "{addr}: the store was opened before refusing"
        );
    }
}

/// A child process killed when dropped, so a failed assertion leaves no server behind.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn serve_on_an_open_address_with_a_token_requires_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = write_config(dir.path(), &format!("0.0.0.0:{port}"));
    let stderr_path = dir.path().join("stderr.log");
    let mut child = Running(
        Command::new(crate::common::scopemem_bin())
            .args(["serve", "--config", cfg.to_str().unwrap()])
            .env(AUTH_TOKEN_ENV, TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("run scopemem"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..300 {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "serve exited with {status}: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            assert_eq!(r.status().as_u16(), 200, "healthz needs no token");
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "serve did not come up on 0.0.0.0 with a token");
    let r = client
        .get(format!("{base}/v1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = client
        .get(format!("{base}/v1/status"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.unwrap();
    assert!(body.contains("\"rows\""), "{body}");
    assert!(!body.contains(TOKEN), "{body}");
    drop(child);
    let logs = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        logs.contains("refused HTTP request"),
        "the 401 is logged: {logs}"
    );
    assert!(!logs.contains(TOKEN), "the logs show the token: {logs}");
}

/// Every state-changing route: writes over HTTP and MCP, feedback, tools, events and erasure.
fn state_changing_routes() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": "cross-site write"}),
        ),
        ("/v1/forget", json!({"conversation_id": FAMILY})),
        (
            "/v1/feedback",
            json!({"conversation_id": FAMILY, "new_memories": [{"content": "cross-site feedback"}]}),
        ),
        (
            "/v1/tools/core_memory_remember",
            json!({"conversation_id": FAMILY, "arguments": {"content": "cross-site tool"}}),
        ),
        (
            "/v1/events/after_message_sent",
            json!({"conversation_id": FAMILY, "user_message": "", "bot_reply": "",
                   "recalled_memory_ids": [],
                   "reflection": {"new_memories": [{"content": "cross-site event"}]}}),
        ),
        ("/mcp", mcp_remember("cross-site write over MCP")),
    ]
}

/// Header name/value pairs of one request.
type Headers = Vec<(&'static str, &'static str)>;

/// What a browser adds to a request sent by a page of another origin (a form post, a `fetch`),
/// and a body a form can send without a CORS preflight.
fn cross_site_requests() -> Vec<(u16, &'static str, Headers)> {
    let json = ("content-type", "application/json");
    vec![
        (
            403,
            "cross_site_request",
            vec![json, ("origin", "http://evil.example")],
        ),
        (
            403,
            "cross_site_request",
            vec![json, ("origin", "http://localhost:3000")],
        ),
        (403, "cross_site_request", vec![json, ("origin", "null")]),
        (
            403,
            "cross_site_request",
            vec![json, ("sec-fetch-site", "cross-site")],
        ),
        (
            403,
            "cross_site_request",
            vec![json, ("sec-fetch-site", "same-site")],
        ),
        (
            403,
            "cross_site_request",
            vec![
                ("content-type", "text/plain"),
                ("origin", "http://evil.example"),
                ("sec-fetch-site", "cross-site"),
            ],
        ),
        (
            415,
            "unsupported_media_type",
            vec![("content-type", "text/plain")],
        ),
        (
            415,
            "unsupported_media_type",
            vec![("content-type", "application/x-www-form-urlencoded")],
        ),
        (415, "unsupported_media_type", vec![]),
    ]
}

#[tokio::test]
async fn cross_site_state_changes_are_refused_even_with_the_token_and_change_nothing() {
    let app = app(json!({"auth_token": TOKEN})).await;
    let right = format!("Bearer {TOKEN}");
    let r = send(
        &app,
        "POST",
        "/v1/remember",
        Some("localhost:8787"),
        Some(&right),
        Some(&json!({"conversation_id": FAMILY, "content": "Grandma likes orchids"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    for (status, code, headers) in cross_site_requests() {
        for (path, body) in state_changing_routes() {
            let r = send_with(
                &app,
                "POST",
                path,
                Some("localhost:8787"),
                Some(&right),
                &headers,
                Some(&body),
            )
            .await;
            assert_eq!(
                r.status.as_u16(),
                status,
                "POST {path} with {headers:?}: {}",
                r.body
            );
            assert_eq!(r.json()["error"]["code"], code, "{}", r.body);
        }
    }
    // Without the token the same requests are refused just the same (not as 401 first).
    let evil = [
        ("content-type", "application/json"),
        ("origin", "http://evil.example"),
    ];
    let (path, body) = &state_changing_routes()[1];
    let r = send_with(
        &app,
        "POST",
        path,
        Some("localhost:8787"),
        None,
        &evil,
        Some(body),
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);

    // Nothing was written or erased, and no feedback job was accepted.
    assert_eq!(rows(&app.host).await, 1);
    assert_eq!(app.host.memory().feedback().depth(), 0);
    assert_eq!(
        family_contents(&app, Some(&right)).await,
        ["Grandma likes orchids"]
    );

    // The page's own requests pass: same origin (Origin = Host), JSON, token.
    let own = [
        ("content-type", "application/json; charset=UTF-8"),
        ("origin", "http://localhost:8787"),
        ("sec-fetch-site", "same-origin"),
    ];
    let forget = json!({"conversation_id": FAMILY});
    let r = send_with(
        &app,
        "POST",
        "/v1/forget",
        Some("localhost:8787"),
        Some(&right),
        &own,
        Some(&forget),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.json()["deleted"], 1, "{}", r.body);
    // Reads are never refused by the rule: a cross-site GET cannot change anything.
    let r = send_with(
        &app,
        "GET",
        "/v1/status",
        Some("localhost:8787"),
        Some(&right),
        &[
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ],
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

/// Every refusal (401, 403 for a foreign Host or another origin, 415) is counted in
/// `/metrics` by code and status, though no route saw the request.
#[tokio::test]
async fn refused_requests_are_counted_in_metrics() {
    let app = app(json!({"auth_token": TOKEN})).await;
    let right = format!("Bearer {TOKEN}");
    let local = Some("localhost:8787");
    let remember = json!({"conversation_id": FAMILY, "content": "Grandma likes orchids"});
    for _ in 0..2 {
        let r = send(&app, "GET", "/v1/status", local, None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    let r = send(
        &app,
        "GET",
        "/v1/status",
        Some("evil.example"),
        Some(&right),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let cross_site: &[(&str, &str)] = &[
        ("content-type", "application/json"),
        ("origin", "http://evil.example"),
    ];
    let plain: &[(&str, &str)] = &[("content-type", "text/plain")];
    for (headers, status) in [
        (cross_site, StatusCode::FORBIDDEN),
        (plain, StatusCode::UNSUPPORTED_MEDIA_TYPE),
    ] {
        let path = "/v1/remember";
        let r = send_with(
            &app,
            "POST",
            path,
            local,
            Some(&right),
            headers,
            Some(&remember),
        )
        .await;
        assert_eq!(r.status, status);
    }

    let r = send(&app, "GET", "/metrics", local, Some(&right), None).await;
    assert_eq!(r.status, StatusCode::OK);
    for line in [
        r#"scopemem_http_refused_total{code="unauthorized",status="401"} 2"#,
        r#"scopemem_http_refused_total{code="forbidden_host",status="403"} 1"#,
        r#"scopemem_http_refused_total{code="cross_site_request",status="403"} 1"#,
        r#"scopemem_http_refused_total{code="unsupported_media_type",status="415"} 1"#,
    ] {
        assert!(
            r.body.lines().any(|l| l == line),
            "{line} missing:\n{}",
            r.body
        );
    }
}
