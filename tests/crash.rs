//! kill -9 of a real `scopemem serve` at random moments: under 8 concurrent writers, and in the
//! middle of a backfill. After each restart every acknowledged write is there, no id appears
//! twice, and the row count never exceeds acknowledged plus in flight.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::serve::*;
use common::*;
use scopemem::embed::ModelInfo;
use scopemem::store::WriterSettings;
use serde_json::json;

/// Every id in the table, read by a fresh store as another process would.
async fn ids_on_disk(db: &std::path::Path) -> Vec<String> {
    let model = ModelInfo {
        id: embedder().model_id().to_string(),
        dimension: embedder().dimension(),
    };
    let (store, _) =
        scopemem::migrate::open_store(db, "memories", &model, WriterSettings::default())
            .await
            .unwrap();
    let ids = store.ids_where("id IS NOT NULL").await.unwrap();
    store.shutdown().await;
    ids
}

/// A cheap deterministic pseudo-random sequence (no extra dependency).
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_under_eight_writers_loses_and_doubles_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    let attempted = Arc::new(AtomicUsize::new(0));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..5 {
        let serve = spawn_serve(dir.path(), &format!("round{round}"), json!({})).await;
        let base = serve.base.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..8 {
            let (base, acknowledged, attempted, stop) = (
                base.clone(),
                acknowledged.clone(),
                attempted.clone(),
                stop.clone(),
            );
            writers.push(tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    attempted.fetch_add(1, Ordering::SeqCst);
                    let conversation = [FAMILY, WORK, "default:FriendMessage:7"][n % 3];
                    let r = client
                        .post(format!("{base}/v1/remember"))
                        .json(&json!({"conversation_id": conversation,
                                      "content": format!("round {round} writer {w} note {n}")}))
                        .timeout(Duration::from_secs(20))
                        .send()
                        .await;
                    let Ok(r) = r else { break };
                    if r.status().as_u16() != 200 {
                        break;
                    }
                    let Ok(body) = r.json::<serde_json::Value>().await else {
                        break;
                    };
                    if let Some(id) = body["memory"]["id"].as_str() {
                        acknowledged.lock().unwrap().push(id.to_string());
                    }
                }
            }));
        }
        let wait_ms = 400 + next_random(&mut seed) % 1600;
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let mut serve = serve;
        serve.kill9();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.await.unwrap();
        }

        let on_disk = ids_on_disk(&db).await;
        let unique: HashSet<&String> = on_disk.iter().collect();
        assert_eq!(
            unique.len(),
            on_disk.len(),
            "round {round}: an id appears twice"
        );
        let acked = acknowledged.lock().unwrap().clone();
        for id in &acked {
            assert!(
                unique.contains(id),
                "round {round}: acknowledged {id} is lost"
            );
        }
        let tried = attempted.load(Ordering::SeqCst);
        // At each kill at most one request per writer was in flight, unacknowledged.
        let in_flight_bound = 8 * (round + 1);
        assert!(
            on_disk.len() <= acked.len() + in_flight_bound,
            "round {round}: {} rows, more than {} acknowledged + {in_flight_bound} in flight",
            on_disk.len(),
            acked.len()
        );
        println!(
            "RESULT kill -9 round {round} after {wait_ms} ms: {} acknowledged, {} rows, {} sent",
            acked.len(),
            on_disk.len(),
            tried
        );
    }
    assert!(
        acknowledged.lock().unwrap().len() >= 5,
        "the writers got through"
    );
}

#[tokio::test]
async fn kill9_during_a_backfill_resumes_and_fills_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    make_legacy_table(&db, &legacy_rows(600, "gardening"), false, false).await;
    let slow = json!({"backfill": {"batch_size": 20, "pause_ms": 20, "pacing": "fixed"}});
    let client = reqwest::Client::new();

    let mut serve = spawn_serve(dir.path(), "first", slow.clone()).await;
    let started = Instant::now();
    loop {
        let s = status(&client, &serve).await;
        let filled = s["migration"]["filled"].as_u64().unwrap_or(0);
        if filled >= 100 {
            assert!(filled < 600, "the kill must land mid-way: {s}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no progress: {s}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serve.kill9();

    let serve = spawn_serve(dir.path(), "second", slow).await;
    let started = Instant::now();
    let done = loop {
        let s = status(&client, &serve).await;
        if s["migration"]["state"] == "done" {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not resumed: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["migration"]["filled"], 600, "{done}");
    assert_eq!(done["rows"], 600, "{done}");
    assert_eq!(done["null_scope_rows"], 0, "{done}");
    assert_eq!(done["rows_by_scope"]["public"], 600, "{done}");
    drop(serve);
    let ids = ids_on_disk(&db).await;
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 600);
}

#[tokio::test]
async fn power_durability_fsyncs_every_acknowledged_write_and_process_does_not() {
    for (mode, expect_syncs) in [("power", true), ("process", false)] {
        let dir = tempfile::tempdir().unwrap();
        let config = scopemem::config::Config::from_value(&json!({
            "conversation_scope_map": family_map(),
            "storage": {"db_dir": dir.path().join("db").to_string_lossy(), "durability": mode},
        }))
        .unwrap()
        .config;
        let host = host(config).await;
        for i in 0..3 {
            remember(&host, FAMILY, &format!("durable note {i}")).await;
        }
        host.invoke("forget", json!({"conversation_id": WORK}))
            .await
            .unwrap();
        let syncs = host
            .memory()
            .store()
            .writer()
            .counters()
            .durable_syncs
            .load(Ordering::Relaxed);
        if expect_syncs {
            assert!(syncs >= 4, "{mode}: {syncs} synced commits");
        } else {
            assert_eq!(syncs, 0, "{mode}");
        }
        assert_eq!(rows(&host).await, 3);
        host.shutdown().await;
    }
    let bad = scopemem::config::Config::from_value(&json!({"storage": {"durability": "disk"}}))
        .unwrap_err()
        .to_string();
    assert!(bad.contains("storage.durability"), "{bad}");
}

/// Issue 50: four `scopemem serve` started at once on an empty `db_dir` (the AstrBot plugin's
/// serve and an MCP client's, a CLI, on a new install): every one comes up and they share one
/// table. Before `migrate::first_open`, one of two such starts exited with "Table 'memories'
/// was not found" (5 times under load). 5 rounds of whole processes (about 20 s); the 20
/// rounds of four openers are `store::four_openers_starting_at_once…`, the same opening path
/// with four connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_serves_started_at_once_on_an_empty_directory_all_come_up() {
    let client = reqwest::Client::new();
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..4).map(|i| format!("first-start-{i}")).collect();
        let serves =
            futures::future::join_all(names.iter().map(|n| spawn_serve(dir.path(), n, json!({}))))
                .await;
        let (code, _) = post(
            &client,
            &serves[0],
            "/v1/remember",
            json!({"conversation_id": FAMILY, "content": format!("round {round} dinner at seven")}),
        )
        .await;
        assert_eq!(code, 200, "round {round}");
        // One table: every process sees the row (another process's write within
        // storage.read_consistency_ms, so waited for, with a generous cap).
        for s in &serves {
            let started = Instant::now();
            loop {
                let st = status(&client, s).await;
                if st["rows"] == 1 {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "round {round}: the row never showed: {st}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
