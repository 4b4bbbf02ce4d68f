//! The operator page's server side: its static files (security headers, Host check, no token
//! needed for the files themselves) and its read-only endpoints `GET /v1/scope_map`,
//! `POST /v1/memories/browse` and `GET /v1/export`, on the real router over a real LanceDB dir and the real model.
//! The page itself is driven in a real browser by tests/ui_browser.rs.

use crate::common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use common::*;
use scopemem::config::Config;
use scopemem::host::PluginHost;
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "ui-test-token-7c1d";

struct App {
    router: Router,
    host: Arc<PluginHost>,
    _dir: tempfile::TempDir,
}

async fn app(extra: Value) -> App {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = json!({
        "conversation_scope_map": family_map(),
        "storage": {"db_dir": dir.path().join("lancedb").to_string_lossy()},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        "server": {"auth_token": TOKEN},
    });
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    let config = Config::from_value(&cfg).expect("test config").config;
    let host = Arc::new(common::host(config).await);
    App {
        router: scopemem::api::http::router(host.clone()),
        host,
        _dir: dir,
    }
}

/// One request from the loopback Host; `auth`: send the token.
async fn send(
    app: &App,
    method: &str,
    path: &str,
    auth: bool,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1:8787");
    if auth {
        req = req.header("authorization", format!("Bearer {TOKEN}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let resp = app.router.clone().oneshot(req).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

async fn json_ok(app: &App, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, _, text) = send(app, method, path, true, body).await;
    assert_eq!(status, StatusCode::OK, "{method} {path}: {text}");
    serde_json::from_str(&text).unwrap()
}

async fn browse(app: &App, body: Value) -> Value {
    json_ok(app, "POST", "/v1/memories/browse", Some(body)).await
}

fn contents(v: &Value) -> Vec<String> {
    v["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn page_files_carry_security_headers_and_need_the_host_but_not_the_token() {
    let app = app(json!({})).await;
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let (status, headers, body) = send(&app, "GET", path, false, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        let h = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            h("content-type").starts_with(kind),
            "{path}: {}",
            h("content-type")
        );
        let csp = h("content-security-policy");
        assert!(csp.contains("default-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(h("x-frame-options"), "DENY");
        assert_eq!(h("x-content-type-options"), "nosniff");
        assert!(!body.is_empty());
    }
    // A foreign Host gets nothing, not even the page.
    let req = Request::builder()
        .uri("/ui")
        .header("host", "evil.example")
        .body(Body::empty())
        .unwrap();
    let resp = app.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    // Only the files themselves skip the token: the data they show does not.
    for (method, path, body) in [
        ("GET", "/v1/status", None),
        ("GET", "/v1/scope_map", None),
        (
            "POST",
            "/v1/memories/browse",
            Some(json!({"conversation_id": FAMILY})),
        ),
        ("GET", "/ui/other", None),
        ("POST", "/ui", Some(json!({}))),
    ] {
        let (status, _, text) = send(&app, method, path, false, body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {text}");
    }
}

#[tokio::test]
async fn scope_map_shows_entries_ignored_entries_with_reasons_and_the_policy() {
    let app = app(json!({
        "conversation_scope_map": {FAMILY: "家人", WORK: "工作", "default:GroupMessage:555": "家 人"},
        "unmapped_scope": "conversation",
    }))
    .await;
    let v = json_ok(&app, "GET", "/v1/scope_map", None).await;
    let entries: Vec<(String, String)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().into(),
                e["scope"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (FAMILY.to_string(), "家人".to_string()),
            (WORK.to_string(), "工作".to_string())
        ]
    );
    let ignored = v["ignored"].as_array().unwrap();
    assert_eq!(ignored.len(), 1, "{v}");
    assert_eq!(ignored[0]["key"], "default:GroupMessage:555");
    assert!(
        ignored[0]["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{v}"
    );
    assert!(
        ignored[0]["fails_closed_to"]
            .as_str()
            .is_some_and(|s| s.starts_with("c_")),
        "{v}"
    );
    assert_eq!(v["unmapped_scope"], "conversation");
    assert_eq!(v["scope_filter"], "enforce");
    assert_eq!(v["summary"]["entries"], 2);
    assert_eq!(v["summary"]["ignored"], 1);
}

#[tokio::test]
async fn browse_lists_what_the_conversation_may_see_newest_first_with_paging() {
    let app = app(json!({})).await;
    for (conversation, content) in [
        (FAMILY, "Grandma likes orchids"),
        (WORK, "The quarterly report is due Friday"),
        (PRIVATE, "The bot's name is Aster"),
        (FAMILY, "Grandpa plays chess on Sundays"),
        (WORK, "The VPN password rotates monthly"),
        (FAMILY, "The cat is called Mochi"),
    ] {
        remember(&app.host, conversation, content).await;
    }
    let family = browse(&app, json!({"conversation_id": FAMILY})).await;
    assert_eq!(family["memory_scope"], "家人");
    assert_eq!(family["total"], 4);
    assert_eq!(
        contents(&family),
        [
            "The cat is called Mochi",
            "Grandpa plays chess on Sundays",
            "The bot's name is Aster",
            "Grandma likes orchids"
        ],
        "family + public, newest first"
    );
    // The same rows recall can return for this conversation, never a work row.
    let (_, recalled) = recall(&app.host, FAMILY, "family").await;
    let mut recalled: Vec<String> = recalled.into_iter().map(|(_, c)| c).collect();
    let mut browsed = contents(&family);
    recalled.sort();
    browsed.sort();
    assert_eq!(browsed, recalled);

    let work = browse(&app, json!({"conversation_id": WORK})).await;
    assert_eq!(work["total"], 3);
    assert!(contents(&work)
        .iter()
        .all(|c| !c.contains("Grandma") && !c.contains("Mochi")));
    let public = browse(&app, json!({"conversation_id": PRIVATE})).await;
    assert_eq!(public["memory_scope"], "public");
    assert_eq!(contents(&public), ["The bot's name is Aster"]);

    // Paging: offset and limit over the same order.
    let p1 = browse(&app, json!({"conversation_id": FAMILY, "limit": 3})).await;
    let p2 = browse(
        &app,
        json!({"conversation_id": FAMILY, "offset": 3, "limit": 3}),
    )
    .await;
    assert_eq!(
        (p1["total"].clone(), p2["total"].clone()),
        (json!(4), json!(4))
    );
    let mut both = contents(&p1);
    both.extend(contents(&p2));
    assert_eq!(both, contents(&family));
    let past = browse(&app, json!({"conversation_id": FAMILY, "offset": 50})).await;
    assert!(contents(&past).is_empty());

    // Bad input is refused like everywhere else, and nobody can name a scope.
    for (body, code) in [
        (json!({"conversation_id": " "}), "invalid_conversation_id"),
        (
            json!({"conversation_id": FAMILY, "limit": 0}),
            "invalid_input",
        ),
        (
            json!({"conversation_id": FAMILY, "limit": 101}),
            "invalid_input",
        ),
        (
            json!({"conversation_id": FAMILY, "offset": -1}),
            "invalid_input",
        ),
        (
            json!({"conversation_id": FAMILY, "memory_scope": "工作"}),
            "invalid_input",
        ),
    ] {
        let (status, _, text) = send(
            &app,
            "POST",
            "/v1/memories/browse",
            true,
            Some(body.clone()),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], code, "{body}: {text}");
    }
}

#[tokio::test]
async fn status_reports_each_index_and_its_coverage() {
    let app = app(json!({})).await;
    remember(&app.host, FAMILY, "Grandma likes orchids").await;
    let v = json_ok(&app, "GET", "/v1/status", None).await;
    let indexes = v["indexes"].as_array().expect("indexes");
    let columns: Vec<&str> = indexes
        .iter()
        .flat_map(|i| {
            i["columns"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
        })
        .collect();
    assert!(
        columns.contains(&"id")
            && columns.contains(&"memory_scope")
            && columns.contains(&"expires_at"),
        "{v}"
    );
    for i in indexes {
        assert!(
            i["index_type"].as_str().is_some_and(|t| !t.is_empty()),
            "{i}"
        );
        assert!(
            i["indexed_rows"].is_u64() || i["indexed_rows"].is_null(),
            "{i}"
        );
    }
    assert_eq!(v["vector_index"], false);
}

#[tokio::test]
async fn export_over_http_holds_exactly_what_the_conversation_may_recall() {
    let app = app(json!({})).await;
    for (conversation, content) in [
        (FAMILY, "Grandma's birthday is on 12 May"),
        (FAMILY, "Dad parks in spot 42"),
        (WORK, "The quarterly report is due Friday"),
        (PRIVATE, "The office closes at six"),
    ] {
        remember(&app.host, conversation, content).await;
    }
    let lines = |text: &str| -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    };
    let path = |conversation: &str, extra: &str| {
        format!(
            "/v1/export?conversation_id={}{extra}",
            urlencode(conversation)
        )
    };
    let (status, headers, text) = send(&app, "GET", &path(FAMILY, ""), true, None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/x-ndjson"));
    let family = lines(&text);
    assert_eq!(family[0]["filter"]["visible_to"], FAMILY, "{text}");
    assert_eq!(family[0]["vectors"], false);
    let mut scopes: Vec<&str> = family[1..]
        .iter()
        .map(|r| r["memory_scope"].as_str().unwrap())
        .collect();
    scopes.sort();
    assert_eq!(scopes, ["public", "家人", "家人"], "{text}");
    assert!(!text.contains("quarterly") && !text.contains("\"vector\""));
    // The public row another group wrote does not say which group: its own rows keep theirs.
    for r in &family[1..] {
        let want = if r["memory_scope"] == "public" {
            Value::Null
        } else {
            json!(FAMILY)
        };
        assert_eq!(r["conversation_id"], want, "{r}");
    }
    assert!(!text.contains(PRIVATE), "another conversation's id: {text}");

    let (_, _, text) = send(&app, "GET", &path(WORK, "&vectors=true"), true, None).await;
    let work = lines(&text);
    assert_eq!(work.len(), 3, "header, 工作, public: {text}");
    assert!(!text.contains("Grandma") && !text.contains("spot 42"));
    assert_eq!(work[1]["vector"].as_array().map(Vec::len), Some(384));
    assert!(!text.contains(PRIVATE) && !text.contains(FAMILY), "{text}");

    for (bad, code) in [
        ("/v1/export".to_string(), "invalid_query"),
        (path(FAMILY, "&scope=public"), "invalid_query"),
        (
            "/v1/export?conversation_id=%20".to_string(),
            "invalid_conversation_id",
        ),
    ] {
        let (status, _, text) = send(&app, "GET", &bad, true, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {text}");
        assert!(text.contains(code), "{bad}: {text}");
    }
    let (status, _, _) = send(&app, "GET", &path(FAMILY, ""), false, None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the token guards the export"
    );
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
