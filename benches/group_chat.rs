//! What a group's memory keeps, on a realistic group chat (issue 59): three days of four chats
//! (`benches/group_chat/chat.json`: a family and a badminton group in Chinese, a board-game
//! group in English, a private chat; 730 messages, 45 facts among stickers, greetings, acks,
//! 复读 chains, long reactions several members say, questions and the bot's replies), replayed
//! through a real `scopemem serve` with the default config (nothing mapped, rules without an
//! LLM only), its `sent_at` times moved so that the last message was said ten minutes ago.
//! Every question and line of small talk is sent to the chat before the bot is asked, as the
//! plugins send every message (a member the set never names asks them all).
//! `make bench-group-chat`; `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the release one
//! users get).
//!
//! It prints:
//! 1. facts found in the injection (`/v1/events/llm_request`, as the plugins ask) for their
//!    question: among the first 3 memories or the recent messages (target ≥ 90 %);
//! 2. each question asked a second time, then the long-term memories by what they were in the
//!    chat: facts, and chatter (target 0, listed; how many of them expire unless recalled
//!    again, `retention.rule_made_ttl_days`), with the facts a second member restated that
//!    became memories (target ≥ half), and the memories that do not stand on their own ("me
//!    too", "同上": `scopemem_core::standalone`, target 0);
//! 3. small talk to the bot that injects anything, without and with the chat's last 6 turns as
//!    history (target ≤ 1 in 10), each with the memories (m) and recent messages (r) it got;
//! 4. rows of one conversation in another's injection (target 0), and the bot's replies shown
//!    as a member's (target 0).
//!
//! `SCOPEMEM_BENCH_LOG_DIR` keeps the server's log; `SCOPEMEM_BENCH_SMOKE=1` replays the first
//! 120 messages and asks 5 questions; `SCOPEMEM_BENCH_VERBOSE=1` shows what each missed
//! question got.

#[path = "common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, FixedOffset, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use common::serve::{self, post};

#[derive(Debug, Clone, Deserialize)]
struct Message {
    id: String,
    conversation_id: String,
    sender_id: String,
    sender_name: String,
    text: String,
    sent_at: DateTime<FixedOffset>,
    is_bot: bool,
    kind: String,
    #[serde(default)]
    fact: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct Fact {
    id: String,
    conversation_id: String,
    restated_by: Option<String>,
    question: String,
}

#[derive(Debug, Clone, Deserialize)]
struct SmallTalk {
    conversation_id: String,
    text: String,
}

#[derive(Debug, Deserialize)]
struct Set {
    messages: Vec<Message>,
    facts: Vec<Fact>,
    small_talk: Vec<SmallTalk>,
}

fn load() -> Set {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/group_chat/chat.json");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What one injection held: memory and message texts in order, with each message's role, and
/// the recent messages' row ids.
struct Injected {
    memories: Vec<String>,
    messages: Vec<(String, String)>,
    message_ids: Vec<String>,
    empty: bool,
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The text between the tag `<name …>` that ends at `end` and its closing `</name>`, for every
/// such element of `block`, with the opening tag.
fn elements<'a>(block: &'a str, name: &str) -> Vec<(&'a str, &'a str)> {
    let (open, close) = (format!("<{name} "), format!("</{name}>"));
    let mut out = Vec::new();
    let mut rest = block;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start..];
        let Some(tag_end) = after.find('>') else {
            break;
        };
        let Some(end) = after.find(&close) else { break };
        out.push((&after[..tag_end], &after[tag_end + 1..end]));
        rest = &after[end + close.len()..];
    }
    out
}

fn injected(reply: &Value) -> Injected {
    let block = reply["injection"].as_str().unwrap_or_default();
    let memories = elements(block, "memory")
        .into_iter()
        .map(|(_, text)| unescape(text))
        .collect();
    let messages = elements(block, "message")
        .into_iter()
        .map(|(tag, text)| {
            let role = if tag.contains("role=\"bot\"") {
                "bot"
            } else if tag.contains("role=\"member\"") {
                "member"
            } else {
                "unmarked"
            };
            (role.to_string(), unescape(text))
        })
        .collect();
    let message_ids = reply["recent_message_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    Injected {
        memories,
        messages,
        message_ids,
        empty: block.is_empty(),
    }
}

