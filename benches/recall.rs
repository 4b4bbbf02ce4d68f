//! Recall and remember benchmarks (issue 2), on real model embeddings of memory-like sentences.
//!
//! Prints, for 10k and 100k rows in 50 scopes + 30% public (k = 10, scope + public prefilter):
//! search-only p50/p95/p99 for exact flat search and for the cosine IVF_HNSW_SQ index (with and
//! without refine) plus recall@10 against exact filtered search; end-to-end recall (query
//! embedding + search) p50/p95; remember throughput with concurrent clients; fragment count
//! after 10k single remembers. Criterion then times the same searches.
//!
//! Datasets are cached under $CARGO_TARGET_DIR/scopemem-bench (embedding 100k sentences takes
//! minutes). `SCOPEMEM_BENCH_SIZES=10000` limits the sizes; `SCOPEMEM_BENCH_QUICK=1` skips the
//! 10k-remember fragment run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use scopemem::config::Config;
use scopemem::embed::{Embedder, FastEmbedder, ModelFiles};
use scopemem::host::PluginHost;
use scopemem::store::search::build_vector_index;
use scopemem::store::{
    Hit, LanceSearch, MemoryRecord, ModelInfo, NearestVisible, SearchRequest, Store, WriterSettings,
};
use serde_json::json;

const SCOPES: usize = 50;
const K: usize = 10;
const QUERIES: usize = 200;

/// splitmix64: deterministic data without a rand dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

const WHO: &[&str] = &[
    "Grandma",
    "Grandpa",
    "Mom",
    "Dad",
    "my sister Lily",
    "my brother Tom",
    "Uncle Wang",
    "Aunt Mei",
    "the team lead",
    "my manager",
    "the new intern",
    "the designer",
    "the CFO",
    "our landlord",
    "my best friend Jack",
    "Coach Li",
    "the neighbour",
    "my cousin Ana",
    "the doctor",
    "the teacher",
    "Alice",
    "Bob",
    "Carol",
    "Dave",
    "Erin",
    "Frank",
    "Grace",
    "Heidi",
    "Ivan",
    "Judy",
];
const DOES: &[&str] = &[
    "loves",
    "is allergic to",
    "wants to learn",
    "recommended",
    "complained about",
    "bought",
    "is planning a trip to",
    "has a meeting about",
    "forgot about",
    "is worried about",
    "asked about",
    "wrote a report on",
    "cooked",
    "borrowed",
    "lost",
    "is training for",
    "gave a talk on",
    "celebrated",
    "fixed",
    "hates",
];
const WHAT: &[&str] = &[
    "spicy hotpot",
    "peanuts",
    "the violin",
    "Kyoto",
    "the Q3 launch",
    "the quarterly budget",
    "a red bicycle",
    "orchids",
    "the staging database",
    "a marathon",
    "dumplings",
    "jazz records",
    "the Rust rewrite",
    "the kitchen sink",
    "tax filing",
    "a birthday cake",
    "the hiking trail",
    "chess openings",
    "the security audit",
    "a puppy",
    "green tea",
    "the wedding",
    "the car insurance",
    "the mortgage",
    "swimming lessons",
    "the quarterly OKRs",
    "a sci-fi novel",
    "the garden",
    "the office move",
    "piano lessons",
    "the dentist appointment",
    "the flu",
    "a camping tent",
    "the hiring plan",
    "sushi",
    "the school play",
    "a new laptop",
    "the client demo",
    "yoga",
    "the beach house",
];
const WHEN: &[&str] = &[
    "last Monday",
    "next weekend",
    "every morning",
    "on Saturday evening",
    "since last year",
    "during the holidays",
    "before the deadline",
    "after dinner",
    "in March",
    "twice a week",
    "yesterday",
    "this Friday",
    "at the family reunion",
    "at the offsite",
    "on her birthday",
];

fn sentence(rng: &mut Rng) -> String {
    format!(
        "{} {} {} {}.",
        rng.pick(WHO),
        rng.pick(DOES),
        rng.pick(WHAT),
        rng.pick(WHEN)
    )
}

fn question(rng: &mut Rng) -> String {
    let q = ["What does", "What about", "Tell me what", "Remind me:"][(rng.next() % 4) as usize];
    format!(
        "{q} {} {} {}?",
        rng.pick(WHO),
        rng.pick(DOES),
        rng.pick(WHAT)
    )
}

