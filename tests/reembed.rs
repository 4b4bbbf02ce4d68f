//! Changing the embedding model loses no memory (issue 21, part 2): real LanceDB directories,
//! the real MiniLM model (and MiniLM with e5-style prefixes, a different model id and
//! different vectors from the same files), real `scopemem serve` processes killed with -9.
//!
//! The model pair is a parameter ([`Pair`]): MiniLM → MiniLM with prefixes, and MiniLM →
//! multilingual-e5-small in-process (the upgrade to the default). The dimension change
//! (384 → 16) uses a small deterministic test embedder beside the real model. The re-embed's
//! throughput is measured by `make bench-reembed` (benches/reembed.rs), not here.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::serve::{post, spawn_serve, status};
use common::{family_map, merged, FAMILY, PRIVATE, WORK};
use futures::future::BoxFuture;
use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, FixedSizeListArray, Float32Array, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use scopemem::config::Config;
use scopemem::embed::{EmbedError, Embedder, FastEmbedder, LocalSettings, ModelFiles, TextRole};
use scopemem::host::PluginHost;
use serde_json::{json, Value};

/// Two models: the table starts with `from` and moves to `to`.
struct Pair {
    /// The `embedding` config section of each model, for `serve` processes.
    from: Value,
    to: Value,
    /// The same models in this process, to seed the table and to check its vectors.
    from_model: fn() -> Arc<dyn Embedder>,
    to_model: fn() -> Arc<dyn Embedder>,
}

/// MiniLM with e5-style prefixes: another model id, other vectors, same files.
fn prefixed() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<FastEmbedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let files = ModelFiles::resolve(None, None);
            let settings = LocalSettings {
                query_prefix: "query: ".into(),
                passage_prefix: "passage: ".into(),
                ..LocalSettings::default()
            };
            Arc::new(FastEmbedder::load_with(&files, 32, settings).expect("model installed"))
        })
        .clone()
}

fn minilm_to_prefixed() -> Pair {
    Pair {
        from: json!({"provider": "local"}),
        to: json!({"provider": "local", "query_prefix": "query: ", "passage_prefix": "passage: "}),
        from_model: common::embedder,
        to_model: prefixed,
    }
}

/// A small deterministic embedder of another dimension (test double beside the real model):
/// character trigrams hashed into 16 buckets, L2-normalised.
struct Hash16;

impl Hash16 {
    fn vector(text: &str) -> Vec<f32> {
        let mut v = [0f32; 16];
        let chars: Vec<char> = text.chars().collect();
        for w in chars.windows(3) {
            let h = w
                .iter()
                .fold(2166136261u32, |h, c| (h ^ *c as u32).wrapping_mul(16777619));
            v[(h % 16) as usize] += 1.0;
        }
        v[0] += 0.5;
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / norm).collect()
    }
}

impl Embedder for Hash16 {
    fn model_id(&self) -> &str {
        "test-hash16"
    }
    fn dimension(&self) -> usize {
        16
    }
    fn embed(
        &self,
        _role: TextRole,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move { Ok(texts.iter().map(|t| Hash16::vector(t)).collect()) })
    }
}

fn config_for(db: &Path, embedding: &Value, extra: Value) -> Config {
    let base = json!({
        "conversation_scope_map": family_map(),
        "storage": {"db_dir": db.to_string_lossy()},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        "embedding": embedding,
    });
    Config::from_value(&merged(base, &extra))
        .expect("test config is valid")
        .config
}

/// Remember `n` memories from FAMILY and WORK (and `private` from PRIVATE) with `model`;
/// returns id → content.
async fn seed(
    db: &Path,
    embedding: &Value,
    model: Arc<dyn Embedder>,
    n: usize,
    private: usize,
) -> HashMap<String, String> {
    let host = PluginHost::start_with(config_for(db, embedding, json!({})), None, model)
        .await
        .expect("host starts");
    let mut rows = HashMap::new();
    for i in 0..n + private {
        let (conversation, content) = if i < n {
            let c = if i % 2 == 0 { FAMILY } else { WORK };
            (
                c,
                format!("memory {i}: topic{} kiwi note number {i}", i % 7),
            )
        } else {
            (PRIVATE, format!("private secret-{i} mango"))
        };
        let r = common::remember(&host, conversation, &content).await;
        rows.insert(r["memory"]["id"].as_str().unwrap().to_string(), content);
    }
    host.shutdown().await;
    rows
}

