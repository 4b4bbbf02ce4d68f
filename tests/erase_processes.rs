//! Erase across processes: two `serve` processes and one `scopemem mcp` on one `db_dir`, with
//! remembers and feedback jobs from other chats committing all the while. A memory written
//! through one process and forgotten a moment later through another (by conversation, by ids,
//! or by scope from the CLI, a fourth process) is gone: the forget counts it, no process
//! recalls it, and no file under the directory holds its text.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::mcp_stdio::Mcp;
use common::serve::*;
use common::*;
use serde_json::{json, Value};

/// Mapped to its own scope in every process, for the scope-wide forget.
const FRIENDS: &str = "default:GroupMessage:31337";

/// How a round's memory is forgotten.
#[derive(Debug, Clone, Copy)]
enum Forget {
    Conversation,
    Ids,
    Scope,
}

/// Remembers (through both serves) and feedback jobs (through `a`) in the work chat until
/// `running` goes false; returns how many of each landed.
async fn keep_writing(a: String, b: String, running: Arc<AtomicBool>) -> (usize, usize) {
    let client = reqwest::Client::new();
    let (mut remembered, mut jobs) = (0, 0);
    let mut k = 0;
    while running.load(Ordering::Acquire) {
        k += 1;
        let base = if k % 2 == 0 { &a } else { &b };
        let r = client
            .post(format!("{base}/v1/remember"))
            .json(&json!({"conversation_id": WORK, "content": format!("filler {k}: the build is green")}))
            .send()
            .await;
        if r.is_ok_and(|r| r.status().is_success()) {
            remembered += 1;
        }
        if k % 3 == 0 {
            let r = client
                .post(format!("{a}/v1/feedback"))
                .json(&json!({"conversation_id": WORK,
                              "new_memories": [{"content": format!("feedback filler {k}: deploys run on Fridays")}]}))
                .send()
                .await;
            if r.is_ok_and(|r| r.status().as_u16() == 202) {
                jobs += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    (remembered, jobs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_rounds_of_write_here_forget_there_leave_nothing_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let extra = json!({"conversation_scope_map": {
        FAMILY: "家人", WORK: "工作", FRIENDS: "闺蜜"}});
    let a = spawn_serve(dir.path(), "a", extra.clone()).await;
    let b = spawn_serve(dir.path(), "b", extra).await;
    let config = dir.path().join("a.json");
    let mut mcp = Mcp::spawn(&config);
    let client = reqwest::Client::new();
    let running = Arc::new(AtomicBool::new(true));
    let writer = tokio::spawn(keep_writing(
        a.base.clone(),
        b.base.clone(),
        running.clone(),
    ));

    let serves = [&a, &b];
    let mut erased: Vec<(String, String)> = Vec::new(); // (conversation, text)
    let mut timings = Vec::new();
    for round in 0..50usize {
        let how = match round % 10 {
            9 => Forget::Scope,
            r if r % 2 == 0 => Forget::Conversation,
            _ => Forget::Ids,
        };
        let conversation = match how {
            Forget::Conversation => format!("default:GroupMessage:55{round:03}"),
            Forget::Ids => FAMILY.to_string(),
            Forget::Scope => FRIENDS.to_string(),
        };
        let text = format!("zq-erase-{round:02}-k7 the spare key is under the blue pot");
        // Written through a serve or the MCP process, forgotten through the other serve.
        let (id, eraser) = match round % 3 {
            2 => {
                let r = mcp.call(
                    "core_memory_remember",
                    &conversation,
                    json!({"content": text}),
                );
                (
                    r["memory"]["id"].as_str().unwrap().to_string(),
                    serves[round % 2],
                )
            }
            w => {
                let (status, r) = post(
                    &client,
                    serves[w],
                    "/v1/remember",
                    json!({"conversation_id": conversation, "content": text}),
                )
                .await;
                assert_eq!(status, 200, "round {round}: {r}");
                (
                    r["memory"]["id"].as_str().unwrap().to_string(),
                    serves[1 - w],
                )
            }
        };
        let started = Instant::now();
        let deleted = match how {
            Forget::Conversation | Forget::Ids => {
                let body = match how {
                    Forget::Ids => json!({"conversation_id": conversation, "memory_ids": [id]}),
                    _ => json!({"conversation_id": conversation}),
                };
                let (status, r) = post(&client, eraser, "/v1/forget", body).await;
                assert_eq!(status, 200, "round {round} ({how:?}): {r}");
                r["deleted"].as_u64().unwrap()
            }
            Forget::Scope => {
                let cfg = config.to_str().unwrap().to_string();
                let (code, out, err) = tokio::task::spawn_blocking(move || {
                    scopemem(&["forget", "--scope", "闺蜜", "--yes", "--config", &cfg])
                })
                .await
                .unwrap();
                assert_eq!(code, 0, "round {round}: {out}{err}");
                assert!(
                    out.starts_with("deleted 1 memories"),
                    "round {round}: {out}"
                );
                1
            }
        };
        timings.push(started.elapsed());
        assert_eq!(
            deleted, 1,
            "round {round} ({how:?}) missed the row just written"
        );
        erased.push((conversation, text));
    }
    running.store(false, Ordering::Release);
    let (remembered, jobs) = writer.await.unwrap();
    assert!(
        remembered > 50,
        "the concurrent writer landed only {remembered} remembers"
    );
    assert!(
        jobs > 10,
        "the concurrent writer landed only {jobs} feedback jobs"
    );

    // Nothing recalls any erased memory, in any process.
    for (conversation, text) in &erased {
        for s in serves {
            let hits = recalled(&client, s, conversation, text).await;
            assert!(
                hits.iter().all(|m| m["content"] != text.as_str()),
                "{} still recalls {text}",
                s.base
            );
        }
        let r = mcp.call(
            "core_memory_recall",
            conversation,
            json!({"query": text, "limit": 50}),
        );
        assert!(!r.to_string().contains(text.as_str()), "mcp recalls {text}");
    }
    // No file under the directory (tables, journals, state, logs) holds any erased text.
    let mut left = Vec::new();
    for (_, text) in &erased {
        let marker = &text[..12];
        for f in files_containing(dir.path(), marker) {
            left.push(format!("{marker} in {f}"));
        }
    }
    timings.sort();
    println!(
        "RESULT 50 rounds of write-here-forget-there beside {remembered} remembers and {jobs} feedback jobs: forget p50 {:?}, max {:?}; files still holding erased text: {}",
        timings[timings.len() / 2],
        timings[timings.len() - 1],
        left.len()
    );
    assert!(
        left.is_empty(),
        "erased text left on disk:\n{}",
        left.join("\n")
    );
    // Both serves came through it all and still answer.
    for s in serves {
        let r = client.get(format!("{}/v1/status", s.base)).send().await;
        let code = r.as_ref().map(|r| r.status().as_u16());
        assert!(matches!(code, Ok(200)), "{}: {code:?}", s.base);
    }
}

/// Feedback accepted by one process, its conversation forgotten through another. Process `a`
/// journals each job (with its text) and applies it; `b` erases the conversation, sometimes
/// before `a` has applied the job, sometimes after. From the moment the forget returns no
/// process recalls the text, and within a bounded time no file holds it (not `a`'s journal
/// either). Before, `a`'s journal kept every
/// such text until `a` itself erased something or restarted, and a job `a` applied just after
/// `b`'s delete wrote its memory back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_accepted_here_and_erased_there_leaves_no_copy_in_any_journal() {
    let dir = tempfile::tempdir().unwrap();
    let a = spawn_serve(dir.path(), "a", json!({})).await;
    let b = spawn_serve(dir.path(), "b", json!({})).await;
    let client = reqwest::Client::new();
    let mut erased = Vec::new();
    for round in 0..20usize {
        let conversation = format!("default:GroupMessage:66{round:03}");
        let text = format!("zq-fb-{round:02}-k9 the red kite nests behind the old mill");
        let (status, r) = post(
            &client,
            &a,
            "/v1/feedback",
            json!({"conversation_id": conversation, "new_memories": [{"content": text}]}),
        )
        .await;
        assert_eq!(status, 202, "round {round}: {r}");
        // Forget at once (the job is likely still queued in `a`), or once it has been applied.
        if round % 2 == 1 {
            let job = r["job_id"].as_str().unwrap();
            let url = format!("{}/v1/feedback/{job}", a.base);
            let mut state = Value::Null;
            for _ in 0..200 {
                state = client.get(&url).send().await.unwrap().json().await.unwrap();
                if state["state"] == "done" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            assert_eq!(state["state"], "done", "round {round}: {state}");
        }
        // Each erase prunes every older version, and `a` erases again what its jobs wrote
        // across `b`'s erases: on a loaded machine a forget whose reads keep meeting files
        // pruned that way answers 503 store_busy (seen once in a fresh-clone `make test`), and
        // a client tries again.
        let (status, r) = post_retrying_busy(
            &client,
            &b,
            "/v1/forget",
            json!({"conversation_id": conversation}),
        )
        .await;
        assert_eq!(status, 200, "round {round}: {r}");
        // Once the forget has returned, no process on this machine serves the row: not `a`,
        // whose view of the table and resident copy were read before the erase
        // (`memory::erase_generation`). No wait, no retry.
        for s in [&a, &b] {
            let hits = recalled(&client, s, &conversation, &text).await;
            assert!(
                hits.is_empty(),
                "round {round}: {} recalls {text} after the forget returned: {hits:?}",
                s.base
            );
        }
        erased.push((conversation, text));
    }
    let started = Instant::now();
    let leftovers = || {
        erased
            .iter()
            .flat_map(|(_, text)| files_containing(dir.path(), &text[..11]))
            .collect::<Vec<_>>()
    };
    let mut left = leftovers();
    while !left.is_empty() && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = leftovers();
    }
    println!(
        "RESULT 20 feedback-here-forget-there rounds: every copy gone {:?} after the last forget; files still holding text: {}",
        started.elapsed(),
        left.len()
    );
    assert!(left.is_empty(), "erased text left on disk:\n{left:#?}");
    for (conversation, text) in &erased {
        for s in [&a, &b] {
            let hits = recalled(&client, s, conversation, text).await;
            assert!(hits.is_empty(), "{} still recalls {text}: {hits:?}", s.base);
        }
    }
}
