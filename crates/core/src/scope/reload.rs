//! Hot reload of the scope map when the config file changes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::Config;

use super::{ScopeError, ScopeMap, ScopeResolver};

/// Quiet period after the last file event before reloading; editors emit bursts of events.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(250);

/// A running config watch. Dropping it stops watching.
#[derive(Debug)]
pub struct ConfigWatcher {
    // Dropping the notify watcher closes the event channel, which ends the task.
    _watcher: RecommendedWatcher,
    task: JoinHandle<()>,
    // Read by the tests (`reload_count`), to wait on a reload without sleeping.
    #[cfg_attr(not(test), allow(dead_code))]
    reloads: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
}

impl ConfigWatcher {
    /// Count of successful reloads (lets tests wait on a reload without sleeping).
    #[cfg(test)]
    pub(crate) fn reload_count(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.reloads)
    }

    /// Count of reloads rejected because the file was unreadable or invalid.
    pub fn failure_count(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.failures)
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `path` and swaps a new [`ScopeMap`] into `resolver` after each change.
///
/// The parent directory is watched, not the file, because editors and config managers replace
/// files by rename, which would orphan a watch on the old inode. Events are debounced by
/// `debounce`; an unreadable or invalid file keeps the last good map and logs an error.
/// Must be called from within a tokio runtime.
pub fn watch_config(
    path: PathBuf,
    resolver: Arc<ScopeResolver>,
    debounce: Duration,
) -> Result<ConfigWatcher, ScopeError> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| ScopeError::Watch(format!("watch_config needs a tokio runtime: {e}")))?;
    let file_name: OsString = path
        .file_name()
        .ok_or_else(|| ScopeError::Watch(format!("{} has no file name", path.display())))?
        .to_owned();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };

    let (tx, rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        match res {
            Ok(event) => {
                let ours = event
                    .paths
                    .iter()
                    .any(|p| p.file_name() == Some(file_name.as_os_str()));
                if ours && is_change(&event.kind) {
                    // The receiver is gone only while shutting down.
                    let _ = tx.send(());
                }
            }
            Err(error) => tracing::warn!(error = %error, "config watch error"),
        }
    })
    .map_err(|e| ScopeError::Watch(e.to_string()))?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| ScopeError::Watch(format!("{}: {e}", dir.display())))?;

    let reloads = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let task = runtime.spawn(run(
        rx,
        path.clone(),
        resolver,
        debounce,
        Arc::clone(&reloads),
        Arc::clone(&failures),
    ));
    tracing::info!(path = %path.display(), "watching config for scope map changes");
    Ok(ConfigWatcher {
        _watcher: watcher,
        task,
        reloads,
        failures,
    })
}

/// Whether an event can mean new content. Opens and reads are ignored, otherwise our own
/// re-read of the file would trigger another reload.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

async fn run(
    mut rx: mpsc::UnboundedReceiver<()>,
    path: PathBuf,
    resolver: Arc<ScopeResolver>,
    debounce: Duration,
    reloads: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
) {
    while rx.recv().await.is_some() {
        // Collect the burst until `debounce` passes with no event.
        loop {
            match tokio::time::timeout(debounce, rx.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) => return,
                Err(_elapsed) => break,
            }
        }
        let target = path.clone();
        let loaded = tokio::task::spawn_blocking(move || Config::load(Some(&target))).await;
        let loaded = match loaded {
            Ok(Ok(loaded)) => loaded,
            Ok(Err(error)) => {
                failures.fetch_add(1, Ordering::Release);
                tracing::error!(
                    path = %path.display(),
                    error = %error,
                    "config reload failed; keeping the previous scope map"
                );
                continue;
            }
            Err(join_error) => {
                failures.fetch_add(1, Ordering::Release);
                tracing::error!(error = %join_error, "config reload task failed");
                continue;
            }
        };
        apply(&path, &resolver, &loaded.config, &loaded.warnings);
        reloads.fetch_add(1, Ordering::Release);
    }
}

