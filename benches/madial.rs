//! MADial-Bench (NAACL 2025; Chinese, MIT, vendored in `benches/madial/`): recall on real
//! dialogue, scopemem beside the paper's baselines (issue 48). `make bench-madial`.
//!
//! The paper's protocol: each user's memories are the pool; the dialogue before the test turn
//! is the query; a memory is the text `{'scene': …, 'emotion': …, 'event': …}`; the top 20 are
//! scored with the paper's metric code (`embedding_score_new.py`, ported in
//! `common/recall_sets.rs`, which `benches/context_turns.rs` shares: its nDCG takes the ideal
//! order from the returned list itself, and the port keeps that).
//!
//! Rows:
//! - the paper's six embedders, recomputed from their top-20 files (this checks the port: they
//!   must print the paper's table);
//! - scopemem as shipped: a real `scopemem serve` with the default config, each user a
//!   conversation mapped to a scope of its own, every memory remembered through the API, every
//!   question a `POST /v1/recall` with `limit: 20`. Asked three ways: the paper's query (the
//!   whole dialogue as one text), the last message with the turns before it as `history` (what
//!   the plugins send), and the last message alone; the second also with `search: vector` and
//!   `search: keyword`, the legs of its fusion; and once more with history after the service
//!   has seen the dialogue's turns as chat messages (the plugins send each line as it arrives),
//!   the question's texts embedded ahead (issue 60), beside the row with unseen history;
//! - multilingual-e5-small exact search (the model alone, on the paper's query) and jieba
//!   BM25, as references.
//!
//! Cross-validation: scopemem's turn weights are fixed round numbers (`memory::turns`), not
//! fitted on this set, so every fold scores the same setting and the 5-fold figure is the
//! whole set's; the table shows the folds' spread (dialogues split by id mod 5). Latency: the
//! recall's wall time over HTTP, p50 and p95, per way of asking.

#[path = "common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use scopemem::embed::{Embedder, TextRole};
use serde_json::{json, Value};

use common::recall_sets::{as_i64, dialogues, lines, memories, metrics, Dialogue, Memory, Turn};
use common::serve;

const TOP: usize = 20;
const FOLDS: usize = 5;
/// The paper's six embedders, as its score script lists them.
const PAPER_MODELS: [&str; 6] = [
    "BGE_M3_colbert",
    "Acge",
    "Stella",
    "BGE_M3_dense",
    "openai",
    "Dmeta",
];

// ---------------------------------------------------------------------------------------------
// Rows

/// One system's top-20 per dialogue (by dialogue id) and its recall times.
struct Run {
    label: String,
    top: HashMap<i64, Vec<i64>>,
    latencies: Vec<Duration>,
}

impl Run {
    fn new(label: &str) -> Run {
        Run {
            label: label.to_string(),
            top: HashMap::new(),
            latencies: Vec::new(),
        }
    }

    /// The mean of each metric over `dialogues` (a dialogue it has no list for scores 0).
    fn scores(&self, dialogues: &[&Dialogue]) -> [f64; 6] {
        let mut sum = [0.0; 6];
        for d in dialogues {
            let top = self.top.get(&d.id).map(Vec::as_slice).unwrap_or(&[]);
            for (s, m) in sum.iter_mut().zip(metrics(&d.relevant, top)) {
                *s += m;
            }
        }
        sum.map(|s| s / dialogues.len().max(1) as f64)
    }

    fn row(&self, dialogues: &[Dialogue]) -> String {
        let all: Vec<&Dialogue> = dialogues.iter().collect();
        let s = self.scores(&all);
        let folds: Vec<f64> = (0..FOLDS)
            .map(|f| {
                let fold: Vec<&Dialogue> = dialogues
                    .iter()
                    .filter(|d| d.id.rem_euclid(FOLDS as i64) == f as i64)
                    .collect();
                self.scores(&fold)[5]
            })
            .collect();
        let spread = format!(
            "{:.3}–{:.3}",
            folds.iter().copied().fold(f64::INFINITY, f64::min),
            folds.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        );
        let latency = if self.latencies.is_empty() {
            "–".to_string()
        } else {
            let (p50, p95, _) = common::percentiles(self.latencies.clone());
            format!("{p50:.1} / {p95:.1}")
        };
        format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {spread} | {latency} |",
            self.label, s[0], s[1], s[2], s[3], s[4], s[5]
        )
    }
}

fn paper_run(dir: &Path, model: &str) -> Run {
    let mut run = Run::new(&format!("{model} (paper's top-20 file)"));
    for line in lines(&dir.join(format!("top20/{model}_zh_top_20_ids.json"))) {
        let ids = line["top_20_ids"]
            .as_array()
            .map(|a| a.iter().map(as_i64).collect())
            .unwrap_or_default();
        run.top.insert(as_i64(&line["id"]), ids);
    }
    run
}

