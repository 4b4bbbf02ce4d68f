//! Chat-framework paths (issue 4): `on_llm_request` latency at 100k rows, feedback throughput
//! with the journal on (fsync per accepted job), and the accept latency a framework sees.
//! Reuses the 100k-row dataset of real embeddings cached by the recall bench (built if absent).
//! `SCOPEMEM_BENCH_SIZES` limits the table size (default 100000).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use scopemem::embed::{Embedder, FastEmbedder, ModelFiles};
use serde_json::json;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _runtime = rt.enter(); // start_background spawns tasks
    let embedder: Arc<dyn Embedder> = Arc::new(
        FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("model (run `make setup`)"),
    );
    let n: usize = std::env::var("SCOPEMEM_BENCH_SIZES")
        .ok()
        .and_then(|s| s.split(',').next_back().and_then(|x| x.trim().parse().ok()))
        .unwrap_or(common::scaled(100_000, 300));

    // on_llm_request at n rows: chained recall (pool 100) + injection rendering, end to end.
    let (dir, store) = rt.block_on(dataset(&embedder, n));
    rt.block_on(store.shutdown());
    let host = rt.block_on(host_on(
        &dir,
        embedder.clone(),
        json!({"conversation_scope_map": {"bench:conv": "scope_07"}}),
    ));
    host.start_background();
    // Let the background index build (if due) finish so both runs see the same strategy.
    for _ in 0..1200 {
        if host.memory().search().is_indexed() || n < 50_000 {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (times, injected) = timed_llm_requests(&rt, &host);
    let (p50, p95, p99) = percentiles(times);
    println!(
        "RESULT {n} rows: on_llm_request p50 {p50:.2} ms  p95 {p95:.2} ms  p99 {p99:.2} ms (vector index: {}, {:.1} memories injected on average)",
        host.memory().search().is_indexed(),
        injected
    );
    rt.block_on(host.shutdown());
    drop(host);

    // Feedback throughput on a fresh table: 8 clients submit jobs (1 new memory + 2 useful ids
    // each); time until the worker has applied them all.
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = Arc::new(rt.block_on(host_on(
        tmp.path(),
        embedder.clone(),
        json!({"feedback": {"queue_capacity": 4096}}),
    )));
    host.start_background();
    let mut rng = Rng(3);
    let ids: Vec<String> = (0..scaled(200, 10))
        .map(|_| {
            let r = rt
                .block_on(host.invoke(
                    "remember",
                    json!({"conversation_id": "bench:fb", "content": sentence(&mut rng)}),
                ))
                .expect("remember");
            r["memory"]["id"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    let ids = Arc::new(ids);
    let jobs_per_client = scaled(100, 4);
    let clients = 8;
    let t = Instant::now();
    let (job_ids, accept_times) = rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (host, ids) = (host.clone(), ids.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(100 + c as u64);
                let mut out = Vec::new();
                let mut lat = Vec::new();
                for j in 0..jobs_per_client {
                    let useful = [ids[(c * 31 + j) % ids.len()].clone(), ids[(c * 17 + j * 7) % ids.len()].clone()];
                    let t = Instant::now();
                    let r = host
                        .invoke("feedback", json!({"conversation_id": "bench:fb", "useful_memory_ids": useful, "new_memories": [{"content": sentence(&mut rng)}]}))
                        .await
                        .expect("feedback");
                    lat.push(t.elapsed());
                    out.push(r["job_id"].as_str().unwrap_or_default().to_string());
                }
                (out, lat)
            }));
        }
        let mut all = Vec::new();
        let mut lat = Vec::new();
        for task in tasks {
            let (o, l) = task.await.expect("client");
            all.extend(o);
            lat.extend(l);
        }
        (all, lat)
    });
    let accepted_in = t.elapsed().as_secs_f64();
    for job in &job_ids {
        rt.block_on(
            host.memory()
                .feedback()
                .wait_for(job, Duration::from_secs(600)),
        );
    }
    let secs = t.elapsed().as_secs_f64();
    let (a50, a95, _) = percentiles(accept_times);
    println!(
        "RESULT feedback: {} jobs applied in {secs:.1} s = {:.0} jobs/s with the journal fsynced (accepting all took {accepted_in:.1} s; accept p50 {a50:.2} ms p95 {a95:.2} ms)",
        job_ids.len(),
        job_ids.len() as f64 / secs
    );
    rt.block_on(host.shutdown());
}
