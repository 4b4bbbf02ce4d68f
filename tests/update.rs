//! Correcting a memory (issue 41, part 2; `service/update.rs`): `POST /v1/memories/update`, the
//! `core_memory_update` tool and MCP. An update reaches only a row the conversation may recall,
//! never changes its scope, re-embeds the new text, and leaves no byte of the old text on disk,
//! in every process. Real LanceDB, the real model, real `serve` processes.

use crate::common;

use std::time::{Duration, Instant};

use common::serve::{post, post_retrying_busy, recalled, spawn_serve};
use common::{family_map, files_containing, host, FAMILY, WORK};
use scopemem::host::CallContext;
use serde_json::{json, Value};

const PUBLIC: &str = "default:GroupMessage:99999";

async fn update(host: &scopemem::host::PluginHost, body: Value) -> Result<Value, String> {
    host.invoke("update", body)
        .await
        .map_err(|e| format!("{}: {}", e.code, e.message))
}

/// Wait (up to 5 s: other processes follow within `read_consistency_ms`) until no file under
/// `dir` holds `needle`; the files that still do.
async fn gone_from_disk(dir: &std::path::Path, needle: &str) -> Vec<String> {
    let started = Instant::now();
    loop {
        let left = files_containing(dir, needle);
        if left.is_empty() || started.elapsed() > Duration::from_secs(5) {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_update_rewrites_the_text_everywhere_and_erases_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let r = common::remember(&host, FAMILY, "妈妈对青霉素过敏 zqold4471").await;
    let id = r["memory"]["id"].as_str().unwrap().to_string();
    let created = r["memory"]["created_at"].clone();

    let u = update(
        &host,
        json!({"conversation_id": FAMILY, "memory_id": id, "content": "妈妈对阿莫西林过敏 zqnew5582，电话13812345678",
               "tags": ["妈妈", "过敏"]}),
    )
    .await
    .unwrap();
    assert_eq!(u["memory"]["id"], id.as_str(), "{u}");
    assert_eq!(u["memory"]["memory_scope"], "家人");
    assert_eq!(
        u["memory"]["created_at"], created,
        "the creation time stays"
    );
    assert_eq!(
        u["memory"]["content"], "妈妈对阿莫西林过敏 zqnew5582，电话[REDACTED_PHONE]",
        "the new text is redacted"
    );
    assert_eq!(u["memory"]["tags"], json!(["妈妈", "过敏"]));

    // Recall, the keyword search and the resident copy follow.
    for search in ["vector", "keyword", "hybrid"] {
        let r = host
            .invoke(
                "recall",
                json!({"conversation_id": FAMILY, "query": "阿莫西林 zqnew5582", "search": search, "limit": 5}),
            )
            .await
            .unwrap();
        let texts: Vec<&str> = r["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        assert!(
            texts.iter().any(|t| t.contains("zqnew5582")),
            "{search}: {texts:?}"
        );
        assert!(
            !texts.iter().any(|t| t.contains("zqold4471")),
            "{search}: {texts:?}"
        );
    }
    let old = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "zqold4471", "search": "keyword", "limit": 5}),
        )
        .await
        .unwrap();
    assert_eq!(old["memories"], json!([]), "{old}");
    let rows = common::all_rows(&host).await;
    assert_eq!(rows.len(), 1, "still one row: {rows:?}");

    // Not a byte of the old text is left: no data file, no older version.
    let left = gone_from_disk(dir.path(), "zqold4471").await;
    assert!(left.is_empty(), "old text still on disk in {left:?}");
    assert!(!files_containing(dir.path(), "zqnew5582").is_empty());
    host.shutdown().await;
}

