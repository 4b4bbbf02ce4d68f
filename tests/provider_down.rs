//! Embedding provider failures never lose or half-write anything and never answer 500: remember
//! gets 503 `embedding_unavailable` with the provider's Retry-After, recall falls back to the
//! keyword search under the same filter (and says so), feedback waits in its queue. The real
//! model does the embedding; a switch beside it fails it on purpose.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use scopemem::embed::EmbedError;
use scopemem::host::PluginHost;
use serde_json::json;

/// The real model, failing every call with the provider's own "unavailable" error while
/// `down` is set (as the OpenAI-compatible provider does when its server is gone).
struct Switchable {
    down: AtomicBool,
}

async fn switchable_host(dir: &std::path::Path) -> (PluginHost, Arc<Switchable>) {
    let model = Arc::new(Switchable {
        down: AtomicBool::new(false),
    });
    let switch = model.clone();
    let failing = Arc::new(failing::Failing::new(embedder(), move |_, _| {
        switch
            .down
            .load(Ordering::SeqCst)
            .then(|| EmbedError::Unavailable {
                provider: "http://127.0.0.1:9".into(),
                reason: "connection refused".into(),
                retry_after: Some(Duration::from_secs(7)),
            })
    }));
    let mut cfg = config(dir, family_map());
    cfg.feedback.retry_backoff_ms = 20;
    cfg.feedback.max_attempts = 50;
    let host = PluginHost::start_with(cfg, None, failing)
        .await
        .expect("host starts");
    host.start_background();
    (host, model)
}

#[tokio::test]
async fn a_provider_that_is_down_stores_nothing_and_says_when_to_retry() {
    let dir = tempfile::tempdir().unwrap();
    let (host, model) = switchable_host(dir.path()).await;
    remember(&host, FAMILY, "妈妈对青霉素过敏").await;
    model.down.store(true, Ordering::SeqCst);
    let err = host
        .invoke(
            "remember",
            json!({"conversation_id": FAMILY, "content": "爸爸的生日是五月三号"}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "embedding_unavailable");
    assert!(!err.is_client_error());
    assert_eq!(
        err.retry_after(),
        Some(7),
        "the provider's Retry-After is passed on"
    );
    assert_eq!(rows(&host).await, 1, "nothing half-written");
    assert!(files_containing(dir.path(), "五月三号").is_empty());
}

#[tokio::test]
async fn recall_falls_back_to_keywords_under_the_same_filter_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (host, model) = switchable_host(dir.path()).await;
    remember(&host, FAMILY, "订单号 ZX-99812 是给奶奶买的轮椅").await;
    remember(&host, WORK, "订单号 ZX-99812 的发票已经报销").await;
    model.down.store(true, Ordering::SeqCst);
    for search in ["hybrid", "vector", "keyword"] {
        let r = host
            .invoke(
                "recall",
                json!({"conversation_id": FAMILY, "query": "ZX-99812", "search": search}),
            )
            .await
            .unwrap_or_else(|e| panic!("{search}: {e}"));
        let contents: Vec<&str> = r["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["订单号 ZX-99812 是给奶奶买的轮椅"], "{search}");
        let degraded = (search != "keyword").then_some("embedding_unavailable");
        assert_eq!(r["degraded"].as_str(), degraded, "{search}: {r}");
    }
    assert_eq!(host.memory().degraded_recalls(), 2);
    model.down.store(false, Ordering::SeqCst);
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "ZX-99812"}),
        )
        .await
        .unwrap();
    assert!(r.get("degraded").is_none(), "{r}");
}

#[tokio::test]
async fn feedback_accepted_while_the_provider_is_down_is_applied_once_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let (host, model) = switchable_host(dir.path()).await;
    model.down.store(true, Ordering::SeqCst);
    let r = host
        .invoke(
            "feedback",
            json!({"conversation_id": FAMILY, "new_memories": [{"content": "小明周六去游泳"}]}),
        )
        .await
        .expect("accepted while the provider is down");
    let job = r["job_id"].as_str().unwrap().to_string();
    // The worker met the down provider (a retry is due), and wrote nothing.
    assert!(
        eventually(Duration::from_secs(120), || host
            .memory()
            .feedback()
            .retries()
            > 0)
        .await,
        "the worker never tried the job"
    );
    assert_eq!(rows(&host).await, 0);
    model.down.store(false, Ordering::SeqCst);
    let outcome = host
        .memory()
        .feedback()
        .wait_for(&job, Duration::from_secs(60))
        .await
        .expect("the job finishes");
    assert!(outcome.error.is_none(), "{outcome:?}");
    assert_eq!(rows(&host).await, 1);
}
