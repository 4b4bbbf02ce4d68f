//! 8 tasks remembering and recalling across scopes while the map is reloaded: no cross-scope
//! leaks and no lost rows.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use scopemem::config::UnmappedPolicy;
use scopemem::scope::ScopeMap;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_remember_and_recall_with_reloads_never_leak() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(config(dir.path(), json!({}))).await);
    let convs: Vec<String> = (0..4)
        .map(|i| format!("default:GroupMessage:{i}"))
        .collect();
    let map_a = json!({&convs[0]: "家人", &convs[1]: "工作", &convs[2]: "朋友"});
    let map_b = json!({&convs[0]: "工作", &convs[1]: "家人", &convs[3]: "朋友"});

    // Reloader: flips the map every few milliseconds for the whole run.
    let scopes = host.memory().scopes().clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reloader = {
        let stop = stop.clone();
        let (a, b) = (map_a.clone(), map_b.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let m = if n.is_multiple_of(2) { &a } else { &b };
                scopes.replace(ScopeMap::build(m, UnmappedPolicy::Public));
                n += 1;
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            n
        })
    };

    let mut tasks = Vec::new();
    for t in 0..8 {
        let host = host.clone();
        let convs = convs.clone();
        tasks.push(tokio::spawn(async move {
            let mut written = Vec::new();
            let mut leaks = Vec::new();
            for i in 0..12 {
                let conv = &convs[(t + i) % convs.len()];
                let r = host
                    .invoke("remember", json!({"conversation_id": conv, "content": format!("task {t} note {i} about the weekend plan")}))
                    .await
                    .expect("remember");
                written.push(r["memory"]["id"].as_str().unwrap().to_string());
                let r = host
                    .invoke("recall", json!({"conversation_id": conv, "query": "weekend plan", "limit": 50}))
                    .await
                    .expect("recall");
                let current = r["memory_scope"].as_str().unwrap().to_string();
                for m in r["memories"].as_array().unwrap() {
                    let s = m["memory_scope"].as_str().unwrap_or("NULL");
                    if s != "public" && s != current {
                        leaks.push(format!("{conv} under {current} saw {s}"));
                    }
                }
            }
            (written, leaks)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let (written, leaks) = t.await.unwrap();
        assert!(leaks.is_empty(), "cross-scope leaks: {leaks:?}");
        all.extend(written);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reloads = reloader.await.unwrap();
    assert!(
        reloads > 2,
        "the map must actually have been reloaded during the run"
    );

    assert_eq!(all.len(), 96);
    assert_eq!(
        all.iter().collect::<HashSet<_>>().len(),
        96,
        "ids are unique"
    );
    assert_eq!(rows(&host).await, 96, "no lost or duplicated rows");
    let stats = host.memory().store().stats().await.unwrap();
    assert_eq!(stats.null_scope_rows, 0, "every new row gets a scope");
}
