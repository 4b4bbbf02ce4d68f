//! The HTTP API over a real socket on loopback (docs/design.md section 8).

use crate::common;

use std::sync::Arc;

use common::*;
use serde_json::{json, Value};

async fn serve() -> (String, tokio::sync::oneshot::Sender<()>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(config(dir.path(), family_map())).await);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(scopemem::api::http::serve(host, listener, async move {
        let _ = rx.await;
    }));
    (format!("http://{addr}"), tx, dir)
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn remember_recall_status_and_errors() {
    let (base, _stop, _dir) = serve().await;

    let (code, body) = post(&base, "/v1/remember", json!({"conversation_id": FAMILY, "content": "Grandma likes orchids", "tags": ["grandma"], "memory_type": "knowledge", "strength": 70})).await;
    assert_eq!(code, 200, "{body}");
    let m = &body["memory"];
    for key in [
        "id",
        "content",
        "reasoning",
        "tags",
        "memory_type",
        "strength",
        "is_active",
        "memory_scope",
        "scope_source",
        "created_at",
    ] {
        assert!(m.get(key).is_some(), "memory JSON lacks {key}: {m}");
    }
    assert_eq!(m["memory_scope"], "家人");
    assert_eq!(m["strength"], 70);
    assert!(chrono::DateTime::parse_from_rfc3339(m["created_at"].as_str().unwrap()).is_ok());

    let (code, body) = post(
        &base,
        "/v1/recall",
        json!({"conversation_id": FAMILY, "query": "what flowers does grandma like"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["memory_scope"], "家人");
    assert_eq!(body["migration_mode"], false);
    assert!(body["memories"][0]["score"].as_f64().is_some());

    let (code, body) = post(
        &base,
        "/v1/recall",
        json!({"conversation_id": WORK, "query": "what flowers does grandma like"}),
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        body["memories"].as_array().unwrap().is_empty(),
        "work must not see family: {body}"
    );

    // Bad input is a 4xx with the error shape.
    for (path, payload, want) in [
        (
            "/v1/remember",
            json!({"conversation_id": "  ", "content": "x"}),
            "invalid_conversation_id",
        ),
        (
            "/v1/recall",
            json!({"conversation_id": "", "query": "x"}),
            "invalid_conversation_id",
        ),
        (
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": "x", "memory_scope": "public"}),
            "invalid_input",
        ),
        (
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": "x", "strength": 500}),
            "invalid_input",
        ),
        (
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": "x", "memory_type": "gossip"}),
            "invalid_input",
        ),
        (
            "/v1/recall",
            json!({"conversation_id": FAMILY, "query": "x", "limit": 0}),
            "invalid_input",
        ),
        (
            "/v1/recall",
            json!({"conversation_id": FAMILY, "query": "x", "limit": 101}),
            "invalid_input",
        ),
    ] {
        let (code, body) = post(&base, path, payload).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], want, "{body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/remember"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_json");

    let status: Value = reqwest::get(format!("{base}/v1/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["rows"], 1);
    assert_eq!(status["rows_by_scope"]["家人"], 1);
    assert_eq!(status["null_scope_rows"], 0);
    assert_eq!(status["migration"]["state"], "none");
    assert_eq!(status["scope_map"]["entries"], 2);

    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["auth"], "none", "no token configured: {health}");
}