pub(crate) async fn open_table(db: &Path) -> lancedb::Table {
    let conn = lancedb::connect(&db.to_string_lossy())
        .read_consistency_interval(Duration::ZERO)
        .execute()
        .await
        .unwrap();
    conn.open_table("memories").execute().await.unwrap()
}

/// Every row's id, content and vector.
pub(crate) async fn vectors(table: &lancedb::Table) -> Vec<(String, String, Vec<f32>)> {
    let batches: Vec<_> = table
        .query()
        .select(Select::columns(&["id", "content", "vector"]))
        .execute()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let ids = b["id"].as_any().downcast_ref::<StringArray>().unwrap();
        let contents = b["content"].as_any().downcast_ref::<StringArray>().unwrap();
        let vecs = b["vector"]
            .as_any()
            .downcast_ref::<FixedSizeListArray>()
            .unwrap();
        for i in 0..b.num_rows() {
            assert!(vecs.is_valid(i), "row {} has no vector", ids.value(i));
            let v = vecs.value(i);
            let v = v.as_any().downcast_ref::<Float32Array>().unwrap();
            out.push((
                ids.value(i).to_string(),
                contents.value(i).to_string(),
                v.values().to_vec(),
            ));
        }
    }
    out
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// Every row's vector is `to`'s embedding of its content (closer to it than to `from`'s;
/// int8 activations make a batch's vectors differ slightly with its other texts).
async fn assert_vectors_are(
    rows: &[(String, String, Vec<f32>)],
    to: &Arc<dyn Embedder>,
    from: &Arc<dyn Embedder>,
) {
    let texts: Vec<String> = rows.iter().map(|r| r.1.clone()).collect();
    let want = to.embed(TextRole::Passage, texts.clone()).await.unwrap();
    let old = from.embed(TextRole::Passage, texts).await.unwrap();
    for ((id, _, got), (want, old)) in rows.iter().zip(want.iter().zip(&old)) {
        let (to_new, to_old) = (cosine(got, want), cosine(got, old));
        assert!(
            to_new > 0.995 && to_new > to_old,
            "row {id}: similarity to the new model's vector {to_new}, to the old one's {to_old}"
        );
    }
}

async fn reembed_status(client: &reqwest::Client, s: &common::serve::Serve) -> Value {
    status(client, s).await["reembed"].clone()
}

async fn wait_until(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> BoxFuture<'static, bool>,
) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn minilm_to_prefixed_minilm_through_kill9_a_forget_and_a_second_process() {
    model_change_through_processes(minilm_to_prefixed()).await;
}

/// The upgrade: a table of the bundled MiniLM (the default before e5) moves to the new
/// default, multilingual-e5-small in-process, when the operator names it
/// (`embedding.provider: "e5"`, `migration.reembed: auto`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn minilm_to_the_default_e5_through_kill9_a_forget_and_a_second_process() {
    model_change_through_processes(minilm_to_e5()).await;
}

/// The bundled MiniLM to multilingual-e5-small in-process.
fn minilm_to_e5() -> Pair {
    Pair {
        from: json!({"provider": "local"}),
        to: json!({"provider": "e5"}),
        from_model: common::embedder,
        to_model: common::e5,
    }
}

/// Under the shipped config (`auto`) a MiniLM table keeps MiniLM, with `migration.reembed`
/// off or auto (as the AstrBot plugin writes it): an upgrade changes nothing by itself.
/// `scopemem migrate reembed` moves it to e5.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minilm_table_keeps_minilm_under_the_defaults_until_the_operator_reembeds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let pair = minilm_to_e5();
    seed(&db, &pair.from, (pair.from_model)(), 12, 0).await;
    let config = config_for(&db, &json!({}), json!({"migration": {"reembed": "auto"}}));
    let chosen = scopemem::memory::model_choice::load_embedder(
        &config,
        scopemem::memory::model_choice::Purpose::Serve,
    )
    .await
    .unwrap();
    assert_eq!(chosen.model_id(), common::embedder().model_id());
    let client = reqwest::Client::new();
    let serve = spawn_serve(
        dir.path(),
        "kept",
        json!({"storage": {"db_dir": db}, "migration": {"reembed": "auto"},
               "embedding": {"provider": "auto"}}),
    )
    .await;
    let status = status(&client, &serve).await;
    assert_eq!(
        status["embedding_model"],
        common::embedder().model_id(),
        "{status}"
    );
    assert_eq!(status["reembed"]["state"], "none", "{status}");
    drop(serve);

    let path = dir.path().join("default.json");
    std::fs::write(
        &path,
        serde_json::to_vec(&json!({"storage": {"db_dir": db}})).unwrap(),
    )
    .unwrap();
    let (code, out, err) =
        common::scopemem(&["migrate", "reembed", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("re-embed done: 12 of 12"), "{out}");
    let rows = vectors(&open_table(&db).await).await;
    assert_vectors_are(&rows, &common::e5(), &common::embedder()).await;
    let chosen = scopemem::memory::model_choice::load_embedder(
        &config,
        scopemem::memory::model_choice::Purpose::Serve,
    )
    .await
    .unwrap();
    assert_eq!(chosen.model_id(), common::e5().model_id());
}

