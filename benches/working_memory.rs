//! Working memory (issue 49): ingest, vector lag, recall of what members said to each other,
//! and memory with 100k live messages, against a real `scopemem serve` with the default config
//! (so the default model, e5 in-process). `make bench-working-memory`; set
//! `SCOPEMEM_BENCH_SERVE_BIN` to the release binary users get.
//!
//! 1. Burst: 200 messages/s for 60 s from 50 group chats (10 scopes). Every request's status
//!    and latency; every 50th message carries a unique token, and a recall in its chat asks for
//!    the token right after the 202 until it is found (keyword-searchable within 1 s?). Then
//!    the queue drains: how long, and at what rate the embedder writes messages.
//! 2. Steady: 30 messages/s for 60 s; the vector lag (`/v1/status` `working_memory.
//!    vector_lag_ms`, sampled every 250 ms): vector-searchable within 10 s?
//! 3. Recall on a held-out set written for this bench (Chinese and English): in each group two
//!    members state a fact to each other 1 to 72 hours before the question (`sent_at`), among
//!    chatter; the question to the bot must find it in the top 3 recent messages. Then, on a
//!    server whose messages live one hour, the facts are said 58 minutes ago, each question is
//!    asked twice (the threshold rule consolidates them), the messages expire and the sweeper
//!    erases them, and the questions are asked once more: the fact must be a top-3 memory.
//!    Rows found across scopes must be 0. The rows left then are what the threshold rule
//!    wrote: the 16 facts, and the chatter it took for facts (listed, as is what the
//!    restatement rule wrote in the first half).
//! 4. RSS with 100k live messages: a table seeded with 100k message rows (random unit vectors:
//!    the size is a message's, the content does not matter), served, RSS once they are loaded.
//!
//! `SCOPEMEM_BENCH_PARTS=burst,recall,rss` picks parts; `SCOPEMEM_BENCH_LOG_DIR` keeps the
//! servers' logs. `SCOPEMEM_BENCH_TO_BOT_EVERY=N` marks every Nth message of parts 1 and 2
//! `to_bot`, as a question to the bot is: its recall's texts are embedded ahead
//! (`recall::prefetch`) beside the ingest, with no recall after it to use them (their cost
//! alone, on the same cores).

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{json, Value};

use common::serve::{self, post, Proc};

const CHATS: usize = 50;
const SCOPES: usize = 10;

fn chat(i: usize) -> String {
    format!("default:GroupMessage:{}", 700_000 + i)
}

/// Each chat mapped to one of [`SCOPES`] scopes.
fn scope_map() -> Value {
    let mut map = serde_json::Map::new();
    for i in 0..CHATS {
        map.insert(chat(i), json!(format!("群{}", i % SCOPES)));
    }
    Value::Object(map)
}

const CHATTER_ZH: [&str; 12] = [
    "哈哈哈笑死我了",
    "今天好热啊",
    "谁看了昨晚的球赛",
    "我先去吃饭了",
    "这个表情包绝了",
    "周末有人打球吗",
    "刚下班，累死",
    "外卖又迟到了",
    "楼下新开了一家奶茶店",
    "晚安各位",
    "有人知道快递几点到吗",
    "我也是这么想的",
];
const CHATTER_EN: [&str; 10] = [
    "lol that's hilarious",
    "anyone watching the game tonight",
    "brb grabbing lunch",
    "so tired today",
    "good morning everyone",
    "nice one",
    "the traffic was terrible",
    "did anyone see the new trailer",
    "I agree with that",
    "good night all",
];

/// A fact one member tells another, and the question asked later.
struct Fact {
    fact: &'static str,
    question: &'static str,
    hours_ago: i64,
}

