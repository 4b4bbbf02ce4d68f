//! End to end at 100k rows (issue 11), with whatever search design recall uses by default:
//! - the query embedding alone: new questions, and a question asked again (the query cache);
//! - `POST /v1/recall` over HTTP on loopback (one keep-alive connection, the real router and
//!   server), for `search` vector, keyword and hybrid;
//! - `on_llm_request` (chained recall + injection) through the host.
//!
//! It waits until the resident copy holds every row, so the figures are the steady state and
//! not the start-up window in which recall still goes to LanceDB. The resident search's
//! served/deferred counts are printed with the figures.
//!
//! Reuses the 100k-row dataset of real embeddings cached by the other benches.
//! Env: SCOPEMEM_BENCH_SIZES (default 100000).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use scopemem::host::PluginHost;
use serde_json::{json, Value};

fn report(label: &str, times: Vec<Duration>, extra: &str) {
    let (p50, p95, p99) = percentiles(times);
    println!("RESULT {label:<46} p50 {p50:>8.2} ms  p95 {p95:>8.2} ms  p99 {p99:>8.2} ms  {extra}");
}

fn main() {
    let rt = runtime();
    let _guard = rt.enter();
    let embedder = model();
    let n = sizes(&[100_000]).last().copied().unwrap_or(100_000);
    let (dir, store) = rt.block_on(dataset(&embedder, n));
    rt.block_on(store.shutdown());

    let host = Arc::new(rt.block_on(host_on(
        &dir,
        embedder.clone(),
        json!({"conversation_scope_map": {"bench:conv": "scope_07"}, "recall": {"similarity_threshold": 0.0, "similarity_cut": "fixed", "relevance_gate": false}}),
    )));
    host.start_background();
    let loaded = wait_resident(&rt, &host, n);
    eprintln!("resident copy ready: {loaded}");

    query_embedding(&rt, &embedder);
    let stats_before = resident(&rt, &host);
    over_http(&rt, &host, n);
    on_llm_request(&rt, &host, n);
    let stats_after = resident(&rt, &host);
    let delta = |key: &str| {
        stats_after[key].as_u64().unwrap_or(0) - stats_before[key].as_u64().unwrap_or(0)
    };
    println!(
        "RESULT resident search during these runs: vector searches served {}, keyword searches served {}, deferred to LanceDB {}",
        delta("served"),
        delta("keyword_served"),
        delta("deferred"),
    );
    if let Ok(host) = Arc::try_unwrap(host) {
        rt.block_on(host.shutdown());
    }
}

fn resident(rt: &tokio::runtime::Runtime, host: &PluginHost) -> Value {
    let status = rt
        .block_on(host.invoke("status", Value::Null))
        .expect("status");
    status["resident_search"].clone()
}

/// Wait (up to 10 minutes) until the resident copy holds all `n` rows.
fn wait_resident(rt: &tokio::runtime::Runtime, host: &PluginHost, n: usize) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(600) {
        let r = resident(rt, host);
        if r["rows"].as_u64().unwrap_or(0) as usize >= n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// The model alone on one question at a time, as a recall embeds it; then the same questions
/// again through the cache in front of it.
fn query_embedding(rt: &tokio::runtime::Runtime, embedder: &Arc<dyn scopemem::embed::Embedder>) {
    let mut rng = Rng(21);
    let questions: Vec<String> = (0..query_count()).map(|_| question(&mut rng)).collect();
    let mut times = Vec::new();
    for q in &questions {
        let t = Instant::now();
        rt.block_on(embedder.embed(scopemem::embed::TextRole::Query, vec![q.clone()]))
            .expect("embed");
        times.push(t.elapsed());
    }
    report("query embedding alone (model)", times, "");
    let cache = scopemem::embed::QueryCache::default();
    for q in &questions {
        rt.block_on(cache.embed(embedder.as_ref(), q))
            .expect("embed");
    }
    let mut times = Vec::new();
    for q in &questions {
        let t = Instant::now();
        rt.block_on(cache.embed(embedder.as_ref(), q))
            .expect("embed");
        times.push(t.elapsed());
    }
    report("query embedding, asked again (cache)", times, "");
}

/// `POST /v1/recall` through the real server on a loopback port.
fn over_http(rt: &tokio::runtime::Runtime, host: &Arc<PluginHost>, n: usize) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(scopemem::api::http::serve(
        host.clone(),
        listener,
        async move {
            let _ = stopped.await;
        },
    ));
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/recall");
    // Other questions per mode, so the query cache never serves one mode's questions to the next.
    for (seed, search) in [(7, "vector"), (8, "keyword"), (9, "hybrid")] {
        let mut rng = Rng(seed);
        let mut times = Vec::with_capacity(query_count());
        let mut hits = 0usize;
        for _ in 0..query_count() {
            let body = json!({"conversation_id": "bench:conv", "query": question(&mut rng),
                              "limit": K, "search": search});
            let t = Instant::now();
            let r: Value = rt
                .block_on(async { client.post(&url).json(&body).send().await?.json().await })
                .expect("recall over HTTP");
            times.push(t.elapsed());
            hits += r["memories"].as_array().map_or(0, Vec::len);
        }
        report(
            &format!("{n} rows: POST /v1/recall, search={search}"),
            times,
            &format!("{:.1} memories/recall", hits as f64 / query_count() as f64),
        );
    }
    let _ = stop.send(());
    let _ = rt.block_on(server);
}

fn on_llm_request(rt: &tokio::runtime::Runtime, host: &PluginHost, n: usize) {
    let (times, injected) = timed_llm_requests(rt, host);
    report(
        &format!("{n} rows: on_llm_request"),
        times,
        &format!("{injected:.1} memories injected"),
    );
}
