//! Shared set-up for integration tests: the real offline model (loaded once per test binary)
//! and a real LanceDB directory in a tempdir.
#![allow(dead_code)]

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

/// Defaults from conf_schema.json, pointed at `dir`, with the given map. The similarity
/// threshold is lowered so visibility tests see every row the filter lets through.
pub fn config(dir: &Path, map: Value) -> Config {
    let loaded = Config::from_value(&json!({
        "conversation_scope_map": map,
        "storage": {"db_dir": dir.join("lancedb").to_string_lossy()},
        "recall": {"similarity_threshold": -1.0},
    }))
    .expect("test config is valid");
    loaded.config
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
