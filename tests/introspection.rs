//! `/v1/status` and `/metrics` read rows per scope from counts the writer keeps, not from a
//! scan of the table per call; a delete or another process's write is reconciled with one scan.
//! Metric labels stay bounded when every chat is its own scope. Real LanceDB, real model.

use crate::common;

use std::time::Duration;

use common::*;
use scopemem::embed::ModelInfo;
use scopemem::store::{MemoryRecord, WriterSettings};
use serde_json::{json, Value};

/// A row of the work chat's scope, as a write path other than remember would add it.
fn work_record(id: String, content: String) -> MemoryRecord {
    MemoryRecord {
        id,
        content,
        reasoning: None,
        tags: vec![],
        memory_type: "knowledge".into(),
        strength: 50,
        is_active: true,
        conversation_id: Some(WORK.into()),
        created_at: Some(chrono::Utc::now()),
        memory_scope: Some("工作".into()),
        scope_source: Some("conversation".into()),
        expires_at: None,
        last_recalled_at: None,
        speaker_id: None,
        speaker_name: None,
        source_ids: vec![],
        about_ids: vec![],
        source_conversations: vec![],
    }
}

async fn by_scope(host: &scopemem::host::PluginHost) -> Value {
    host.invoke("status", json!(null)).await.unwrap()["rows_by_scope"].clone()
}

#[tokio::test]
async fn status_counts_follow_writes_without_a_scan_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(config(dir.path(), family_map())).await;
    for (conversation, n) in [(FAMILY, 3), (WORK, 2), (PRIVATE, 1)] {
        for i in 0..n {
            remember(
                &host,
                conversation,
                &format!("note {i} from {conversation}"),
            )
            .await;
        }
    }
    assert_eq!(
        by_scope(&host).await,
        json!({"家人": 3, "工作": 2, "public": 1})
    );
    let counts = host.memory().store().scope_counts();
    let scans = counts.scans();
    for i in 0..10 {
        remember(&host, PRIVATE, &format!("public note {i}")).await;
        assert_eq!(by_scope(&host).await["public"], 2 + i);
    }
    assert!(
        counts.scans() - scans <= 2,
        "10 status calls after 10 appends scanned {} times (a compaction may cost one)",
        counts.scans() - scans
    );

    // A delete is not an append: the next status scans once and is exact.
    let r = host
        .invoke("forget", json!({"conversation_id": FAMILY}))
        .await
        .unwrap();
    assert_eq!(r["deleted"], 3);
    assert_eq!(by_scope(&host).await, json!({"工作": 2, "public": 11}));

    // Another process appends to the same table: seen within the read-consistency interval.
    let e = embedder();
    let model = ModelInfo {
        id: e.model_id().to_string(),
        dimension: e.dimension(),
    };
    let (other, _) = scopemem::migrate::open_store(
        &dir.path().join("lancedb"),
        "memories",
        &model,
        WriterSettings::default(),
    )
    .await
    .unwrap();
    let record = work_record(
        "from-another-process".into(),
        "written by another process".into(),
    );
    let v = e
        .embed(
            scopemem::embed::TextRole::Passage,
            vec![record.content.clone()],
        )
        .await
        .unwrap();
    other.append(vec![(record, v[0].clone())]).await.unwrap();
    other.shutdown().await;
    let mut seen = false;
    for _ in 0..50 {
        if by_scope(&host).await["工作"] == 3 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "{}", by_scope(&host).await);
    host.shutdown().await;
}

#[tokio::test]
async fn metrics_keep_twenty_scope_series_and_sum_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), json!({}));
    cfg.unmapped_scope = scopemem::config::UnmappedPolicy::Conversation;
    let host = host(cfg).await;
    // 25 private chats: the first 5 hold 1 memory each, the other 20 hold 2 (45 rows).
    for chat in 0..25 {
        let conversation = format!("default:FriendMessage:{chat}");
        for i in 0..if chat < 5 { 1 } else { 2 } {
            host.invoke(
                "remember",
                json!({"conversation_id": conversation, "content": format!("chat {chat} note {i}")}),
            )
            .await
            .unwrap();
        }
    }
    let text = scopemem::api::metrics::render(&Default::default(), &host).await;
    let series: Vec<(&str, u64)> = text
        .lines()
        .filter(|l| l.starts_with("scopemem_rows{memory_scope="))
        .filter_map(|l| {
            let (labels, n) = l.rsplit_once(' ')?;
            Some((labels, n.parse().ok()?))
        })
        .collect();
    let other: Vec<_> = series
        .iter()
        .filter(|(l, _)| l.contains("(other)"))
        .collect();
    let named = series.len() - other.len() - 1; // minus the NULL-scope series
    assert_eq!(named, 20, "{text}");
    assert_eq!(other.len(), 1, "{text}");
    // The five smallest chats (1 memory each) are summed; the twenty named hold 2 each.
    assert_eq!(other[0].1, 5, "{text}");
    assert!(text.contains("scopemem_other_scopes 5"), "{text}");
    let named_rows: Vec<u64> = series
        .iter()
        .filter(|(l, _)| l.contains("\"c_"))
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(named_rows, vec![2; 20], "{text}");
    assert_eq!(series.iter().map(|(_, n)| n).sum::<u64>(), 45);
    host.shutdown().await;
}

/// Rows that did not come through remember (feedback, an import, another process) still get
/// the vector index built once the table passes the threshold: the maintainer checks on its
/// own schedule, not only after a remember.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_from_any_write_path_trigger_the_vector_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), family_map());
    cfg.storage.index_threshold_rows = 300;
    cfg.storage.compaction_interval_secs = 1;
    let host = host(cfg).await;
    host.start_background();
    let mut seed = 7u64;
    let rows: Vec<(MemoryRecord, Vec<f32>)> = (0..400)
        .map(|i| {
            let v: Vec<f32> = (0..384)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 33) % 2000) as f32 / 1000.0 - 1.0
                })
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            let record = work_record(format!("imported-{i:04}"), format!("imported note {i}"));
            (record, v.iter().map(|x| x / norm).collect())
        })
        .collect();
    host.memory().store().append(rows).await.unwrap();
    assert!(!host.memory().search().is_indexed());
    let indexed = eventually(Duration::from_secs(60), || {
        host.memory().search().is_indexed()
    })
    .await;
    assert!(
        indexed,
        "no vector index 60 s after the table passed the threshold"
    );
    let (_, hits) = recall(&host, WORK, "imported note").await;
    assert!(!hits.is_empty());
    host.shutdown().await;
}