fn scope_of(rng: &mut Rng) -> String {
    if rng.next() % 10 < 3 {
        "public".into()
    } else {
        format!("scope_{:02}", rng.next() % SCOPES as u64)
    }
}

fn percentiles(mut xs: Vec<Duration>) -> (f64, f64, f64) {
    xs.sort();
    let at = |p: f64| xs[((xs.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    (at(0.50), at(0.95), at(0.99))
}

fn bench_root() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("scopemem-bench")
}

async fn embed_all(e: &dyn Embedder, texts: Vec<String>) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(texts.len());
    let started = Instant::now();
    for (i, chunk) in texts.chunks(256).enumerate() {
        out.extend(e.embed(chunk.to_vec()).await.expect("embed"));
        if i % 40 == 0 {
            eprintln!(
                "  embedded {}/{} ({:.0}/s)",
                out.len(),
                texts.len(),
                out.len() as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    out
}

/// A table of `n` memory-like rows in 50 scopes + 30% public, cached on disk.
async fn dataset(e: &Arc<dyn Embedder>, n: usize) -> (PathBuf, Store) {
    let dir = bench_root().join(format!("rows-{n}-v1"));
    let model = ModelInfo {
        id: e.model_id().into(),
        dimension: e.dimension(),
    };
    let done = dir.join("COMPLETE");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("building the {n}-row dataset (cached in {})", dir.display());
        let (store, _) = Store::open(&dir, "memories", &model, WriterSettings::default())
            .await
            .expect("open");
        let mut rng = Rng(n as u64);
        let texts: Vec<String> = (0..n).map(|_| sentence(&mut rng)).collect();
        let vectors = embed_all(e.as_ref(), texts.clone()).await;
        let now = chrono::Utc::now();
        let rows: Vec<_> = texts
            .into_iter()
            .zip(vectors)
            .enumerate()
            .map(|(i, (content, v))| {
                let scope = scope_of(&mut rng);
                (
                    MemoryRecord {
                        id: uuid::Uuid::now_v7().to_string(),
                        content,
                        reasoning: None,
                        tags: vec![],
                        memory_type: "knowledge".into(),
                        strength: 10,
                        is_active: true,
                        conversation_id: Some(format!("bench:{}", i % 500)),
                        created_at: Some(now),
                        memory_scope: Some(scope),
                        scope_source: Some("conversation".into()),
                    },
                    v,
                )
            })
            .collect();
        for chunk in rows.chunks(20_000) {
            store.append(chunk.to_vec()).await.expect("append");
        }
        store.writer().maintain().await.expect("compact");
        store.shutdown().await;
        std::fs::write(&done, b"ok").expect("mark complete");
    }
    let (store, _) = Store::open(&dir, "memories", &model, WriterSettings::default())
        .await
        .expect("open");
    (dir, store)
}

struct Query {
    vector: Vec<f32>,
    predicate: String,
}

async fn queries(e: &dyn Embedder) -> Vec<Query> {
    let mut rng = Rng(0xC0FFEE);
    let texts: Vec<String> = (0..QUERIES).map(|_| question(&mut rng)).collect();
    let vectors = e.embed(texts).await.expect("embed queries");
    vectors
        .into_iter()
        .map(|vector| {
            let scope = format!("scope_{:02}", rng.next() % SCOPES as u64);
            Query {
                vector,
                predicate: format!("memory_scope IN ('{scope}', 'public')"),
            }
        })
        .collect()
}

async fn run_all(search: &dyn NearestVisible, qs: &[Query]) -> (Vec<Duration>, Vec<Vec<Hit>>) {
    let mut times = Vec::with_capacity(qs.len());
    let mut results = Vec::with_capacity(qs.len());
    for q in qs {
        let req = SearchRequest {
            vector: q.vector.clone(),
            predicate: Some(q.predicate.clone()),
            k: K,
        };
        let t = Instant::now();
        let hits = search.nearest(&req).await.expect("search");
        times.push(t.elapsed());
        results.push(hits);
    }
    (times, results)
}

fn recall_at_k(exact: &[Vec<Hit>], approx: &[Vec<Hit>]) -> f64 {
    let mut found = 0usize;
    let mut total = 0usize;
    for (e, a) in exact.iter().zip(approx) {
        let ids: std::collections::HashSet<&str> = a.iter().map(|h| h.record.id.as_str()).collect();
        total += e.len();
        found += e
            .iter()
            .filter(|h| ids.contains(h.record.id.as_str()))
            .count();
    }
    found as f64 / total.max(1) as f64
}

fn report(label: &str, times: Vec<Duration>, extra: &str) {
    let (p50, p95, p99) = percentiles(times);
    println!("RESULT {label:<44} p50 {p50:>8.2} ms  p95 {p95:>8.2} ms  p99 {p99:>8.2} ms  {extra}");
}

async fn host_on(
    dir: &std::path::Path,
    e: Arc<dyn Embedder>,
    extra: serde_json::Value,
) -> PluginHost {
    let mut cfg = json!({"storage": {"db_dir": dir.to_string_lossy()}});
    if let (Some(c), Some(x)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in x {
            c.insert(k.clone(), v.clone());
        }
    }
    let config: Config = Config::from_value(&cfg).expect("config").config;
    PluginHost::start_with(config, None, e).await.expect("host")
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let embedder: Arc<dyn Embedder> = Arc::new(
        FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("model (run `make setup`)"),
    );
    let sizes: Vec<usize> = std::env::var("SCOPEMEM_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let qs = rt.block_on(queries(embedder.as_ref()));
    let mut criterion = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1));

    for &n in &sizes {
        let (dir, store) = rt.block_on(dataset(&embedder, n));
        // Exact filtered search: the flat prefiltered scan, the ground truth.
        let flat = rt
            .block_on(LanceSearch::new(store.table().clone(), usize::MAX, 0))
            .expect("search");
        let (t, exact) = rt.block_on(run_all(&flat, &qs));
        report(
            &format!("{n} rows: search only, flat (exact)"),
            t,
            "recall@10 1.000",
        );
        let mut group = criterion.benchmark_group(format!("search_{n}"));
        let mut i = 0;
        group.bench_function("flat", |b| {
            b.iter(|| {
                let q = &qs[i % qs.len()];
                i += 1;
                rt.block_on(flat.nearest(&SearchRequest {
                    vector: q.vector.clone(),
                    predicate: Some(q.predicate.clone()),
                    k: K,
                }))
                .expect("search")
            })
        });

        if n >= 50_000 {
            let t0 = Instant::now();
            rt.block_on(build_vector_index(store.table()))
                .expect("index");
            println!(
                "RESULT {n} rows: IVF_HNSW_SQ (cosine) index build {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            for refine in [0u32, 4] {
                let indexed = rt
                    .block_on(LanceSearch::new(store.table().clone(), 0, refine))
                    .expect("search");
                assert!(indexed.is_indexed());
                let (t, approx) = rt.block_on(run_all(&indexed, &qs));
                report(
                    &format!("{n} rows: search only, index refine={refine}"),
                    t,
                    &format!("recall@10 {:.3}", recall_at_k(&exact, &approx)),
                );
                let mut j = 0;
                group.bench_function(format!("index_refine{refine}"), |b| {
                    b.iter(|| {
                        let q = &qs[j % qs.len()];
                        j += 1;
                        rt.block_on(indexed.nearest(&SearchRequest {
                            vector: q.vector.clone(),
                            predicate: Some(q.predicate.clone()),
                            k: K,
                        }))
                        .expect("search")
                    })
                });
            }
        }
        group.finish();
        rt.block_on(store.shutdown());

        // End to end through the service: query embedding + prefiltered search (+ the index
        // when the table has one), as a conversation in a mapped scope sees it.
        let host = rt.block_on(host_on(
            &dir,
            embedder.clone(),
            json!({"conversation_scope_map": {"bench:conv": "scope_07"}, "recall": {"similarity_threshold": 0.0}}),
        ));
        let mut rng = Rng(7);
        let mut times = Vec::new();
        for _ in 0..QUERIES {
            let q = question(&mut rng);
            let t = Instant::now();
            rt.block_on(host.invoke(
                "recall",
                json!({"conversation_id": "bench:conv", "query": q, "limit": K}),
            ))
            .expect("recall");
            times.push(t.elapsed());
        }
        report(&format!("{n} rows: recall with query embedding"), times, "");
        rt.block_on(host.shutdown());
    }

    // Remember throughput with concurrent clients, on a fresh table.
    for clients in [1usize, 8, 32] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let host = Arc::new(rt.block_on(host_on(tmp.path(), embedder.clone(), json!({}))));
        let per = 2000 / clients;
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

    if std::env::var("SCOPEMEM_BENCH_QUICK").is_err() {
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
    criterion.final_summary();
}
