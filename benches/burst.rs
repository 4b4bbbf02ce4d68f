//! Sustained writes (issue 24): what a burst of remembers does to the machine, and how recall
//! feels right after it.
//!
//! One real `scopemem serve` (default config, conversations mapped to four scopes plus an
//! unmapped one) takes SCOPEMEM_BURST_ROWS (default 100,000) memory-like sentences (English,
//! and one in ten Chinese) from SCOPEMEM_BURST_CLIENTS (16) concurrent HTTP clients as fast as
//! it answers `POST /v1/remember`. Every second a sampler reads `/v1/status` (table versions,
//! `disk_bytes`, the resident copy's counters) and the server's RSS from /proc. One client
//! recalls (`search: vector`, limit 10) every half second during the burst; after it, 200
//! recalls run back to back, then 200 with the default `search: hybrid`. Then 20 single
//! memories are forgotten (`POST /v1/forget`, an erase each), each followed by 5 recalls. Then
//! the service idles SCOPEMEM_BURST_SETTLE_SECS (600) while its maintenance compacts and
//! prunes, and the disk is read again.
//!
//! Prints one table: peak and final versions, disk and RSS, the ingest rate, recall latency
//! during and right after the burst, and how many of those recalls the resident copy left to
//! LanceDB. The client shares the machine with the server, as it does in the figures.
//!
//! SCOPEMEM_BURST_STORAGE takes a JSON object merged into the config's `storage` section (for
//! example `{"commit_linger_ms": 0, "keep_versions_max": 0}`, the settings before issue 24);
//! SCOPEMEM_BURST_CONFIG takes `{"section": {"key": value}}` for any other section (for
//! example `{"recall": {"resident_max_rows": 0}}`, to see what the resident copy costs).
//! SCOPEMEM_BURST_KEEP=1 keeps the data directory and prints where it is, to see what the bytes
//! are (which files the latest version references, which only older ones).
//!
//! Run with `make bench-burst` (release; SCOPEMEM_BENCH_PROFILE=dev for a debug build, whose
//! figures are not production figures). Not part of `make test`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::serve::{get, post, start_serve};
use common::workload::zh_sentence;
use common::{bench_root, scaled, sentence, Rng};
use serde_json::{json, Value};

const CONVERSATIONS: [(&str, Option<&str>); 5] = [
    ("qq:GroupMessage:1001", Some("家人")),
    ("qq:GroupMessage:1002", Some("工作")),
    ("qq:GroupMessage:1003", Some("游戏群")),
    ("qq:GroupMessage:1004", Some("同学")),
    ("qq:GroupMessage:9999", None),
];
/// Recalls timed right after the burst (a few in a smoke run).
fn after_recalls() -> usize {
    scaled(200, 5)
}