fn apply(path: &Path, resolver: &ScopeResolver, config: &Config, warnings: &[String]) {
    for warning in warnings {
        tracing::warn!(path = %path.display(), warning = %warning, "config warning");
    }
    let map = ScopeMap::from_config(config);
    map.log_summary("reload");
    resolver.replace(map);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UnmappedPolicy;
    use crate::scope::{ConversationId, ScopeSource};
    use std::time::Instant;

    const DEBOUNCE: Duration = Duration::from_millis(100);

    async fn wait_for(counter: &AtomicU64, at_least: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while counter.load(Ordering::Acquire) < at_least {
            assert!(Instant::now() < deadline, "timed out waiting for reload");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn scope_of(resolver: &ScopeResolver, id: &str) -> String {
        let id = ConversationId::parse(id).unwrap();
        resolver.snapshot().resolve(&id, None).scope.to_string()
    }

    fn start(dir: &Path, initial: &str) -> (PathBuf, Arc<ScopeResolver>, ConfigWatcher) {
        let path = dir.join("scopemem.json");
        std::fs::write(&path, initial).unwrap();
        let config = Config::load(Some(&path)).unwrap().config;
        let resolver = Arc::new(ScopeResolver::new(ScopeMap::from_config(&config)));
        let watcher = watch_config(path.clone(), Arc::clone(&resolver), DEBOUNCE).unwrap();
        (path, resolver, watcher)
    }

    #[tokio::test]
    async fn reloads_on_write_and_rename_and_keeps_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let (path, resolver, watcher) =
            start(dir.path(), r#"{"conversation_scope_map": {"g1": "家人"}}"#);
        let reloads = watcher.reload_count();
        let failures = watcher.failure_count();
        assert_eq!(scope_of(&resolver, "g1"), "家人");

        // 1. In-place rewrite.
        std::fs::write(&path, r#"{"conversation_scope_map": {"g1": "work"}}"#).unwrap();
        wait_for(&reloads, 1).await;
        assert_eq!(scope_of(&resolver, "g1"), "work");

        // 2. Write to a temp file and rename over the config (how editors save).
        let n = reloads.load(Ordering::Acquire);
        let tmp = dir.path().join("scopemem.json.tmp");
        std::fs::write(
            &tmp,
            r#"{"conversation_scope_map": "{\"g1\": \"renamed\"}", "unmapped_scope": "conversation"}"#,
        )
        .unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        wait_for(&reloads, n + 1).await;
        assert_eq!(scope_of(&resolver, "g1"), "renamed");
        let snap = resolver.snapshot();
        assert_eq!(snap.unmapped(), UnmappedPolicy::Conversation);
        let other = snap.resolve(&ConversationId::parse("other").unwrap(), None);
        assert_eq!(other.source, ScopeSource::Unmapped);
        assert!(other.scope.as_str().starts_with("c_"));

        // 3. Invalid JSON: the last good map stays.
        let good_reloads = reloads.load(Ordering::Acquire);
        let failed = failures.load(Ordering::Acquire);
        std::fs::write(&path, "{ not json").unwrap();
        wait_for(&failures, failed + 1).await;
        // Give any stray event a bounded chance to (wrongly) apply.
        tokio::time::sleep(DEBOUNCE * 3).await;
        assert_eq!(scope_of(&resolver, "g1"), "renamed");
        assert_eq!(reloads.load(Ordering::Acquire), good_reloads);

        // 4. Valid JSON but invalid config (wrong type) is rejected too.
        let failed = failures.load(Ordering::Acquire);
        std::fs::write(&path, r#"{"unmapped_scope": 3}"#).unwrap();
        wait_for(&failures, failed + 1).await;
        assert_eq!(scope_of(&resolver, "g1"), "renamed");

        // 5. And a good file after a bad one applies again.
        std::fs::write(&path, r#"{"conversation_scope_map": {"g1": "back"}}"#).unwrap();
        wait_for(&reloads, good_reloads + 1).await;
        assert_eq!(scope_of(&resolver, "g1"), "back");
    }

    #[tokio::test]
    async fn other_files_in_directory_are_ignored_and_drop_stops() {
        let dir = tempfile::tempdir().unwrap();
        let (path, resolver, watcher) =
            start(dir.path(), r#"{"conversation_scope_map": {"g1": "a"}}"#);
        let reloads = watcher.reload_count();
        std::fs::write(dir.path().join("unrelated.json"), "{}").unwrap();
        tokio::time::sleep(DEBOUNCE * 5).await;
        assert_eq!(reloads.load(Ordering::Acquire), 0);

        drop(watcher);
        std::fs::write(&path, r#"{"conversation_scope_map": {"g1": "b"}}"#).unwrap();
        tokio::time::sleep(DEBOUNCE * 5).await;
        assert_eq!(reloads.load(Ordering::Acquire), 0);
        assert_eq!(scope_of(&resolver, "g1"), "a");
    }

    #[test]
    fn outside_runtime_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let resolver = Arc::new(ScopeResolver::new(ScopeMap::build(
            &serde_json::json!({}),
            UnmappedPolicy::Public,
        )));
        let err = watch_config(dir.path().join("c.json"), resolver, DEFAULT_DEBOUNCE).unwrap_err();
        assert_eq!(err.code(), "watch_failed");
    }
}
