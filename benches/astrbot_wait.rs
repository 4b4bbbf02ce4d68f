//! The bot's wait for its memory block, as a real AstrBot 4.29.0 sees it (issue 78, item 3).
//! `make bench-astrbot-wait`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the shipped
//! wheel's, for the figures reported); `SCOPEMEM_BENCH_QUESTIONS` stops after N questions.
//!
//! tests/astrbot/wait_scenario.py plays the group-chat set's three groups into AstrBot's real
//! core with the plugin's defaults, against a real `scopemem serve` with the default config;
//! each fact's question is asked of the bot where a member restates it, and AstrBot answers
//! through a recording provider, so the history the plugin sends is AstrBot's own
//! `req.contexts`. It prints, over the questions:
//! - the plugin's `on_llm_request` hook, p50 and p95 (the injection's wait as the host sees it),
//!   for all questions and split by whether scopemem had the context computed ahead;
//! - for the questions whose context was computed ahead, where their wait goes: the injection
//!   as scopemem served it, the question's texts from their hand-off to the model to their
//!   vectors (a passage call under way included), the lead AstrBot gave (the message's arrival
//!   to the injection event) and how many texts were embedded;
//! - the question's arrival to the model's request (AstrBot's stages and the hook);
//! - the share of recalls whose context was computed ahead (scopemem's own counters);
//! - how many requests carried the memory block.

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use common::serve;

fn main() {
    common::runtime().block_on(run());
}

/// Run the scenario once; its report (the `@@SCENARIO REPORT` line).
fn scenario(root: &Path, scopemem: &str, questions: usize) -> Value {
    let args = ["--questions".to_string(), questions.to_string()];
    let mut asked = 0;
    common::astrbot_scenario("wait_scenario.py", root, scopemem, &args, |line| {
        if line.starts_with("@@SCENARIO ASK ") {
            asked += 1;
            if asked % 10 == 0 {
                println!("  {asked} questions asked");
            }
        }
    })
}

/// p50 and p95 (nearest rank) of `v`; NaN when empty.
fn p50_p95(mut v: Vec<f64>) -> (f64, f64, usize) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, 0);
    }
    let rank = |q: f64| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    (rank(0.5), rank(0.95), n)
}

fn row(name: &str, v: Vec<f64>) {
    let (p50, p95, n) = p50_p95(v);
    println!("{name:<44} {n:>5} {p50:>9.1} {p95:>9.1}");
}

async fn run() {
    let questions: usize = std::env::var("SCOPEMEM_BENCH_QUESTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if common::smoke() { 2 } else { 0 });
    let (client, dir, _serve, base) = serve::start_default_serve(Duration::from_secs(60)).await;
    println!("AstrBot 4.29.0 with the plugin's defaults, the group-chat set's three groups");
    let root = dir.path().join("astrbot");
    let report = tokio::task::block_in_place(|| scenario(&root, &base, questions));
    let asks: Vec<Value> = report["asks"].as_array().cloned().unwrap_or_default();
    let hook = |a: &Value| a["hook_ms"].as_array().and_then(|h| h.first()?.as_f64());
    let ahead = |a: &Value| a["predicted"].as_f64().unwrap_or(0.0) > 0.0;
    println!(
        "{} member lines, {} questions to the bot",
        report["lines"],
        asks.len()
    );
    println!("{:<44} {:>5} {:>9} {:>9}", "ms", "n", "p50", "p95");
    row(
        "injection (on_llm_request hook)",
        asks.iter().filter_map(hook).collect(),
    );
    row(
        "  its context computed ahead",
        asks.iter().filter(|a| ahead(a)).filter_map(hook).collect(),
    );
    row(
        "  not computed ahead",
        asks.iter().filter(|a| !ahead(a)).filter_map(hook).collect(),
    );
    for (name, key) in [
        ("  served by scopemem (the injection route)", "served_ms"),
        (
            "  the question's texts, handed to the model",
            "query_model_ms",
        ),
        ("  the host's lead (arrival to the injection)", "lead_ms"),
        ("  texts the model embedded for it (count)", "texts"),
    ] {
        row(
            name,
            asks.iter()
                .filter(|a| ahead(a))
                .filter_map(|a| a[key].as_f64())
                .collect(),
        );
    }
    row(
        "question's arrival to the model's request",
        asks.iter()
            .filter_map(|a| a["arrival_to_model_ms"].as_f64())
            .collect(),
    );
    let followed = asks
        .iter()
        .filter(|a| a["followed"].as_f64().unwrap_or(0.0) > 0.0)
        .count();
    let with_history = asks
        .iter()
        .filter(|a| a["history_turns"].as_i64().unwrap_or(0) > 0)
        .count();
    let predicted = asks.iter().filter(|a| ahead(a)).count();
    let blocks = asks.iter().filter(|a| a["block"] == true).count();
    println!(
        "context computed ahead: {predicted} of {} requests ({with_history} with history; {followed} followed a message to the bot)",
        asks.len()
    );
    println!(
        "memory block in the model's request: {blocks} of {}",
        asks.len()
    );
    let text = serve::metrics(&client, &base).await;
    let value = |name: &str| serve::metric(&text, name);
    let followed = value("scopemem_prefetch_recalls_total");
    println!(
        "mean lead from the question to its injection event {:.1} ms; texts joined from a run under way {}, cache hits {}",
        1000.0 * value("scopemem_prefetch_lead_seconds_total") / followed.max(1.0),
        value("scopemem_query_joins_total"),
        value("scopemem_query_cache_hits_total"),
    );
}
