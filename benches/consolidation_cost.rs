//! What the LLM consolidation passes cost (issue 78): LLM tokens per 1,000 chat messages before
//! and after the budget, which chats get passes, and whether a `consolidation.daily_tokens` cap
//! holds. `make bench-consolidation-cost`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary.
//!
//! Why through AstrBot: the passes are asked where operators pay for them, by the plugin's
//! loop, of AstrBot's configured chat model. tests/astrbot/cost_scenario.py plays the group-chat
//! set (benches/group_chat/chat.json) into a real AstrBot 4.29.0 core with the plugin at its
//! defaults, each of its three groups as three chats (mapped in scopemem's scope map; unmapped
//! with members who @ the bot where the set does; unmapped with nobody addressing it) and its
//! private chat once, against a real `scopemem serve`. The model is a recording
//! OpenAI-compatible provider that answers the passes (an ADD of each shown message the set
//! marks a fact, else NONE) with a `usage` counted from the request and the answer, and records
//! each pass's tokens and chat.
//!
//! Three runs, each on a fresh serve and AstrBot:
//! - before: `consolidation.active_days` 0 and `daily_tokens` 0, every chat gets passes and
//!   nothing caps them (the behaviour before issue 78);
//! - after: the default config (`active_days` 7), with `daily_tokens` three times its default
//!   200,000: the set's three days are played within one of the budget's days;
//! - cap: the default config with `daily_tokens` a third of what the after run spent.
//!
//! Passes come every `consolidation.every_messages` (default 20) messages of a chat. The set's
//! three days pass in minutes, so the plugin's rounds (its own `run_due`) run every 30 lines
//! once they are stored and embedded, as its loop's would within seconds of each line in real
//! time; at the end, until a round finds nothing due (waited for, never slept for). The quiet
//! pass (10 minutes without a message) never comes in a run of minutes: a chat's last lines
//! (fewer than 20) stay unread in every run alike.
//!
//! It prints the lines played, passes and tokens in total and per 1,000 lines, each class's
//! passes, what `/v1/status` and `/metrics` report of the budget beside the provider's count,
//! and for the cap run the cap, the tokens spent, the largest pass and whether the overshoot is
//! at most one pass. It fails when a chat that is neither mapped nor ever addressed the bot
//! got a pass after the budget, when the cap is exceeded by more than one pass, or when the
//! server's count is not the provider's.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use common::serve;

/// The set's groups' scopes when mapped (their chats' names in the bench).
const SCOPES: [(&str, &str); 3] = [
    ("20001", "family"),
    ("20002", "badminton"),
    ("20003", "boardgames"),
];
/// The days the set spans, and `consolidation.daily_tokens`' default.
const SET_DAYS: u64 = 3;
const DEFAULT_DAILY_TOKENS: u64 = 200_000;
/// The chat classes, as the scenario names them.
const CLASSES: [&str; 4] = ["mapped", "asks", "private", "never"];

fn main() {
    common::runtime().block_on(run());
}

/// Play the set once into AstrBot against the serve at `scopemem`; the scenario's report.
fn scenario(root: &Path, scopemem: &str) -> Value {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut args = vec![
        "--chat-set".to_string(),
        manifest
            .join("benches/group_chat/chat.json")
            .display()
            .to_string(),
    ];
    if common::smoke() {
        args.extend(["--limit".to_string(), "120".to_string()]);
    }
    common::astrbot_scenario("cost_scenario.py", root, scopemem, &args, |_| {})
}

/// One class of chats in one run.
#[derive(Default)]
struct Class {
    chats: usize,
    lines: u64,
    passes: u64,
    tokens: u64,
}

/// What one run measured.
struct Measured {
    lines: u64,
    addressed: u64,
    passes: Vec<(String, u64)>,
    classes: BTreeMap<&'static str, Class>,
    /// `consolidation.budget` of `/v1/status`, read by the bench after the play.
    budget: Value,
    metrics_tokens: f64,
    report: Value,
}

impl Measured {
    fn tokens(&self) -> u64 {
        self.passes.iter().map(|(_, t)| t).sum()
    }

    fn per_1000(&self, n: u64) -> f64 {
        1000.0 * n as f64 / self.lines.max(1) as f64
    }

    fn largest(&self) -> u64 {
        self.passes.iter().map(|(_, t)| *t).max().unwrap_or(0)
    }
}

