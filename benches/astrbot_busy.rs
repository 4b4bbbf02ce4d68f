//! Does watching every message slow the bot in a busy group (issue 59, item 5)? A real AstrBot
//! 4.29.0 core (tests/astrbot/scenario.py `--busy-answer`, AstrBot's default rate limit: 30
//! events a chat a minute, then the chat stalls) answers a member's question to the bot in a
//! quiet group, then in a group where 45 lines of chatter came just before it; with the plugin
//! (its defaults, working memory on, against a real `scopemem serve` with the default config)
//! and without it. `make bench-astrbot-busy`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that
//! binary; `SCOPEMEM_BENCH_ROUNDS` (default 5) rounds each way.
//!
//! It prints, each way: the answer's p50 and max in the quiet and the busy group, and how many
//! times AstrBot stalled a chat. AstrBot's built-in plugin wakes every message (its session
//! waiter takes `event_message_type(ALL)`), so chatter counts toward the limit with or without
//! scopemem; the plugin itself wakes nothing (integrations/astrbot/observer.py).

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use common::serve;

fn main() {
    common::runtime().block_on(run());
}

/// Run the scenario once; its report (the `@@SCENARIO REPORT` line), rounds shown as they end.
fn scenario(root: &Path, scopemem: &str, without_plugin: bool, rounds: usize) -> Value {
    let mut args = vec![
        "--busy-answer".to_string(),
        "--rounds".to_string(),
        rounds.to_string(),
    ];
    if without_plugin {
        args.push("--without-plugin".into());
    }
    common::astrbot_scenario("scenario.py", root, scopemem, &args, |line| {
        if let Some(round) = line.strip_prefix("@@SCENARIO ROUND ") {
            println!("  round: {round}");
        }
    })
}

/// p50 and max of one figure over the rounds.
fn spread(report: &Value, key: &str) -> (f64, f64) {
    let mut v: Vec<f64> = report["rounds"]
        .as_array()
        .map(|r| r.iter().filter_map(|x| x[key].as_f64()).collect())
        .unwrap_or_default();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => (f64::NAN, f64::NAN),
        n => (v[(n - 1) / 2], v[n - 1]),
    }
}

async fn run() {
    let rounds: usize = std::env::var("SCOPEMEM_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let (client, dir, _serve, base) = serve::start_default_serve(Duration::from_secs(60)).await;
    println!("AstrBot 4.29.0, default rate limit; {rounds} rounds each way (45 lines, then the question)");
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "", "quiet p50", "quiet max", "busy p50", "busy max", "stalls"
    );
    for (name, without) in [("with scopemem", false), ("without", true)] {
        let root = dir.path().join(if without { "without" } else { "with" });
        let report = tokio::task::block_in_place(|| scenario(&root, &base, without, rounds));
        assert_eq!(report["plugin_loaded"], json!(!without), "{report}");
        let (qp, qm) = spread(&report, "quiet_answer_s");
        let (bp, bm) = spread(&report, "busy_answer_s");
        println!(
            "{name:<16} {qp:>9.2}s {qm:>9.2}s {bp:>9.2}s {bm:>9.2}s {:>8}",
            report["rate_limited"]
        );
    }
    // How far ahead of AstrBot's injection event the question came (`recall::prefetch`).
    let text = serve::metrics(&client, &base).await;
    let value = |name: &str| serve::metric(&text, name);
    let followed = value("scopemem_prefetch_recalls_total");
    println!(
        "questions embedded ahead {}, injection events after one {followed}, mean lead {:.1} ms, history foreseen {}, joined a run under way {}",
        value("scopemem_questions_prefetched_total"),
        1000.0 * value("scopemem_prefetch_lead_seconds_total") / followed.max(1.0),
        value("scopemem_prefetch_history_predicted_total"),
        value("scopemem_query_joins_total"),
    );
}
