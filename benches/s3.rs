//! Scale-out on object storage (issue 12): remember throughput and recall latency for one, two
//! and three instances sharing one table in a bucket on a local S3 API (`moto_server`), beside
//! one instance on a local directory; and how many object-store requests one remember and one
//! recall cost, counted from the server's request log. Loopback understates a real network's
//! latency, so the request counts are the figures to carry over: multiply by your store's
//! round trip.

mod common;
#[path = "../tests/common/moto.rs"]
mod moto;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use scopemem::host::PluginHost;
use serde_json::{json, Value};

/// Remembers per configuration, spread over the instances by 8 concurrent clients.
/// Remembers and recalls per configuration, and calls counted one by one (fewer in a smoke run).
fn remembers() -> usize {
    common::scaled(400, 16)
}
const CLIENTS: usize = 8;
fn recalls() -> usize {
    common::scaled(200, 4)
}
/// Sequential operations whose requests are counted.
fn counted() -> usize {
    common::scaled(40, 4)
}

fn storage(db: Value, moto: &moto::Moto, state: &std::path::Path, remote: bool) -> Value {
    if remote {
        json!({"db_dir": db, "options": moto.options(), "state_dir": state})
    } else {
        json!({"db_dir": db, "state_dir": state})
    }
}

fn start(
    rt: &tokio::runtime::Runtime,
    embedder: &Arc<dyn scopemem::embed::Embedder>,
    storage: Value,
) -> Arc<PluginHost> {
    let config = scopemem::config::Config::from_value(&json!({
        "storage": storage,
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
    }))
    .expect("config")
    .config;
    let host = rt
        .block_on(PluginHost::start_with(config, None, embedder.clone()))
        .expect("host");
    host.start_background();
    Arc::new(host)
}

