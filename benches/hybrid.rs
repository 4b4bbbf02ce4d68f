//! Hybrid recall and the expiry sweeper at 100k rows (issue 10).
//!
//! On the cached dataset of real model embeddings (50 scopes + 30% public, current scope +
//! public prefilter, k = 10) it prints:
//! - search-only p50/p95/p99 of the vector search (cosine IVF_HNSW_SQ, refine x4), the BM25
//!   keyword search, and both run concurrently and fused by reciprocal rank (hybrid);
//! - recall end to end through the service (query embedding included) with `search` vector,
//!   keyword and hybrid;
//! - the sweeper's cost on a copy of the table: a pass with nothing due, and a pass erasing 1%
//!   of the rows (delete, fragment rewrite, pruning of every older version), with the latency
//!   of single-row appends while that pass runs against their latency when idle (the rewrite
//!   and prune run beside the writer, so appends should not wait for them).
//!
//! Env: SCOPEMEM_BENCH_SIZES (default 100000); SCOPEMEM_SWEEP_WITHOUT_VECTOR_INDEX=1 drops
//! LanceDB's vector index from the sweep's copy first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use common::*;
use scopemem::embed::Embedder;
use scopemem::memory::recall::hybrid::{fuse, Candidate};
use scopemem::memory::service::sweeper::sweep_once;
use scopemem::store::maintenance::indexes::build_vector_index;
use scopemem::store::search::has_vector_index;
use scopemem::store::timestamp_literal;
use scopemem::store::{
    FulltextSearch, KeywordRequest, LanceSearch, MemoryRecord, NearestVisible, SearchRequest,
};
use serde_json::json;

fn report(label: &str, times: Vec<Duration>, extra: &str) {
    let (p50, p95, p99) = percentiles(times);
    println!("RESULT {label:<46} p50 {p50:>8.2} ms  p95 {p95:>8.2} ms  p99 {p99:>8.2} ms  {extra}");
}

/// Search-only latencies of the vector, keyword and fused searches.
async fn searches(vector: &LanceSearch, keywords: &FulltextSearch, qs: &[Query], n: usize) {
    let vector_req = |q: &Query| SearchRequest {
        vector: q.vector.clone(),
        rows: q.rows.clone(),
        k: K,
        rescale: None,
    };
    let keyword_req = |q: &Query| KeywordRequest {
        text: q.text.clone(),
        rows: q.rows.clone(),
        k: K,
    };
    let (mut tv, mut tk, mut th) = (Vec::new(), Vec::new(), Vec::new());
    let mut keyword_hits = 0;
    for q in qs {
        let t = Instant::now();
        vector.nearest(&vector_req(q)).await.expect("vector");
        tv.push(t.elapsed());
        let t = Instant::now();
        keyword_hits += keywords
            .matching(&keyword_req(q))
            .await
            .expect("keyword")
            .len();
        tk.push(t.elapsed());
        let (vr, kr) = (vector_req(q), keyword_req(q));
        let t = Instant::now();
        let (v, k) = futures::join!(vector.nearest(&vr), keywords.matching(&kr));
        let as_candidates = |records: Vec<MemoryRecord>| -> Vec<Candidate> {
            records
                .into_iter()
                .map(|record| Candidate {
                    record,
                    relevance: 1.0,
                    vector: None,
                })
                .collect()
        };
        let v = as_candidates(v.expect("vector").into_iter().map(|h| h.record).collect());
        let k = as_candidates(k.expect("keyword").into_iter().map(|h| h.record).collect());
        std::hint::black_box(fuse(&[(0.5, v), (0.5, k)]));
        th.push(t.elapsed());
    }
    report(&format!("{n} rows: search only, vector (index)"), tv, "");
    report(
        &format!("{n} rows: search only, keyword (BM25)"),
        tk,
        &format!("{:.1} hits/query", keyword_hits as f64 / qs.len() as f64),
    );
    report(
        &format!("{n} rows: search only, hybrid (both + weighted RRF)"),
        th,
        "",
    );
}

/// Recall through the service, query embedding included, for each `search`.
fn end_to_end(rt: &tokio::runtime::Runtime, dir: &std::path::Path, e: Arc<dyn Embedder>, n: usize) {
    let host = rt.block_on(host_on(
        dir,
        e,
        json!({"conversation_scope_map": {"bench:conv": "scope_07"}, "recall": {"similarity_threshold": 0.0, "similarity_cut": "fixed", "relevance_gate": false}}),
    ));
    // Other questions per mode: the query-embedding cache must not serve one mode's queries
    // to the next.
    for (seed, search) in [(7, "vector"), (8, "keyword"), (9, "hybrid")] {
        let times = timed_recalls(rt, &host, seed, Some(search));
        report(
            &format!("{n} rows: recall end to end, search={search}"),
            times,
            "",
        );
    }
    rt.block_on(host.shutdown());
}

