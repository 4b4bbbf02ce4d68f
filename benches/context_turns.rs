//! How much of the conversation a recall embeds beside its message (issue 77, item 6): the
//! turns and the bound on each, chosen by cross-validation on a Chinese and an English set, the
//! CPU a context costs, and the service's recall on both sets. `make bench-context`.
//!
//! The sets (`common::recall_sets`): MADial-Bench zh (160 dialogues, turns of at most 60
//! characters) and RealMem (English, Apache-2.0, `benches/realmem/`: 172 questions of two
//! personas asked inside a session, after assistant replies of hundreds of words; each may find
//! the memories of its persona's earlier sessions). One protocol for both: the question is the
//! dialogue's last user message, the turns before it its history, the top 20 scored with the
//! MADial paper's metric code.
//!
//! 1. **Cross-validation, the model alone** (multilingual-e5-small in-process, exact cosine over
//!    each question's pool): the query vector is the message's and the context's, combined as
//!    the service combines them (`memory::turns`), the context built by the service's own
//!    `turns::context` with each candidate bound (its last `n` turns, each cut to its last `T`
//!    tokens of the model, `TurnBound::Tokens`). 5 folds per set (question id mod 5); for each
//!    fold, the turns, the bound and the message's weight are picked on the other four folds of
//!    *both* sets (the mean of the two sets' MRR@10, so the larger set does not decide alone)
//!    and scored on the held-out fold. Beside it, the same with the bound fixed and only the
//!    weight picked: the setting shipped (2 turns of 60 characters), 8 whole turns, and the
//!    token bound chosen on all five folds (what a token bound would ship).
//! 2. **CPU per context**: the CPU time (getrusage, every thread of this process: the engine's
//!    OpenMP team included) to embed each question's context alone, as a recall does, for 1, 2
//!    and 4 turns cut to 60 characters, to 32 tokens and whole; and the model's tokens it held.
//! 3. **The service**: a real `scopemem serve` with the default config, each user a scope of its
//!    own, every memory remembered through the API (RealMem's in session order, each question
//!    asked once its earlier sessions are remembered), every question a `POST /v1/recall` with
//!    `limit: 20`, with its turns as `history` (what the plugins send) and alone.
//!
//! Env: `SCOPEMEM_BENCH_CONTEXT=service` runs part 3 alone (minutes, where parts 1 and 2 embed
//! every candidate context for hours on 2 cores; `scripts/context-cv.py` is part 1 with a cache);
//! `SCOPEMEM_BENCH_SERVE_BIN` serves with that binary (the shipped wheel's).

#[path = "common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use scopemem::embed::e5_model::resolve_files;
use scopemem::embed::{E5Embedder, Embedder, TextRole};
use scopemem::memory::turns::{
    self, TurnBound, TurnRole, EMBEDDED_TURN_CHARS, MESSAGE_WEIGHT, TURNS_EMBEDDED,
};
use serde_json::{json, Value};

use common::recall_sets::{
    dialogues, memories, metrics, realmem_dialogues, realmem_memories, Dialogue, Memory,
};
use common::serve;

const TOP: usize = 20;
const FOLDS: i64 = 5;
/// The candidates: turns embedded, and tokens kept of each.
const TURNS: [usize; 3] = [1, 2, 4];
const TOKENS: [usize; 3] = [16, 32, 64];
/// The message's share of the query vector.
const WEIGHTS: [f32; 4] = [0.2, 0.3, 0.4, 0.5];
/// One window of the model: a turn cut to it is whole (all but a pasted log).
const WHOLE: usize = 512;

/// How a context is bounded: turns, and each turn's end in tokens or characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Bound {
    Tokens(usize),
    Chars(usize),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Setting {
    turns: usize,
    bound: Bound,
}

impl Setting {
    fn label(&self) -> String {
        match self.bound {
            Bound::Tokens(WHOLE) => format!("{} whole turns", self.turns),
            Bound::Tokens(t) => format!("{} turns × {t} tokens", self.turns),
            Bound::Chars(c) => format!("{} turns × {c} characters", self.turns),
        }
    }
}

/// One set, loaded and embedded.
struct Set {
    name: &'static str,
    memories: Vec<Memory>,
    dialogues: Vec<Dialogue>,
    passages: Vec<Vec<f32>>,
    messages: Vec<Vec<f32>>,
    /// Per setting, each dialogue's context vector (`None`: no turn before the message).
    contexts: HashMap<Setting, Vec<Option<Vec<f32>>>>,
}

