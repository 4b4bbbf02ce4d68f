//! What a recall with history costs (issue 60): a real `scopemem serve` with the default
//! config and six memories, then `POST /v1/recall` with no history, with a short question and
//! a short reply before it (MADial-Bench's turns are 60 characters at most), and with the same
//! question and a 162-character bot reply, as a chat's assistant turns often are. Each recall
//! asks a new question, so the query cache never answers. Prints p50 / p95 per case.
//!
//! Then the injection event as the AstrBot plugin sends it, in a dialogue (each question after
//! the previous question and the bot's reply): with turns the service never saw, and with the
//! turns and the question sent to `/v1/events/message` first as the plugin does (the question
//! `to_bot`), so the service embeds the question's texts ahead (`recall::prefetch`). Asked at
//! once after the message's 202 (AstrBot's later stages taking no time at all), and asked once
//! those texts are embedded (its stages taking longer than the embedding).
//!
//! `make bench-history-latency`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the
//! release one users get); 40 recalls per case (3 in `make bench-smoke`).

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::serve::{self, metric, metrics, post};

const CONVERSATION: &str = "default:GroupMessage:777";

const MEMORIES: [&str; 6] = [
    "外婆对青霉素过敏，看病时一定要跟医生说",
    "周六下午三点在老地方打羽毛球",
    "妈妈的生日是十二月十九号",
    "车子的保险12月3号到期",
    "婷婷下周二考驾照科目二",
    "爸爸最近在戒烟",
];

const QUESTION: &str = "最近家里有什么事要记着的吗？帮我看看";
const SHORT_REPLY: &str = "外婆这周复查，周末羽毛球照常，保险快到期了，其他没什么";
const LONG_REPLY: &str = "好的，我帮你整理一下最近家里的安排：外婆这周要去医院复查，记得提醒医生她对青霉素过敏；妈妈的生日快到了，大家可以提前准备礼物，蛋糕不要放芒果；周末的羽毛球照常，下午三点老地方见；另外车子的保险快到期了，需要有人去续保。如果还有别的事情需要我记住，随时告诉我就好。希望大家这周都顺顺利利，天气冷了注意保暖，多喝热水，早点休息。";

fn main() {
    common::runtime().block_on(run());
}

fn history(reply: &str) -> Value {
    json!([
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": reply},
    ])
}

async fn run() {
    let (client, _dir, _serve, base) = serve::start_default_serve(Duration::from_secs(120)).await;
    for m in MEMORIES {
        post(
            &client,
            &format!("{base}/v1/remember"),
            &json!({"conversation_id": CONVERSATION, "content": m}),
        )
        .await
        .unwrap_or_else(|e| panic!("remember: {e}"));
    }
    let n = common::scaled(40, 3);
    println!(
        "recall with history: {n} recalls per case, each a new question; the long reply is {} characters",
        LONG_REPLY.chars().count()
    );
    let cases = [
        ("no history", Value::Null),
        ("a short question and a short reply", history(SHORT_REPLY)),
        ("the same question and a long reply", history(LONG_REPLY)),
    ];
    for (name, turns) in cases {
        let mut took = Vec::with_capacity(n);
        for i in 0..n {
            let mut body =
                json!({"conversation_id": CONVERSATION, "query": format!("那个保险谁去办呀{i}")});
            if !turns.is_null() {
                body["history"] = turns.clone();
            }
            let started = Instant::now();
            post(&client, &format!("{base}/v1/recall"), &body)
                .await
                .unwrap_or_else(|e| panic!("recall: {e}"));
            took.push(started.elapsed());
        }
        let (p50, p95, _) = common::percentiles(took);
        println!("  {name:<36} p50 {p50:6.1} ms  p95 {p95:6.1} ms");
    }
    println!("the injection event in a dialogue (the previous question and reply as history):");
    let dialogues = [
        ("turns never seen", Ahead::Unseen),
        ("seen, not marked to_bot, at once", Ahead::Unmarked),
        ("seen, asked at once", Ahead::AtOnce),
        ("seen, asked once embedded", Ahead::Embedded),
    ];
    for (c, (name, ahead)) in dialogues.into_iter().enumerate() {
        let conversation = format!("default:GroupMessage:{}", 900 + c);
        let took = dialogue(&client, &base, (&conversation, c), ahead, n).await;
        let (p50, p95, _) = common::percentiles(took);
        println!("  {name:<36} p50 {p50:6.1} ms  p95 {p95:6.1} ms");
    }
    let text = metrics(&client, &base).await;
    for name in [
        "scopemem_questions_prefetched_total",
        "scopemem_prefetch_history_predicted_total",
        "scopemem_query_joins_total",
    ] {
        println!("  {name} {}", metric(&text, name));
    }
}

