//! Reads beside another process's erases (issue 50): two `scopemem serve` on one `db_dir` with
//! the default config, as the AstrBot plugin's serve and an MCP client's share it. Process A
//! answers recalls from 4 clients without pause; process B, every 1.5 s, remembers a memory in
//! a conversation of its own and forgets that conversation (an erase: delete, rewrite, prune,
//! notice, erase generation). `make bench-erase-reads`; set `SCOPEMEM_BENCH_SERVE_BIN` to the
//! release binary users get.
//!
//! Prints: reads, how many were not 200, their latency (p50 / p95 / p99 / max), the erases and
//! their latency, and how many reads in A returned a memory whose forget through B had already
//! returned (the promise: 0 on one machine). `SCOPEMEM_BENCH_ERASE_SECS` sets the duration
//! (default 60; `SCOPEMEM_BENCH_SMOKE=1`: 5 s over 20 memories).

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::serve::{post, start_serve};

const READERS: usize = 4;
const SEED: usize = 200;
const ERASE_EVERY: Duration = Duration::from_millis(1500);
const SEED_TOPICS: [&str; 8] = [
    "奶奶喜欢在阳台上种兰花",
    "周五下午三点开项目例会",
    "Grandpa's favourite dish is braised pork",
    "小明下个月去上海出差",
    "The dentist appointment moved to Tuesday",
    "妈妈对青霉素过敏",
    "The wifi password is on the fridge",
    "周末一起去爬香山",
];
const QUERIES: [&str; 6] = [
    "奶奶喜欢什么花",
    "例会几点开",
    "what does grandpa like to eat",
    "妈妈对什么过敏",
    "when is the dentist",
    "周末去哪",
];

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// The erased texts whose forget has returned, and when.
type Forgotten = Arc<Mutex<Vec<(String, Instant)>>>;

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let smoke = common::smoke();
    let secs: u64 = std::env::var("SCOPEMEM_BENCH_ERASE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 5 } else { 60 });
    let seed = if smoke { 20 } else { SEED };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let client = reqwest::Client::new();
    let start = |name: &str| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let cfg = json!({"storage": {"db_dir": db}});
        let client = client.clone();
        async move { start_serve(&client, &sub, cfg).await }
    };
    let (_a, a) = start("a").await.unwrap_or_else(|e| panic!("serve a: {e}"));
    let (_b, b) = start("b").await.unwrap_or_else(|e| panic!("serve b: {e}"));
    println!("seeding {seed} memories through a ...");
    for i in 0..seed {
        let body = json!({
            "conversation_id": format!("default:GroupMessage:{}", 900 + i % 10),
            "content": format!("{} (#{i})", SEED_TOPICS[i % SEED_TOPICS.len()]),
        });
        post(&client, &format!("{a}/v1/remember"), &body)
            .await
            .unwrap_or_else(|e| panic!("seed {i}: {e}"));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let forgotten: Forgotten = Arc::default();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let served_after_forget = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for r in 0..READERS {
        let (client, a, stop) = (client.clone(), a.clone(), stop.clone());
        let (forgotten, latencies, failed, served) = (
            forgotten.clone(),
            latencies.clone(),
            failed.clone(),
            served_after_forget.clone(),
        );
        readers.push(tokio::spawn(async move {
            let mut n = r;
            while !stop.load(Ordering::Relaxed) {
                n += READERS;
                // Half the reads ask the erasing process's conversations for their marker.
                let (conversation, query) = match n % 2 {
                    0 => (
                        format!("default:GroupMessage:{}", 900 + n % 10),
                        QUERIES[n % QUERIES.len()].to_string(),
                    ),
                    _ => (
                        "default:GroupMessage:990".to_string(),
                        "eraseme marker".to_string(),
                    ),
                };
                let asked = Instant::now();
                let r = client
                    .post(format!("{a}/v1/recall"))
                    .json(&json!({"conversation_id": conversation, "query": query, "limit": 20}))
                    .send()
                    .await;
                let took = asked.elapsed();
                let Ok(r) = r else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if !r.status().is_success() {
                    failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                latencies.lock().unwrap().push(took);
                let v: Value = r.json().await.unwrap_or(Value::Null);
                let gone: Vec<String> = forgotten
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(_, at)| *at < asked)
                    .map(|(t, _)| t.clone())
                    .collect();
                let hits = v["memories"].as_array().cloned().unwrap_or_default();
                if hits.iter().any(|m| {
                    gone.iter()
                        .any(|t| m["content"].as_str() == Some(t.as_str()))
                }) {
                    served.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    println!("{READERS} readers on a, one erase through b every {ERASE_EVERY:?}, for {secs} s ...");
    let started = Instant::now();
    let mut erase_times = Vec::new();
    let mut erase_errors = 0;
    let mut k = 0;
    while started.elapsed() < Duration::from_secs(secs) {
        let tick = Instant::now();
        let text = format!("eraseme marker {k} the blue heron");
        let conversation = "default:GroupMessage:990";
        let wrote = post(
            &client,
            &format!("{b}/v1/remember"),
            &json!({"conversation_id": conversation, "content": text}),
        )
        .await;
        let erased_at = Instant::now();
        let forgot = post(
            &client,
            &format!("{b}/v1/forget"),
            &json!({"conversation_id": conversation}),
        )
        .await;
        match (wrote, forgot) {
            (Ok(_), Ok(_)) => {
                erase_times.push(erased_at.elapsed());
                forgotten.lock().unwrap().push((text, Instant::now()));
            }
            (w, f) => {
                erase_errors += 1;
                eprintln!("erase round {k}: {w:?} {f:?}");
            }
        }
        k += 1;
        if let Some(rest) = ERASE_EVERY.checked_sub(tick.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.await;
    }
    let mut lat = std::mem::take(&mut *latencies.lock().unwrap());
    lat.sort();
    erase_times.sort();
    println!(
        "RESULT reads: {} answered 200, {} not (or no answer); p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        lat.len(),
        failed.load(Ordering::Relaxed),
        percentile(&lat, 0.50),
        percentile(&lat, 0.95),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0),
    );
    println!(
        "RESULT erases through b: {} (failed {erase_errors}); forget p50 {:.0} ms, max {:.0} ms",
        erase_times.len(),
        percentile(&erase_times, 0.5),
        percentile(&erase_times, 1.0),
    );
    println!(
        "RESULT reads in a that returned a memory whose forget through b had returned: {}",
        served_after_forget.load(Ordering::Relaxed)
    );
}