fn history(d: &Dialogue) -> Vec<turns::Turn> {
    let (_, earlier) = d.message_and_history();
    earlier
        .iter()
        .map(|t| turns::Turn {
            role: if t.assistant {
                TurnRole::Assistant
            } else {
                TurnRole::User
            },
            content: t.text.clone(),
            name: None,
        })
        .collect()
}

/// The context the service would embed for `d` under `setting`.
fn context(model: &E5Embedder, d: &Dialogue, setting: Setting) -> Option<String> {
    let bound = match setting.bound {
        Bound::Tokens(tokens) => TurnBound::Tokens {
            embedder: model,
            tokens,
        },
        Bound::Chars(c) => TurnBound::Chars(c),
    };
    let (message, _) = d.message_and_history();
    turns::context(&history(d), message, setting.turns, bound).unwrap_or_else(|e| panic!("{e}"))
}

/// CPU seconds this process has used, every thread (the engine's OpenMP team included).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

async fn embed(model: &E5Embedder, role: TextRole, texts: &[String]) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(16) {
        out.extend(
            model
                .embed(role, chunk.to_vec())
                .await
                .unwrap_or_else(|e| panic!("embed: {e}")),
        );
    }
    out
}

/// A set for the service's rows alone: its texts, nothing embedded here.
fn unembedded(name: &'static str, memories: Vec<Memory>, dialogues: Vec<Dialogue>) -> Set {
    Set {
        name,
        memories,
        dialogues,
        passages: Vec::new(),
        messages: Vec::new(),
        contexts: HashMap::new(),
    }
}

async fn load(
    model: &E5Embedder,
    name: &'static str,
    memories: Vec<Memory>,
    dialogues: Vec<Dialogue>,
    settings: &[Setting],
) -> Set {
    let started = Instant::now();
    let texts: Vec<String> = memories.iter().map(|m| m.text.clone()).collect();
    let passages = embed(model, TextRole::Passage, &texts).await;
    let asked: Vec<String> = dialogues
        .iter()
        .map(|d| d.message_and_history().0.to_string())
        .collect();
    let messages = embed(model, TextRole::Query, &asked).await;
    println!(
        "{name}: {} memories, {} questions embedded in {:.0} s",
        memories.len(),
        dialogues.len(),
        started.elapsed().as_secs_f64()
    );
    let mut cache: HashMap<String, Vec<f32>> = HashMap::new();
    let mut contexts = HashMap::new();
    for &setting in settings {
        let texts: Vec<Option<String>> = dialogues
            .iter()
            .map(|d| context(model, d, setting))
            .collect();
        let new: Vec<String> = texts
            .iter()
            .flatten()
            .filter(|t| !cache.contains_key(*t))
            .cloned()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let vectors = embed(model, TextRole::Query, &new).await;
        cache.extend(new.into_iter().zip(vectors));
        contexts.insert(
            setting,
            texts
                .iter()
                .map(|t| t.as_ref().map(|t| cache[t].clone()))
                .collect(),
        );
    }
    Set {
        name,
        memories,
        dialogues,
        passages,
        messages,
        contexts,
    }
}

/// Per dialogue of `set`: its fold, MRR@10 and R@1 under `setting` with the message's weight `w`.
fn scores(set: &Set, setting: Setting, w: f32) -> Vec<(i64, f64, f64)> {
    let contexts = &set.contexts[&setting];
    set.dialogues
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let message = set.messages[i].as_slice();
            let query = match &contexts[i] {
                Some(c) => turns_combine(message, c, w),
                None => message.to_vec(),
            };
            let mut scored: Vec<(f64, i64)> = set
                .memories
                .iter()
                .zip(&set.passages)
                .filter(|(m, _)| d.may_find(m))
                .map(|(m, v)| (f64::from(scopemem::embed::cosine(&query, v)), m.id))
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let top: Vec<i64> = scored.into_iter().take(TOP).map(|(_, id)| id).collect();
            let m = metrics(&d.relevant, &top);
            (d.id.rem_euclid(FOLDS), m[5], m[0])
        })
        .collect()
}

/// The weighted sum of the two unit vectors, as `memory::turns::combine` makes it.
fn turns_combine(message: &[f32], context: &[f32], w: f32) -> Vec<f32> {
    let mut v: Vec<f32> = message
        .iter()
        .zip(context)
        .map(|(m, c)| w * m + (1.0 - w) * c)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm.max(f32::MIN_POSITIVE));
    v
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    sum / n.max(1) as f64
}

