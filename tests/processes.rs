//! Several real `scopemem serve` processes on one `db_dir`: each sees the others' writes within
//! the read-consistency interval, nothing crosses a scope, and jobs a killed process accepted
//! are adopted by the next process that starts.

use crate::common;

use std::time::{Duration, Instant};

use common::mcp_stdio::Mcp;
use common::serve::*;
use common::*;
use serde_json::{json, Value};

#[tokio::test]
async fn two_serve_processes_see_each_others_writes_and_keep_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_serve(dir.path(), "a", json!({})).await;
    let b = spawn_serve(dir.path(), "b", json!({})).await;
    let client = reqwest::Client::new();
    let mut delays = Vec::new();
    for i in 0..10 {
        let (writer, reader) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let conversation = if i % 3 == 0 { WORK } else { FAMILY };
        let content = format!("cross-process note {i} about the garden");
        let (status, r) = post(
            &client,
            writer,
            "/v1/remember",
            json!({"conversation_id": conversation, "content": content}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let written = Instant::now();
        loop {
            let hits = recalled(&client, reader, conversation, &content).await;
            if hits.iter().any(|m| m["content"] == content.as_str()) {
                delays.push(written.elapsed());
                break;
            }
            // The figure is printed; the cap only stops a hang (a loaded machine's recall
            // alone can take seconds).
            assert!(
                written.elapsed() < Duration::from_secs(60),
                "note {i} never became visible in the other process"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    delays.sort();
    println!(
        "RESULT cross-process visibility over {} writes: p50 {:?}, max {:?} (read_consistency_ms 500)",
        delays.len(),
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
    // Zero leaks: each process shows each conversation only its own scope and public.
    for s in [&a, &b] {
        for (conversation, own) in [(FAMILY, "家人"), (WORK, "工作")] {
            let hits = recalled(&client, s, conversation, "cross-process note").await;
            assert!(!hits.is_empty());
            for m in &hits {
                let scope = m["memory_scope"].as_str().unwrap_or("");
                assert!(scope == own || scope == "public", "{conversation} saw {m}");
            }
        }
    }
    let status = status(&client, &a).await;
    assert_eq!(status["rows"], 10, "no row lost or doubled: {status}");
}

#[tokio::test]
async fn jobs_a_killed_process_accepted_are_applied_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut a = spawn_serve(dir.path(), "a", json!({})).await;
    let b = spawn_serve(dir.path(), "b", json!({})).await;
    let mut jobs = Vec::new();
    for i in 0..20 {
        let (status, r) = post(
            &client,
            &a,
            "/v1/feedback",
            json!({"conversation_id": FAMILY,
                   "new_memories": [{"content": format!("reflection {i} on the trip")}]}),
        )
        .await;
        assert_eq!(status, 202, "{r}");
        jobs.push(r["job_id"].as_str().unwrap().to_string());
    }
    // kill -9 right after the 202s: some jobs are applied, the rest only journaled.
    a.kill9();
    // b is alive and must not take a's jobs behind its back; a restarted process adopts them.
    let c = spawn_serve(dir.path(), "c", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = status(&client, &c).await;
        if status["rows"] == 20 && status["feedback_queue_depth"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs were not all applied: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Exactly once: 20 rows, and each reflection appears once, in b too once b reads c's last
    // commit (at most `read_consistency_ms` after c made it).
    let seen = Instant::now();
    loop {
        let hits = recalled(&client, &b, FAMILY, "reflection on the trip").await;
        let counts: Vec<usize> = (0..20)
            .map(|i| {
                let text = format!("reflection {i} on the trip");
                hits.iter()
                    .filter(|m| m["content"] == text.as_str())
                    .count()
            })
            .collect();
        if counts.iter().all(|&n| n == 1) {
            break;
        }
        assert!(
            counts.iter().all(|&n| n <= 1) && seen.elapsed() < Duration::from_secs(60),
            "reflections 0..20 appear {counts:?} times in b"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_process_holds_the_maintenance_lease_and_the_next_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut a = spawn_serve(dir.path(), "a", json!({})).await;
    let b = spawn_serve(dir.path(), "b", json!({})).await;
    let (sa, sb) = (status(&client, &a).await, status(&client, &b).await);
    assert_eq!(sa["maintenance"]["this_process"], true, "{sa}");
    assert_eq!(sb["maintenance"]["this_process"], false, "{sb}");
    let a_pid = a.child.id();
    assert_eq!(sb["maintenance"]["holder"]["pid"], a_pid, "{sb}");

    // Admin commands beside the service say who holds it instead of fighting over the work.
    let cfg = dir.path().join("b.json");
    let out = std::process::Command::new(crate::common::scopemem_bin())
        .args(["migrate", "status", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["maintenance_lease"]["pid"], a_pid, "{s}");
    let out = std::process::Command::new(crate::common::scopemem_bin())
        .args(["migrate", "run", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("holds the maintenance lease") && err.contains(&a_pid.to_string()),
        "{err}"
    );

    a.kill9();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = status(&client, &b).await;
        if s["maintenance"]["this_process"] == true {
            assert_eq!(s["maintenance"]["holder"]["pid"], b.child.id(), "{s}");
            break;
        }
        assert!(Instant::now() < deadline, "b never took over: {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn one_serve_and_two_mcp_processes_share_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let serve = spawn_serve(dir.path(), "serve", json!({})).await;
    let cfg = dir.path().join("serve.json"); // the same db_dir and map
    let mcps: Vec<Mcp> = (0..2).map(|_| Mcp::spawn(&cfg)).collect();
    let mcps = std::sync::Arc::new(std::sync::Mutex::new(mcps));

    // Each process writes for both groups; each must see every other's writes within 1 s.
    let mut written = Vec::new();
    for round in 0..4 {
        for (i, conversation) in [FAMILY, WORK].iter().enumerate() {
            let text = format!("shared note r{round} c{i} from serve");
            let (status, r) = post(
                &client,
                &serve,
                "/v1/remember",
                json!({"conversation_id": conversation, "content": text}),
            )
            .await;
            assert_eq!(status, 200, "{r}");
            written.push((conversation.to_string(), text));
            for m in 0..2 {
                let text = format!("shared note r{round} c{i} from mcp{m}");
                let mcps = mcps.clone();
                let (c, t) = (conversation.to_string(), text.clone());
                let r = tokio::task::spawn_blocking(move || {
                    mcps.lock().unwrap()[m].call("core_memory_remember", &c, json!({"content": t}))
                })
                .await
                .unwrap();
                assert!(r["memory"]["id"].is_string(), "{r}");
                written.push((conversation.to_string(), text));
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Visible everywhere it may be, and nowhere it may not.
    for (conversation, own, other) in [(FAMILY, "家人", WORK), (WORK, "工作", FAMILY)] {
        let mine: Vec<&String> = written
            .iter()
            .filter(|(c, _)| c == conversation)
            .map(|(_, t)| t)
            .collect();
        let hits = recalled(&client, &serve, conversation, "shared note").await;
        for t in &mine {
            assert!(
                hits.iter().any(|m| m["content"] == t.as_str()),
                "serve does not see {t}"
            );
        }
        for m in 0..2 {
            let mcps = mcps.clone();
            let r = tokio::task::spawn_blocking(move || {
                mcps.lock().unwrap()[m].call(
                    "core_memory_recall",
                    conversation,
                    json!({"query": "shared note", "limit": 100}),
                )
            })
            .await
            .unwrap();
            let hits = r["memories"].as_array().cloned().unwrap_or_default();
            for t in &mine {
                assert!(
                    hits.iter().any(|h| h["content"] == t.as_str()),
                    "mcp{m} does not see {t} within 1 s"
                );
            }
            for h in &hits {
                let scope = h["memory_scope"].as_str().unwrap_or("");
                assert!(
                    scope == own || scope == "public",
                    "leak into {other}'s view: {h}"
                );
            }
        }
    }
    let s = status(&client, &serve).await;
    assert_eq!(s["rows"], written.len(), "no row lost or doubled: {s}");
}

#[tokio::test]
async fn two_processes_starting_together_on_a_legacy_table_both_come_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    make_legacy_table(&db, &legacy_rows(200, "sailing"), false, false).await;
    // Both open the legacy table and apply the scope migration at the same moment.
    let (a, b) = tokio::join!(
        spawn_serve(dir.path(), "a", json!({})),
        spawn_serve(dir.path(), "b", json!({}))
    );
    let client = reqwest::Client::new();
    for s in [&a, &b] {
        let st = status(&client, s).await;
        assert_eq!(st["rows"], 200, "{st}");
    }
    let hits = recalled(&client, &b, FAMILY, "sailing").await;
    assert!(!hits.is_empty(), "legacy rows are recalled while migrating");
}