/// Model A → B with real `serve` processes: R1 re-embeds and is killed -9 half-way; R2
/// resumes from the table; F, started after, serves keyword recall, a forget and a remember
/// throughout and follows the switch. Afterwards: no row lost, none twice, none brought back,
/// every vector B's embedding of its content, and R2 embedded only what R1 had not staged.
async fn model_change_through_processes(pair: Pair) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (n, private) = (300, 10);
    let seeded = seed(&db, &pair.from, (pair.from_model)(), n, private).await;
    let extra = json!({
        "embedding": pair.to,
        "migration": {"reembed": "auto", "reembed_batch_size": 8},
        "backfill": {"pacing": "fixed", "pause_ms": 250},
    });
    let client = reqwest::Client::new();

    let mut r1 = spawn_serve(dir.path(), "r1", extra.clone()).await;
    let started = Instant::now();
    loop {
        let p = reembed_status(&client, &r1).await;
        if p["done"].as_u64().unwrap_or(0) >= 60 {
            assert_eq!(p["state"], "running", "{p}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "R1 never got going: {p}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r1.kill9();
    let table = open_table(&db).await;
    let staged_at_kill = table
        .count_rows(Some("vector_next IS NOT NULL".into()))
        .await
        .unwrap() as u64;
    let total = (n + private) as u64;
    assert!(
        staged_at_kill >= 60 && staged_at_kill < total,
        "killed in the middle: {staged_at_kill} of {total} staged"
    );

    // R2 resumes at a slower pace, so that the checks below (F's start, a recall, a forget
    // and a remember, seconds each in a debug build on a loaded machine) run while it works:
    // about 31 batches of 8 at 2 s apart leave a minute of re-embed.
    let mut slow = extra.clone();
    slow["backfill"]["pause_ms"] = json!(2000);
    let r2 = spawn_serve(dir.path(), "r2", slow).await;
    let f = spawn_serve(dir.path(), "f", extra.clone()).await;
    let p = reembed_status(&client, &f).await;
    assert_eq!(p["state"], "pending", "F follows, R2 runs it: {p}");

    // F serves recall throughout, keyword-only, and says so.
    let (code, r) = post(
        &client,
        &f,
        "/v1/recall",
        json!({"conversation_id": FAMILY, "query": "topic3 kiwi", "limit": 5}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["degraded"], "reembedding", "{r}");
    assert!(!r["memories"].as_array().unwrap().is_empty(), "{r}");
    // A forget and a remember during the re-embed.
    let (code, r) = post(
        &client,
        &f,
        "/v1/forget",
        json!({"conversation_id": PRIVATE}),
    )
    .await;
    assert_eq!(
        (code, r["deleted"].as_u64()),
        (200, Some(private as u64)),
        "{r}"
    );
    let (code, r) = post(
        &client,
        &f,
        "/v1/remember",
        json!({"conversation_id": FAMILY, "content": "written during the re-embed: papaya"}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    let during_id = r["memory"]["id"].as_str().unwrap().to_string();
    let r2_state = reembed_status(&client, &r2).await;
    assert_ne!(
        r2_state["state"], "done",
        "the checks above ran during the re-embed: {r2_state}"
    );

    wait_until(
        Duration::from_secs(240),
        "R2 and F both report the switch",
        || {
            let (client, r2b, fb) = (client.clone(), r2.base.clone(), f.base.clone());
            Box::pin(async move {
                let get = |b: String| {
                    let c = client.clone();
                    async move {
                        c.get(format!("{b}/v1/status"))
                            .send()
                            .await
                            .ok()?
                            .json::<Value>()
                            .await
                            .ok()
                    }
                };
                let (a, b) = (get(r2b).await, get(fb).await);
                a.is_some_and(|s| s["reembed"]["state"] == "done")
                    && b.is_some_and(|s| s["reembed"]["state"] == "done")
            })
        },
    )
    .await;

    // R2 embedded only what R1 had not staged (less what was forgotten before it got there).
    let r2p = reembed_status(&client, &r2).await;
    let embedded = r2p["embedded"].as_u64().unwrap();
    assert!(
        embedded <= total - staged_at_kill && embedded + private as u64 >= total - staged_at_kill,
        "R2 embedded {embedded}; {staged_at_kill} of {total} were staged at the kill: {r2p}"
    );

    // Every row is there once, with B's vector; the forgotten ones are gone for good.
    let table = open_table(&db).await;
    let schema = table.schema().await.unwrap();
    assert!(schema.field_with_name("vector_next").is_err(), "{schema:?}");
    let vector = schema.field_with_name("vector").unwrap();
    assert!(!vector.is_nullable());
    let to = (pair.to_model)();
    assert_eq!(
        vector
            .metadata()
            .get("scopemem.embedding_model")
            .map(String::as_str),
        Some(to.model_id())
    );
    let rows = vectors(&table).await;
    let ids: HashSet<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids.len(), rows.len(), "no id twice");
    let mut want: HashSet<String> = seeded
        .iter()
        .filter(|(_, c)| !c.contains("secret"))
        .map(|(id, _)| id.clone())
        .collect();
    want.insert(during_id.clone());
    assert_eq!(ids, want.iter().map(String::as_str).collect::<HashSet<_>>());
    assert_vectors_are(&rows, &to, &(pair.from_model)()).await;
    let left = common::files_containing(&db, "secret-30");
    assert!(
        left.is_empty(),
        "a forgotten memory's text is on disk: {left:?}"
    );

    // F searches the new vectors now.
    let (code, r) = post(
        &client,
        &f,
        "/v1/recall",
        json!({"conversation_id": FAMILY, "query": "written during the re-embed: papaya",
               "limit": 3, "search": "vector"}),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    assert!(r.get("degraded").is_none(), "{r}");
    assert_eq!(r["memories"][0]["id"], during_id.as_str(), "{r}");
    let restarted = spawn_serve(dir.path(), "r3", extra).await;
    assert_eq!(reembed_status(&client, &restarted).await["state"], "none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dimension_change_384_to_16_with_a_forget_and_a_remember_during_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let seeded = seed(&db, &json!({}), common::embedder(), 40, 5).await;
    let cfg = config_for(
        &db,
        &json!({}),
        json!({"migration": {"reembed": "auto", "reembed_batch_size": 7}}),
    );
    let host = PluginHost::start_with(cfg, None, Arc::new(Hash16))
        .await
        .expect("starts on a 384-d table with a 16-d model");
    let memory = host.memory();
    assert!(!memory.reembed().vectors_current());
    assert_eq!(memory.reembed().progress().state, "pending");
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "kiwi"}),
        )
        .await
        .unwrap();
    assert_eq!(r["degraded"], "reembedding", "{r}");
    assert!(!r["memories"].as_array().unwrap().is_empty());
    let r = host
        .invoke("forget", json!({"conversation_id": PRIVATE}))
        .await
        .unwrap();
    assert_eq!(r["deleted"], 5);
    let during = common::remember(&host, FAMILY, "remembered with the new model: durian").await;
    let during_id = during["memory"]["id"].as_str().unwrap().to_string();

    let p = memory.reembed().run(|_| {}).await.unwrap();
    assert_eq!(p.state, "done");
    assert_eq!(
        p.embedded, 40,
        "the row remembered with the new model was not re-embedded"
    );
    assert!(memory.reembed().vectors_current());

    let table = open_table(&db).await;
    let rows = vectors(&table).await;
    assert_eq!(rows.len(), 41);
    let ids: HashSet<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert!(ids.contains(during_id.as_str()));
    for (id, content, v) in &rows {
        assert_eq!(v.len(), 16);
        assert_eq!(v, &Hash16::vector(content), "row {id}");
        assert!(!seeded.get(id).is_some_and(|c| c.contains("secret")));
    }
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": FAMILY, "query": "remembered with the new model: durian",
                   "search": "vector", "limit": 1}),
        )
        .await
        .unwrap();
    assert!(r.get("degraded").is_none(), "{r}");
    assert_eq!(r["memories"][0]["id"], during_id.as_str(), "{r}");
    // A remember after the switch lands in the 16-d `vector`.
    common::remember(&host, WORK, "after the switch").await;
    assert_eq!(common::rows(&host).await, 42);
    host.shutdown().await;
}

