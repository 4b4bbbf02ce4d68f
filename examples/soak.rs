//! `make soak`: randomized load on two real `scopemem serve` processes sharing one directory,
//! with hot map reloads, a legacy-row backfill running, and periodic kill -9. Asserts zero scope
//! leaks (every recalled row is visible under the map snapshot the request reported, and that
//! scope is one the map gave the conversation at some point) and zero lost or duplicated
//! acknowledged writes, then prints one summary line.
//!
//! `SOAK_OPS` sets the operation count (default 100000). Run with `make soak`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use scopemem::embed::ModelInfo;
use scopemem::embed::{Embedder, FastEmbedder, ModelFiles};
use scopemem::store::schema::META_SCHEMA_VERSION;
use scopemem::store::{MemoryRecord, WriterSettings};
use serde_json::{json, Value};

const SCOPES: usize = 20;
const CONVERSATIONS: usize = 30;
const LEGACY_ROWS: usize = 3000;
const CLIENTS: usize = 8;

fn conversation(i: usize) -> String {
    format!("soak:GroupMessage:{i}")
}

/// The map at reload `version`: conversations 0..25 rotate over 20 scopes, the rest unmapped.
fn map_at(version: usize) -> BTreeMap<String, String> {
    (0..25)
        .map(|i| (conversation(i), format!("s{:02}", (i + version) % SCOPES)))
        .collect()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct Proc {
    child: Child,
    base: String,
    config: PathBuf,
}

impl Proc {
    fn spawn(config: &Path, port: u16, binary: &Path) -> Proc {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(config.with_extension("log"))
            .expect("log file");
        let child = Command::new(binary)
            .args(["serve", "--config", &config.to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn serve");
        Proc {
            child,
            base: format!("http://127.0.0.1:{port}"),
            config: config.to_path_buf(),
        }
    }
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn write_config(path: &Path, db: &Path, port: u16, version: usize) {
    let cfg = json!({
        "conversation_scope_map": map_at(version),
        "storage": {"db_dir": db, "read_consistency_ms": 500, "keep_versions_minutes": 1},
        "server": {"http_addr": format!("127.0.0.1:{port}")},
        "recall": {"similarity_threshold": -1.0, "relevance_gate": false},
        "backfill": {"batch_size": 50, "pause_ms": 200},
        "feedback": {"queue_capacity": 4096},
        "log_level": "warn",
    });
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&cfg).expect("json")).expect("write config");
    std::fs::rename(&tmp, path).expect("replace config");
}

async fn wait_up(client: &reqwest::Client, base: &str) {
    for _ in 0..600 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{base} did not come up (see its pN.log)");
}

/// A legacy table: rows written, then the scope columns dropped and the schema marked v1, so
/// the service migrates it and backfills while the soak runs.
async fn legacy_table(db: &Path, embedder: &Arc<dyn Embedder>) {
    let model = ModelInfo {
        id: embedder.model_id().to_string(),
        dimension: embedder.dimension(),
    };
    let (store, _) =
        scopemem::migrate::open_store(db, "memories", &model, WriterSettings::default())
            .await
            .expect("store");
    let texts: Vec<String> = (0..LEGACY_ROWS)
        .map(|i| format!("legacy note {i} about topic {}", i % 37))
        .collect();
    for chunk in texts.chunks(500) {
        let vectors = embedder
            .embed(scopemem::embed::TextRole::Passage, chunk.to_vec())
            .await
            .expect("embed");
        let rows = chunk
            .iter()
            .zip(vectors)
            .map(|(t, v)| {
                let record = MemoryRecord {
                    id: uuid::Uuid::now_v7().to_string(),
                    content: t.clone(),
                    reasoning: None,
                    tags: vec![],
                    memory_type: "knowledge".into(),
                    strength: 50,
                    is_active: true,
                    conversation_id: None,
                    created_at: Some(chrono::Utc::now() - chrono::TimeDelta::days(30)),
                    memory_scope: None,
                    scope_source: None,
                    expires_at: None,
                    last_recalled_at: None,
                    speaker_id: None,
                    speaker_name: None,
                    source_ids: vec![],
                    about_ids: vec![],
                    source_conversations: vec![],
                };
                (record, v)
            })
            .collect();
        store.append(rows).await.expect("append");
    }
    let table = store.table().clone();
    store.shutdown().await;
    table
        .drop_columns(&["memory_scope", "scope_source"])
        .await
        .expect("drop scope columns");
    table
        .as_native()
        .expect("local table")
        .update_config([(META_SCHEMA_VERSION.to_string(), "1".to_string())])
        .await
        .expect("mark v1");
}

#[derive(Default)]
struct Tally {
    ops: AtomicUsize,
    leaks: AtomicUsize,
    errors: AtomicUsize,
    acked: Mutex<Vec<String>>,
    jobs: Mutex<Vec<String>>,
    leak_examples: Mutex<Vec<String>>,
}

#[tokio::main]
async fn main() {
    let total: usize = std::env::var("SOAK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // The `scopemem` binary of the same build: examples live in <target>/<profile>/examples.
    let binary = std::env::var("SCOPEMEM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let exe = std::env::current_exe().expect("current exe");
            exe.parent()
                .and_then(Path::parent)
                .map(|d| d.join("scopemem"))
                .expect("target dir")
        });
    assert!(
        binary.exists(),
        "build the binary first (`make soak` does): {}",
        binary.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    eprintln!(
        "soak: working in {} (each process logs to pN.log)",
        dir.path().display()
    );
    let db = dir.path().join("db");
    std::fs::create_dir_all(&db).expect("db dir");
    let embedder: Arc<dyn Embedder> = Arc::new(
        FastEmbedder::load(&ModelFiles::resolve(None, None), 32).expect("model (run `make setup`)"),
    );
    legacy_table(&db, &embedder).await;
    drop(embedder);

    // Every scope each conversation could ever have had, over all map versions.
    let mut possible: HashMap<String, HashSet<String>> = HashMap::new();
    let reloads = (total / 10_000).max(2);
    for v in 0..=reloads {
        for i in 0..CONVERSATIONS {
            let scope = map_at(v)
                .get(&conversation(i))
                .cloned()
                .unwrap_or_else(|| "public".into());
            possible.entry(conversation(i)).or_default().insert(scope);
        }
    }
    let possible = Arc::new(possible);

    let ports = [free_port(), free_port()];
    let configs: Vec<PathBuf> = (0..2)
        .map(|p| dir.path().join(format!("p{p}.json")))
        .collect();
    for (p, cfg) in configs.iter().enumerate() {
        write_config(cfg, &db, ports[p], 0);
    }
    let client = reqwest::Client::new();
    let procs: Vec<Arc<Mutex<Proc>>> = (0..2)
        .map(|p| Arc::new(Mutex::new(Proc::spawn(&configs[p], ports[p], &binary))))
        .collect();
    for p in &procs {
        let base = p.lock().expect("proc").base.clone();
        wait_up(&client, &base).await;
    }

    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let mut restarts = 0;
    let mut version = 0;
    let per_phase = total / (reloads + 1);
    let mut done_ops = 0;
    while done_ops < total {
        let phase_ops = per_phase.min(total - done_ops);
        let mut tasks = Vec::new();
        for c in 0..CLIENTS {
            let (tally, possible, client) = (tally.clone(), possible.clone(), client.clone());
            let bases: Vec<String> = procs
                .iter()
                .map(|p| p.lock().expect("proc").base.clone())
                .collect();
            let ops = phase_ops / CLIENTS + usize::from(c < phase_ops % CLIENTS);
            let seed = (done_ops as u64 + 1) * 7919 + c as u64;
            tasks.push(tokio::spawn(async move {
                run_client(ops, seed, &bases, &client, &tally, &possible).await;
            }));
        }
        // Mid-phase: kill -9 one process and restart it on the same config.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let victim = restarts % 2;
        {
            let mut p = procs[victim].lock().expect("proc");
            p.kill9();
            let config = p.config.clone();
            *p = Proc::spawn(&config, ports[victim], &binary);
        }
        restarts += 1;
        for t in tasks {
            let _ = t.await;
        }
        let victim_base = procs[victim].lock().expect("proc").base.clone();
        wait_up(&client, &victim_base).await;
        done_ops += phase_ops;
        // Hot reload: rewrite both configs with the next map.
        version += 1;
        for (p, cfg) in configs.iter().enumerate() {
            write_config(cfg, &db, ports[p], version);
        }
        eprintln!(
            "soak: {done_ops}/{total} ops, {} leaks, {} errors, {:.0} s",
            tally.leaks.load(Ordering::Relaxed),
            tally.errors.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64()
        );
    }

    // Let every accepted feedback job be applied (adopted jobs included), then stop.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut depth = 0;
        for p in &procs {
            let base = p.lock().expect("proc").base.clone();
            let s: Value = match client.get(format!("{base}/v1/status")).send().await {
                Ok(r) => r.json().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            depth += s["feedback_queue_depth"].as_u64().unwrap_or(1);
        }
        if depth == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let jobs = tally.jobs.lock().expect("jobs").clone();
    let mut jobs_not_done = 0;
    let mut created: Vec<String> = Vec::new();
    for job in &jobs {
        let mut state = Value::Null;
        for p in &procs {
            let base = p.lock().expect("proc").base.clone();
            if let Ok(r) = client.get(format!("{base}/v1/feedback/{job}")).send().await {
                let v: Value = r.json().await.unwrap_or(Value::Null);
                if v["state"] == "done" {
                    state = v;
                    break;
                }
            }
        }
        match state["outcome"]["created"].as_array() {
            Some(ids) => created.extend(ids.iter().filter_map(|i| i.as_str().map(String::from))),
            None => jobs_not_done += 1,
        }
    }
    for p in &procs {
        p.lock().expect("proc").kill9();
    }

    let model = {
        let e = FastEmbedder::load(&ModelFiles::resolve(None, None), 1).expect("model");
        ModelInfo {
            id: e.model_id().to_string(),
            dimension: e.dimension(),
        }
    };
    let (store, _) =
        scopemem::migrate::open_store(&db, "memories", &model, WriterSettings::default())
            .await
            .expect("store");
    let ids = store.ids_where("id IS NOT NULL").await.expect("ids");
    store.shutdown().await;
    let on_disk: HashSet<&String> = ids.iter().collect();
    let duplicated = ids.len() - on_disk.len();
    let acked = tally.acked.lock().expect("acked").clone();
    let lost = acked
        .iter()
        .chain(created.iter())
        .filter(|id| !on_disk.contains(id))
        .count()
        + jobs_not_done;
    let leaks = tally.leaks.load(Ordering::Relaxed);
    println!(
        "SOAK operations={} leaks={leaks} lost={lost} duplicated={duplicated} restarts={restarts} acknowledged_remembers={} feedback_jobs={} request_errors={} seconds={:.0}",
        tally.ops.load(Ordering::Relaxed),
        acked.len(),
        jobs.len(),
        tally.errors.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    for example in tally.leak_examples.lock().expect("examples").iter().take(5) {
        println!("leak: {example}");
    }
    if leaks > 0 || lost > 0 || duplicated > 0 {
        eprintln!("soak: keeping {} for inspection", dir.keep().display());
        std::process::exit(1);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

async fn run_client(
    ops: usize,
    seed: u64,
    bases: &[String],
    client: &reqwest::Client,
    tally: &Tally,
    possible: &HashMap<String, HashSet<String>>,
) {
    let mut rng = Rng(seed | 1);
    for _ in 0..ops {
        let base = &bases[rng.below(bases.len())];
        let conv = conversation(rng.below(CONVERSATIONS));
        let roll = rng.below(100);
        tally.ops.fetch_add(1, Ordering::Relaxed);
        let result = if roll < 40 {
            let body = json!({"conversation_id": conv,
                              "content": format!("soak memory {} in {conv}", rng.next())});
            post(client, base, "/v1/remember", &body).await.map(|v| {
                if let Some(id) = v["memory"]["id"].as_str() {
                    tally.acked.lock().expect("acked").push(id.to_string());
                }
            })
        } else if roll < 45 {
            let body = json!({"conversation_id": conv,
                              "new_memories": [{"content": format!("soak reflection {}", rng.next())}]});
            post(client, base, "/v1/feedback", &body).await.map(|v| {
                if let Some(job) = v["job_id"].as_str() {
                    tally.jobs.lock().expect("jobs").push(job.to_string());
                }
            })
        } else {
            let body = json!({"conversation_id": conv, "query": "soak memory", "limit": 20});
            post(client, base, "/v1/recall", &body)
                .await
                .map(|v| check_recall(&conv, &v, tally, possible))
        };
        if result.is_err() {
            tally.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A leak: a row outside the scope the response says it ran under (plus public, plus NULL in
/// migration mode), or a scope the map never gave this conversation.
fn check_recall(
    conv: &str,
    response: &Value,
    tally: &Tally,
    possible: &HashMap<String, HashSet<String>>,
) {
    let current = response["memory_scope"].as_str().unwrap_or("");
    let migration = response["migration_mode"] == true;
    let mut leak = !possible.get(conv).is_some_and(|s| s.contains(current));
    for m in response["memories"].as_array().into_iter().flatten() {
        let ok = match m["memory_scope"].as_str() {
            Some(s) => s == current || s == "public",
            None => migration,
        };
        if !ok {
            leak = true;
            if let Ok(mut ex) = tally.leak_examples.lock() {
                ex.push(format!(
                    "{conv} in {current} saw a row of {}",
                    m["memory_scope"]
                ));
            }
        }
    }
    if leak {
        tally.leaks.fetch_add(1, Ordering::Relaxed);
    }
}

/// POST; Err for a transport error or a non-2xx status (a killed process, a restart).
async fn post(client: &reqwest::Client, base: &str, path: &str, body: &Value) -> Result<Value, ()> {
    let r = client
        .post(format!("{base}{path}"))
        .json(body)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|_| ())?;
    if !r.status().is_success() {
        return Err(());
    }
    r.json().await.map_err(|_| ())
}
