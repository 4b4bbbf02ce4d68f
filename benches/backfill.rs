//! Backfill benchmark (issue 3) on 100k- and 1M-row legacy (v1) tables.
//!
//! Prints: start-up time to the first served recall, backfill throughput (rows/s) with the
//! configured pacing, bytes written per backfilled row (table growth until the backfill is done,
//! before its compaction), and recall p50/p95 during vs after the backfill.
//!
//! Legacy tables use synthetic unit vectors: the backfill never reads or writes vectors, and
//! flat-search latency does not depend on their content. Templates are cached under
//! $CARGO_TARGET_DIR/scopemem-bench and copied fresh for every run.
//! Env: SCOPEMEM_BACKFILL_SIZES (default 100000,1000000), SCOPEMEM_BACKFILL_BATCH (300),
//! SCOPEMEM_BACKFILL_PAUSE_MS (100), SCOPEMEM_BACKFILL_PACING (`fixed`, so runs compare with
//! earlier ones; `adaptive` backs off only while the sampled recalls' p99 rises),
//! SCOPEMEM_BACKFILL_REMEMBERS=1 (also remember every 20 ms during the backfill, and 100 times
//! on the quiet table afterwards, and print both latencies; off by default because the new
//! rows count in the bytes written).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{bench_root, copy_dir, du, percentiles, smoke, Rng};
use lancedb::arrow::arrow_array::builder::{ListBuilder, StringBuilder};
use lancedb::arrow::arrow_array::{
    ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int32Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use lancedb::arrow::arrow_schema::{DataType, Field, Schema, TimeUnit};
use scopemem::config::Config;
use scopemem::embed::{Embedder, FastEmbedder, ModelFiles};
use scopemem::host::PluginHost;
use serde_json::json;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A v1 table (no scope columns) of `n` rows, as the upstream Python plugin would leave it.
async fn legacy_template(n: usize, dim: usize) -> PathBuf {
    let dir = bench_root().join(format!("legacy-{n}-v1"));
    if dir.join("COMPLETE").exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    eprintln!("building the {n}-row legacy template in {}", dir.display());
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("content", DataType::Utf8, false),
        Field::new("reasoning", DataType::Utf8, true),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
        Field::new("memory_type", DataType::Utf8, false),
        Field::new("strength", DataType::Int32, false),
        Field::new("is_active", DataType::Boolean, false),
        Field::new("conversation_id", DataType::Utf8, true),
        Field::new(
            "created_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new(
            "vector",
            DataType::FixedSizeList(item.clone(), dim as i32),
            false,
        ),
    ]));
    let conn = lancedb::connect(&dir.to_string_lossy())
        .execute()
        .await
        .expect("connect");
    let mut rng = Rng(n as u64);
    let chunk = 50_000;
    let mut table: Option<lancedb::Table> = None;
    for start in (0..n).step_by(chunk) {
        let m = chunk.min(n - start);
        let mut tags = ListBuilder::new(StringBuilder::new());
        let mut flat = Vec::with_capacity(m * dim);
        for _ in 0..m {
            tags.values().append_value("legacy");
            tags.append(true);
            flat.extend(rng.unit(dim));
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                (start..start + m).map(|i| format!("legacy-{i:08}")),
            )),
            Arc::new(StringArray::from_iter_values((start..start + m).map(|i| {
                format!("legacy memory number {i} about something the user said")
            }))),
            Arc::new(StringArray::from(vec![Some("legacy"); m])),
            Arc::new(tags.finish()),
            Arc::new(StringArray::from(vec!["knowledge"; m])),
            Arc::new(Int32Array::from(vec![20; m])),
            Arc::new(BooleanArray::from(vec![true; m])),
            Arc::new(StringArray::from_iter_values(
                (start..start + m).map(|i| format!("legacy:{}", i % 300)),
            )),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(1_700_000_000_000_000i64); m])
                    .with_timezone("UTC"),
            ),
            Arc::new(
                FixedSizeListArray::try_new(
                    item.clone(),
                    dim as i32,
                    Arc::new(Float32Array::from(flat)),
                    None,
                )
                .expect("vectors"),
            ),
        ];
        let batch = RecordBatch::try_new(schema.clone(), cols).expect("batch");
        match &table {
            None => {
                table = Some(
                    conn.create_table("memories", batch)
                        .execute()
                        .await
                        .expect("create"),
                )
            }
            Some(t) => {
                t.add(batch).execute().await.expect("add");
            }
        }
    }
    std::fs::write(dir.join("COMPLETE"), b"ok").expect("mark");
    dir
}