#[tokio::test]
async fn an_update_reaches_only_what_the_conversation_may_recall() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let family = common::remember(&host, FAMILY, "奶奶住在杭州").await;
    let family_id = family["memory"]["id"].as_str().unwrap().to_string();
    let public = common::remember(&host, PUBLIC, "群规：每周五分享一本书").await;
    let public_id = public["memory"]["id"].as_str().unwrap().to_string();

    // Another scope: not found, and the row is untouched.
    let e = update(
        &host,
        json!({"conversation_id": WORK, "memory_id": family_id, "content": "奶奶住在北京"}),
    )
    .await
    .unwrap_err();
    assert!(e.starts_with("not_found"), "{e}");
    // A missing id.
    let e = update(
        &host,
        json!({"conversation_id": FAMILY, "memory_id": "no-such-id", "content": "x"}),
    )
    .await
    .unwrap_err();
    assert!(e.starts_with("not_found"), "{e}");
    // A scope cannot be named, nothing to change is refused.
    for body in [
        json!({"conversation_id": FAMILY, "memory_id": family_id, "content": "x", "memory_scope": "工作"}),
        json!({"conversation_id": FAMILY, "memory_id": family_id}),
        json!({"conversation_id": "", "memory_id": family_id, "content": "x"}),
        json!({"conversation_id": FAMILY, "memory_id": family_id, "content": "   "}),
    ] {
        let e = update(&host, body.clone()).await.unwrap_err();
        assert!(
            e.starts_with("invalid_input") || e.starts_with("invalid_conversation_id"),
            "{body}: {e}"
        );
    }
    let rows = common::all_rows(&host).await;
    let row = rows.iter().find(|r| r.id == family_id).unwrap();
    assert_eq!(row.content, "奶奶住在杭州");

    // A public memory, which the family reads but may not change (issue 76): the family's
    // words would be read by every chat. Refused `read_only`, the row as it was.
    let e = update(
        &host,
        json!({"conversation_id": FAMILY, "memory_id": public_id, "content": "群规：每周六分享一本书（家里说的）"}),
    )
    .await
    .unwrap_err();
    assert!(e.starts_with("read_only"), "{e}");
    let rows = common::all_rows(&host).await;
    assert_eq!(
        rows.iter().find(|r| r.id == public_id).unwrap().content,
        "群规：每周五分享一本书"
    );
    // A public conversation writes public: it corrects it in place, its scope stays public.
    let u = update(
        &host,
        json!({"conversation_id": PUBLIC, "memory_id": public_id, "content": "群规：每周六分享一本书"}),
    )
    .await
    .unwrap();
    assert_eq!(u["memory"]["memory_scope"], "public", "{u}");
    assert_eq!(u["memory_scope"], "public", "{u}");

    // A deleted memory: not found.
    let f = host
        .invoke(
            "forget",
            json!({"conversation_id": FAMILY, "memory_ids": [family_id]}),
        )
        .await
        .unwrap();
    assert_eq!(f["deleted"], 1, "{f}");
    let e = update(
        &host,
        json!({"conversation_id": FAMILY, "memory_id": family_id, "content": "奶奶住在苏州"}),
    )
    .await
    .unwrap_err();
    assert!(e.starts_with("not_found"), "{e}");
    assert_eq!(common::rows(&host).await, 1);
    host.shutdown().await;
}

