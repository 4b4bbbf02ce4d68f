//! Recall and remember benchmarks (issue 2), on real model embeddings of memory-like sentences.
//!
//! Prints, for 10k and 100k rows in 50 scopes + 30% public (k = 10, scope + public prefilter):
//! search-only p50/p95/p99 for exact flat search and for the cosine IVF_HNSW_SQ index (with and
//! without refine) plus recall@10 against exact filtered search; end-to-end recall (query
//! embedding + search) p50/p95. Criterion then times the same searches. Remember throughput is
//! in `benches/remember.rs`.
//!
//! Datasets are cached under $CARGO_TARGET_DIR/scopemem-bench (embedding 100k sentences takes
//! minutes). `SCOPEMEM_BENCH_SIZES=10000` limits the sizes.

use std::time::{Duration, Instant};

mod common;

use common::*;
use scopemem::store::maintenance::indexes::build_vector_index;
use scopemem::store::{Hit, LanceSearch, NearestVisible, SearchRequest};
use serde_json::json;

async fn run_all(search: &dyn NearestVisible, qs: &[Query]) -> (Vec<Duration>, Vec<Vec<Hit>>) {
    let mut times = Vec::with_capacity(qs.len());
    let mut results = Vec::with_capacity(qs.len());
    for q in qs {
        let req = SearchRequest {
            vector: q.vector.clone(),
            rows: q.rows.clone(),
            k: K,
            rescale: None,
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

fn main() {
    let rt = runtime();
    let embedder = model();
    let sizes = sizes(&[10_000, 100_000]);
    let qs = rt.block_on(queries(embedder.as_ref()));
    let mut criterion = criterion(30);

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
                    rows: q.rows.clone(),
                    k: K,
                    rescale: None,
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
                            rows: q.rows.clone(),
                            k: K,
                            rescale: None,
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
            json!({"conversation_scope_map": {"bench:conv": "scope_07"}, "recall": {"similarity_threshold": 0.0, "similarity_cut": "fixed", "relevance_gate": false}}),
        ));
        let times = timed_recalls(&rt, &host, 7, None);
        report(&format!("{n} rows: recall with query embedding"), times, "");
        rt.block_on(host.shutdown());
    }

    criterion.final_summary();
}