/// A line of small talk that injected something, with what: memories (m), recent messages (r).
fn described(text: &str, got: &Injected) -> String {
    format!("{text} ({}m {}r)", got.memories.len(), got.messages.len())
}

async fn status(client: &reqwest::Client, base: &str) -> Value {
    serve::get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or(Value::Null)
}

/// Who asks the bot in every chat: a member the set never names, so no question lifts them.
const ASKER: (&str, &str) = ("u-bench-asker", "群友");

/// Ask as the plugins do: the message reaches the chat first (`/v1/events/message`, marked
/// `to_bot`), and the injection is asked for once it is embedded (a host whose own stages take
/// longer than the embedding, as AstrBot's do; asked at once, it would still be waiting).
async fn ask(
    client: &reqwest::Client,
    base: &str,
    conversation: &str,
    query: &str,
    history: &[Value],
) -> Value {
    let said = json!({
        "conversation_id": conversation, "sender_id": ASKER.0, "sender_name": ASKER.1,
        "text": query, "sent_at": Utc::now().to_rfc3339(), "to_bot": true,
    });
    post(client, &format!("{base}/v1/events/message"), &said)
        .await
        .unwrap_or_else(|e| panic!("message to the bot: {e}"));
    let started = Instant::now();
    while status(client, base).await["working_memory"]["waiting"] != json!(0) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the message to the bot was not embedded in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    post(
        client,
        &format!("{base}/v1/events/llm_request"),
        &json!({"conversation_id": conversation, "query": query, "history": history}),
    )
    .await
    .unwrap_or_else(|e| panic!("llm_request: {e}"))
}

/// The long-term memories every chat may read, by id: (content, the rule that made it, whether
/// it expires).
async fn long_term(
    client: &reqwest::Client,
    base: &str,
    chats: &[String],
) -> BTreeMap<String, (String, &'static str, bool)> {
    let mut all = BTreeMap::new();
    for chat in chats {
        for row in serve::exported(client, base, chat).await {
            if row["memory_type"] != "message" && !row["id"].is_null() {
                let id = row["id"].as_str().unwrap_or("").to_string();
                let why = row["reasoning"].as_str().unwrap_or("");
                let rule = if why.contains("stated again") {
                    "restated"
                } else if why.contains("recalled again") {
                    "recalled twice"
                } else {
                    "other"
                };
                let content = row["content"].as_str().unwrap_or("").to_string();
                all.insert(id, (content, rule, !row["expires_at"].is_null()));
            }
        }
    }
    all
}

fn pct(n: usize, of: usize) -> f64 {
    100.0 * n as f64 / of.max(1) as f64
}

fn main() {
    common::runtime().block_on(run());
}