type Table = HashMap<(usize, Setting, u32), Vec<(i64, f64, f64)>>;
/// A fold's pick: the setting and the message's weight.
type Pick = (Setting, f32);

/// MRR@10 of set `s` under (setting, weight) over `folds`.
fn mrr(table: &Table, s: usize, setting: Setting, w: f32, folds: &[i64]) -> f64 {
    mean(
        table[&(s, setting, w.to_bits())]
            .iter()
            .filter(|(f, _, _)| folds.contains(f))
            .map(|x| x.1),
    )
}

/// Cross-validate: per fold, the best of `candidates` × weights on the other folds of both
/// sets; each set's held-out MRR@10 and R@1, and the picks.
fn cross_validate(
    table: &Table,
    sets: usize,
    candidates: &[Setting],
) -> (Vec<(f64, f64)>, Vec<Pick>) {
    let mut held: Vec<Vec<(f64, f64)>> = vec![Vec::new(); sets];
    let mut picks = Vec::new();
    for k in 0..FOLDS {
        let train: Vec<i64> = (0..FOLDS).filter(|f| *f != k).collect();
        let mut best: Option<((Setting, f32), f64)> = None;
        for &c in candidates {
            for w in WEIGHTS {
                let score = mean((0..sets).map(|s| mrr(table, s, c, w, &train)));
                if best.is_none_or(|(_, b)| score > b + 1e-12) {
                    best = Some(((c, w), score));
                }
            }
        }
        let Some(((c, w), _)) = best else {
            continue;
        };
        picks.push((c, w));
        for (s, h) in held.iter_mut().enumerate() {
            h.extend(
                table[&(s, c, w.to_bits())]
                    .iter()
                    .filter(|(f, _, _)| *f == k)
                    .map(|x| (x.1, x.2)),
            );
        }
    }
    let figures = held
        .iter()
        .map(|h| (mean(h.iter().map(|x| x.0)), mean(h.iter().map(|x| x.1))))
        .collect();
    (figures, picks)
}

/// The contexts of `setting` (the messages alone for 0 turns), each embedded alone as a recall
/// embeds it, for questions with at least that many turns: mean CPU ms and model tokens per
/// context, and how many were embedded.
async fn cpu_per_context(model: &E5Embedder, set: &Set, setting: Setting) -> (f64, f64, usize) {
    let texts: Vec<String> = set
        .dialogues
        .iter()
        .filter(|d| d.message_and_history().1.len() >= setting.turns)
        .filter_map(|d| match setting.turns {
            0 => Some(d.message_and_history().0.to_string()),
            _ => context(model, d, setting),
        })
        .take(common::scaled(30, 3))
        .collect();
    let tokens: usize = texts
        .iter()
        .map(|t| model.query_tokens(t).unwrap_or(0))
        .sum();
    let before = cpu_seconds();
    for t in &texts {
        // Never the same text twice: nothing in this process caches an embedding.
        model
            .embed(TextRole::Query, vec![t.clone()])
            .await
            .unwrap_or_else(|e| panic!("embed: {e}"));
    }
    let cpu = cpu_seconds() - before;
    let n = texts.len().max(1) as f64;
    (cpu * 1000.0 / n, tokens as f64 / n, texts.len())
}

// ---------------------------------------------------------------------------------------------
// The service

fn conversation(set: &str, user: i64) -> String {
    format!("{}:user_{user}", set.replace('-', "_"))
}

fn request(set: &str, d: &Dialogue, with_history: bool) -> Value {
    let (message, earlier) = d.message_and_history();
    // The API takes at most 2,000 characters of query: the end of a longer message.
    let chars: Vec<char> = message.chars().collect();
    let query: String = chars[chars.len().saturating_sub(2000)..].iter().collect();
    let mut body = json!({"conversation_id": conversation(set, d.user), "query": query,
                          "limit": TOP});
    if with_history {
        let history: Vec<Value> = earlier
            .iter()
            .map(|t| {
                json!({"role": if t.assistant { "assistant" } else { "user" },
                       "content": t.text})
            })
            .collect();
        body["history"] = json!(history);
    }
    body
}