/// The LLM tool corrects and deletes what the conversation was shown; it cannot reach another
/// scope's memory, and its arguments cannot name a scope.
#[tokio::test]
async fn the_update_tool_corrects_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(common::config(dir.path(), family_map())).await;
    let r = common::remember(&host, FAMILY, "妈妈对青霉素过敏").await;
    let id = r["memory"]["id"].as_str().unwrap().to_string();
    let ctx = |c: &str| CallContext {
        conversation_id: c.to_string(),
        persona: None,
    };
    let e = host
        .call_tool(
            "core_memory_update",
            ctx(WORK),
            json!({"memory_id": id, "content": "x"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "not_found");
    let e = host
        .call_tool(
            "core_memory_update",
            ctx(FAMILY),
            json!({"memory_id": id, "content": "x", "memory_scope": "工作"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_arguments");
    let u = host
        .call_tool(
            "core_memory_update",
            ctx(FAMILY),
            json!({"memory_id": id, "content": "妈妈对阿莫西林过敏"}),
        )
        .await
        .unwrap();
    assert_eq!(u["memory"]["content"], "妈妈对阿莫西林过敏", "{u}");
    let e = host
        .call_tool(
            "core_memory_update",
            ctx(WORK),
            json!({"memory_id": id, "delete": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "not_found");
    let d = host
        .call_tool(
            "core_memory_update",
            ctx(FAMILY),
            json!({"memory_id": id, "delete": true}),
        )
        .await
        .unwrap();
    assert_eq!(d["deleted"], 1, "{d}");
    assert_eq!(common::rows(&host).await, 0);
    host.shutdown().await;
}

/// Two `serve` processes on one table: updates from both at once, and a forget racing an
/// update. Every answer is a success or `not_found`; what is left is one of the texts written
/// last (or nothing after the forget), and no file holds a replaced text.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_and_a_racing_forget_across_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_serve(dir.path(), "a", json!({})).await;
    let b = spawn_serve(dir.path(), "b", json!({})).await;
    let client = reqwest::Client::new();
    let (code, r) = post(
        &client,
        &a,
        "/v1/remember",
        json!({"conversation_id": FAMILY, "content": "周五晚上家庭聚餐在海底捞 zqorig0001"}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    let id = r["memory"]["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(700)).await; // b reads it (read_consistency 500 ms)

    let body = |text: &str| json!({"conversation_id": FAMILY, "memory_id": id, "content": text});
    // A 503 `store_busy` (the other process is erasing the replaced text) is tried again, as
    // a client does: the product promises that answer under contention, not a 200 at once.
    let (ra, rb) = tokio::join!(
        post_retrying_busy(
            &client,
            &a,
            "/v1/memories/update",
            body("周五晚上家庭聚餐在西贝 zqfromaaa1")
        ),
        post_retrying_busy(
            &client,
            &b,
            "/v1/memories/update",
            body("周五晚上家庭聚餐在外婆家 zqfrombbb2")
        ),
    );
    assert_eq!((ra.0, rb.0), (200, 200), "{ra:?} {rb:?}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let now = recalled(&client, &a, FAMILY, "周五家庭聚餐在哪里").await;
    let texts: Vec<&str> = now.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(texts.len(), 1, "{texts:?}");
    let (kept, replaced) = if texts[0].contains("zqfromaaa1") {
        ("zqfromaaa1", "zqfrombbb2")
    } else {
        ("zqfrombbb2", "zqfromaaa1")
    };
    assert!(texts[0].contains(kept), "{texts:?}");
    for gone in ["zqorig0001", replaced] {
        let left = gone_from_disk(dir.path(), gone).await;
        assert!(left.is_empty(), "{gone} still on disk in {left:?}");
    }

    // A forget (from a) racing an update (from b): the memory is gone either way, and so is
    // every text it ever had.
    let (f, u) = tokio::join!(
        post_retrying_busy(
            &client,
            &a,
            "/v1/forget",
            json!({"conversation_id": FAMILY, "memory_ids": [id]})
        ),
        post_retrying_busy(
            &client,
            &b,
            "/v1/memories/update",
            body("周五晚上家庭聚餐取消了 zqlate0003")
        ),
    );
    assert_eq!(f.0, 200, "{f:?}");
    assert!(u.0 == 200 || u.0 == 404, "{u:?}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    for serve in [&a, &b] {
        let left = recalled(&client, serve, FAMILY, "周五家庭聚餐在哪里").await;
        assert!(left.is_empty(), "{left:?} (forget {f:?}, update {u:?})");
    }
    for gone in [kept, "zqlate0003"] {
        let left = gone_from_disk(dir.path(), gone).await;
        assert!(left.is_empty(), "{gone} still on disk in {left:?}");
    }
}
