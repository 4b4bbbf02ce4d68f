//! Legacy (schema v1) tables: migrations on open, NULL-compatible migration mode, the resumable
//! background backfill, and its revert. Real LanceDB directories, real embeddings.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use scopemem::host::PluginHost;
use serde_json::json;

async fn start(dir: &std::path::Path, mode: &str) -> PluginHost {
    PluginHost::start_with(legacy_config(dir, family_map(), mode), None, embedder())
        .await
        .unwrap()
}

fn visible_scopes(hits: &[(Option<String>, String)]) -> HashSet<String> {
    hits.iter()
        .map(|(s, _)| s.clone().unwrap_or_else(|| "NULL".into()))
        .collect()
}

#[tokio::test]
async fn a_v1_table_migrates_serves_during_backfill_and_ends_public() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = legacy_rows(300, "gardening");
    // Damaged: no created_at at all.
    for r in rows.iter_mut().take(3) {
        r.created_at = None;
    }
    make_legacy_table(dir.path(), &rows, false, false).await;

    let host = start(dir.path(), "auto").await;
    let status = host.invoke("status", json!(null)).await.unwrap();
    assert_eq!(status["migration"]["state"], "pending", "{status}");
    assert_eq!(status["migration"]["active"], true);
    assert_eq!(status["null_scope_rows"], 300);
    assert_eq!(status["rows"], 300, "opening adds columns, never rows");

    // Before and during the backfill every scope sees the legacy rows.
    for conv in [FAMILY, WORK, PRIVATE] {
        let (_, hits) = recall(&host, conv, "gardening note").await;
        assert!(
            !hits.is_empty(),
            "{conv} must see legacy rows in migration mode"
        );
        let r = host
            .invoke(
                "recall",
                json!({"conversation_id": conv, "query": "gardening"}),
            )
            .await
            .unwrap();
        assert_eq!(r["migration_mode"], true);
    }
    // A new private memory written during migration stays private.
    remember(&host, FAMILY, "family gardening secret: roses by the fence").await;

    host.start_background();
    let mut saw_running_recall = false;
    for _ in 0..400 {
        let p = host.memory().backfill().progress();
        if p.state == "running" && p.filled > 0 && p.remaining > 0 {
            let (_, hits) = recall(&host, WORK, "gardening note").await;
            assert!(
                !visible_scopes(&hits).contains("家人"),
                "no leak during the backfill"
            );
            assert!(!hits.is_empty());
            saw_running_recall = true;
        }
        if p.state == "done" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        wait_backfill_done(&host, Duration::from_secs(60)).await,
        "backfill must finish"
    );
    assert!(
        saw_running_recall,
        "recall must have been served while the backfill ran"
    );

    let p = host.memory().backfill().progress();
    assert_eq!(p.filled, 297);
    assert_eq!(p.damaged.null_created_at, 3);
    assert_eq!(p.skipped, 3);
    assert!(
        !host.memory().migration_active(),
        "auto mode turns itself off"
    );
    // Recall after the backfill is no slower than before: the scope index covers every row.
    let idx = host
        .memory()
        .store()
        .table()
        .index_stats("memory_scope_idx")
        .await
        .unwrap()
        .expect("scope index");
    assert_eq!(idx.num_unindexed_rows, 0, "{idx:?}");

    let all = all_rows(&host).await;
    assert_eq!(all.len(), 301, "row count unchanged (+ the one new memory)");
    let by_scope: HashMap<Option<String>, usize> = all.iter().fold(HashMap::new(), |mut m, r| {
        *m.entry(r.memory_scope.clone()).or_default() += 1;
        m
    });
    assert_eq!(by_scope.get(&Some("public".into())), Some(&297));
    assert_eq!(
        by_scope.get(&None),
        Some(&3),
        "damaged rows are reported, not guessed"
    );
    assert_eq!(by_scope.get(&Some("家人".into())), Some(&1));
    assert!(all
        .iter()
        .filter(|r| r.memory_scope.as_deref() == Some("public"))
        .all(|r| r.scope_source.as_deref() == Some("backfill")));

    // Migration mode off: NULL rows are no longer recalled anywhere.
    let (_, hits) = recall(&host, WORK, "gardening note").await;
    assert!(!visible_scopes(&hits).contains("NULL"));
    let status = host.invoke("status", json!(null)).await.unwrap();
    assert_eq!(status["migration"]["state"], "done");
    assert_eq!(status["migration"]["active"], false);
    host.shutdown().await;
    drop(host);

    // Durable: a restart stays out of migration mode and does not redo anything.
    let host = start(dir.path(), "auto").await;
    assert!(!host.memory().migration_active());
    assert_eq!(host.memory().backfill().progress().state, "done");
    host.start_background();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(host.memory().backfill().progress().filled, 297);
    let status = scopemem::migrate::runner::status(host.memory().store().table())
        .await
        .unwrap();
    assert_eq!((status.version, status.pending.len()), (6, 0));
}