fn remember_load(rt: &tokio::runtime::Runtime, hosts: &[Arc<PluginHost>]) -> f64 {
    let per = remembers() / CLIENTS;
    let t = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let host = hosts[c % hosts.len()].clone();
            tasks.push(tokio::spawn(async move {
                let mut rng = Rng(c as u64 + 7);
                for _ in 0..per {
                    host.invoke(
                        "remember",
                        json!({"conversation_id": format!("bench:{}", c % 4), "content": sentence(&mut rng)}),
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
    (per * CLIENTS) as f64 / t.elapsed().as_secs_f64()
}

fn recall_latency(rt: &tokio::runtime::Runtime, hosts: &[Arc<PluginHost>]) -> (f64, f64) {
    let mut rng = Rng(31);
    let mut times = Vec::with_capacity(recalls());
    for i in 0..recalls() {
        let body = json!({"conversation_id": "bench:1", "query": question(&mut rng), "limit": 10});
        let t = Instant::now();
        rt.block_on(hosts[i % hosts.len()].invoke("recall", body))
            .expect("recall");
        times.push(t.elapsed());
    }
    let (p50, _, p99) = percentiles(times);
    (p50, p99)
}

/// Recall latency on the first instance while the others remember as fast as 2 clients each
/// can: the cost of following their appends. Also how many of these recalls' searches (a
/// hybrid recall makes a vector and a keyword search) the in-memory copy answered; the rest
/// went to LanceDB.
fn recall_during_writes(
    rt: &tokio::runtime::Runtime,
    hosts: &[Arc<PluginHost>],
) -> (f64, f64, u64, u64) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for (i, host) in hosts.iter().enumerate().skip(1) {
        for c in 0..2 {
            let (host, stop) = (host.clone(), stop.clone());
            writers.push(rt.spawn(async move {
                let mut rng = Rng((i * 10 + c) as u64 + 500);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    host.invoke(
                        "remember",
                        json!({"conversation_id": "bench:1", "content": sentence(&mut rng)}),
                    )
                    .await
                    .expect("remember");
                }
            }));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = hosts[0].memory().store().resident().stats();
    let (p50, p99) = recall_latency(rt, &hosts[..1]);
    let after = hosts[0].memory().store().resident().stats();
    let from_memory = |s: &scopemem::store::resident::ResidentStats| s.served + s.keyword_served;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        rt.block_on(w).expect("writer");
    }
    (
        p50,
        p99,
        from_memory(&after) - from_memory(&before),
        after.deferred - before.deferred,
    )
}

/// Requests per operation on one instance, counted call by call (`counted()` sequential calls,
/// each followed by a short pause so its requests are logged before the next starts): the
/// median is what a typical call costs, the mean adds what they set off in the background
/// (compaction every few dozen remembers, the lease renewal).
fn requests_per_op(
    rt: &tokio::runtime::Runtime,
    moto: &moto::Moto,
    host: &PluginHost,
    op: impl Fn(usize) -> (&'static str, Value),
) -> (u64, f64, moto::Requests) {
    let first = moto.requests();
    let mut counts = Vec::with_capacity(counted());
    for i in 0..counted() {
        let before = moto.requests();
        let (tool, body) = op(i);
        rt.block_on(host.invoke(tool, body)).expect(tool);
        std::thread::sleep(Duration::from_millis(100));
        counts.push(moto.requests().since(&before).total());
    }
    let all = moto.requests().since(&first);
    counts.sort_unstable();
    let mean = counts.iter().sum::<u64>() as f64 / counted() as f64;
    (counts[counted() / 2], mean, all)
}

fn main() {
    let rt = runtime();
    let _guard = rt.enter();
    let embedder = model();
    let moto = rt.block_on(moto::Moto::start());
    println!(
        "RESULT s3 bench: {} remembers by {CLIENTS} clients, {} recalls (k=10), per configuration",
        remembers(),
        recalls()
    );
    for (remote, instances) in [(false, 1usize), (true, 1), (true, 2), (true, 3)] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let db = if remote {
            json!(rt.block_on(moto.bucket(&format!("bench-{instances}"), "memories")))
        } else {
            json!(tmp.path().join("db"))
        };
        let hosts: Vec<Arc<PluginHost>> = (0..instances)
            .map(|i| {
                let state = tmp.path().join(format!("state-{i}"));
                start(&rt, &embedder, storage(db.clone(), &moto, &state, remote))
            })
            .collect();
        let before = moto.requests();
        let per_sec = remember_load(&rt, &hosts);
        let remember_requests = moto.requests().since(&before).total() as f64 / remembers() as f64;
        let commits: u64 = hosts
            .iter()
            .map(|h| {
                let c = h.memory().store().writer().counters();
                c.commits.load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum();
        // Every instance sees every row before recall is timed.
        for h in &hosts {
            while rt.block_on(h.memory().store().count(None)).expect("count") < remembers() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let (p50, p99) = recall_latency(&rt, &hosts);
        println!(
            "RESULT {:<5} {} instance{}: remember {per_sec:>4.0}/s ({commits} commits, {remember_requests:.1} requests per row), recall p50 {p50:.2} ms p99 {p99:.2} ms",
            if remote { "s3" } else { "local" },
            instances,
            if instances == 1 { " " } else { "s" },
        );
        if instances > 1 {
            let (p50, p99, served, deferred) = recall_during_writes(&rt, &hosts);
            println!(
                "RESULT {:<5} {instances} instances: recall on one while the others remember: p50 {p50:.2} ms p99 {p99:.2} ms (vector and keyword searches: {served} from memory, {deferred} from LanceDB)",
                "s3"
            );
        }
        for h in &hosts {
            rt.block_on(h.shutdown());
        }
    }

    // Requests per operation, one instance on the bucket.
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = json!(rt.block_on(moto.bucket("bench-requests", "memories")));
    let host = start(
        &rt,
        &embedder,
        storage(db, &moto, &tmp.path().join("state"), true),
    );
    remember_load(&rt, std::slice::from_ref(&host));
    std::thread::sleep(Duration::from_secs(2));
    let before = moto.requests();
    let idle = Duration::from_secs(10);
    std::thread::sleep(idle);
    let idle_requests = moto.requests().since(&before);
    let idle_per_sec = idle_requests.total() as f64 / idle.as_secs_f64();
    let mut rng = Rng(5);
    let sentences: Vec<String> = (0..counted()).map(|_| sentence(&mut rng)).collect();
    let questions: Vec<String> = (0..counted()).map(|_| question(&mut rng)).collect();
    let (remember, remember_mean, r_during) = requests_per_op(&rt, &moto, &host, |i| {
        (
            "remember",
            json!({"conversation_id": "bench:count", "content": sentences[i]}),
        )
    });
    // Let the compaction those remembers triggered finish before recalls are counted.
    std::thread::sleep(Duration::from_secs(5));
    let (recall, recall_mean, q_during) = requests_per_op(&rt, &moto, &host, |i| {
        (
            "recall",
            json!({"conversation_id": "bench:count", "query": questions[i], "limit": 10}),
        )
    });
    println!(
        "RESULT s3 idle instance: {idle_per_sec:.1} requests/s ({idle_requests:?} in {idle:?})"
    );
    println!(
        "RESULT s3 requests per remember: median {remember}, mean {remember_mean:.1} ({} sequential remembers: {r_during:?})",
        counted()
    );
    println!(
        "RESULT s3 requests per recall: median {recall}, mean {recall_mean:.1} ({} sequential recalls: {q_during:?})",
        counted()
    );
    rt.block_on(host.shutdown());
}