/// The set through a served scopemem: memories remembered in session order, each question asked
/// (with history, then alone) once the memories of its earlier sessions are in. Per way of
/// asking: MRR@10, R@1 and the recalls' p50 ms.
async fn served(
    client: &reqwest::Client,
    base: &str,
    set: &Set,
) -> Result<[(f64, f64, f64); 2], String> {
    let mut order: Vec<&Dialogue> = set.dialogues.iter().collect();
    order.sort_by_key(|d| (d.session, d.id));
    let mut pending: Vec<&Memory> = set.memories.iter().collect();
    pending.sort_by_key(|m| (m.session, m.id));
    let mut pending = pending.into_iter().peekable();
    let mut ids: HashMap<String, Vec<i64>> = HashMap::new();
    let mut results: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let mut latencies: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for d in order {
        while let Some(m) = pending.next_if(|m| m.session < d.session) {
            let body = json!({"conversation_id": conversation(set.name, m.user),
                              "content": m.text});
            let v = serve::post(client, &format!("{base}/v1/remember"), &body).await?;
            let id = v["memory"]["id"].as_str().unwrap_or_default().to_string();
            ids.entry(id).or_default().push(m.id);
        }
        for (way, with_history) in [true, false].into_iter().enumerate() {
            let started = Instant::now();
            let v = serve::post(
                client,
                &format!("{base}/v1/recall"),
                &request(set.name, d, with_history),
            )
            .await?;
            latencies[way].push(started.elapsed());
            let mut top: Vec<i64> = Vec::new();
            for m in v["memories"].as_array().into_iter().flatten() {
                for &id in m["id"]
                    .as_str()
                    .and_then(|id| ids.get(id))
                    .into_iter()
                    .flatten()
                {
                    if !top.contains(&id) {
                        top.push(id);
                    }
                }
            }
            top.truncate(TOP);
            let m = metrics(&d.relevant, &top);
            results[way].push((m[5], m[0]));
        }
    }
    Ok([0, 1].map(|way| {
        let (p50, _, _) = common::percentiles(latencies[way].clone());
        (
            mean(results[way].iter().map(|x| x.0)),
            mean(results[way].iter().map(|x| x.1)),
            p50,
        )
    }))
}