#[tokio::test]
async fn kill_mid_way_then_resume_finishes_with_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    make_legacy_table(dir.path(), &legacy_rows(400, "chess"), false, false).await;

    let host = start(dir.path(), "auto").await;
    let migration_start = host.memory().backfill().progress().migration_start;
    assert!(migration_start.is_some(), "recorded durably on first open");
    host.start_background();
    let killed_at = loop {
        let p = host.memory().backfill().progress();
        if p.filled >= 80 {
            host.memory().backfill().abort(); // as a crash would
            break p.filled;
        }
        assert_ne!(
            p.state, "done",
            "the test must interrupt the backfill mid-way"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(killed_at < 400);
    let before: HashMap<String, String> = all_rows(&host)
        .await
        .into_iter()
        .map(|r| (r.id, r.content))
        .collect();
    host.shutdown().await;
    drop(host);

    let host = start(dir.path(), "auto").await;
    assert!(
        host.memory().migration_active(),
        "still in migration mode after the crash"
    );
    assert_eq!(
        host.memory().backfill().progress().migration_start,
        migration_start,
        "start time is kept"
    );
    host.start_background();
    assert!(wait_backfill_done(&host, Duration::from_secs(60)).await);
    let p = host.memory().backfill().progress();
    assert_eq!(
        p.filled, 400,
        "every row filled exactly once, counted from the marks"
    );
    assert_eq!(p.skipped, 0);
    let after = all_rows(&host).await;
    assert_eq!(after.len(), 400);
    assert_eq!(
        after.iter().map(|r| &r.id).collect::<HashSet<_>>().len(),
        400,
        "no duplicates"
    );
    for r in &after {
        assert_eq!(r.memory_scope.as_deref(), Some("public"));
        assert_eq!(r.scope_source.as_deref(), Some("backfill"));
        assert_eq!(before.get(&r.id), Some(&r.content), "content untouched");
    }
    // Running it again is harmless.
    let again = host.memory().backfill().run(|_| {}).await.unwrap();
    assert_eq!(again.filled, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backfill_with_concurrent_traffic_and_map_reloads() {
    let dir = tempfile::tempdir().unwrap();
    make_legacy_table(dir.path(), &legacy_rows(400, "travel"), false, false).await;
    // migration_mode = off: NULL rows must never be recalled, even while they exist.
    let host = Arc::new(start(dir.path(), "off").await);
    assert!(!host.memory().migration_active());
    host.start_background();

    let convs = [FAMILY, WORK, PRIVATE, "default:GroupMessage:555"];
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let host = host.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut problems = Vec::new();
            for i in 0..10usize {
                let conv = convs[(t + i) % convs.len()];
                let r = host
                    .invoke("remember", json!({"conversation_id": conv, "content": format!("task {t} travel plan {i}")}))
                    .await
                    .unwrap();
                ids.push((r["memory"]["id"].as_str().unwrap().to_string(), r["memory"]["memory_scope"].as_str().unwrap().to_string()));
                let r = host
                    .invoke("recall", json!({"conversation_id": conv, "query": "travel plan", "limit": 100}))
                    .await
                    .unwrap();
                let current = r["memory_scope"].as_str().unwrap().to_string();
                for m in r["memories"].as_array().unwrap() {
                    match m["memory_scope"].as_str() {
                        None => problems.push(format!("{conv}: NULL row visible with migration_mode=off")),
                        Some(s) if s != "public" && s != current => problems.push(format!("{conv}: leak of {s}")),
                        _ => {}
                    }
                }
            }
            (ids, problems)
        }));
    }
    // Meanwhile the map changes: the 555 group becomes 工作.
    tokio::time::sleep(Duration::from_millis(100)).await;
    host.memory()
        .scopes()
        .replace(scopemem::scope::ScopeMap::build(
            &json!({FAMILY: "家人", WORK: "工作", "default:GroupMessage:555": "工作"}),
            scopemem::config::UnmappedPolicy::Public,
        ));
    let mut written = Vec::new();
    for t in tasks {
        let (ids, problems) = t.await.unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        written.extend(ids);
    }
    assert!(wait_backfill_done(&host, Duration::from_secs(60)).await);

    let all = all_rows(&host).await;
    assert_eq!(
        all.len(),
        480,
        "400 legacy + 80 new, none lost or duplicated"
    );
    assert_eq!(all.iter().map(|r| &r.id).collect::<HashSet<_>>().len(), 480);
    let by_id: HashMap<&str, &scopemem::store::MemoryRecord> =
        all.iter().map(|r| (r.id.as_str(), r)).collect();
    for (id, scope) in &written {
        let r = by_id[id.as_str()];
        assert_eq!(
            r.memory_scope.as_deref(),
            Some(scope.as_str()),
            "new rows keep the scope they were written with"
        );
        assert_ne!(
            r.scope_source.as_deref(),
            Some("backfill"),
            "the backfill never touches new rows"
        );
    }
    let legacy: Vec<_> = all.iter().filter(|r| r.id.starts_with("legacy-")).collect();
    assert!(legacy
        .iter()
        .all(|r| r.memory_scope.as_deref() == Some("public")
            && r.scope_source.as_deref() == Some("backfill")));
}

