//! scopemem's side of `make bench-compare`, on any workload directory in the neutral format
//! (see `common/workload.rs`):
//!
//!   SCOPEMEM_WORKLOAD=DIR cargo bench --bench workload
//!
//! With `SCOPEMEM_WORKLOAD_GENERATE=realistic|uniform` (and `SCOPEMEM_WORKLOAD_N`, default
//! 100000; `SCOPEMEM_WORKLOAD_Q`, default 500) a missing DIR is generated first;
//! `SCOPEMEM_WORKLOAD_GENERATE_ONLY=1` stops there (generating is not timed, so it may run
//! beside other work).
//!
//! It loads 95% of the rows into a fresh table through the writer, lets maintenance finish
//! (compaction, scalar indexes, the cosine IVF_HNSW_SQ index), then appends the last 5% (rows
//! written after the last index build) and runs every query with the current-scope + public
//! filter, k = 10, search only, through both designs:
//! - the resident search (the service's default: admitted scopes scanned in memory);
//! - LanceDB's prefiltered ANN (index, refine ×4), which the service falls back to.
//!
//! Recall@10 is against exact filtered search computed here, overall and for the queries from
//! tiny scopes. The last line is one JSON object for the resident search.

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use chrono::Utc;
use common::workload::{Workload, DIM};
use common::*;
use scopemem::embed::ModelInfo;
use scopemem::store::maintenance::indexes::build_vector_index;
use scopemem::store::resident::ResidentSearch;
use scopemem::store::{
    Hit, LanceSearch, MemoryRecord, NearestVisible, RowFilter, ScopeSet, SearchRequest, Store,
    WriterSettings,
};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn workload(rt: &tokio::runtime::Runtime) -> Workload {
    let dir = std::path::PathBuf::from(
        std::env::var("SCOPEMEM_WORKLOAD").expect("set SCOPEMEM_WORKLOAD=DIR"),
    );
    if !Workload::is_complete(&dir) {
        let n = env_usize("SCOPEMEM_WORKLOAD_N", 100_000);
        let q = env_usize("SCOPEMEM_WORKLOAD_Q", 500);
        let w = match std::env::var("SCOPEMEM_WORKLOAD_GENERATE").as_deref() {
            Ok("uniform") => common::workload::uniform(n, q),
            Ok("realistic") => rt.block_on(common::workload::realistic(model().as_ref(), n, q)),
            _ => panic!(
                "{} is not a complete workload; set SCOPEMEM_WORKLOAD_GENERATE=realistic|uniform",
                dir.display()
            ),
        };
        w.write(&dir).expect("write workload");
        eprintln!("wrote {} to {}", w.name, dir.display());
    }
    Workload::read(&dir).expect("read workload")
}

fn record(i: usize, scope: &str) -> MemoryRecord {
    MemoryRecord {
        id: format!("w{i}"),
        content: format!("row {i}"),
        reasoning: None,
        tags: vec![],
        memory_type: "knowledge".into(),
        strength: 50,
        is_active: true,
        conversation_id: None,
        created_at: Some(Utc::now()),
        memory_scope: Some(scope.into()),
        scope_source: Some("conversation".into()),
        expires_at: None,
        last_recalled_at: None,
        speaker_id: None,
        speaker_name: None,
        source_ids: vec![],
        about_ids: vec![],
        source_conversations: vec![],
    }
}

async fn append(store: &Store, w: &Workload, rows: std::ops::Range<usize>) {
    let rows: Vec<usize> = rows.collect();
    for chunk in rows.chunks(1000) {
        let batch = chunk
            .iter()
            .map(|&i| (record(i, &w.scopes[i]), w.vector(i).to_vec()))
            .collect();
        store.append(batch).await.expect("append");
    }
}

fn request(w: &Workload, qi: usize) -> SearchRequest {
    let scope = &w.query_scopes[qi];
    let mut names = vec![scope.clone()];
    if scope != "public" {
        names.push("public".into());
    }
    SearchRequest {
        vector: w.query(qi).to_vec(),
        rows: RowFilter {
            scopes: Some(ScopeSet { names, null: false }),
            alive_at: Some(Utc::now()),
            created: None,
            tier: None,
        },
        k: K,
        rescale: None,
    }
}

/// Resident set size in bytes (Linux), to report what the in-memory copy costs.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

