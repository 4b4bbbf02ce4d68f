//! The cost of `storage.durability` (issue 8): remember throughput with 32 concurrent clients
//! and the feedback accept latency a framework sees, with `process` (acknowledged after the
//! Lance commit) and `power` (the commit's files and directories fsynced first).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use scopemem::embed::{Embedder, FastEmbedder, ModelFiles};
use serde_json::json;

const CLIENTS: usize = 32;
/// Remembers and feedback accepts per mode (a few in a smoke run).
fn remembers() -> usize {
    common::scaled(2048, 64)
}
fn accepts() -> usize {
    common::scaled(800, 16)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _runtime = rt.enter();
    let embedder: Arc<dyn Embedder> = Arc::new(
        FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("model (run `make setup`)"),
    );
    for mode in ["process", "power"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = json!({"db_dir": tmp.path().to_string_lossy(), "durability": mode});
        let host = Arc::new(rt.block_on(host_on(
            tmp.path(),
            embedder.clone(),
            json!({"storage": storage, "feedback": {"queue_capacity": accepts() + 1}}),
        )));
        let per = remembers() / CLIENTS;
        let t = Instant::now();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for c in 0..CLIENTS {
                let host = host.clone();
                tasks.push(tokio::spawn(async move {
                    let mut rng = Rng(c as u64 + 7);
                    for _ in 0..per {
                        host.invoke(
                            "remember",
                            json!({"conversation_id": format!("bench:{c}"), "content": sentence(&mut rng)}),
                        )
                        .await
                        .expect("remember");
                    }
                }));
            }
            for task in tasks {
                task.await.expect("client");
            }
        });
        let rate = (per * CLIENTS) as f64 / t.elapsed().as_secs_f64();

        // Accept latency: what the framework waits for (journal append + fsync). The worker
        // is not started, so applying jobs does not compete with accepting them.
        let mut times: Vec<Duration> = Vec::with_capacity(accepts());
        let mut rng = Rng(42);
        for i in 0..accepts() {
            let body = json!({"conversation_id": format!("bench:{}", i % 8),
                              "new_memories": [{"content": sentence(&mut rng)}]});
            let t = Instant::now();
            host.memory()
                .feedback()
                .accept(serde_json::from_value(body).expect("request"))
                .expect("accepted");
            times.push(t.elapsed());
        }
        let (p50, _, p99) = percentiles(times);
        let syncs = host
            .memory()
            .store()
            .writer()
            .counters()
            .durable_syncs
            .load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "RESULT durability {mode:<7}: remember {rate:.0}/s with {CLIENTS} clients ({syncs} synced commits); feedback accept p50 {p50:.2} ms p99 {p99:.2} ms"
        );
        rt.block_on(host.shutdown());
    }
}