/// Rank a pool by score, best first, ties by id; the top 20 ids.
fn ranked(mut scored: Vec<(f64, i64)>) -> Vec<i64> {
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(TOP).map(|(_, id)| id).collect()
}

/// multilingual-e5-small alone, exact cosine, on the paper's query.
async fn e5_exact(memories: &[Memory], dialogues: &[Dialogue]) -> Run {
    let files = scopemem::embed::e5_model::resolve_files(None);
    let model = scopemem::embed::E5Embedder::load(&files, 32, 2)
        .unwrap_or_else(|e| panic!("the e5 model (run `make setup`): {e}"));
    let texts: Vec<String> = memories.iter().map(|m| m.text.clone()).collect();
    let passages = model.embed(TextRole::Passage, texts).await.expect("embed");
    let queries: Vec<String> = dialogues.iter().map(|d| d.history_text.clone()).collect();
    let mut asked = Vec::new();
    for chunk in queries.chunks(32) {
        asked.extend(
            model
                .embed(TextRole::Query, chunk.to_vec())
                .await
                .expect("embed"),
        );
    }
    let mut run = Run::new("multilingual-e5-small alone, exact (paper's query)");
    for (d, q) in dialogues.iter().zip(&asked) {
        let scored = memories
            .iter()
            .zip(&passages)
            .filter(|(m, _)| m.user == d.user)
            .map(|(m, v)| (f64::from(scopemem::embed::cosine(q, v)), m.id))
            .collect();
        run.top.insert(d.id, ranked(scored));
    }
    run
}

/// jieba BM25 (search-mode cut, k1 1.2, b 0.75) over each user's pool, on the paper's query.
fn jieba_bm25(memories: &[Memory], dialogues: &[Dialogue]) -> Run {
    let jieba = jieba_rs::Jieba::new();
    let terms = |text: &str| -> Vec<String> {
        jieba
            .cut_for_search(text, true)
            .into_iter()
            .map(|t| t.word.to_lowercase())
            .filter(|t| t.chars().any(char::is_alphanumeric))
            .collect()
    };
    let docs: Vec<Vec<String>> = memories.iter().map(|m| terms(&m.text)).collect();
    let mut run = Run::new("jieba BM25 (paper's query)");
    for d in dialogues {
        let pool: Vec<usize> = (0..memories.len())
            .filter(|&i| memories[i].user == d.user)
            .collect();
        let n = pool.len() as f64;
        let avg = pool.iter().map(|&i| docs[i].len()).sum::<usize>() as f64 / n.max(1.0);
        let query: HashSet<String> = terms(&d.history_text).into_iter().collect();
        let scored = pool
            .iter()
            .map(|&i| {
                let doc = &docs[i];
                let score: f64 = query
                    .iter()
                    .map(|t| {
                        let df = pool.iter().filter(|&&j| docs[j].contains(t)).count() as f64;
                        let tf = doc.iter().filter(|x| *x == t).count() as f64;
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * doc.len() as f64 / avg))
                    })
                    .sum();
                (score, memories[i].id)
            })
            .filter(|(s, _)| *s > 0.0)
            .collect();
        run.top.insert(d.id, ranked(scored));
    }
    run
}

// ---------------------------------------------------------------------------------------------
// scopemem over HTTP

fn conversation(user: i64) -> String {
    format!("madial:user_{user}")
}

/// Remember every memory in its user's conversation; scopemem id → the paper's ids (two
/// memories that scopemem keeps as one fact map to both).
async fn seed(
    client: &reqwest::Client,
    base: &str,
    memories: &[Memory],
) -> HashMap<String, Vec<i64>> {
    let mut ids: HashMap<String, Vec<i64>> = HashMap::new();
    for m in memories {
        let body = json!({"conversation_id": conversation(m.user), "content": m.text});
        let v = serve::post(client, &format!("{base}/v1/remember"), &body)
            .await
            .unwrap_or_else(|e| panic!("remember: {e}"));
        let id = v["memory"]["id"].as_str().expect("a memory id").to_string();
        ids.entry(id).or_default().push(m.id);
    }
    ids
}

/// How a question is put to scopemem.
#[derive(Clone, Copy)]
enum Ask {
    /// The whole dialogue before the test turn as one query (the paper's).
    Paper,
    /// The last message as the query, the turns before it as `history` (the plugins').
    WithHistory,
    /// The last message alone.
    LastMessage,
}