/// How the service met a question's turns before it was asked.
#[derive(Clone, Copy, PartialEq)]
enum Ahead {
    /// Never: no message was sent.
    Unseen,
    /// Each line was sent as a message, the question not marked `to_bot` (the plugins before
    /// `recall::prefetch`), and asked right after its 202.
    Unmarked,
    /// Each line was sent as a message, and the question asked right after its 202.
    AtOnce,
    /// As `AtOnce`, asked once the question's texts were embedded.
    Embedded,
}

/// `n` measured turns of a dialogue (after two that teach the service its shape): the time of
/// each injection event. Each dialogue's texts are its own (`case`), so none is in the query
/// cache from another.
async fn dialogue(
    client: &reqwest::Client,
    base: &str,
    (conversation, case): (&str, usize),
    ahead: Ahead,
    n: usize,
) -> Vec<Duration> {
    let mut turns: Vec<Value> = Vec::new();
    let mut took = Vec::with_capacity(n);
    for i in 0..n + 2 {
        let question = format!("{QUESTION}第{case}组第{i}次");
        let reply = format!("{SHORT_REPLY}，第{case}组第{i}条");
        if ahead != Ahead::Unseen {
            // As in a chat, where turns are seconds apart: the earlier lines are embedded.
            serve::messages_embedded(client, base).await;
            let before = metric(&metrics(client, base).await, PREFETCHED);
            said(
                client,
                base,
                conversation,
                &question,
                ahead != Ahead::Unmarked,
            )
            .await;
            if ahead == Ahead::Embedded {
                let deadline = Instant::now() + Duration::from_secs(30);
                while metric(&metrics(client, base).await, PREFETCHED) < before + 1.0 {
                    assert!(
                        Instant::now() < deadline,
                        "the question was never embedded ahead"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        let last = turns.len().saturating_sub(2);
        let body = json!({"conversation_id": conversation, "query": question,
                          "history": turns[last..].to_vec()});
        let started = Instant::now();
        post(client, &format!("{base}/v1/events/llm_request"), &body)
            .await
            .unwrap_or_else(|e| panic!("llm_request: {e}"));
        if i >= 2 {
            took.push(started.elapsed());
        }
        if ahead != Ahead::Unseen {
            said(client, base, conversation, &reply, false).await;
        }
        turns.push(json!({"role": "user", "content": question}));
        turns.push(json!({"role": "assistant", "content": reply}));
    }
    took
}

const PREFETCHED: &str = "scopemem_questions_prefetched_total";

/// A line to `/v1/events/message` as the AstrBot plugin sends it: a member's question
/// (`to_bot` when marked), or the bot's reply.
async fn said(client: &reqwest::Client, base: &str, conversation: &str, text: &str, to_bot: bool) {
    let bot = text.starts_with(SHORT_REPLY);
    let sender = if bot { "bot" } else { "u1" };
    let body = json!({"conversation_id": conversation, "sender_id": sender, "text": text,
                      "is_bot": bot, "to_bot": to_bot});
    post(client, &format!("{base}/v1/events/message"), &body)
        .await
        .unwrap_or_else(|e| panic!("message: {e}"));
}