struct Measured {
    times: Vec<Duration>,
    recall: f64,
    tiny_recall: f64,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    w: &Workload,
    truth: &[Vec<usize>],
    search: &dyn NearestVisible,
) -> Measured {
    for qi in 0..10.min(w.q()) {
        rt.block_on(search.nearest(&request(w, qi)))
            .expect("warm up");
    }
    let mut times = Vec::with_capacity(w.q());
    let (mut found, mut tiny_found, mut tiny_n) = (0.0, 0.0, 0);
    for (qi, want) in truth.iter().enumerate() {
        let req = request(w, qi);
        let t = Instant::now();
        let hits: Vec<Hit> = rt.block_on(search.nearest(&req)).expect("search");
        times.push(t.elapsed());
        let got: Vec<usize> = hits
            .iter()
            .filter_map(|h| h.record.id.strip_prefix('w')?.parse().ok())
            .collect();
        let share = if want.is_empty() {
            1.0
        } else {
            want.iter().filter(|i| got.contains(i)).count() as f64 / want.len() as f64
        };
        found += share;
        if w.query_scopes[qi].starts_with("c_") {
            tiny_found += share;
            tiny_n += 1;
        }
    }
    Measured {
        times,
        recall: found / truth.len().max(1) as f64,
        tiny_recall: tiny_found / tiny_n.max(1) as f64,
    }
}

fn report(w: &Workload, label: &str, m: &Measured) -> (f64, f64, f64) {
    let (p50, p95, p99) = percentiles(m.times.clone());
    println!(
        "RESULT {}: {label:<38} p50 {p50:>7.2} ms  p95 {p95:>7.2} ms  p99 {p99:>7.2} ms  \
         recall@10 {:.3} (tiny scopes {:.3})",
        w.name, m.recall, m.tiny_recall
    );
    (p50, p95, p99)
}

fn main() {
    let rt = runtime();
    let w = workload(&rt);
    if std::env::var_os("SCOPEMEM_WORKLOAD_GENERATE_ONLY").is_some() {
        return;
    }
    assert_eq!(w.dim, DIM, "workload vectors must have {DIM} dimensions");
    let (n, q) = (w.n(), w.q());
    eprintln!(
        "{}: {n} rows, {q} queries; exact filtered top-{K} ...",
        w.name
    );
    let truth: Vec<Vec<usize>> = (0..q).map(|qi| w.exact_top(qi, K)).collect();

    let dir = tempfile::tempdir_in(bench_root()).expect("tempdir");
    let model = ModelInfo {
        id: "workload".into(),
        dimension: DIM,
    };
    let store = rt
        .block_on(scopemem::migrate::open_store(
            dir.path(),
            "memories",
            &model,
            WriterSettings::default(),
        ))
        .expect("open")
        .0;
    let indexed = n * 95 / 100;
    let build = Instant::now();
    rt.block_on(append(&store, &w, 0..indexed));
    rt.block_on(store.writer().maintain()).expect("compact");
    rt.block_on(store.ensure_indexes()).expect("scalar indexes");
    rt.block_on(build_vector_index(store.table()))
        .expect("vector index");
    let build_s = build.elapsed().as_secs_f64();
    eprintln!("loaded {indexed} rows and built the indexes in {build_s:.1} s");

    let lance = Arc::new(
        rt.block_on(LanceSearch::new(store.table().clone(), 0, 4))
            .expect("lance search"),
    );
    let before = rss();
    let t = Instant::now();
    let _in_runtime = rt.enter();
    let resident = ResidentSearch::new(
        store.table().clone(),
        store.resident().clone(),
        lance.clone(),
        Arc::new(scopemem::store::FulltextSearch::new(store.table().clone())),
    );
    while store.resident().stats().loads == 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let load_ms = t.elapsed().as_secs_f64() * 1000.0;
    let held = rss().saturating_sub(before);
    // The last 5%: written after the index build, reaching the resident copy through the
    // writer's appends and LanceDB's search as unindexed rows.
    rt.block_on(append(&store, &w, indexed..n));

    let lance_m = measure(&rt, &w, &truth, lance.as_ref());
    report(&w, "LanceDB ANN (IVF_HNSW_SQ, refine x4)", &lance_m);
    let served = store.resident().stats().served;
    let m = measure(&rt, &w, &truth, &resident);
    let (p50, p95, p99) = report(&w, "resident (exact scan of admitted scopes)", &m);
    let stats = store.resident().stats();
    assert_eq!(
        stats.served - served,
        (q + 10.min(q)) as u64,
        "every query answered from memory"
    );
    println!(
        "RESULT {}: resident copy loaded in {load_ms:.0} ms; holds {:.0} MB ({:.0} bytes/row); \
         process RSS grew {:.0} MB during the load",
        w.name,
        stats.bytes as f64 / 1e6,
        stats.bytes as f64 / stats.rows.max(1) as f64,
        held as f64 / 1e6,
    );
    rt.block_on(store.shutdown());
    println!(
        "{}",
        serde_json::json!({
            "system": "scopemem",
            "workload": w.name,
            "n": n,
            "queries": q,
            "p50_ms": p50,
            "p95_ms": p95,
            "p99_ms": p99,
            "recall_at_10": m.recall,
            "build_s": build_s,
            "config": "resident exact scan of admitted scopes (int8 + f16 re-rank); 5% of rows appended after the last index build",
        })
    );
}