/// One sweep with nothing due, then one erasing 1% of the rows, on a scratch copy.
fn sweeper(rt: &tokio::runtime::Runtime, dir: &std::path::Path, e: &Arc<dyn Embedder>, n: usize) {
    let scratch = tempfile::tempdir().expect("tempdir");
    copy_dir(dir, scratch.path()).expect("copy dataset");
    let host = rt.block_on(host_on(scratch.path(), e.clone(), json!({})));
    let memory = host.memory().clone();
    let store = memory.store().clone();
    let t = Instant::now();
    let none = rt.block_on(sweep_once(&memory)).expect("sweep");
    println!(
        "RESULT {n} rows: sweeper pass with nothing due: {:.1} ms ({none} rows)",
        t.elapsed().as_secs_f64() * 1000.0
    );
    // Conversations bench:0..4 hold 1% of the rows (rows are spread over 500).
    let due: Vec<String> = (0..5).map(|i| format!("'bench:{i}'")).collect();
    let past = timestamp_literal(chrono::Utc::now() - chrono::Duration::days(1));
    rt.block_on(
        store
            .table()
            .update()
            .only_if(format!("conversation_id IN ({})", due.join(", ")))
            .column("expires_at", past)
            .execute(),
    )
    .expect("expire 1%");
    // Leave only the expiry's own versions for the sweep to prune: measure the sweep, not the
    // history of building the dataset.
    rt.block_on(store.writer().maintain()).expect("maintain");
    // `SCOPEMEM_SWEEP_WITHOUT_VECTOR_INDEX=1`: the same sweep on a copy without LanceDB's
    // vector index, to show what remapping the IVF_HNSW_SQ graphs after the rewrite costs.
    if std::env::var_os("SCOPEMEM_SWEEP_WITHOUT_VECTOR_INDEX").is_some() {
        rt.block_on(async {
            let indices = store.table().list_indices().await.expect("list indexes");
            for index in indices
                .iter()
                .filter(|i| i.columns.iter().any(|c| c == "vector"))
            {
                store
                    .table()
                    .drop_index(&index.name)
                    .await
                    .expect("drop the vector index");
            }
        });
        println!("RESULT {n} rows: sweep below runs without the LanceDB vector index");
    }
    let before = du(scratch.path());
    let idle = rt.block_on(appends(&store, e, 100, None));
    let running = AtomicBool::new(true);
    let t = Instant::now();
    let (erased, during) = rt.block_on(async {
        let sweep = async {
            let r = sweep_once(&memory).await;
            running.store(false, Ordering::Release);
            r
        };
        futures::join!(sweep, appends(&store, e, 0, Some(&running)))
    });
    let erased = erased.expect("sweep");
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let after = du(scratch.path());
    report(&format!("{n} rows: single-row append, idle"), idle, "");
    let appended = during.len();
    let longest = during.iter().max().copied().unwrap_or_default();
    report(
        &format!("{n} rows: single-row append during the sweep"),
        during,
        &format!(
            "{appended} appends, longest {:.0} ms",
            longest.as_secs_f64() * 1000.0
        ),
    );
    println!(
        "RESULT {n} rows: sweeper pass erasing 1%: {ms:.0} ms for {erased} rows, table {:.1} MB -> {:.1} MB",
        before as f64 / 1e6,
        after as f64 / 1e6
    );
    rt.block_on(store.shutdown());
}

/// Single-row appends, one after another: `count` of them, or while `running` is set.
async fn appends(
    store: &scopemem::store::Store,
    e: &Arc<dyn Embedder>,
    count: usize,
    running: Option<&AtomicBool>,
) -> Vec<Duration> {
    let vector = e
        .embed(
            scopemem::embed::TextRole::Passage,
            vec!["an appended note".into()],
        )
        .await
        .expect("embed")
        .remove(0);
    let mut times = Vec::new();
    for i in 0.. {
        let more = match running {
            Some(flag) => flag.load(Ordering::Acquire),
            None => i < count,
        };
        if !more {
            break;
        }
        let record = scopemem::store::MemoryRecord {
            id: uuid::Uuid::now_v7().to_string(),
            content: format!("appended note {i}"),
            reasoning: None,
            tags: vec![],
            memory_type: "knowledge".into(),
            strength: 10,
            is_active: true,
            conversation_id: Some("bench:append".into()),
            created_at: Some(chrono::Utc::now()),
            memory_scope: Some("public".into()),
            scope_source: Some("unmapped".into()),
            expires_at: None,
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        };
        let t = Instant::now();
        store
            .append(vec![(record, vector.clone())])
            .await
            .expect("append");
        times.push(t.elapsed());
    }
    times
}

fn main() {
    let rt = runtime();
    let embedder = model();
    let sizes = sizes(&[100_000]);
    let qs = rt.block_on(queries(embedder.as_ref()));
    for &n in &sizes {
        let (dir, store) = rt.block_on(dataset(&embedder, n));
        // A dataset cached before full-text search existed gets its indexes now.
        rt.block_on(store.ensure_indexes()).expect("indexes");
        rt.block_on(store.writer().maintain())
            .expect("fold rows into the indexes");
        if !rt
            .block_on(has_vector_index(store.table()))
            .expect("list indexes")
        {
            rt.block_on(build_vector_index(store.table()))
                .expect("vector index");
        }
        let vector = rt
            .block_on(LanceSearch::new(store.table().clone(), 0, 4))
            .expect("search");
        let keywords = FulltextSearch::new(store.table().clone());
        rt.block_on(searches(&vector, &keywords, &qs, n));
        rt.block_on(store.shutdown());
        end_to_end(&rt, &dir, embedder.clone(), n);
        sweeper(&rt, &dir, &embedder, n);
    }
}