async fn service_rows(work: &Path, sets: &[Set]) -> Result<(), String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let map: serde_json::Map<String, Value> = sets
        .iter()
        .flat_map(|s| {
            s.memories
                .iter()
                .map(|m| m.user)
                .collect::<HashSet<_>>()
                .into_iter()
                .map(|u| {
                    (
                        conversation(s.name, u),
                        json!(format!("{}_user_{u}", s.name.replace('-', "_"))),
                    )
                })
        })
        .collect();
    let (_serve, base) =
        serve::start_serve(&client, work, json!({"conversation_scope_map": map})).await?;
    calibrated(&client, &base).await;
    println!("\n| the service (default config) | set | MRR@10 | R@1 | recall p50 ms |");
    println!("|---|---|---|---|---|");
    for set in sets {
        let [history, alone] = served(&client, &base, set).await?;
        for (label, (m, r, p50)) in [
            ("message + history (what the plugins send)", history),
            ("last message alone", alone),
        ] {
            println!("| {label} | {} | {m:.3} | {r:.3} | {p50:.1} |", set.name);
        }
    }
    Ok(())
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

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    let (zh_memories, mut zh) = (
        memories(&root.join("madial")),
        dialogues(&root.join("madial")),
    );
    let (mut en_memories, mut users) = realmem_memories(&root.join("realmem"));
    let mut en = realmem_dialogues(&root.join("realmem"), &mut users);
    if common::smoke() {
        // Every stage at a tiny size: the first questions, and the first memories they may find.
        zh.truncate(12);
        en.truncate(12);
        en_memories.truncate(100);
    }
    let rt = common::runtime();
    let work = tempfile::tempdir_in(common::bench_root()).expect("bench temp dir");
    if std::env::var("SCOPEMEM_BENCH_CONTEXT").is_ok_and(|v| v == "service") {
        // The service's rows alone: nothing embedded in this process.
        let sets = [
            unembedded("madial-zh", zh_memories, zh),
            unembedded("realmem-en", en_memories, en),
        ];
        if let Err(e) = rt.block_on(service_rows(work.path(), &sets)) {
            panic!("scopemem serve: {e}");
        }
        return;
    }
    let candidates: Vec<Setting> = TURNS
        .iter()
        .flat_map(|&turns| {
            TOKENS.iter().map(move |&t| Setting {
                turns,
                bound: Bound::Tokens(t),
            })
        })
        .collect();
    let shipped = Setting {
        turns: TURNS_EMBEDDED,
        bound: Bound::Chars(EMBEDDED_TURN_CHARS),
    };
    let whole = Setting {
        turns: 8,
        bound: Bound::Tokens(WHOLE),
    };
    let mut all = candidates.clone();
    all.extend([shipped, whole]);
    println!(
        "context turns: build profile {}",
        if cfg!(debug_assertions) {
            "dev (latency is not a production figure)"
        } else {
            "bench (release)"
        }
    );
    let model = E5Embedder::load(&resolve_files(None), 16, 0)
        .unwrap_or_else(|e| panic!("the e5 model (run `make setup`): {e}"));
    let sets = rt.block_on(async {
        vec![
            load(&model, "madial-zh", zh_memories, zh, &all).await,
            load(&model, "realmem-en", en_memories, en, &all).await,
        ]
    });
    let mut table: Table = HashMap::new();
    for (s, set) in sets.iter().enumerate() {
        for &setting in &all {
            for w in WEIGHTS {
                table.insert((s, setting, w.to_bits()), scores(set, setting, w));
            }
        }
    }

    println!("\nPer fold (question id mod {FOLDS}), picked on the other four of both sets:");
    let (figures, picks) = cross_validate(&table, sets.len(), &candidates);
    for (k, (setting, w)) in picks.iter().enumerate() {
        println!("- fold {k}: {}, message weight {w}", setting.label());
    }
    // The token bound chosen on every fold of both sets: what would ship.
    let everything: Vec<i64> = (0..FOLDS).collect();
    let chosen = candidates
        .iter()
        .flat_map(|&c| WEIGHTS.map(|w| (c, w)))
        .max_by(|a, b| {
            let score = |(c, w): (Setting, f32)| {
                mean((0..sets.len()).map(|s| mrr(&table, s, c, w, &everything)))
            };
            score(*a).total_cmp(&score(*b))
        })
        .map(|(c, _)| c)
        .unwrap_or(shipped);
    println!("- chosen on all five: {}", chosen.label());
    let header: Vec<String> = sets
        .iter()
        .map(|s| format!("{} MRR@10 | {} R@1", s.name, s.name))
        .collect();
    println!(
        "\n| context embedded (5-fold cross-validated) | {} |",
        header.join(" | ")
    );
    println!("|---|{}", "---|".repeat(2 * sets.len()));
    let row = |label: &str, figures: &[(f64, f64)]| {
        let cells: Vec<String> = figures
            .iter()
            .map(|(m, r)| format!("{m:.3} | {r:.3}"))
            .collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    row("turns, tokens and weight picked per fold", &figures);
    for (label, setting) in [
        ("shipped", shipped),
        ("uncut", whole),
        ("the token bound chosen on all folds", chosen),
    ] {
        let (figures, picks) = cross_validate(&table, sets.len(), &[setting]);
        let weights: Vec<String> = picks.iter().map(|(_, w)| w.to_string()).collect();
        row(
            &format!(
                "{label}: {}, weight picked per fold ({})",
                setting.label(),
                weights.join("/")
            ),
            &figures,
        );
    }
    println!("\nWhole-set MRR@10 at the shipped weight {MESSAGE_WEIGHT} (not cross-validated):");
    for setting in &all {
        let cells: Vec<String> = (0..sets.len())
            .map(|s| {
                format!(
                    "{} {:.3}",
                    sets[s].name,
                    mrr(&table, s, *setting, MESSAGE_WEIGHT, &[0, 1, 2, 3, 4])
                )
            })
            .collect();
        println!("- {}: {}", setting.label(), cells.join(", "));
    }

    println!(
        "\n| CPU per context, each embedded alone as a recall does | set | contexts | model \
         tokens | CPU ms | CPU ms per 100 tokens |"
    );
    println!("|---|---|---|---|---|---|");
    let mut measured = vec![Setting {
        turns: 0,
        bound: Bound::Chars(0),
    }];
    for turns_kept in [1, 2, 4] {
        for bound in [
            Bound::Chars(EMBEDDED_TURN_CHARS),
            Bound::Tokens(32),
            Bound::Tokens(WHOLE),
        ] {
            measured.push(Setting {
                turns: turns_kept,
                bound,
            });
        }
    }
    rt.block_on(async {
        for set in &sets {
            for &setting in &measured {
                let (ms, tokens, n) = cpu_per_context(&model, set, setting).await;
                let label = match setting.turns {
                    0 => "the message alone".to_string(),
                    _ => format!("{} and the message", setting.label()),
                };
                println!(
                    "| {label} | {} | {n} | {tokens:.0} | {ms:.1} | {:.1} |",
                    set.name,
                    ms * 100.0 / tokens.max(1.0)
                );
            }
        }
    });

    if let Err(e) = rt.block_on(service_rows(work.path(), &sets)) {
        panic!("scopemem serve: {e}");
    }
}
