//! Memory life cycle (migration 0003): `expires_at` from the request or the type's TTL, expired
//! rows hidden from recall at once (in the prefilter), and erased from disk by the sweeper.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use scopemem::config::Config;
use serde_json::{json, Value};

const BRIEF: &str = "The pottery class meets tonight zq-expiring-4471";
const KEEP: &str = "The pottery class teacher is Ms Lin";

fn life_config(dir: &std::path::Path, retention: Value) -> Config {
    Config::from_value(&json!({
        "conversation_scope_map": family_map(),
        "storage": {"db_dir": dir.join("lancedb").to_string_lossy(), "keep_versions_minutes": 0},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        "retention": retention,
    }))
    .expect("test config is valid")
    .config
}

fn time(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .map(|s| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_memories_are_never_recalled_and_the_sweeper_erases_them() {
    let dir = tempfile::tempdir().unwrap();
    // The sweeper's own timer never fires here: recall must hide the row by itself.
    let host = host(life_config(
        dir.path(),
        json!({"sweep_interval_secs": 3600}),
    ))
    .await;
    host.start_background();
    // Microseconds, the column's precision. An hour ahead: two remembers and a recall see it
    // unexpired however loaded the machine; then its hour passes below.
    let expires = Utc::now() + chrono::Duration::hours(1);
    let soon = expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let brief = host
        .invoke(
            "remember",
            json!({"conversation_id": FAMILY, "content": BRIEF, "memory_type": "event",
                   "expires_at": soon}),
        )
        .await
        .unwrap();
    assert_eq!(time(&brief["memory"]["expires_at"]), time(&json!(soon)));
    let keep = remember(&host, FAMILY, KEEP).await;
    assert_eq!(
        keep["memory"]["expires_at"],
        Value::Null,
        "no TTL configured"
    );
    let (_, hits) = recall(&host, FAMILY, "pottery class").await;
    assert_eq!(hits.len(), 2, "{hits:?}");

    // Its hour passes: the row's expiry moves to now (the test does not wait an hour).
    let id = brief["memory"]["id"].as_str().unwrap();
    let passed = Utc::now();
    set_expiry(&host, id, passed).await;
    assert!(eventually(Duration::from_secs(60), || Utc::now() > passed).await);
    let (_, hits) = recall(&host, FAMILY, "pottery class").await;
    let contents: Vec<&str> = hits.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(contents, [KEEP], "expired, though not swept yet");
    assert_eq!(rows(&host).await, 2, "the row is still on disk");
    assert!(
        all_rows(&host)
            .await
            .iter()
            .all(|r| r.last_recalled_at.is_none()),
        "recalls are not written back unless decay or refresh-on-recall is on"
    );
    let browsed = host
        .invoke("browse", json!({"conversation_id": FAMILY}))
        .await
        .unwrap();
    assert_eq!(browsed["total"], 1, "{browsed}");
    // Feedback cannot reinforce or merge what recall would not show.
    let job = host
        .invoke(
            "feedback",
            json!({"conversation_id": FAMILY, "useful_memory_ids": [id]}),
        )
        .await
        .unwrap();
    let job_id = job["job_id"].as_str().unwrap().to_string();
    let mut refused = Value::Null;
    for _ in 0..200 {
        let r = host
            .invoke("feedback_status", json!({"job_id": job_id}))
            .await
            .unwrap();
        if r["state"] == "done" {
            refused = r["outcome"]["refused"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(refused.as_array().map(Vec::len), Some(1), "{refused}");

    let swept = scopemem::memory::service::sweeper::sweep_once(host.memory())
        .await
        .unwrap();
    assert_eq!(swept, 1);
    assert_eq!(rows(&host).await, 1);
    assert_eq!(
        files_containing(dir.path(), "zq-expiring-4471"),
        Vec::<String>::new(),
        "erased like forget: no old version or journal keeps the text"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_per_type_applies_to_every_write_path_and_bad_expiry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(life_config(
        dir.path(),
        json!({"task_ttl_days": 30, "event_ttl_days": 180}),
    ))
    .await;
    host.start_background();
    let before = Utc::now();
    let task = host
        .invoke(
            "remember",
            json!({"conversation_id": FAMILY, "content": "Renew the passport", "memory_type": "task"}),
        )
        .await
        .unwrap();
    let expires = time(&task["memory"]["expires_at"]).expect("a task expires");
    let created = time(&task["memory"]["created_at"]).unwrap();
    assert_eq!(expires - created, chrono::Duration::days(30));
    assert!(created >= before);
    let knowledge = remember(&host, FAMILY, "Grandma likes orchids").await;
    assert_eq!(knowledge["memory"]["expires_at"], Value::Null);
    // The tool takes an explicit expiry too, which beats the type's TTL.
    let until = "2999-01-01T00:00:00Z";
    let tool = host
        .call_tool(
            "core_memory_remember",
            serde_json::from_value(json!({"conversation_id": WORK})).unwrap(),
            json!({"content": "Quarterly review", "memory_type": "task", "expires_at": until}),
        )
        .await
        .unwrap();
    assert_eq!(time(&tool["memory"]["expires_at"]), time(&json!(until)));

    // Reflection feedback: new memories get their type's TTL, decided when accepted.
    host.invoke(
        "feedback",
        json!({"conversation_id": FAMILY,
               "new_memories": [{"content": "Dinner at grandma's on Sunday", "memory_type": "event"}]}),
    )
    .await
    .unwrap();
    let mut found = None;
    for _ in 0..200 {
        found = all_rows(&host)
            .await
            .into_iter()
            .find(|r| r.content.starts_with("Dinner"));
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let row = found.expect("feedback applied");
    let ttl = row.expires_at.unwrap() - row.created_at.unwrap();
    assert!(
        (ttl - chrono::Duration::days(180)).num_seconds().abs() < 60,
        "{ttl}"
    );

    for bad in ["2001-01-01T00:00:00Z", "next week", "2999-01-01"] {
        let err = host
            .invoke(
                "remember",
                json!({"conversation_id": FAMILY, "content": "x", "expires_at": bad}),
            )
            .await
            .unwrap_err();
        assert!(
            err.is_client_error() && err.message.contains("expires_at"),
            "{bad}: {err}"
        );
    }
    host.shutdown().await;
}

/// A table written before migration 0003 (here a legacy one from another program) gains the
/// life-cycle columns in metadata only: old rows get NULL expiry (never expire) and stay
/// recallable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_table_gains_the_life_cycle_columns_as_all_null() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    make_legacy_table(&db, &legacy_rows(50, "sailing"), false, true).await;
    let host = host(legacy_config(&db, family_map(), "auto")).await;
    let status = scopemem::migrate::runner::status(host.memory().store().table())
        .await
        .unwrap();
    assert_eq!((status.version, status.pending.len()), (6, 0));
    let schema = host.memory().store().table().schema().await.unwrap();
    assert!(schema.field_with_name("expires_at").unwrap().is_nullable());
    assert!(schema.field_with_name("last_recalled_at").is_ok());
    let rows = all_rows(&host).await;
    assert_eq!(rows.len(), 50);
    assert!(rows.iter().all(|r| r.expires_at.is_none()));
    let (_, hits) = recall(&host, FAMILY, "sailing").await;
    assert!(!hits.is_empty());
    host.shutdown().await;
}

/// Ranking by strength (recall.strength_weight) and the write-back of recalls: last_recalled_at
/// is recorded and, with refresh_on_recall, a recalled task's expiry moves out to now + TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strength_ranks_and_recalls_refresh_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = life_config(
        dir.path(),
        json!({"task_ttl_days": 1, "refresh_on_recall": true}),
    );
    config.recall.strength_weight = 0.5;
    let host = host(config).await;
    host.start_background();
    // Near twins: one word apart, and a number apart, so neither the remember (one copy of a
    // fact) nor the recall (one fact per answer) takes them for one fact.
    let mut ids = Vec::new();
    for (text, strength) in [
        ("Team offsite 1 is in Hangzhou", 5),
        ("Team offsite 2 is in Hangzhou", 100),
    ] {
        let r = host
            .invoke(
                "remember",
                json!({"conversation_id": FAMILY, "content": text, "strength": strength}),
            )
            .await
            .unwrap();
        ids.push(r["memory"]["id"].as_str().unwrap().to_string());
    }
    let task = host
        .invoke(
            "remember",
            json!({"conversation_id": FAMILY, "content": "Book the offsite train tickets",
                   "memory_type": "task"}),
        )
        .await
        .unwrap();
    let first_expiry = time(&task["memory"]["expires_at"]).unwrap();

    let r = host
        .invoke(
            "recall",
            // Vector search: the near twins get nearly the same similarity, so the score gap is
            // the strength term and a little (fused ranks would differ by their rank).
            json!({"conversation_id": FAMILY, "query": "team offsite", "limit": 3, "search": "vector"}),
        )
        .await
        .unwrap();
    let got: Vec<(&str, f64)> = r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["score"].as_f64().unwrap()))
        .collect();
    let pos = |id: &str| got.iter().position(|(g, _)| *g == id).unwrap();
    assert!(
        pos(&ids[1]) < pos(&ids[0]),
        "the strong twin ranks first: {got:?}"
    );
    let gap = got[pos(&ids[1])].1 - got[pos(&ids[0])].1;
    assert!((gap - 0.475).abs() < 0.05, "0.5 * (100 - 5) / 100: {gap}");

    // Written back in a batch, off the request path (one update per kind).
    let mut rows_now = Vec::new();
    for _ in 0..100 {
        rows_now = all_rows(&host).await;
        let refreshed = rows_now
            .iter()
            .any(|r| r.memory_type == "task" && r.expires_at.unwrap() > first_expiry);
        if refreshed && rows_now.iter().all(|r| r.last_recalled_at.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        rows_now.iter().all(|r| r.last_recalled_at.is_some()),
        "{rows_now:?}"
    );
    let task_row = rows_now.iter().find(|r| r.memory_type == "task").unwrap();
    assert!(task_row.expires_at.unwrap() > first_expiry, "refreshed");
    assert!(
        rows_now
            .iter()
            .filter(|r| r.memory_type != "task")
            .all(|r| r.expires_at.is_none()),
        "types without a TTL keep no expiry"
    );
    host.shutdown().await;
}

/// The alive clause must hold once `expires_at` is indexed: rows with a NULL expiry (never
/// expires) and rows with a future one are recalled, expired ones are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_is_right_when_the_expiry_column_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(life_config(dir.path(), json!({"task_ttl_days": 30}))).await;
    remember(&host, FAMILY, "Grandma likes orchids").await;
    host.invoke(
        "remember",
        json!({"conversation_id": FAMILY, "content": "Water the orchids on Sunday", "memory_type": "task"}),
    )
    .await
    .unwrap();
    let store = host.memory().store();
    store.ensure_indexes().await.unwrap();
    store.writer().maintain_with(true).await.unwrap();
    let indexes = store.table().list_indices().await.unwrap();
    assert!(
        indexes.iter().any(|i| i.columns == ["expires_at"]),
        "{indexes:?}"
    );
    let (_, hits) = recall(&host, FAMILY, "orchids").await;
    assert_eq!(hits.len(), 2, "{hits:?}");
    host.shutdown().await;
}