async fn run() {
    let set = load();
    let smoke = common::smoke();
    let messages: Vec<Message> = match smoke {
        true => set.messages.iter().take(120).cloned().collect(),
        false => set.messages.clone(),
    };
    let said: HashSet<&str> = messages.iter().map(|m| m.id.as_str()).collect();
    let facts: Vec<&Fact> = set
        .facts
        .iter()
        .filter(|f| {
            !smoke
                || set
                    .messages
                    .iter()
                    .any(|m| m.fact.as_deref() == Some(&f.id) && said.contains(m.id.as_str()))
        })
        .take(if smoke { 5 } else { usize::MAX })
        .collect();
    let chats: Vec<String> = {
        let mut c: Vec<String> = messages.iter().map(|m| m.conversation_id.clone()).collect();
        c.sort();
        c.dedup();
        c
    };
    // What each text was in the chat, and who said it.
    let mut kinds: HashMap<&str, HashSet<&str>> = HashMap::new();
    for m in &messages {
        let kind = if m.is_bot { "bot" } else { m.kind.as_str() };
        kinds.entry(m.text.trim()).or_default().insert(kind);
    }
    let is_fact_text = |t: &str| {
        kinds
            .get(t.trim())
            .is_some_and(|k| k.contains("fact") || k.contains("restatement"))
    };
    let texts_of = |fact: &str| -> Vec<&str> {
        messages
            .iter()
            .filter(|m| m.fact.as_deref() == Some(fact) && !m.is_bot)
            .map(|m| m.text.trim())
            .collect()
    };

    // The default config: nothing mapped, no LLM for consolidation.
    let (client, _dir, proc, base) = serve::start_default_serve(Duration::from_secs(120)).await;
    for _ in 0..600 {
        if !status(&client, &base).await["embedding_calibration"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Replay, moved so the last message was said ten minutes ago.
    let last = messages.iter().map(|m| m.sent_at).max().expect("messages");
    let shift = (Utc::now() - chrono::Duration::minutes(10)) - last.with_timezone(&Utc);
    let mut row_of: HashMap<String, &Message> = HashMap::new();
    let started = Instant::now();
    for m in &messages {
        let body = json!({
            "conversation_id": m.conversation_id, "sender_id": m.sender_id,
            "sender_name": m.sender_name, "text": m.text, "message_id": m.id,
            "sent_at": (m.sent_at.with_timezone(&Utc) + shift).to_rfc3339(), "is_bot": m.is_bot,
        });
        let r = post(&client, &format!("{base}/v1/events/message"), &body)
            .await
            .unwrap_or_else(|e| panic!("message {}: {e}", m.id));
        if let Some(id) = r["id"].as_str() {
            row_of.insert(id.to_string(), m);
        }
    }
    serve::settled(
        &client,
        &base,
        |s| {
            json!([
                s["working_memory"]["waiting"],
                s["working_memory"]["restated"],
                s["rows"]
            ])
        },
        Duration::from_secs(10),
        Duration::from_secs(1800),
    )
    .await;
    println!(
        "group-chat: {} messages of {} chats replayed and embedded in {:.0} s",
        messages.len(),
        chats.len(),
        started.elapsed().as_secs_f64()
    );

    // Every injection, checked for rows of another conversation and the bot shown as a member.
    let bot_texts: HashSet<&str> = messages
        .iter()
        .filter(|m| m.is_bot)
        .map(|m| m.text.trim())
        .filter(|t| kinds.get(t).is_some_and(|k| k.len() == 1))
        .collect();
    let (mut crossed, mut bot_as_member, mut injections) = (0, 0, 0);
    let mut check = |conversation: &str, i: &Injected| {
        injections += 1;
        crossed += i
            .message_ids
            .iter()
            .filter(|id| {
                row_of
                    .get(*id)
                    .is_some_and(|m| m.conversation_id != conversation)
            })
            .count();
        bot_as_member += i
            .messages
            .iter()
            .filter(|(role, text)| role != "bot" && bot_texts.contains(text.trim()))
            .count();
    };

    // 1. Each fact's question, once.
    let verbose = std::env::var_os("SCOPEMEM_BENCH_VERBOSE").is_some_and(|v| v == "1");
    let mut found = 0;
    let mut missed = Vec::new();
    for f in &facts {
        let reply = ask(&client, &base, &f.conversation_id, &f.question, &[]).await;
        let got = injected(&reply);
        check(&f.conversation_id, &got);
        let wanted = texts_of(&f.id);
        let hit = got
            .memories
            .iter()
            .take(3)
            .chain(got.messages.iter().map(|(_, t)| t))
            .any(|t| wanted.contains(&t.trim()));
        if hit {
            found += 1;
        } else {
            missed.push(f.id.as_str());
            if verbose {
                println!(
                    "  missed {}: {} wants {wanted:?}; got memories {:?}, messages {:?}",
                    f.id, f.question, got.memories, got.messages
                );
            }
        }
    }
    println!(
        "group-chat: facts in the injection for their question (first 3 memories or the recent messages): {found}/{} ({:.0} %); missed {missed:?}",
        facts.len(),
        pct(found, facts.len())
    );

    // 2. Each question a second time; then what became long-term memories.
    for f in &facts {
        let reply = ask(&client, &base, &f.conversation_id, &f.question, &[]).await;
        check(&f.conversation_id, &injected(&reply));
    }
    serve::settled(
        &client,
        &base,
        |s| json!([s["rows"], s["working_memory"]["recalled_again"]]),
        Duration::from_secs(10),
        Duration::from_secs(600),
    )
    .await;
    let kept = long_term(&client, &base, &chats).await;
    let (fact_memories, chatter): (Vec<_>, Vec<_>) =
        kept.values().partition(|(t, _, _)| is_fact_text(t));
    let restated: Vec<&&Fact> = facts.iter().filter(|f| f.restated_by.is_some()).collect();
    let restated_kept = restated
        .iter()
        .filter(|f| {
            texts_of(&f.id)
                .iter()
                .any(|t| kept.values().any(|(k, _, _)| k.trim() == *t))
        })
        .count();
    let s = status(&client, &base).await;
    let fading = chatter.iter().filter(|(_, _, expires)| *expires).count();
    println!(
        "group-chat: long-term memories {}: facts {}, chatter {} ({fading} of them fade unless recalled again); facts a second member restated kept {restated_kept}/{} ({:.0} %); restatement rule {}, threshold rule hand-overs {}",
        kept.len(),
        fact_memories.len(),
        chatter.len(),
        restated.len(),
        pct(restated_kept, restated.len()),
        s["working_memory"]["restated"],
        s["working_memory"]["recalled_again"],
    );
    // Issue 76: a memory that means nothing without the line it answered ("me too", "同上").
    let not_alone: Vec<&String> = kept
        .values()
        .map(|(t, _, _)| t)
        .filter(|t| scopemem_core::standalone::means_nothing_alone(t))
        .collect();
    println!(
        "group-chat: long-term memories that do not stand on their own {} (target 0){}",
        not_alone.len(),
        if not_alone.is_empty() {
            String::new()
        } else {
            format!(": {not_alone:?}")
        }
    );
    for (t, rule, _) in &chatter {
        let kind: Vec<&str> = kinds
            .get(t.trim())
            .map(|k| k.iter().copied().collect())
            .unwrap_or_default();
        println!("  chatter kept by {rule}: {t} ({})", kind.join("/"));
    }

    // 3. Small talk to the bot, alone and with the chat's last 6 turns.
    let (mut alone, mut with_turns) = (Vec::new(), Vec::new());
    let talk: Vec<&SmallTalk> = set
        .small_talk
        .iter()
        .filter(|t| chats.contains(&t.conversation_id))
        .take(if smoke { 3 } else { usize::MAX })
        .collect();
    for t in &talk {
        let reply = ask(&client, &base, &t.conversation_id, &t.text, &[]).await;
        let got = injected(&reply);
        check(&t.conversation_id, &got);
        if !got.empty {
            alone.push(described(&t.text, &got));
            if verbose {
                println!(
                    "  small talk {:?} alone injected {:?} {:?}",
                    t.text, got.memories, got.messages
                );
            }
        }
        let chat: Vec<&Message> = messages
            .iter()
            .filter(|m| m.conversation_id == t.conversation_id)
            .collect();
        let turns: Vec<Value> = chat[chat.len().saturating_sub(6)..]
            .iter()
            .map(|m| {
                let role = if m.is_bot { "assistant" } else { "user" };
                json!({"role": role, "content": m.text, "name": m.sender_name})
            })
            .collect();
        let reply = ask(&client, &base, &t.conversation_id, &t.text, &turns).await;
        let got = injected(&reply);
        check(&t.conversation_id, &got);
        if !got.empty {
            with_turns.push(described(&t.text, &got));
            if verbose {
                println!(
                    "  small talk {:?} with turns injected {:?} {:?}",
                    t.text, got.memories, got.messages
                );
            }
        }
    }
    println!(
        "group-chat: small talk injecting anything: {}/{} alone {alone:?}, {}/{} with the chat's last 6 turns {with_turns:?}",
        alone.len(),
        talk.len(),
        with_turns.len(),
        talk.len()
    );

    // 4. Across conversations, and the bot's words.
    println!(
        "group-chat: in {injections} injections: rows of another conversation {crossed}, the bot's replies shown as a member's {bot_as_member}"
    );
    drop(proc);
}