#[tokio::test]
async fn damaged_rows_are_counted_and_skipped_and_blank_scopes_count_as_null() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = legacy_rows(20, "music");
    rows[0].created_at = None; // NULL created_at
    rows[1].created_at = Some("last tuesday-ish".into()); // unparseable
    rows[2].scope = Some("".into()); // blank: filled
    rows[3].scope = Some("   ".into()); // blank: filled
    rows[4].scope = Some("bad scope!".into()); // invalid: left alone
    rows[5].tags = None; // missing tags: filled anyway
    rows[6].tags = None;
    make_legacy_table(dir.path(), &rows, true, true).await;

    let host = start(dir.path(), "auto").await;
    host.start_background();
    assert!(wait_backfill_done(&host, Duration::from_secs(60)).await);
    let p = host.memory().backfill().progress();
    assert_eq!(p.damaged.null_created_at, 1);
    assert_eq!(p.damaged.unparseable_created_at, 1);
    assert_eq!(p.damaged.blank_scope, 2);
    assert_eq!(p.damaged.invalid_scope, 1);
    assert_eq!(p.damaged.missing_tags, 2);
    assert_eq!(p.filled, 17, "20 - 2 bad timestamps - 1 invalid scope");
    assert_eq!(p.skipped, 2);
    let all = all_rows(&host).await;
    assert_eq!(all.len(), 20);
    let get = |id: &str| all.iter().find(|r| r.id == id).unwrap();
    assert_eq!(get("legacy-000002").memory_scope.as_deref(), Some("public"));
    assert_eq!(
        get("legacy-000004").memory_scope.as_deref(),
        Some("bad scope!")
    );
    assert_eq!(get("legacy-000000").memory_scope, None);
    // New writes into a table whose created_at is text still work.
    remember(&host, FAMILY, "a new memory in an old table").await;
    assert_eq!(all_rows(&host).await.len(), 21);
}

#[tokio::test]
async fn revert_backfill_restores_nulls_for_a_downgrade() {
    let dir = tempfile::tempdir().unwrap();
    make_legacy_table(dir.path(), &legacy_rows(60, "cooking"), false, false).await;
    let host = start(dir.path(), "auto").await;
    host.start_background();
    assert!(wait_backfill_done(&host, Duration::from_secs(60)).await);
    remember(
        &host,
        FAMILY,
        "a scoped memory that must survive the revert",
    )
    .await;
    let checkpoint = dir.path().join("memories.backfill.json");
    assert!(checkpoint.exists());
    let n = scopemem::migrate::backfill::revert(
        host.memory().store(),
        host.memory().backfill().checkpoint(),
    )
    .await
    .unwrap();
    assert_eq!(n, 60);
    assert!(!checkpoint.exists());
    let all = all_rows(&host).await;
    assert_eq!(all.len(), 61);
    assert_eq!(
        all.iter()
            .filter(|r| r.memory_scope.is_none() && r.scope_source.is_none())
            .count(),
        60
    );
    assert_eq!(
        all.iter()
            .filter(|r| r.memory_scope.as_deref() == Some("家人"))
            .count(),
        1
    );
}

/// The migration itself declares the backfill, before any column appears: a second process
/// that opens the table once the scope columns exist (so it runs no migration of its own)
/// still finds the checkpoint, starts in migration mode and keeps legacy rows visible. Without
/// this, a process starting beside the migrating one hid every legacy row until the backfill
/// ended.
#[tokio::test]
async fn the_migration_declares_the_backfill_before_adding_columns() {
    let dir = tempfile::tempdir().unwrap();
    make_legacy_table(dir.path(), &legacy_rows(30, "tennis"), false, false).await;
    let checkpoint = scopemem::migrate::checkpoint::CheckpointFile::in_dir(dir.path(), "memories");
    let conn = lancedb::connect(dir.path().to_str().unwrap())
        .execute()
        .await
        .unwrap();
    let (_, outcome) =
        scopemem::migrate::runner::open_or_create(&conn, "memories", 384, &checkpoint)
            .await
            .unwrap();
    assert!(outcome.backfill_needed);
    let cp = checkpoint.load().await.unwrap();
    assert!(cp.is_some(), "the runner wrote the checkpoint");

    // A process opening now sees the columns, applies nothing, and still starts in migration
    // mode with the legacy rows visible.
    let host = start(dir.path(), "auto").await;
    assert!(host.memory().migration_active());
    let (_, hits) = recall(&host, FAMILY, "tennis").await;
    assert_eq!(hits.len(), 30);
}