/// Single memories forgotten after the burst, each followed by [`RECALLS_PER_ERASE`] recalls.
fn erases() -> usize {
    scaled(20, 2)
}
const RECALLS_PER_ERASE: usize = 5;
/// The unmapped conversation: its scope is `public`, whose memories it may forget.
const PUBLIC_CONVERSATION: &str = "qq:GroupMessage:9999";

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `n`th memory: distinct text (a running number keeps templated sentences apart).
fn memory(n: usize) -> String {
    let mut rng = Rng(n as u64 * 7919 + 1);
    if n % 10 == 9 {
        format!("{}（第{n}条）", zh_sentence(&mut rng))
    } else {
        format!("{} (note {n})", sentence(&mut rng))
    }
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[derive(Default, Clone, Copy)]
struct Sample {
    secs: f64,
    rows_sent: usize,
    versions: u64,
    disk: u64,
    rss: u64,
    deferred: u64,
    loads: u64,
    /// The resident copy's own estimate of its size (vectors, records, keyword index).
    resident_bytes: u64,
}

async fn sample(client: &reqwest::Client, base: &str, pid: u32, started: Instant) -> Sample {
    let s = get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or(Value::Null);
    Sample {
        secs: started.elapsed().as_secs_f64(),
        rows_sent: 0,
        versions: s["table_versions"].as_u64().unwrap_or(0),
        disk: s["disk_bytes"].as_u64().unwrap_or(0),
        rss: rss_bytes(pid),
        deferred: s["resident_search"]["deferred"].as_u64().unwrap_or(0),
        loads: s["resident_search"]["loads"].as_u64().unwrap_or(0),
        resident_bytes: s["resident_search"]["bytes"].as_u64().unwrap_or(0),
    }
}

async fn recall_once(client: &reqwest::Client, base: &str, n: usize, search: &str) -> Duration {
    let mut rng = Rng(n as u64 + 424_242);
    let (conversation, _) = CONVERSATIONS[n % CONVERSATIONS.len()];
    let body = json!({
        "conversation_id": conversation,
        "query": common::question(&mut rng),
        "search": search,
        "limit": 10,
    });
    let t = Instant::now();
    post(client, &format!("{base}/v1/recall"), &body)
        .await
        .unwrap_or_else(|e| panic!("recall failed: {e}"));
    t.elapsed()
}

fn ms(xs: &mut [Duration], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort();
    xs[((xs.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

const MB: f64 = 1024.0 * 1024.0;

fn main() {
    let rows = env_usize("SCOPEMEM_BURST_ROWS", scaled(100_000, 200));
    let clients = env_usize("SCOPEMEM_BURST_CLIENTS", 16);
    let settle =
        Duration::from_secs(env_usize("SCOPEMEM_BURST_SETTLE_SECS", scaled(600, 1)) as u64);
    let profile = if cfg!(debug_assertions) {
        "dev (debug build: not production figures)"
    } else {
        "bench (release)"
    };
    println!("burst bench: {rows} remembers from {clients} clients over HTTP; build {profile}");
    let root = bench_root().join("burst");
    std::fs::create_dir_all(&root).expect("bench dir");
    let work = tempfile::tempdir_in(&root).expect("bench temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .pool_max_idle_per_host(clients + 2)
        .build()
        .expect("client");
    rt.block_on(run(&client, work.path(), rows, clients, settle));
    if std::env::var_os("SCOPEMEM_BURST_KEEP").is_some() {
        println!("kept the data directory: {}", work.keep().display());
    }
}

async fn run(
    client: &reqwest::Client,
    dir: &std::path::Path,
    rows: usize,
    clients: usize,
    settle: Duration,
) {
    let map: serde_json::Map<String, Value> = CONVERSATIONS
        .iter()
        .filter_map(|(c, s)| Some((c.to_string(), json!((*s)?))))
        .collect();
    let mut cfg = json!({"conversation_scope_map": map, "storage": {}});
    if let Ok(extra) = std::env::var("SCOPEMEM_BURST_STORAGE") {
        let extra: Value = serde_json::from_str(&extra).expect("SCOPEMEM_BURST_STORAGE is JSON");
        for (k, v) in extra
            .as_object()
            .expect("SCOPEMEM_BURST_STORAGE is an object")
        {
            cfg["storage"][k] = v.clone();
        }
        println!("storage settings: {extra}");
    }
    if let Ok(extra) = std::env::var("SCOPEMEM_BURST_CONFIG") {
        let extra: Value = serde_json::from_str(&extra).expect("SCOPEMEM_BURST_CONFIG is JSON");
        for (section, keys) in extra
            .as_object()
            .expect("SCOPEMEM_BURST_CONFIG is an object")
        {
            for (k, v) in keys.as_object().expect("each section is an object") {
                cfg[section][k] = v.clone();
            }
        }
        println!("config settings: {extra}");
    }
    let (serve, base) = start_serve(client, dir, cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = serve.id();
    let started = Instant::now();
    let sent = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));

    // The sampler: once a second until told to stop.
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let sampler = {
        let (client, base, samples, sent, done) = (
            client.clone(),
            base.clone(),
            samples.clone(),
            sent.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let mut s = sample(&client, &base, pid, started).await;
                s.rows_sent = sent.load(Ordering::Relaxed);
                samples.lock().unwrap().push(s);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    // Recalls during the burst.
    let during = {
        let (client, base, done) = (client.clone(), base.clone(), done.clone());
        tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                lat.push(recall_once(&client, &base, n, "vector").await);
                n += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            lat
        })
    };
    // The burst.
    let writers: Vec<_> = (0..clients)
        .map(|_| {
            let (client, base, sent) = (client.clone(), base.clone(), sent.clone());
            tokio::spawn(async move {
                let url = format!("{base}/v1/remember");
                loop {
                    let n = sent.fetch_add(1, Ordering::Relaxed);
                    if n >= rows {
                        sent.fetch_sub(1, Ordering::Relaxed);
                        break;
                    }
                    let (conversation, _) = CONVERSATIONS[n % CONVERSATIONS.len()];
                    let body = json!({"conversation_id": conversation, "content": memory(n)});
                    if let Err(e) = post(&client, &url, &body).await {
                        panic!("remember {n} failed: {e}");
                    }
                }
            })
        })
        .collect();
    let mut last_report = 0;
    while !writers.iter().all(|w| w.is_finished()) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let n = sent.load(Ordering::Relaxed);
        if n >= last_report + rows / 10 {
            last_report = n;
            if let Some(s) = samples.lock().unwrap().last() {
                println!(
                    "  {:>6.0} s: {n:>7} sent, {:>6} versions, disk {:>7.1} MB, rss {:>6.1} MB",
                    s.secs,
                    s.versions,
                    s.disk as f64 / MB,
                    s.rss as f64 / MB
                );
            }
        }
    }
    for w in writers {
        w.await.expect("writer");
    }
    let burst_secs = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let mut during = during.await.expect("during");
    sampler.await.expect("sampler");
    let end = sample(client, &base, pid, started).await;

    // Right after the burst.
    let mut after = Vec::with_capacity(after_recalls());
    for n in 0..after_recalls() {
        after.push(recall_once(client, &base, 10_000 + n, "vector").await);
    }
    // The default search: the vector list and the keyword list, fused.
    let mut hybrid = Vec::with_capacity(after_recalls());
    for n in 0..after_recalls() {
        hybrid.push(recall_once(client, &base, 20_000 + n, "hybrid").await);
    }
    let after_end = sample(client, &base, pid, started).await;

    // A user forgets single memories while recalls go on: each erase deletes, rewrites the
    // fragment and prunes every older version; the recalls after it show whether the resident
    // copy followed it or left them to LanceDB.
    let (mut erase_lat, mut after_erase) = (Vec::new(), Vec::new());
    for n in 0..erases() {
        let mut rng = Rng(n as u64 + 77_777);
        let found = post(
            client,
            &format!("{base}/v1/recall"),
            &json!({"conversation_id": PUBLIC_CONVERSATION, "query": common::question(&mut rng),
                    "search": "vector", "limit": 1}),
        )
        .await
        .unwrap_or_else(|e| panic!("recall failed: {e}"));
        let id = found["memories"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("nothing to forget: {found}"))
            .to_string();
        let t = Instant::now();
        let forgot = post(
            client,
            &format!("{base}/v1/forget"),
            &json!({"conversation_id": PUBLIC_CONVERSATION, "memory_ids": [id]}),
        )
        .await
        .unwrap_or_else(|e| panic!("forget failed: {e}"));
        erase_lat.push(t.elapsed());
        assert_eq!(forgot["deleted"], 1, "forget erased one memory: {forgot}");
        for k in 0..RECALLS_PER_ERASE {
            let n = 30_000 + n * RECALLS_PER_ERASE + k;
            after_erase.push(recall_once(client, &base, n, "vector").await);
        }
    }
    let erases_end = sample(client, &base, pid, started).await;

    // Settle: maintenance compacts and prunes while the service idles.
    let mut settled = erases_end;
    let settle_started = Instant::now();
    while settle_started.elapsed() < settle {
        tokio::time::sleep(Duration::from_secs(10).min(settle)).await;
        settled = sample(client, &base, pid, started).await;
    }
    let status = get(client, &format!("{base}/v1/status"))
        .await
        .unwrap_or(Value::Null);

    let samples = samples.lock().unwrap().clone();
    let peak = |f: fn(&Sample) -> u64| samples.iter().map(f).chain([f(&end)]).max().unwrap_or(0);
    println!();
    println!("| figure | measured |");
    println!("|---|---|");
    println!(
        "| rows stored | {} of {rows} |",
        status["rows"].as_u64().unwrap_or(0)
    );
    println!(
        "| ingest (remembers/s, {clients} clients, client on the same machine) | {:.0} |",
        rows as f64 / burst_secs
    );
    println!(
        "| table versions: peak / end of burst / after {} s idle | {} / {} / {} |",
        settle.as_secs(),
        peak(|s| s.versions),
        end.versions,
        settled.versions
    );
    println!(
        "| disk: peak / end of burst / after {} s idle | {:.0} MB / {:.0} MB / {:.0} MB |",
        settle.as_secs(),
        peak(|s| s.disk) as f64 / MB,
        end.disk as f64 / MB,
        settled.disk as f64 / MB
    );
    println!(
        "| serve RSS: peak / after {} s idle | {:.0} MB / {:.0} MB |",
        settle.as_secs(),
        peak(|s| s.rss) as f64 / MB,
        settled.rss as f64 / MB
    );
    println!(
        "| recall during the burst ({} recalls, vector, limit 10) | p50 {:.1} ms, p99 {:.1} ms |",
        during.len(),
        ms(&mut during, 0.5),
        ms(&mut during, 0.99)
    );
    println!(
        "| recall right after the burst ({} back to back) | p50 {:.1} ms, p99 {:.1} ms; {} left to LanceDB |",
        after.len(),
        ms(&mut after, 0.5),
        ms(&mut after, 0.99),
        after_end.deferred - end.deferred
    );
    println!(
        "| hybrid recall after that ({} back to back, the default search) | p50 {:.1} ms, p99 {:.1} ms |",
        hybrid.len(),
        ms(&mut hybrid, 0.5),
        ms(&mut hybrid, 0.99),
    );
    println!(
        "| forget one memory ({} erases), then {RECALLS_PER_ERASE} recalls each | erase p50 {:.0} ms, p99 {:.0} ms; recalls p50 {:.1} ms, p99 {:.1} ms; {} left to LanceDB, {} reloads |",
        erase_lat.len(),
        ms(&mut erase_lat, 0.5),
        ms(&mut erase_lat, 0.99),
        ms(&mut after_erase, 0.5),
        ms(&mut after_erase, 0.99),
        erases_end.deferred - after_end.deferred,
        erases_end.loads - after_end.loads,
    );
    println!(
        "| resident copy: full reloads over the run / searches left to LanceDB | {} / {} |",
        settled.loads, settled.deferred
    );
    println!(
        "| resident copy's own size estimate: peak / after idle | {:.0} MB / {:.0} MB |",
        peak(|s| s.resident_bytes) as f64 / MB,
        settled.resident_bytes as f64 / MB
    );
    drop(serve);
    // The temp dir goes; the server's log stays for a look at what it did.
    let kept = dir.parent().unwrap_or(dir).join("serve-last.log");
    let _ = std::fs::copy(dir.join("serve.log"), &kept);
    println!(
        "(bench finished in {:.0} s; the server's log is in {})",
        started.elapsed().as_secs_f64(),
        kept.display()
    );
}