fn pct(mut xs: Vec<Duration>) -> (f64, f64, usize) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN, 0);
    }
    xs.sort();
    let at = |p: f64| xs[((xs.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.95), xs.len())
}

async fn remember_once(host: &PluginHost, i: usize) -> Duration {
    let t = Instant::now();
    host.invoke("remember", json!({"conversation_id": format!("legacy:{}", i % 300), "content": format!("a note taken during the bench, number {i}")}))
        .await
        .expect("remember");
    t.elapsed()
}

/// Remember every 20 ms until `running` clears (the foreground writes a backfill must not stall).
fn remember_sampler(
    rt: &tokio::runtime::Runtime,
    host: &Arc<PluginHost>,
    running: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Duration>> {
    let (host, running) = (host.clone(), running.clone());
    rt.spawn(async move {
        let mut times = Vec::new();
        while running.load(Ordering::Relaxed) {
            times.push(remember_once(&host, times.len()).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        times
    })
}

async fn recall_once(host: &PluginHost, i: usize) -> Duration {
    let t = Instant::now();
    host.invoke("recall", json!({"conversation_id": format!("legacy:{}", i % 300), "query": "what did the user say about something", "limit": 10}))
        .await
        .expect("recall");
    t.elapsed()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let t_model = Instant::now();
    let embedder: Arc<dyn Embedder> = Arc::new(
        FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("model (run `make setup`)"),
    );
    println!(
        "RESULT model load {:.0} ms",
        t_model.elapsed().as_secs_f64() * 1000.0
    );
    let sizes: Vec<usize> = std::env::var("SCOPEMEM_BACKFILL_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| {
            if smoke() {
                vec![300]
            } else {
                vec![100_000, 1_000_000]
            }
        });
    let batch: usize = env_or("SCOPEMEM_BACKFILL_BATCH", 300);
    let pause: u64 = env_or("SCOPEMEM_BACKFILL_PAUSE_MS", 100);
    let pacing = std::env::var("SCOPEMEM_BACKFILL_PACING").unwrap_or_else(|_| "fixed".into());

    // Each size once with column patching; sizes up to 100k also with the row-rewriting
    // fallback (forced by giving the copy an unenforced primary key), for comparison.
    let runs: Vec<(usize, bool)> = sizes
        .iter()
        .flat_map(|&n| {
            if n <= 100_000 {
                vec![(n, false), (n, true)]
            } else {
                vec![(n, false)]
            }
        })
        .collect();
    for (n, rewrite_rows) in runs {
        let label = if rewrite_rows {
            "row-rewrite fallback"
        } else {
            "column patch"
        };
        println!("RESULT {n} rows, {label}:");
        let template = rt.block_on(legacy_template(n, embedder.dimension()));
        let work = bench_root().join(format!("legacy-{n}-work"));
        let _ = std::fs::remove_dir_all(&work);
        copy_dir(&template, &work).expect("copy template");
        // Write the copy back to disk first: otherwise the kernel flushes 1.5 GB of dirty pages
        // during the start-up being timed, which a table that has sat on disk never sees.
        let _ = std::process::Command::new("sync").status();
        if rewrite_rows {
            rt.block_on(async {
                let conn = lancedb::connect(&work.to_string_lossy())
                    .execute()
                    .await
                    .expect("connect");
                let t = conn.open_table("memories").execute().await.expect("open");
                t.set_unenforced_primary_key(["id"]).await.expect("pk");
            });
        }
        let bytes_before = du(&work);
        let config = Config::from_value(&json!({
            "storage": {"db_dir": work.to_string_lossy(), "index_threshold_rows": usize::MAX / 2},
            "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
            "backfill": {"batch_size": batch, "pause_ms": pause, "pacing": pacing},
        }))
        .expect("config")
        .config;

        // Start-up: open (migrations applied, metadata only) and serve the first recall.
        let t0 = Instant::now();
        let host = Arc::new(
            rt.block_on(PluginHost::start_with(config, None, embedder.clone()))
                .expect("start"),
        );
        let open_ms = t0.elapsed().as_secs_f64() * 1000.0;
        rt.block_on(recall_once(&host, 0));
        println!(
            "RESULT {n} rows: start-up to first served recall {:.0} ms (open + migrations {open_ms:.0} ms; model load excluded)",
            t0.elapsed().as_secs_f64() * 1000.0
        );

        // Recall latency sampled while the backfill runs.
        let running = Arc::new(AtomicBool::new(true));
        let during = Arc::new(Mutex::new(Vec::new()));
        let sampler = {
            let (host, running, during) = (host.clone(), running.clone(), during.clone());
            rt.spawn(async move {
                let mut i = 1;
                while running.load(Ordering::Relaxed) {
                    let d = recall_once(&host, i).await;
                    if let Ok(mut v) = during.lock() {
                        v.push(d);
                    }
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let remembers = std::env::var_os("SCOPEMEM_BACKFILL_REMEMBERS")
            .map(|_| remember_sampler(&rt, &host, &running));
        rt.block_on(host.memory().store().ensure_indexes())
            .expect("indexes");
        let done_bytes = Arc::new(Mutex::new(0u64));
        let t_fill = Instant::now();
        let fill_secs = Arc::new(Mutex::new(0f64));
        let progress = {
            let (done_bytes, work, fill_secs) =
                (done_bytes.clone(), work.clone(), fill_secs.clone());
            rt.block_on(host.memory().backfill().run(move |p| {
                // The last batch reports remaining 0: measure before the final compaction.
                if p.remaining == 0 && p.filled > 0 {
                    if let Ok(mut b) = done_bytes.lock() {
                        if *b == 0 {
                            *b = du(&work);
                        }
                    }
                    if let Ok(mut s) = fill_secs.lock() {
                        if *s == 0.0 {
                            *s = t_fill.elapsed().as_secs_f64();
                        }
                    }
                }
            }))
            .expect("backfill")
        };
        let total_secs = t_fill.elapsed().as_secs_f64();
        running.store(false, Ordering::Relaxed);
        rt.block_on(sampler).expect("sampler");
        let fill = fill_secs.lock().map(|s| *s).unwrap_or(total_secs);
        let grown = done_bytes
            .lock()
            .map(|b| *b)
            .unwrap_or(0)
            .saturating_sub(bytes_before);
        println!(
            "RESULT {n} rows: backfill filled {} rows in {fill:.1} s = {:.0} rows/s (batch {batch}, {pacing} pacing, pause {pause} ms); + compaction/index refresh {:.1} s",
            progress.filled,
            progress.filled as f64 / fill.max(1e-9),
            total_secs - fill
        );
        println!(
            "RESULT {n} rows: bytes written per backfilled row {:.1} (table {:.1} MB -> {:.1} MB before compaction)",
            grown as f64 / progress.filled.max(1) as f64,
            bytes_before as f64 / 1e6,
            (bytes_before + grown) as f64 / 1e6
        );
        let (p50, p95, k) = pct(during.lock().map(|v| v.clone()).unwrap_or_default());
        println!(
            "RESULT {n} rows: recall during backfill p50 {p50:.1} ms p95 {p95:.1} ms ({k} samples)"
        );
        let after: Vec<Duration> = (0..40)
            .map(|i| rt.block_on(recall_once(&host, i)))
            .collect();
        let (p50, p95, k) = pct(after);
        println!(
            "RESULT {n} rows: recall after backfill  p50 {p50:.1} ms p95 {p95:.1} ms ({k} samples)"
        );
        if let Some(during) = remembers {
            let during = rt.block_on(during).expect("remember sampler");
            let idle: Vec<Duration> = (0..100)
                .map(|i| rt.block_on(remember_once(&host, i)))
                .collect();
            for (label, times) in [("during the backfill", during), ("afterwards, idle", idle)] {
                let k = times.len();
                let (p50, p95, p99) = percentiles(times);
                println!(
                    "RESULT {n} rows: remember {label:<20} p50 {p50:.1} ms p95 {p95:.1} ms p99 {p99:.1} ms ({k} samples)"
                );
            }
        }
        rt.block_on(host.shutdown());
        drop(host);
        let _ = std::fs::remove_dir_all(&work);
    }
}