const FACTS: [Fact; 16] = [
    Fact {
        fact: "妈妈对花生过敏，聚餐别点沙爹",
        question: "妈妈有什么不能吃的？",
        hours_ago: 2,
    },
    Fact {
        fact: "明早九点半在三楼会议室开周会",
        question: "周会几点开，在哪？",
        hours_ago: 1,
    },
    Fact {
        fact: "小雨的生日派对改到周日下午了",
        question: "小雨的生日派对什么时候？",
        hours_ago: 30,
    },
    Fact {
        fact: "车钥匙我放在玄关鞋柜第二层了",
        question: "车钥匙放哪了？",
        hours_ago: 5,
    },
    Fact {
        fact: "外婆下周三要去医院复查眼睛",
        question: "外婆什么时候去复查？",
        hours_ago: 48,
    },
    Fact {
        fact: "房租这个月涨到四千二了",
        question: "这个月房租多少钱？",
        hours_ago: 70,
    },
    Fact {
        fact: "新来的同事叫陈静，负责财务报表",
        question: "谁负责财务报表？",
        hours_ago: 12,
    },
    Fact {
        fact: "猫粮快吃完了，记得买那个蓝色包装的",
        question: "该买哪种猫粮？",
        hours_ago: 20,
    },
    Fact {
        fact: "The wifi password at the cabin is pinecone42",
        question: "What's the cabin wifi password?",
        hours_ago: 3,
    },
    Fact {
        fact: "Dad's flight lands at 6:40pm on Friday",
        question: "When does Dad's flight land?",
        hours_ago: 26,
    },
    Fact {
        fact: "The team dinner moved to the Thai place on Elm Street",
        question: "Where is the team dinner now?",
        hours_ago: 8,
    },
    Fact {
        fact: "Lily is allergic to cats so don't bring Milo",
        question: "Who is allergic to cats?",
        hours_ago: 40,
    },
    Fact {
        fact: "The quarterly report is due next Tuesday",
        question: "When is the quarterly report due?",
        hours_ago: 60,
    },
    Fact {
        fact: "I left the spare house key with Mrs. Chen next door",
        question: "Who has the spare house key?",
        hours_ago: 16,
    },
    Fact {
        fact: "Soccer practice is cancelled this Saturday because of the rain",
        question: "Is there soccer practice on Saturday?",
        hours_ago: 6,
    },
    Fact {
        fact: "Grandpa wants the blue sweater, size large, for his birthday",
        question: "What does Grandpa want for his birthday?",
        hours_ago: 66,
    },
];

fn message(i: usize, sender: usize, text: &str, sent_at: Option<chrono::DateTime<Utc>>) -> Value {
    let mut m = json!({
        "conversation_id": chat(i),
        "sender_id": format!("u{sender}"),
        "sender_name": format!("成员{sender}"),
        "text": text,
    });
    if let Some(t) = sent_at {
        m["sent_at"] = json!(t.to_rfc3339());
    }
    m
}