fn request(d: &Dialogue, ask: Ask, search: Option<&str>) -> Value {
    let last = d.turns.last().map_or("", |t| t.text.as_str());
    let mut body = match ask {
        Ask::Paper => {
            // The API takes at most 2,000 characters: the end of a longer dialogue.
            let chars: Vec<char> = d.history_text.trim().chars().collect();
            let from = chars.len().saturating_sub(2000);
            json!({"query": chars[from..].iter().collect::<String>()})
        }
        Ask::LastMessage => json!({"query": last}),
        Ask::WithHistory => {
            let earlier = &d.turns[..d.turns.len().saturating_sub(1)];
            let history: Vec<Value> = earlier
                .iter()
                .map(|t| {
                    json!({"role": if t.assistant { "assistant" } else { "user" },
                           "content": t.text})
                })
                .collect();
            json!({"query": last, "history": history})
        }
    };
    body["conversation_id"] = json!(conversation(d.user));
    body["limit"] = json!(TOP);
    if let Some(search) = search {
        body["search"] = json!(search);
    }
    body
}

async fn scopemem_run(
    client: &reqwest::Client,
    base: &str,
    label: &str,
    dialogues: &[Dialogue],
    ids: &HashMap<String, Vec<i64>>,
    ask: Ask,
    search: Option<&str>,
) -> Run {
    let mut run = Run::new(label);
    for d in dialogues {
        let started = Instant::now();
        let v = serve::post(
            client,
            &format!("{base}/v1/recall"),
            &request(d, ask, search),
        )
        .await
        .unwrap_or_else(|e| panic!("recall of dialogue {}: {e}", d.id));
        run.latencies.push(started.elapsed());
        run.top.insert(d.id, paper_ids(&v, ids));
    }
    run
}

/// A recall's long-term memories as the paper's ids, first 20.
fn paper_ids(recalled: &Value, ids: &HashMap<String, Vec<i64>>) -> Vec<i64> {
    let mut top: Vec<i64> = Vec::new();
    for m in recalled["memories"].as_array().into_iter().flatten() {
        let found = m["id"].as_str().and_then(|id| ids.get(id));
        for &id in found.into_iter().flatten() {
            if !top.contains(&id) {
                top.push(id);
            }
        }
    }
    top.truncate(TOP);
    top
}

const PREFETCHED: &str = "scopemem_questions_prefetched_total";

