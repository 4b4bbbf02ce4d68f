//! Recent messages found by what they answer (issue 60, item 2): two group chats
//! (`benches/short_replies/set.json`, Chinese and English) where each question a member asks
//! is answered by another member's short reply ("订好了，在老地方", "I'll handle it") among
//! chatter, replayed through a real `scopemem serve` with the default config; then each later
//! question, in other words, is asked in that chat twice: by hand (`POST /v1/recall`) and as
//! the plugins ask before the bot answers (`/v1/events/llm_request`). A hit: the reply among
//! the recall's recent messages, or among those the injection shows (3 by default). Measured
//! with the default contextual passages (a short message embedded with the message before it,
//! `working_memory.reply_context_minutes` 5) and with each message alone (0).
//!
//! Then replies that mean nothing without the statement they answer (issue 76,
//! `tests/fixtures/replies_to_statements.json`: 24 "me too"s after a question and a member's
//! statement, in Chinese and English): each later question about the statement is put to the
//! bot twice, as the plugins ask, and the long-term memories are counted: replies kept alone
//! (target 0) and statements kept.
//!
//! `make bench-short-replies`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the release
//! one users get); `SCOPEMEM_BENCH_VERBOSE=1` lists what each missed question got.

#[path = "common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};

use common::serve::{self, post};

#[derive(Deserialize)]
struct Set {
    chats: Vec<Chat>,
    questions: Vec<Question>,
}

#[derive(Deserialize)]
struct Chat {
    conversation_id: String,
    messages: Vec<Message>,
}

#[derive(Deserialize)]
struct Message {
    message_id: String,
    speaker_id: String,
    speaker_name: String,
    text: String,
    minute: i64,
}

#[derive(Deserialize)]
struct Question {
    conversation_id: String,
    question: String,
    /// The `message_id` of the reply that answers it.
    answer: String,
    lang: String,
}

fn main() {
    common::runtime().block_on(run());
}