/// Every how many messages one is marked `to_bot` (`SCOPEMEM_BENCH_TO_BOT_EVERY`; 0, none).
fn to_bot_every() -> usize {
    std::env::var("SCOPEMEM_BENCH_TO_BOT_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn status(client: &reqwest::Client, base: &str) -> Value {
    serve::get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or(Value::Null)
}

async fn start(client: &reqwest::Client, dir: &std::path::Path, extra: Value) -> (Proc, String) {
    let mut cfg = json!({"conversation_scope_map": scope_map()});
    if let (Some(c), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    let (proc, base) = serve::start_serve(client, dir, cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Calibrated: the gate and cut are measured in the background at start-up.
    for _ in 0..600 {
        if !status(client, &base).await["embedding_calibration"].is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (proc, base)
}

/// Send `rate` messages/s for `secs` seconds; returns (accepted, 4xx, 5xx, latencies, token
/// probes' times to keyword-searchable).
async fn ingest(
    client: &reqwest::Client,
    base: &str,
    rate: usize,
    secs: usize,
    probe_every: usize,
) -> (u64, u64, u64, Vec<Duration>, Vec<Option<Duration>>) {
    let ok = Arc::new(AtomicU64::new(0));
    let client_err = Arc::new(AtomicU64::new(0));
    let server_err = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let probes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let total = rate * secs;
    let mut rng = common::Rng(49);
    for n in 0..total {
        tick.tick().await;
        let i = n % CHATS;
        let probe = n % probe_every == 0;
        let text = if probe {
            format!("暗号是 KX{n:06}，记一下")
        } else if n % 2 == 0 {
            rng.pick(&CHATTER_ZH).to_string()
        } else {
            rng.pick(&CHATTER_EN).to_string()
        };
        let mut body = message(i, n % 7, &text, None);
        if to_bot_every() > 0 && n % to_bot_every() == 1 {
            body["to_bot"] = json!(true);
        }
        let (client, base) = (client.clone(), base.to_string());
        let (ok, client_err, server_err) = (ok.clone(), client_err.clone(), server_err.clone());
        let (latencies, probes) = (latencies.clone(), probes.clone());
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let r = client
                .post(format!("{base}/v1/events/message"))
                .json(&body)
                .send()
                .await;
            let code = r.as_ref().map(|r| r.status().as_u16()).unwrap_or(599);
            latencies.lock().unwrap().push(started.elapsed());
            match code {
                200..=299 => ok.fetch_add(1, Ordering::Relaxed),
                400..=499 => client_err.fetch_add(1, Ordering::Relaxed),
                _ => server_err.fetch_add(1, Ordering::Relaxed),
            };
            if probe && code == 202 {
                let accepted = Instant::now();
                let token = format!("KX{n:06}");
                let mut found = None;
                while accepted.elapsed() < Duration::from_secs(30) {
                    let r = post(
                        &client,
                        &format!("{base}/v1/recall"),
                        &json!({"conversation_id": chat(i), "query": token}),
                    )
                    .await
                    .unwrap_or(Value::Null);
                    let hit = r["recent_messages"].as_array().is_some_and(|m| {
                        m.iter()
                            .any(|m| m["content"].as_str().is_some_and(|c| c.contains(&token)))
                    });
                    if hit {
                        found = Some(accepted.elapsed());
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                probes.lock().unwrap().push(found);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    let probes = std::mem::take(&mut *probes.lock().unwrap());
    (
        ok.load(Ordering::Relaxed),
        client_err.load(Ordering::Relaxed),
        server_err.load(Ordering::Relaxed),
        latencies,
        probes,
    )
}

/// Wait until no message waits for its vector; the time it took and the most seen waiting.
async fn drain(client: &reqwest::Client, base: &str) -> (Duration, u64) {
    let started = Instant::now();
    let mut most = 0;
    loop {
        let waiting = status(client, base).await["working_memory"]["waiting"]
            .as_u64()
            .unwrap_or(0);
        most = most.max(waiting);
        if waiting == 0 || started.elapsed() > Duration::from_secs(3600) {
            return (started.elapsed(), most);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn burst_and_steady(client: &reqwest::Client) {
    let dir = tempfile::tempdir_in(common::bench_root()).unwrap();
    let (proc, base) = start(client, dir.path(), json!({})).await;
    let secs = common::scaled(60, 3);
    let (ok, c4, c5, lat, probes) = ingest(client, &base, 200, secs, 50).await;
    let sent = ok + c4 + c5;
    let (p50, p95, p99) = common::percentiles(lat);
    let found: Vec<Duration> = probes.iter().flatten().copied().collect();
    let within_1s = found
        .iter()
        .filter(|d| **d <= Duration::from_secs(1))
        .count();
    let worst = found.iter().max().copied().unwrap_or_default();
    println!(
        "burst: {sent} messages at 200/s for {secs} s from {CHATS} chats: {ok} accepted, {c4} 4xx, {c5} 5xx; answer p50 {p50:.1} ms, p95 {p95:.1} ms, p99 {p99:.1} ms"
    );
    println!(
        "keyword-searchable: {within_1s}/{} tokens found within 1 s of the 202 (slowest {:.0} ms, {} never)",
        probes.len(),
        worst.as_secs_f64() * 1000.0,
        probes.iter().filter(|p| p.is_none()).count()
    );
    let waiting_after = status(client, &base).await["working_memory"]["waiting"]
        .as_u64()
        .unwrap_or(0);
    let (took, _) = drain(client, &base).await;
    println!(
        "drain: {waiting_after} messages waiting at the burst's end, embedded in {:.0} s ({:.1} messages/s)",
        took.as_secs_f64(),
        waiting_after as f64 / took.as_secs_f64().max(0.001)
    );
    let working = &status(client, &base).await["working_memory"];
    println!(
        "rules during the burst: {} messages handed to the threshold rule as recalled again ({} skipped), {} restated",
        working["recalled_again"], working["recurrence_skipped"], working["restated"]
    );

    let steady = common::scaled(60, 3);
    let sampler = {
        let (client, base) = (client.clone(), base.clone());
        tokio::spawn(async move {
            let mut worst = 0u64;
            let until = Instant::now() + Duration::from_secs(steady as u64 + 5);
            while Instant::now() < until {
                let lag = status(&client, &base).await["working_memory"]["vector_lag_ms"]
                    .as_u64()
                    .unwrap_or(0);
                worst = worst.max(lag);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            worst
        })
    };
    let (ok, c4, c5, lat, _) = ingest(client, &base, 30, steady, usize::MAX).await;
    let worst_lag = sampler.await.unwrap_or(0);
    let (_, p95, _) = common::percentiles(lat);
    println!(
        "steady: 30 messages/s for {steady} s: {ok} accepted, {c4} 4xx, {c5} 5xx, answer p95 {p95:.1} ms; vector lag at most {:.1} s",
        worst_lag as f64 / 1000.0
    );
    let rss = serve::proc_status_mb(&proc.id().to_string(), "VmRSS");
    println!("serve RSS after the burst and the steady phase: {rss:.0} MB");
    if to_bot_every() > 0 {
        let text = serve::metrics(client, &base).await;
        println!(
            "every {}th message to the bot: {} embedded ahead",
            to_bot_every(),
            serve::metric(&text, "scopemem_questions_prefetched_total")
        );
    }
    drop(proc);
}

/// Say the held-out facts among chatter; the share of questions whose fact is a top-3 recent
/// message, and rows from another scope.
async fn say_facts(
    client: &reqwest::Client,
    base: &str,
    at: impl Fn(&Fact) -> chrono::DateTime<Utc>,
) {
    let mut rng = common::Rng(7);
    for (i, f) in FACTS.iter().enumerate() {
        let said = at(f);
        for k in 0..12 {
            let line = if k % 2 == 0 {
                rng.pick(&CHATTER_ZH)
            } else {
                rng.pick(&CHATTER_EN)
            };
            // All before the fact: the chatter expires before the fact's consolidated memory
            // is asked for, so "messages still recalled" counts only what should be gone.
            let t = said - chrono::Duration::minutes(60) + chrono::Duration::minutes(4 * k as i64);
            post(
                client,
                &format!("{base}/v1/events/message"),
                &message(i, 2 + k % 3, line, Some(t)),
            )
            .await
            .expect("chatter");
        }
        post(
            client,
            &format!("{base}/v1/events/message"),
            &message(i, 0, f.fact, Some(said)),
        )
        .await
        .expect("fact");
        post(
            client,
            &format!("{base}/v1/events/message"),
            &message(
                i,
                1,
                "好的收到 / got it",
                Some(said + chrono::Duration::minutes(1)),
            ),
        )
        .await
        .expect("reply");
    }
    drain(client, base).await;
}

async fn ask(client: &reqwest::Client, base: &str, i: usize, question: &str) -> Value {
    post(
        client,
        &format!("{base}/v1/recall"),
        &json!({"conversation_id": chat(i), "query": question, "limit": 3}),
    )
    .await
    .expect("recall")
}

/// `question` through the injection path (`/v1/events/llm_request`), as a plugin asks before
/// the bot answers.
async fn ask_for_prompt(client: &reqwest::Client, base: &str, i: usize, question: &str) -> Value {
    post(
        client,
        &format!("{base}/v1/events/llm_request"),
        &json!({"conversation_id": chat(i), "query": question}),
    )
    .await
    .expect("injection")
}

fn contents(list: &Value) -> Vec<(String, String)> {
    list.as_array()
        .map(|l| {
            l.iter()
                .map(|m| {
                    (
                        m["content"].as_str().unwrap_or("").to_string(),
                        m["memory_scope"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The long-term memories of every chat (browsed in each: the rows its scope sees), by id,
/// as (content, speaker id).
async fn long_term_memories(
    client: &reqwest::Client,
    base: &str,
) -> std::collections::BTreeMap<String, (String, String)> {
    let mut all = std::collections::BTreeMap::new();
    for i in 0..CHATS {
        let listed = post(
            client,
            &format!("{base}/v1/memories/browse"),
            &json!({"conversation_id": chat(i), "limit": 20}),
        )
        .await
        .unwrap_or(Value::Null);
        for m in listed["memories"].as_array().into_iter().flatten() {
            let text = |k: &str| m[k].as_str().unwrap_or("").to_string();
            all.insert(text("id"), (text("content"), text("speaker_id")));
        }
    }
    all
}

/// "N long-term memories: F of the facts, and the others (by text)".
fn what_became_memories(memories: &std::collections::BTreeMap<String, (String, String)>) -> String {
    let (facts, others): (Vec<_>, Vec<_>) = memories
        .values()
        .partition(|(c, _)| FACTS.iter().any(|f| f.fact == c));
    let others: Vec<String> = others
        .iter()
        .map(|(c, speaker)| format!("{c:?} ({speaker})"))
        .collect();
    format!(
        "{} long-term memories: {} of the facts, {} others {others:?}",
        memories.len(),
        facts.len(),
        others.len()
    )
}

async fn recall_set(client: &reqwest::Client) {
    let dir = tempfile::tempdir_in(common::bench_root()).unwrap();
    let (proc, base) = start(client, dir.path(), json!({})).await;
    let now = Utc::now();
    say_facts(client, &base, |f| {
        now - chrono::Duration::hours(f.hours_ago)
    })
    .await;
    let (mut hits, mut leaks) = (0, 0);
    for (i, f) in FACTS.iter().enumerate() {
        let r = ask(client, &base, i, f.question).await;
        let recent = contents(&r["recent_messages"]);
        hits += usize::from(recent.iter().any(|(c, _)| c == f.fact));
        let own = format!("群{}", i % SCOPES);
        leaks += recent
            .iter()
            .filter(|(_, s)| *s != own && s != "public")
            .count();
    }
    println!(
        "recall: {hits}/{} facts said between members 1-72 h earlier found in the top 3 recent messages; {leaks} rows from another scope",
        FACTS.len()
    );
    // Nothing was asked twice: what is a memory now, the restatement rule wrote.
    println!(
        "restatement rule, after the facts were said: {}",
        what_became_memories(&long_term_memories(client, &base).await)
    );
    drop(proc);

    // Consolidated, then the messages expire.
    let dir = tempfile::tempdir_in(common::bench_root()).unwrap();
    let (proc, base) = start(
        client,
        dir.path(),
        json!({"working_memory": {"ttl_hours": 1}, "retention": {"sweep_interval_secs": 1}}),
    )
    .await;
    let said = Utc::now() - chrono::Duration::minutes(58);
    say_facts(client, &base, |_| said).await;
    // Asked as a bot asks for its prompt: only that counts toward the threshold rule.
    for (i, f) in FACTS.iter().enumerate() {
        ask_for_prompt(client, &base, i, f.question).await;
        ask_for_prompt(client, &base, i, f.question).await;
    }
    let expiry = said + chrono::Duration::hours(1) + chrono::Duration::minutes(2);
    while Utc::now() < expiry {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // The sweeper runs every second; wait until no message is left.
    for _ in 0..600 {
        let listed = post(
            client,
            &format!("{base}/v1/memories/browse"),
            &json!({"conversation_id": chat(0), "messages": true}),
        )
        .await
        .unwrap_or(Value::Null);
        if listed["total"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (mut kept, mut leaks, mut messages_left) = (0, 0, 0);
    for (i, f) in FACTS.iter().enumerate() {
        let r = ask(client, &base, i, f.question).await;
        let memories = contents(&r["memories"]);
        kept += usize::from(memories.iter().any(|(c, _)| c == f.fact));
        messages_left += r["recent_messages"].as_array().map_or(0, Vec::len);
        let own = format!("群{}", i % SCOPES);
        leaks += memories
            .iter()
            .filter(|(_, s)| *s != own && s != "public")
            .count();
    }
    println!(
        "after consolidation and expiry: {kept}/{} facts found in the top 3 memories; {messages_left} messages still recalled; {leaks} rows from another scope",
        FACTS.len()
    );
    // Every message expired, so the rows left are what the threshold rule made memories: the
    // facts, and whatever else the questions returned twice that could state a fact.
    let after = status(client, &base).await;
    println!(
        "threshold rule, each question asked twice: {} rows left; {}; {} messages handed over as recalled again",
        after["rows"],
        what_became_memories(&long_term_memories(client, &base).await),
        after["working_memory"]["recalled_again"]
    );
    drop(proc);
}

async fn rss_with_live_messages(client: &reqwest::Client) {
    let n = common::scaled(100_000, 2_000);
    let dir = tempfile::tempdir_in(common::bench_root()).unwrap();
    let db = dir.path().join("db");
    let files = scopemem::embed::e5_model::resolve_files(None);
    let e5 = scopemem::embed::E5Embedder::load(&files, 32, 2).expect("the e5 model is installed");
    use scopemem::embed::Embedder;
    let model = scopemem::embed::ModelInfo {
        id: e5.model_id().into(),
        dimension: e5.dimension(),
    };
    drop(e5);
    let (store, _) = scopemem::migrate::open_store(
        &db,
        "memories",
        &model,
        scopemem::store::WriterSettings::default(),
    )
    .await
    .expect("open");
    let mut rng = common::Rng(100);
    let now = Utc::now();
    let mut chatter = CHATTER_ZH.iter().chain(CHATTER_EN.iter()).cycle();
    let rows: Vec<_> = (0..n)
        .map(|k| {
            let i = k % CHATS;
            let record = scopemem::store::MemoryRecord {
                id: format!("msg-{k:032}"),
                content: format!("{} #{k}", chatter.next().unwrap_or(&"hi")),
                reasoning: None,
                tags: vec![],
                memory_type: "message".into(),
                strength: 1,
                is_active: false,
                conversation_id: Some(chat(i)),
                created_at: Some(now - chrono::Duration::seconds((n - k) as i64)),
                memory_scope: Some(format!("群{}", i % SCOPES)),
                scope_source: Some("mapped".into()),
                expires_at: Some(now + chrono::Duration::hours(72)),
                last_recalled_at: None,
                speaker_id: Some(format!("u{}", k % 7)),
                speaker_name: Some(format!("成员{}", k % 7)),
                source_ids: vec![],
                about_ids: vec![],
                source_conversations: vec![],
            };
            (record, rng.unit(model.dimension))
        })
        .collect();
    for chunk in rows.chunks(20_000) {
        store.append(chunk.to_vec()).await.expect("append");
    }
    store.writer().maintain().await.expect("compact");
    store.shutdown().await;
    drop(rows);
    let cfg = json!({"storage": {"db_dir": db}});
    let (proc, base) = start(client, dir.path(), cfg).await;
    for _ in 0..1200 {
        let s = status(client, &base).await;
        if s["resident_search"]["rows"].as_u64() == Some(n as u64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ask(client, &base, 0, "哈哈哈").await;
    // The first search starts the vector index build (the table outgrew flat search), which
    // reads every vector: measure once it is done, as a serve that has been up a while is.
    let mut indexed = false;
    for _ in 0..2400 {
        if status(client, &base).await["vector_index"] == json!(true) {
            indexed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ask(client, &base, 1, "周六谁带球").await;
    let pid = proc.id().to_string();
    let (rss, peak) = (
        serve::proc_status_mb(&pid, "VmRSS"),
        serve::proc_status_mb(&pid, "VmHWM"),
    );
    let when = if indexed {
        "once they are loaded, the vector index built and a recall ran"
    } else {
        "once they are loaded and a recall ran (no vector index after 10 minutes)"
    };
    println!("memory: {n} live messages, serve RSS {rss:.0} MB {when}; peak {peak:.0} MB");
    drop(proc);
}

/// Whether to run this part: `SCOPEMEM_BENCH_PARTS` lists some of `burst,recall,rss` (all
/// when unset).
fn part(name: &str) -> bool {
    std::env::var("SCOPEMEM_BENCH_PARTS")
        .map(|parts| parts.split(',').any(|p| p.trim() == name))
        .unwrap_or(true)
}

fn main() {
    let rt = common::runtime();
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .expect("client");
        println!("serve binary: {}", serve::serve_bin().display());
        if part("burst") {
            burst_and_steady(&client).await;
        }
        if part("recall") {
            recall_set(&client).await;
        }
        if part("rss") {
            rss_with_live_messages(&client).await;
        }
    });
}