/// Message + history as the plugins ask when the service has seen the turns (issue 60): each
/// dialogue's turns sent to `/v1/events/message` in its user's conversation as they would
/// arrive (the assistant's as the bot's), the last one marked `to_bot`, and the recall asked
/// once that question's texts are embedded (`recall::prefetch`; a host whose own stages take
/// longer than the embedding, as AstrBot's did). The first injection event of each conversation
/// teaches the service where its history comes from. Timed: the injection event the plugins
/// send (`/v1/events/llm_request`); scored: the same question's `/v1/recall`, as the rows above.
async fn seen_run(
    client: &reqwest::Client,
    base: &str,
    label: &str,
    dialogues: &[Dialogue],
    ids: &HashMap<String, Vec<i64>>,
) -> Run {
    let mut run = Run::new(label);
    for d in dialogues {
        let Some((question, earlier)) = d.turns.split_last() else {
            continue;
        };
        for t in earlier {
            said(client, base, d.user, t, false).await;
        }
        // As in a chat, where turns are seconds apart: the earlier lines are embedded.
        serve::messages_embedded(client, base).await;
        let before = serve::metric(&serve::metrics(client, base).await, PREFETCHED);
        said(client, base, d.user, question, true).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while serve::metric(&serve::metrics(client, base).await, PREFETCHED) < before + 1.0 {
            assert!(
                Instant::now() < deadline,
                "dialogue {}: the question was never embedded ahead",
                d.id
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The injection event, as the plugins ask (it teaches the service the history's shape),
        // timed; then the same question's top 20 through `/v1/recall`, from the same texts.
        let asked = request(d, Ask::WithHistory, None);
        let injection = json!({"conversation_id": asked["conversation_id"],
                               "query": asked["query"], "history": asked["history"]});
        let started = Instant::now();
        serve::post(client, &format!("{base}/v1/events/llm_request"), &injection)
            .await
            .unwrap_or_else(|e| panic!("injection of dialogue {}: {e}", d.id));
        run.latencies.push(started.elapsed());
        let v = serve::post(client, &format!("{base}/v1/recall"), &asked)
            .await
            .unwrap_or_else(|e| panic!("recall of dialogue {}: {e}", d.id));
        run.top.insert(d.id, paper_ids(&v, ids));
    }
    let text = serve::metrics(client, base).await;
    println!(
        "seen history: {} questions embedded ahead, {} histories foreseen, {} recalls joined a run under way",
        serve::metric(&text, PREFETCHED),
        serve::metric(&text, "scopemem_prefetch_history_predicted_total"),
        serve::metric(&text, "scopemem_query_joins_total")
    );
    run
}

/// A dialogue's turn to `/v1/events/message` in its user's conversation.
async fn said(client: &reqwest::Client, base: &str, user: i64, turn: &Turn, to_bot: bool) {
    let sender = if turn.assistant {
        "bot".to_string()
    } else {
        format!("user_{user}")
    };
    let body = json!({"conversation_id": conversation(user), "sender_id": sender,
                      "text": turn.text, "is_bot": turn.assistant, "to_bot": to_bot});
    serve::post(client, &format!("{base}/v1/events/message"), &body)
        .await
        .unwrap_or_else(|e| panic!("message: {e}"));
}

/// Wait (up to 5 minutes) until the served model is calibrated: the similarity cut recall uses
/// by default is the calibrated one.
async fn calibrated(client: &reqwest::Client, base: &str) {
    let started = Instant::now();
    loop {
        let status = serve::get(client, &format!("{base}/v1/status")).await;
        if status.is_ok_and(|s| !s["embedding_calibration"].is_null()) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the served model was not calibrated in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn scopemem_runs(
    work: &Path,
    memories: &[Memory],
    dialogues: &[Dialogue],
) -> Result<Vec<Run>, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let users: HashSet<i64> = memories.iter().map(|m| m.user).collect();
    let map: serde_json::Map<String, Value> = users
        .iter()
        .map(|u| (conversation(*u), json!(format!("user_{u}"))))
        .collect();
    // The default config, with each user a scope of its own.
    let cfg = json!({"conversation_scope_map": map});
    let (_serve, base) = serve::start_serve(&client, work, cfg).await?;
    calibrated(&client, &base).await;
    let started = Instant::now();
    let ids = seed(&client, &base, memories).await;
    println!(
        "seeded {} memories as {} rows in {:.0} s",
        memories.len(),
        ids.len(),
        started.elapsed().as_secs_f64()
    );
    let mut runs = Vec::new();
    for (label, ask, search) in [
        (
            "**scopemem default: message + history**",
            Ask::WithHistory,
            None,
        ),
        (
            "scopemem, message + history, vector leg",
            Ask::WithHistory,
            Some("vector"),
        ),
        (
            "scopemem, message + history, keyword leg",
            Ask::WithHistory,
            Some("keyword"),
        ),
        (
            "scopemem default: last message alone",
            Ask::LastMessage,
            None,
        ),
        (
            "scopemem default: paper's query (whole dialogue)",
            Ask::Paper,
            None,
        ),
    ] {
        runs.push(scopemem_run(&client, &base, label, dialogues, &ids, ask, search).await);
    }
    // Last: the turns it sends become the working memory's messages.
    runs.push(
        seen_run(
            &client,
            &base,
            "scopemem default: message + history seen as messages (ms: the injection event)",
            dialogues,
            &ids,
        )
        .await,
    );
    Ok(runs)
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/madial");
    let memories = memories(&dir);
    let mut dialogues = dialogues(&dir);
    if common::smoke() {
        dialogues.truncate(12);
    }
    println!(
        "MADial-Bench zh: {} dialogues, {} memories of {} users; build profile {}",
        dialogues.len(),
        memories.len(),
        memories
            .iter()
            .map(|m| m.user)
            .collect::<HashSet<_>>()
            .len(),
        if cfg!(debug_assertions) {
            "dev (latency is not a production figure)"
        } else {
            "bench (release)"
        }
    );
    let rt = common::runtime();
    let work = tempfile::tempdir_in(common::bench_root()).expect("bench temp dir");
    let mut runs: Vec<Run> = PAPER_MODELS.iter().map(|m| paper_run(&dir, m)).collect();
    runs.push(rt.block_on(e5_exact(&memories, &dialogues)));
    runs.push(jieba_bm25(&memories, &dialogues));
    match rt.block_on(scopemem_runs(work.path(), &memories, &dialogues)) {
        Ok(r) => runs.extend(r),
        Err(e) => panic!("scopemem serve: {e}"),
    }
    println!();
    println!(
        "| system | R@1 | R@3 | R@5 | R@10 | nDCG@5 | MRR@10 | MRR@10 over {FOLDS} folds | recall ms p50 / p95 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for run in &runs {
        println!("{}", run.row(&dialogues));
    }
    println!(
        "\nscopemem's turn weights are fixed (memory::turns), not fitted on this set: each of the \
         {FOLDS} folds (dialogue id mod {FOLDS}) scores the same setting, and the cross-validated \
         figure is the whole set's."
    );
}