fn measure(report: Value, budget: Value, metrics_tokens: f64) -> Measured {
    let class_of = |umo: &str| -> &'static str {
        let named = report["classes"][umo].as_str().unwrap_or("");
        CLASSES.into_iter().find(|c| *c == named).unwrap_or("?")
    };
    let mut classes: BTreeMap<&'static str, Class> = BTreeMap::new();
    let played = report["played"].as_object().cloned().unwrap_or_default();
    for (umo, n) in &played {
        let c = classes.entry(class_of(umo)).or_default();
        c.chats += 1;
        c.lines += n.as_u64().unwrap_or(0);
    }
    let passes: Vec<(String, u64)> = report["passes"]
        .as_array()
        .map(|p| {
            p.iter()
                .map(|x| {
                    (
                        x["conversation_id"].as_str().unwrap_or("").to_string(),
                        x["total_tokens"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    for (umo, t) in &passes {
        let c = classes.entry(class_of(umo)).or_default();
        c.passes += 1;
        c.tokens += t;
    }
    let sum = |key: &str| -> u64 {
        report[key]
            .as_object()
            .map(|o| o.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0)
    };
    Measured {
        lines: sum("played"),
        addressed: sum("addressed"),
        passes,
        classes,
        budget,
        metrics_tokens,
        report,
    }
}

/// Play the set against a fresh serve with `cfg`; what it measured.
async fn play(client: &reqwest::Client, dir: &Path, name: &str, cfg: Value) -> Measured {
    let here = dir.join(name);
    std::fs::create_dir_all(&here).expect("a run dir");
    let (_serve, base) = serve::start_serve(client, &here, cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let root = here.join("astrbot");
    let report = tokio::task::block_in_place(|| scenario(&root, &base));
    let status = serve::get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = serve::metrics(client, &base).await;
    let tokens = serve::metric(&text, "scopemem_consolidation_tokens_total");
    measure(report, status["consolidation"]["budget"].clone(), tokens)
}

fn print_run(name: &str, m: &Measured) {
    let tokens = m.tokens();
    println!(
        "{name:<7} {:>6} lines ({} to the bot, {} model replies), {:>4} passes, {:>8} tokens: {:>6.1} passes and {:>7.0} tokens per 1,000 lines (played in {:.0} s; {} sends retried after a closed connection)",
        m.lines,
        m.addressed,
        m.report["chat_turns"],
        m.passes.len(),
        tokens,
        m.per_1000(m.passes.len() as u64),
        m.per_1000(tokens),
        m.report["play_s"].as_f64().unwrap_or(f64::NAN)
            + m.report["drain_s"].as_f64().unwrap_or(f64::NAN),
        m.report["stored"]["retried"],
    );
    for class in CLASSES {
        let c = m.classes.get(class);
        let (chats, lines, passes, tokens) =
            c.map_or((0, 0, 0, 0), |c| (c.chats, c.lines, c.passes, c.tokens));
        println!("        {class:<8} {chats} chats, {lines:>5} lines: {passes:>4} passes, {tokens:>8} tokens");
    }
    let b = &m.budget;
    println!(
        "        /v1/status budget: tokens today {}, passes today {}, chats served {}, tokens total {}, spent {}; /metrics tokens total {}; the provider counted {} tokens in {} passes over {} chats",
        b["tokens_today"],
        b["passes_today"],
        b["chats_today"],
        b["tokens_total"],
        b["spent"],
        m.metrics_tokens,
        tokens,
        m.passes.len(),
        m.passes
            .iter()
            .map(|(c, _)| c.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
    );
}

/// Whether the server counted what the provider did: the day's tokens and passes, the chats.
fn agrees(m: &Measured) -> bool {
    let chats = m
        .passes
        .iter()
        .map(|(c, _)| c.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len() as u64;
    m.budget["tokens_today"].as_u64() == Some(m.tokens())
        && m.budget["passes_today"].as_u64() == Some(m.passes.len() as u64)
        && m.budget["chats_today"].as_u64() == Some(chats)
        && m.metrics_tokens == m.tokens() as f64
}

async fn run() {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client");
    let dir = tempfile::tempdir_in(common::bench_root()).expect("a bench dir");
    let map: serde_json::Map<String, Value> = SCOPES
        .iter()
        .map(|(group, scope)| (format!("webchat:GroupMessage:{group}-mapped"), json!(scope)))
        .collect();
    let with = |consolidation: Value| json!({"conversation_scope_map": Value::Object(map.clone()), "consolidation": consolidation});
    println!(
        "The group-chat set through AstrBot 4.29.0 and the plugin (its defaults), a recording model (Qwen's tokenizer); every_messages 20"
    );
    println!(
        "before: active_days 0, daily_tokens 0; after: the defaults (active_days 7), daily_tokens {} (3 days' worth: the set's 3 days are played in one); cap: a third of what after spent",
        SET_DAYS * DEFAULT_DAILY_TOKENS
    );
    let before = play(
        &client,
        dir.path(),
        "before",
        with(json!({"active_days": 0, "daily_tokens": 0})),
    )
    .await;
    print_run("before", &before);
    // The set's three days are played within one of the budget's days: three days' worth of
    // the default cap, which the set would spend over three.
    let after = play(
        &client,
        dir.path(),
        "after",
        with(json!({"daily_tokens": SET_DAYS * DEFAULT_DAILY_TOKENS})),
    )
    .await;
    print_run("after", &after);
    let cap = (after.tokens() / 3).max(1);
    let capped = play(
        &client,
        dir.path(),
        "cap",
        with(json!({"daily_tokens": cap})),
    )
    .await;
    print_run("cap", &capped);

    let spent = capped.tokens();
    let last = capped.passes.last().map_or(0, |(_, t)| *t);
    let within_one = spent <= cap || spent - last < cap;
    println!(
        "cap run: daily_tokens {cap}, spent {spent} in {} passes, largest pass {}, overshoot {}, at most one pass over: {}, /v1/status spent: {}",
        capped.passes.len(),
        capped.largest(),
        spent.saturating_sub(cap),
        if within_one { "yes" } else { "NO" },
        capped.budget["spent"],
    );
    println!(
        "tokens per 1,000 lines: before {:.0}, after {:.0} ({:+.0}%)",
        before.per_1000(before.tokens()),
        after.per_1000(after.tokens()),
        100.0 * (after.tokens() as f64 / before.tokens().max(1) as f64 - 1.0),
    );

    let never = after.classes.get("never").map_or(0, |c| c.passes);
    let agreed = [&before, &after, &capped].iter().all(|m| agrees(m));
    println!(
        "never-addressed unmapped chats' passes after: {never}; /v1/status and /metrics agree with the provider: {}",
        if agreed { "yes" } else { "NO" }
    );
    assert_eq!(never, 0, "a chat neither mapped nor addressed got passes");
    assert!(within_one, "the cap was exceeded by more than one pass");
    assert!(agreed, "the server's count is not the provider's");
    for m in [&before, &after, &capped] {
        assert_eq!(
            m.report["stored"]["refused"],
            json!(0),
            "{}",
            m.report["stored"]
        );
    }
}
