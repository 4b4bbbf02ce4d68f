//! Several real `scopemem serve` processes on one `db_dir`: each sees the others' writes within
//! the read-consistency interval, nothing crosses a scope, and jobs a killed process accepted
//! are adopted by the next process that starts.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

struct Serve {
    child: Child,
    base: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn spawn_serve(dir: &std::path::Path, name: &str) -> Serve {
    let port = free_port();
    let cfg = dir.join(format!("{name}.json"));
    std::fs::write(
        &cfg,
        serde_json::to_vec(&json!({
            "storage": {"db_dir": dir.join("db"), "read_consistency_ms": 500},
            "server": {"http_addr": format!("127.0.0.1:{port}")},
            "conversation_scope_map": family_map(),
            "recall": {"similarity_threshold": -1.0},
        }))
        .unwrap(),
    )
    .unwrap();
    // Owned by `Serve` at once, so even a failed start is killed and reaped.
    let serve = Serve {
        child: Command::new(env!("CARGO_BIN_EXE_scopemem"))
            .args(["serve", "--config", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if client
            .get(format!("{}/healthz", serve.base))
            .send()
            .await
            .is_ok()
        {
            return serve;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} did not come up");
}

async fn post(client: &reqwest::Client, s: &Serve, path: &str, body: Value) -> (u16, Value) {
    let r = client
        .post(format!("{}{path}", s.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn recalled(
    client: &reqwest::Client,
    s: &Serve,
    conversation: &str,
    query: &str,
) -> Vec<Value> {
    let (status, r) = post(
        client,
        s,
        "/v1/recall",
        json!({"conversation_id": conversation, "query": query, "limit": 100}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    r["memories"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn two_serve_processes_see_each_others_writes_and_keep_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_serve(dir.path(), "a").await;
    let b = spawn_serve(dir.path(), "b").await;
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
            assert!(
                written.elapsed() < Duration::from_secs(5),
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
    let status: Value = client
        .get(format!("{}/v1/status", a.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["rows"], 10, "no row lost or doubled: {status}");
}

#[tokio::test]
async fn jobs_a_killed_process_accepted_are_applied_by_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut a = spawn_serve(dir.path(), "a").await;
    let b = spawn_serve(dir.path(), "b").await;
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
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    // b is alive and must not take a's jobs behind its back; a restarted process adopts them.
    let c = spawn_serve(dir.path(), "c").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status: Value = client
            .get(format!("{}/v1/status", c.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if status["rows"] == 20 && status["feedback_queue_depth"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs were not all applied: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Exactly once: 20 rows, and each reflection appears once.
    let hits = recalled(&client, &b, FAMILY, "reflection on the trip").await;
    for i in 0..20 {
        let text = format!("reflection {i} on the trip");
        let n = hits
            .iter()
            .filter(|m| m["content"] == text.as_str())
            .count();
        assert_eq!(n, 1, "{text} appears {n} times");
    }
}