/// Remembers from a second service on the same table keep committing while the first one
/// re-embeds and switches: every one lands, with the new model's vector, before or after the
/// switch (one staged before it and committed after is refused by Lance and reshaped).
///
/// Before `store::reembed::stage_vectors` dropped the (empty) inserted-keys filter Lance puts
/// on a merge keyed by the primary key, every staging batch lost every commit race to a
/// remember every ~10 ms and the run never reached the switch; before the switch retried its
/// commit at once on what landed, it lost every race too ("three runs gave up: ... Project
/// transaction was preempted by concurrent transaction Append").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remembers_racing_the_switch_all_land_with_the_new_model() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    seed(&db, &json!({}), common::embedder(), 60, 0).await;
    let cfg = || {
        config_for(
            &db,
            &json!({}),
            json!({"migration": {"reembed": "auto", "reembed_batch_size": 16},
                   "backfill": {"pacing": "fixed", "pause_ms": 0}}),
        )
    };
    let runner = PluginHost::start_with(cfg(), None, Arc::new(Hash16))
        .await
        .unwrap();
    let writer = Arc::new(
        PluginHost::start_with(cfg(), None, Arc::new(Hash16))
            .await
            .unwrap(),
    );
    assert!(runner.memory().is_maintainer() && !writer.memory().is_maintainer());
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn({
        let (writer, stop) = (writer.clone(), stop.clone());
        async move {
            let mut ids = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Acquire) {
                let r = writer
                    .invoke(
                        "remember",
                        json!({"conversation_id": WORK, "content": format!("racing remember {i}")}),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("remember {i} during the re-embed failed: {e}"));
                ids.push(r["memory"]["id"].as_str().unwrap().to_string());
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ids
        }
    });
    // As the service's loop does: a run that gives up on write contention resumes.
    let mut runs = 0;
    let p = loop {
        runs += 1;
        match runner.memory().reembed().run(|_| {}).await {
            Ok(p) => break p,
            Err(e) if runs < 3 => eprintln!("run {runs} gave up, resuming: {e}"),
            Err(e) => panic!("three runs gave up: {e}"),
        }
    };
    assert_eq!(p.state, "done");
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Release);
    let ids = task.await.unwrap();
    assert!(ids.len() > 5, "the writer kept writing: {}", ids.len());

    let rows = vectors(&open_table(&db).await).await;
    assert_eq!(rows.len(), 60 + ids.len(), "no remember lost, none twice");
    let present: HashSet<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert!(ids.iter().all(|id| present.contains(id.as_str())));
    for (id, content, v) in &rows {
        assert_eq!(v, &Hash16::vector(content), "row {id}");
    }
    runner.shutdown().await;
    writer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reembed_off_refuses_with_a_hint_and_the_cli_reembeds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let pair = minilm_to_prefixed();
    seed(&db, &pair.from, (pair.from_model)(), 12, 0).await;
    let refused = PluginHost::start_with(
        config_for(&db, &pair.to, json!({})),
        None,
        (pair.to_model)(),
    )
    .await;
    let err = refused
        .err()
        .expect("migration.reembed off refuses")
        .to_string();
    assert!(
        err.contains("embedding model mismatch") && err.contains("scopemem migrate reembed"),
        "{err}"
    );
    assert!(open_table(&db)
        .await
        .schema()
        .await
        .unwrap()
        .field_with_name("vector_next")
        .is_err());

    let path = dir.path().join("to.json");
    let cfg = json!({"storage": {"db_dir": db}, "embedding": pair.to});
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (code, out, err) =
        common::scopemem(&["migrate", "reembed", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("re-embed done: 12 of 12"), "{out}");
    let rows = vectors(&open_table(&db).await).await;
    assert_eq!(rows.len(), 12);
    assert_vectors_are(&rows, &(pair.to_model)(), &(pair.from_model)()).await;
    // Now the new model opens it with reembed off.
    let host = PluginHost::start_with(
        config_for(&db, &pair.to, json!({})),
        None,
        (pair.to_model)(),
    )
    .await
    .expect("the table holds the configured model now");
    assert_eq!(host.memory().reembed().progress().state, "none");
    host.shutdown().await;
}
