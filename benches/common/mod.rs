//! Shared bench data: deterministic memory-like sentences, questions, scopes, and a cached
//! table of real model embeddings (building 100k rows embeds for minutes).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod recall_sets;
pub mod serve;
pub mod workload;

use scopemem::config::Config;
use scopemem::embed::Embedder;
use scopemem::embed::ModelInfo;
use scopemem::host::PluginHost;
use scopemem::store::{MemoryRecord, Store, WriterSettings};
use serde_json::json;

/// AstrBot's venv (scripts/setup-astrbot.sh, which the Makefile target runs first).
pub fn astrbot_python() -> PathBuf {
    let venv = std::env::var_os("SCOPEMEM_ASTRBOT_VENV").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/scopemem/astrbot-venv")
        },
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-astrbot.sh",
        python.display()
    );
    python
}

/// Run the AstrBot scenario `file` of tests/astrbot under AstrBot's python, with `--root root`,
/// the plugin from this checkout, `--scopemem scopemem` and `args`; each other protocol line
/// (`@@SCENARIO <kind> …`) goes to `on_line`. Its report (the `@@SCENARIO REPORT` line); a
/// failed scenario panics naming its log (`<root>.log`).
pub fn astrbot_scenario(
    file: &str,
    root: &std::path::Path,
    scopemem: &str,
    args: &[String],
    mut on_line: impl FnMut(&str),
) -> serde_json::Value {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let log = root.with_extension("log");
    let mut child = Command::new(astrbot_python())
        .arg(manifest.join("tests/astrbot").join(file))
        .arg("--root")
        .arg(root)
        .arg("--plugin-src")
        .arg(manifest.join("integrations/astrbot"))
        .args(["--scopemem", scopemem])
        .args(args)
        .env_remove("ASTRBOT_ROOT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("a log file in the bench dir"))
        .spawn()
        .expect("AstrBot's python runs");
    let out = child.stdout.take().expect("piped stdout");
    let mut report = serde_json::Value::Null;
    for line in BufReader::new(out).lines().map_while(Result::ok) {
        if let Some(json) = line.strip_prefix("@@SCENARIO REPORT ") {
            report = serde_json::from_str(json).expect("the scenario's report is JSON");
        } else if let Some(why) = line.strip_prefix("@@SCENARIO FAILED ") {
            panic!("the scenario failed: {why}; its log: {}", log.display());
        } else if line.starts_with("@@SCENARIO ") {
            on_line(&line);
        }
    }
    let status = child.wait().expect("the scenario is reaped");
    assert!(
        status.success(),
        "the scenario exited {status}; its log: {}",
        log.display()
    );
    report
}

pub const SCOPES: usize = 50;
pub const K: usize = 10;
/// Timed queries per run (a handful in a smoke run).
pub fn query_count() -> usize {
    scaled(200, 5)
}

/// `SCOPEMEM_BENCH_SMOKE=1`: run every stage of the bench once at a tiny size, to prove a
/// fresh clone can run it (`make bench-smoke`, part of `make lint`); the figures mean nothing.
pub fn smoke() -> bool {
    std::env::var("SCOPEMEM_BENCH_SMOKE").is_ok_and(|v| v == "1")
}

/// `full`, or `tiny` in a smoke run.
pub fn scaled(full: usize, tiny: usize) -> usize {
    if smoke() {
        tiny
    } else {
        full
    }
}

/// Criterion with the bench's sample size, or the least work Criterion accepts in a smoke run.
pub fn criterion(sample_size: usize) -> criterion::Criterion {
    let c = criterion::Criterion::default().configure_from_args();
    if smoke() {
        c.sample_size(10)
            .warm_up_time(Duration::from_millis(10))
            .measurement_time(Duration::from_millis(10))
            .without_plots()
    } else {
        c.sample_size(sample_size)
            .warm_up_time(Duration::from_secs(1))
    }
}

/// splitmix64: deterministic data without a rand dependency.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    /// A uniform-ish unit vector (synthetic tables where vector content does not matter).
    pub fn unit(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim)
            .map(|_| (self.next() % 2000) as f32 / 1000.0 - 1.0)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

const WHO: &[&str] = &[
    "Grandma",
    "Grandpa",
    "Mom",
    "Dad",
    "my sister Lily",
    "my brother Tom",
    "Uncle Wang",
    "Aunt Mei",
    "the team lead",
    "my manager",
    "the new intern",
    "the designer",
    "the CFO",
    "our landlord",
    "my best friend Jack",
    "Coach Li",
    "the neighbour",
    "my cousin Ana",
    "the doctor",
    "the teacher",
    "Alice",
    "Bob",
    "Carol",
    "Dave",
    "Erin",
    "Frank",
    "Grace",
    "Heidi",
    "Ivan",
    "Judy",
];
const DOES: &[&str] = &[
    "loves",
    "is allergic to",
    "wants to learn",
    "recommended",
    "complained about",
    "bought",
    "is planning a trip to",
    "has a meeting about",
    "forgot about",
    "is worried about",
    "asked about",
    "wrote a report on",
    "cooked",
    "borrowed",
    "lost",
    "is training for",
    "gave a talk on",
    "celebrated",
    "fixed",
    "hates",
];
const WHAT: &[&str] = &[
    "spicy hotpot",
    "peanuts",
    "the violin",
    "Kyoto",
    "the Q3 launch",
    "the quarterly budget",
    "a red bicycle",
    "orchids",
    "the staging database",
    "a marathon",
    "dumplings",
    "jazz records",
    "the Rust rewrite",
    "the kitchen sink",
    "tax filing",
    "a birthday cake",
    "the hiking trail",
    "chess openings",
    "the security audit",
    "a puppy",
    "green tea",
    "the wedding",
    "the car insurance",
    "the mortgage",
    "swimming lessons",
    "the quarterly OKRs",
    "a sci-fi novel",
    "the garden",
    "the office move",
    "piano lessons",
    "the dentist appointment",
    "the flu",
    "a camping tent",
    "the hiring plan",
    "sushi",
    "the school play",
    "a new laptop",
    "the client demo",
    "yoga",
    "the beach house",
];
const WHEN: &[&str] = &[
    "last Monday",
    "next weekend",
    "every morning",
    "on Saturday evening",
    "since last year",
    "during the holidays",
    "before the deadline",
    "after dinner",
    "in March",
    "twice a week",
    "yesterday",
    "this Friday",
    "at the family reunion",
    "at the offsite",
    "on her birthday",
];

pub fn sentence(rng: &mut Rng) -> String {
    format!(
        "{} {} {} {}.",
        rng.pick(WHO),
        rng.pick(DOES),
        rng.pick(WHAT),
        rng.pick(WHEN)
    )
}

pub fn question(rng: &mut Rng) -> String {
    let q = ["What does", "What about", "Tell me what", "Remind me:"][(rng.next() % 4) as usize];
    format!(
        "{q} {} {} {}?",
        rng.pick(WHO),
        rng.pick(DOES),
        rng.pick(WHAT)
    )
}

pub fn scope_of(rng: &mut Rng) -> String {
    if rng.next() % 10 < 3 {
        "public".into()
    } else {
        format!("scope_{:02}", rng.next() % SCOPES as u64)
    }
}

pub fn percentiles(mut xs: Vec<Duration>) -> (f64, f64, f64) {
    xs.sort();
    let at = |p: f64| xs[((xs.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1000.0;
    (at(0.50), at(0.95), at(0.99))
}

pub fn bench_root() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let root = target.join("scopemem-bench");
    // Created here, where every bench asks for it: a fresh clone has no such directory, and
    // `tempdir_in` below it panicked (only scripts/bench-compare.sh used to create it).
    if let Err(e) = std::fs::create_dir_all(&root) {
        panic!("cannot create the bench directory {}: {e}", root.display());
    }
    root
}

pub async fn embed_all(e: &dyn Embedder, texts: Vec<String>) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(texts.len());
    let started = Instant::now();
    for (i, chunk) in texts.chunks(256).enumerate() {
        out.extend(
            e.embed(scopemem::embed::TextRole::Passage, chunk.to_vec())
                .await
                .expect("embed"),
        );
        if i % 40 == 0 {
            eprintln!(
                "  embedded {}/{} ({:.0}/s)",
                out.len(),
                texts.len(),
                out.len() as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    out
}

/// A table of `n` memory-like rows in 50 scopes + 30% public, cached on disk.
pub async fn dataset(e: &Arc<dyn Embedder>, n: usize) -> (PathBuf, Store) {
    let dir = bench_root().join(format!("rows-{n}-v1"));
    let model = ModelInfo {
        id: e.model_id().into(),
        dimension: e.dimension(),
    };
    let done = dir.join("COMPLETE");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("building the {n}-row dataset (cached in {})", dir.display());
        let (store, _) =
            scopemem::migrate::open_store(&dir, "memories", &model, WriterSettings::default())
                .await
                .expect("open");
        let mut rng = Rng(n as u64);
        let texts: Vec<String> = (0..n).map(|_| sentence(&mut rng)).collect();
        let vectors = embed_all(e.as_ref(), texts.clone()).await;
        let now = chrono::Utc::now();
        let rows: Vec<_> = texts
            .into_iter()
            .zip(vectors)
            .enumerate()
            .map(|(i, (content, v))| {
                let scope = scope_of(&mut rng);
                (
                    MemoryRecord {
                        id: uuid::Uuid::now_v7().to_string(),
                        content,
                        reasoning: None,
                        tags: vec![],
                        memory_type: "knowledge".into(),
                        strength: 10,
                        is_active: true,
                        conversation_id: Some(format!("bench:{}", i % 500)),
                        created_at: Some(now),
                        memory_scope: Some(scope),
                        scope_source: Some("conversation".into()),
                        expires_at: None,
                        last_recalled_at: None,
                        speaker_id: None,
                        speaker_name: None,
                        source_ids: vec![],
                        about_ids: vec![],
                        source_conversations: vec![],
                    },
                    v,
                )
            })
            .collect();
        for chunk in rows.chunks(20_000) {
            store.append(chunk.to_vec()).await.expect("append");
        }
        store.writer().maintain().await.expect("compact");
        store.shutdown().await;
        std::fs::write(&done, b"ok").expect("mark complete");
    }
    let (store, _) =
        scopemem::migrate::open_store(&dir, "memories", &model, WriterSettings::default())
            .await
            .expect("open");
    (dir, store)
}

pub struct Query {
    /// The question as a user would type it (keyword search uses the text).
    pub text: String,
    pub vector: Vec<f32>,
    /// Its scope and `public`.
    pub rows: scopemem::store::RowFilter,
}

pub async fn queries(e: &dyn Embedder) -> Vec<Query> {
    let mut rng = Rng(0xC0FFEE);
    let texts: Vec<String> = (0..query_count()).map(|_| question(&mut rng)).collect();
    let vectors = e
        .embed(scopemem::embed::TextRole::Query, texts.clone())
        .await
        .expect("embed queries");
    texts
        .into_iter()
        .zip(vectors)
        .map(|(text, vector)| {
            let scope = format!("scope_{:02}", rng.next() % SCOPES as u64);
            Query {
                text,
                vector,
                rows: scopemem::store::RowFilter {
                    scopes: Some(scopemem::store::ScopeSet {
                        names: vec![scope, "public".into()],
                        null: false,
                    }),
                    alive_at: None,
                    created: None,
                    tier: None,
                },
            }
        })
        .collect()
}

/// A host on `dir` with defaults from conf_schema.json plus `extra` top-level keys.
pub async fn host_on(
    dir: &std::path::Path,
    e: Arc<dyn Embedder>,
    extra: serde_json::Value,
) -> PluginHost {
    let mut cfg = json!({"storage": {"db_dir": dir.to_string_lossy()}});
    if let (Some(c), Some(x)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in x {
            c.insert(k.clone(), v.clone());
        }
    }
    let config: Config = Config::from_value(&cfg).expect("config").config;
    PluginHost::start_with(config, None, e).await.expect("host")
}

/// Bytes under `path`, recursively.
pub fn du(path: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += du(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// Copy a directory tree (a cached table into a scratch dir the run may change).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), target)?;
        }
    }
    Ok(())
}

/// Lines of `field` from every `benches/quality/*.jsonl` file that has it, each once, in file
/// order, at most `limit`: the quality bench's mostly Chinese questions (`q`), right answers
/// (`a`) and memories (`text`).
pub fn quality_lines(field: &str, limit: usize) -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/quality");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("benches/quality")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap_or_default().lines() {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                if let Some(t) = v[field].as_str() {
                    if !out.iter().any(|o| o == t) {
                        out.push(t.to_string());
                    }
                }
            }
        }
    }
    out.truncate(limit);
    out
}

