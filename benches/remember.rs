//! Remember throughput (issue 11): 1, 8 and 32 concurrent clients on a fresh table through the
//! host (validation, scope, embedding, the writer's group commit, maintenance beside it), and
//! the fragments 10k sequential single remembers leave behind (skipped with
//! `SCOPEMEM_BENCH_QUICK`).

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use serde_json::json;

fn main() {
    let rt = runtime();
    let _guard = rt.enter();
    let embedder = model();
    // Remember throughput with concurrent clients, on a fresh table.
    for clients in [1usize, 8, 32] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let host = Arc::new(rt.block_on(host_on(tmp.path(), embedder.clone(), json!({}))));
        let per = scaled(2000, 64) / clients;
        let t = Instant::now();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for c in 0..clients {
                let host = host.clone();
                tasks.push(tokio::spawn(async move {
                    let mut rng = Rng(c as u64 + 99);
                    for _ in 0..per {
                        host.invoke("remember", json!({"conversation_id": format!("bench:{c}"), "content": sentence(&mut rng)}))
                            .await
                            .expect("remember");
                    }
                }));
            }
            for task in tasks {
                task.await.expect("client");
            }
        });
        let secs = t.elapsed().as_secs_f64();
        let stats = rt.block_on(host.memory().store().stats()).expect("stats");
        println!(
            "RESULT remember throughput, {clients:>2} clients: {:.0} memories/s ({} rows, {} fragments)",
            (per * clients) as f64 / secs,
            stats.rows,
            stats.fragments
        );
        rt.block_on(host.shutdown());
    }

    if std::env::var("SCOPEMEM_BENCH_QUICK").is_err() && !smoke() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let host = rt.block_on(host_on(tmp.path(), embedder.clone(), json!({})));
        let mut rng = Rng(4242);
        let t = Instant::now();
        for i in 0..10_000 {
            rt.block_on(host.invoke(
                "remember",
                json!({"conversation_id": "bench:single", "content": sentence(&mut rng)}),
            ))
            .expect("remember");
            if i % 2000 == 1999 {
                let s = rt.block_on(host.memory().store().stats()).expect("stats");
                eprintln!("  {} single remembers: {} fragments", i + 1, s.fragments);
            }
        }
        let stats = rt.block_on(host.memory().store().stats()).expect("stats");
        println!(
            "RESULT 10k single remembers: {} fragments afterwards ({:.0} remembers/s, {} compactions)",
            stats.fragments,
            10_000.0 / t.elapsed().as_secs_f64(),
            host.memory().store().writer().counters().compactions.load(std::sync::atomic::Ordering::Relaxed)
        );
        rt.block_on(host.shutdown());
    }
}