fn load() -> Set {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/short_replies/set.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Replay every chat (the last message said ten minutes ago) and wait until every message has
/// its vector; the row id of each message id.
async fn replay(client: &reqwest::Client, base: &str, set: &Set) -> HashMap<String, String> {
    let mut rows = HashMap::new();
    for chat in &set.chats {
        let last = chat.messages.iter().map(|m| m.minute).max().unwrap_or(0);
        let start = Utc::now() - chrono::Duration::minutes(last + 10);
        for m in &chat.messages {
            let body = json!({
                "conversation_id": chat.conversation_id, "sender_id": m.speaker_id,
                "sender_name": m.speaker_name, "text": m.text, "message_id": m.message_id,
                "sent_at": (start + chrono::Duration::minutes(m.minute)).to_rfc3339(),
            });
            let r = post(client, &format!("{base}/v1/events/message"), &body)
                .await
                .unwrap_or_else(|e| panic!("message {}: {e}", m.message_id));
            if let Some(id) = r["id"].as_str() {
                rows.insert(m.message_id.clone(), id.to_string());
            }
        }
    }
    let started = Instant::now();
    loop {
        let s = serve::get(client, &format!("{base}/v1/status"))
            .await
            .unwrap_or(Value::Null);
        if s["working_memory"]["waiting"] == json!(0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "messages still waiting for vectors after 15 min: {s}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rows
}

/// How a question is asked: by hand (`POST /v1/recall`, its recent messages by score), or as
/// the plugins ask before the bot answers (`/v1/events/llm_request`, the messages a prompt
/// is shown: `working::shown`).
#[derive(Clone, Copy)]
enum Asked {
    ByHand,
    Injected,
}

/// Hits per language, and what each missed question got.
async fn ask(
    client: &reqwest::Client,
    base: &str,
    set: &Set,
    rows: &HashMap<String, String>,
    how: Asked,
) -> (HashMap<String, (usize, usize)>, Vec<String>) {
    let mut hits: HashMap<String, (usize, usize)> = HashMap::new();
    let mut missed = Vec::new();
    let text_of: HashMap<&str, &str> = set
        .chats
        .iter()
        .flat_map(|c| c.messages.iter())
        .map(|m| (m.message_id.as_str(), m.text.as_str()))
        .collect();
    let text_of_row: HashMap<&str, &str> = rows
        .iter()
        .filter_map(|(message, row)| Some((row.as_str(), *text_of.get(message.as_str())?)))
        .collect();
    for q in &set.questions {
        let body = json!({"conversation_id": q.conversation_id, "query": q.question});
        // The rows shown, by id, in order: a search by hand's recent messages, or what the
        // injection event shows a prompt (`recent_message_ids`).
        let (url, field) = match how {
            Asked::ByHand => (format!("{base}/v1/recall"), "recent_messages"),
            Asked::Injected => (
                format!("{base}/v1/events/llm_request"),
                "recent_message_ids",
            ),
        };
        let r = post(client, &url, &body)
            .await
            .unwrap_or_else(|e| panic!("{url} {:?}: {e}", q.question));
        let got: Vec<&str> = r[field]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["id"].as_str().or(m.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let want = rows.get(&q.answer).map(String::as_str);
        let hit = got.iter().any(|id| Some(*id) == want);
        let e = hits.entry(q.lang.clone()).or_default();
        e.1 += 1;
        if hit {
            e.0 += 1;
        } else {
            let got: Vec<&str> = got
                .iter()
                .map(|id| text_of_row.get(id).copied().unwrap_or("?"))
                .collect();
            missed.push(format!(
                "  {} → want {:?}, got {:?}",
                q.question,
                text_of.get(q.answer.as_str()).copied().unwrap_or("?"),
                got
            ));
        }
    }
    (hits, missed)
}

/// One exchange of the replies-to-statements set: `[asker, stater, replier]` as
/// `(speaker id, name, text)`, and the later question.
#[derive(Deserialize)]
struct Exchange {
    chat: String,
    ask: (String, String, String),
    state: (String, String, String),
    reply: (String, String, String),
    later: String,
}

/// Replies to statements, asked about twice each through the injection event: the long-term
/// memories made of a reply alone (target 0), and of the statement.
async fn replies_to_statements(client: &reqwest::Client) {
    #[derive(Deserialize)]
    struct Statements {
        exchanges: Vec<Exchange>,
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/replies_to_statements.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let set: Statements = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let dir = tempfile::tempdir_in(common::bench_root()).expect("a bench dir");
    let (_serve, base) = serve::start_serve(client, dir.path(), json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let start = Utc::now() - chrono::Duration::minutes(30);
    for (i, e) in set.exchanges.iter().enumerate() {
        for (j, (id, name, text)) in [&e.ask, &e.state, &e.reply].into_iter().enumerate() {
            let at = start + chrono::Duration::seconds((i * 30 + j * 5) as i64);
            let body = json!({"conversation_id": e.chat, "sender_id": id, "sender_name": name,
                              "text": text, "sent_at": at.to_rfc3339()});
            post(client, &format!("{base}/v1/events/message"), &body)
                .await
                .unwrap_or_else(|err| panic!("message: {err}"));
        }
    }
    serve::messages_embedded(client, &base).await;
    for e in &set.exchanges {
        for _ in 0..2 {
            let body = json!({"conversation_id": e.chat, "query": e.later});
            post(client, &format!("{base}/v1/events/llm_request"), &body)
                .await
                .unwrap_or_else(|err| panic!("llm_request: {err}"));
        }
    }
    // The threshold rule writes in the background: wait until the rows stop changing.
    let read = |s: &Value| json!([s["rows"], s["working_memory"]["recalled_again"]]);
    serve::settled(
        client,
        &base,
        read,
        Duration::from_secs(10),
        Duration::from_secs(600),
    )
    .await;
    let chats: HashSet<&str> = set.exchanges.iter().map(|e| e.chat.as_str()).collect();
    let mut memories: Vec<String> = Vec::new();
    for chat in chats {
        let rows = serve::exported(client, &base, chat).await;
        let kept = rows.iter().filter(|r| r["memory_type"] != "message");
        memories.extend(kept.filter_map(|r| r["content"].as_str().map(str::to_string)));
    }
    let same = |a: &str, b: &str| scopemem_core::fact::same_fact(a, b);
    let alone: Vec<&String> = memories
        .iter()
        .filter(|m| set.exchanges.iter().any(|e| same(m, &e.reply.2)))
        .collect();
    let stated = memories
        .iter()
        .filter(|m| set.exchanges.iter().any(|e| same(m, &e.state.2)))
        .count();
    println!(
        "replies to statements: {} exchanges; long-term memories {}: replies kept alone {} (target 0), statements kept {stated}{}",
        set.exchanges.len(),
        memories.len(),
        alone.len(),
        if alone.is_empty() { String::new() } else { format!(": {alone:?}") }
    );
}

async fn run() {
    let set = load();
    let verbose = std::env::var_os("SCOPEMEM_BENCH_VERBOSE").is_some_and(|v| v == "1");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client");
    println!(
        "short replies: {} questions; a hit is the reply among the recent messages a search by \
         hand returns, or an injection shows",
        set.questions.len()
    );
    println!("{:<56} {:>8} {:>8} {:>8}", "", "zh", "en", "all");
    for (name, minutes) in [
        ("contextual passages (default, 5 min)", None),
        ("each message alone (reply_context_minutes 0)", Some(0)),
    ] {
        let dir = tempfile::tempdir_in(common::bench_root()).expect("a bench dir");
        let cfg = match minutes {
            None => json!({}),
            Some(m) => json!({"working_memory": {"reply_context_minutes": m}}),
        };
        let (_serve, base) = serve::start_serve(&client, dir.path(), cfg)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let rows = replay(&client, &base, &set).await;
        for (how, label) in [(Asked::ByHand, "by hand"), (Asked::Injected, "injected")] {
            let (hits, missed) = ask(&client, &base, &set, &rows, how).await;
            let cell = |lang: &str| {
                hits.get(lang)
                    .map_or("-".to_string(), |(h, n)| format!("{h}/{n}"))
            };
            let (h, n) = hits.values().fold((0, 0), |(h, n), (a, b)| (h + a, n + b));
            println!(
                "{:<56} {:>8} {:>8} {:>8}",
                format!("{name}, {label}"),
                cell("zh"),
                cell("en"),
                format!("{h}/{n} {:.0}%", 100.0 * h as f64 / n.max(1) as f64)
            );
            if verbose {
                for m in &missed {
                    println!("{m}");
                }
            }
        }
    }
    replies_to_statements(&client).await;
}