/// The migration gate follows the checkpoint in every process. Process A (this test) holds the
/// maintenance lease and runs the backfill; process B (a real `serve`) never runs it. Once the
/// checkpoint says done, B stops showing NULL-scope rows within `read_consistency_ms`: the row
/// the backfill leaves NULL (no `created_at`) is no longer recalled anywhere. Before, only the
/// process that ran the backfill closed its gate and B kept `OR memory_scope IS NULL` until it
/// restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_closes_the_migration_gate_when_any_one_finishes_the_backfill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut rows = legacy_rows(40, "chess");
    rows[0].created_at = None; // the backfill leaves it NULL
    make_legacy_table(&db, &rows, false, false).await;
    let a = start(&db, "auto").await;
    assert!(a.memory().migration_active());
    let b = common::serve::spawn_serve(dir.path(), "b", json!({"migration_mode": "auto"})).await;
    let client = reqwest::Client::new();
    let null_row = |hits: &[serde_json::Value]| {
        hits.iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("legacy memory 0:"))
        })
    };
    let before = common::serve::recalled(&client, &b, FAMILY, "legacy memory 0: chess note").await;
    assert!(
        null_row(&before),
        "migration mode shows the legacy row in B"
    );

    a.start_background();
    assert!(wait_backfill_done(&a, Duration::from_secs(60)).await);
    assert!(!a.memory().migration_active());
    let started = std::time::Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(60) {
        let s = common::serve::status(&client, &b).await;
        if s["migration"]["active"] == false {
            assert_eq!(s["migration"]["state"], "done", "{s}");
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        closed,
        "B still in migration mode 5 s after the backfill ended"
    );
    let followed = started.elapsed();
    let after = common::serve::recalled(&client, &b, FAMILY, "legacy memory 0: chess note").await;
    assert!(
        !null_row(&after),
        "B recalls the NULL-scope row after the backfill"
    );
    assert!(!after.is_empty(), "the backfilled public rows stay visible");
    assert!(after.iter().all(|m| m["memory_scope"] == "public"));
    println!("B closed its gate {followed:?} after A's backfill ended");
}

/// "Done" means no blank row is left. Rows a batch filled that are blank again before the
/// backfill settles are filled again: a compaction that read the fragments before a batch's
/// column patch committed its rewrite after it, and `make test` once ended with 20 of 600 rows
/// NULL after "done" (crash::kill9_during_a_backfill…). Here the table's own writer blanks 20
/// filled rows right after the last batch, before the settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rows_blank_again_before_the_backfill_settles_are_filled_again() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let ids = make_legacy_table(dir.path(), &legacy_rows(200, "chess"), false, false).await;
    let host = start(dir.path(), "auto").await;
    let writer = host.memory().store().writer().clone();
    let blanked = AtomicBool::new(false);
    let list: Vec<String> = ids[..20].iter().map(|id| format!("'{id}'")).collect();
    let predicate = format!("id IN ({})", list.join(", "));
    let p = host
        .memory()
        .backfill()
        .run(|p| {
            if p.filled >= 200 && !blanked.swap(true, Ordering::SeqCst) {
                let (writer, predicate) = (writer.clone(), predicate.clone());
                let n = tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(writer.update(
                        predicate,
                        vec![
                            ("memory_scope".into(), "NULL".into()),
                            ("scope_source".into(), "NULL".into()),
                        ],
                    ))
                })
                .expect("blank 20 filled rows");
                assert_eq!(n, 20);
            }
        })
        .await
        .expect("the backfill finishes");
    assert!(blanked.load(Ordering::SeqCst), "the rows were blanked");
    assert_eq!(p.state, "done");
    let rows = all_rows(&host).await;
    let blank: Vec<&String> = rows
        .iter()
        .filter(|r| r.memory_scope.as_deref() != Some("public"))
        .map(|r| &r.id)
        .collect();
    assert!(blank.is_empty(), "done with {} blank rows", blank.len());
    assert_eq!(p.filled, 200, "{p:?}");
}