/// `texts` embedded as passages by `model` in calls of `chunk`, one after another: texts per
/// second.
pub async fn passages_per_s(model: &dyn Embedder, texts: &[String], chunk: usize) -> f64 {
    let started = Instant::now();
    for part in texts.chunks(chunk) {
        model
            .embed(scopemem::embed::TextRole::Passage, part.to_vec())
            .await
            .expect("embed");
    }
    texts.len() as f64 / started.elapsed().as_secs_f64()
}

/// The multi-threaded runtime every bench drives its async work on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The offline model from the set-up cache.
pub fn model() -> Arc<dyn Embedder> {
    Arc::new(
        scopemem::embed::FastEmbedder::load(&scopemem::embed::ModelFiles::resolve(None, None), 32)
            .expect("model (run `make setup`)"),
    )
}

/// Table sizes from `SCOPEMEM_BENCH_SIZES` (comma-separated), else `default`.
pub fn sizes(default: &[usize]) -> Vec<usize> {
    std::env::var("SCOPEMEM_BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| if smoke() { vec![300] } else { default.to_vec() })
}

/// `query_count()` recalls of generated questions (from `seed`) as `bench:conv`, each timed end to
/// end; `search` sets the request's `search` field.
pub fn timed_recalls(
    rt: &tokio::runtime::Runtime,
    host: &PluginHost,
    seed: u64,
    search: Option<&str>,
) -> Vec<Duration> {
    let mut rng = Rng(seed);
    let mut times = Vec::with_capacity(query_count());
    for _ in 0..query_count() {
        let mut body =
            json!({"conversation_id": "bench:conv", "query": question(&mut rng), "limit": K});
        if let Some(search) = search {
            body["search"] = json!(search);
        }
        let t = Instant::now();
        rt.block_on(host.invoke("recall", body)).expect("recall");
        times.push(t.elapsed());
    }
    times
}

/// `on_llm_request` (chained recall + injection) for `query_count()` questions: each call's time,
/// and the memories injected per call on average.
pub fn timed_llm_requests(rt: &tokio::runtime::Runtime, host: &PluginHost) -> (Vec<Duration>, f64) {
    let mut rng = Rng(11);
    let mut times = Vec::with_capacity(query_count());
    let mut injected = 0usize;
    for _ in 0..query_count() {
        let q = question(&mut rng);
        let t = Instant::now();
        let r = rt
            .block_on(host.invoke(
                "on_llm_request",
                json!({"conversation_id": "bench:conv", "query": q, "entities": ["Alice"]}),
            ))
            .expect("on_llm_request");
        times.push(t.elapsed());
        injected += r["memory_ids"].as_array().map_or(0, Vec::len);
    }
    (times, injected as f64 / query_count() as f64)
}
