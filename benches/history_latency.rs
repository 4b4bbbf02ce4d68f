//! What a recall with history costs (issue 60): a real `scopemem serve` with the default
//! config and six memories, then `POST /v1/recall` with no history, with a short question and
//! a short reply before it (MADial-Bench's turns are 60 characters at most), and with the same
//! question and a 162-character bot reply, as a chat's assistant turns often are. Each recall
//! asks a new question, so the query cache never answers. Prints p50 / p95 per case.
//!
//! `make bench-history-latency`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the
//! release one users get); 40 recalls per case (3 in `make bench-smoke`).

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::serve::{self, post};

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
}
