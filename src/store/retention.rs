//! What stays on disk. Lance never rewrites a file: a delete only marks rows in a deletion
//! file, and every older table version keeps the data files it referenced. So erasing content
//! takes two more steps after the delete, and routine pruning keeps the directory from growing
//! without bound:
//! - [`purge_deleted_rows`] rewrites every fragment that has deleted rows (deletions
//!   materialised, indexes remapped), so the latest version no longer references them;
//! - [`prune_versions`] removes versions older than a cut-off, with the data, deletion,
//!   transaction and index files that only they referenced.
//!
//! Pruning commits nothing, so it runs beside the writer; files a concurrent write has not
//! committed yet are younger than Lance's unverified-file threshold and are left alone.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lancedb::table::{CompactionOptions, OptimizeAction};
use lancedb::Table;
use tokio::sync::Notify;

use super::StoreError;

/// What [`prune_versions`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PruneReport {
    /// Table versions removed.
    pub versions_removed: u64,
    /// Bytes of files removed.
    pub bytes_removed: u64,
}

/// Rewrite every fragment that has deleted rows, so no current data file still holds them.
/// Small neighbouring fragments are merged on the way, as by routine compaction.
pub async fn purge_deleted_rows(table: &Table, target_rows: usize) -> Result<(), StoreError> {
    table
        .optimize(OptimizeAction::Compact {
            options: CompactionOptions {
                target_rows_per_fragment: target_rows,
                materialize_deletions: true,
                // Zero: any deleted row makes its fragment a rewrite candidate.
                materialize_deletions_threshold: 0.0,
                // One core for the rewrite, the rest for requests (it runs beside the writer).
                num_threads: Some(1),
                ..CompactionOptions::default()
            },
            remap_options: None,
        })
        .await?;
    Ok(())
}

/// Remove every table version committed more than `older_than` ago (the latest version is
/// always kept) and the files only those versions referenced.
pub async fn prune_versions(
    table: &Table,
    older_than: Duration,
) -> Result<PruneReport, StoreError> {
    let older_than = chrono::Duration::from_std(older_than)
        .map_err(|e| StoreError::Schema(format!("retention period out of range: {e}")))?;
    let stats = table
        .optimize(OptimizeAction::Prune {
            older_than: Some(older_than),
            // Never delete files no version references yet: another process may be writing
            // them right now. Erased rows live only in referenced files.
            delete_unverified: Some(false),
            error_if_tagged_old_versions: Some(false),
        })
        .await?;
    let prune = stats.prune.unwrap_or_default();
    Ok(PruneReport {
        versions_removed: prune.old_versions,
        bytes_removed: prune.bytes_removed,
    })
}

/// Total size of the regular files under `dir` (for `/v1/status`); unreadable entries are
/// skipped rather than failing a status call.
pub fn disk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(entry.path()),
                Ok(t) if t.is_file() => total += entry.metadata().map(|m| m.len()).unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// How often the pruner looks: a quarter of the retention period, between 100 ms and 10 min,
/// so a version is removed at most ~25% after it expires.
pub fn prune_interval(keep: Duration) -> Duration {
    (keep / 4).clamp(Duration::from_millis(100), Duration::from_secs(600))
}

/// The routine pruner: removes versions older than `keep` every [`prune_interval`] while this
/// process holds the maintenance lease, until `stop` is notified. Failures are logged and
/// retried at the next tick.
pub async fn run_pruner(
    table: Table,
    keep: Duration,
    maintainer: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<Notify>,
) {
    let mut tick = tokio::time::interval(prune_interval(keep));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.notified() => break,
        }
        if !maintainer.load(std::sync::atomic::Ordering::Acquire) {
            continue; // another process holds the maintenance lease
        }
        let started = Instant::now();
        match prune_versions(&table, keep).await {
            Ok(r) if r.versions_removed > 0 => tracing::info!(
                versions = r.versions_removed,
                bytes = r.bytes_removed,
                ms = started.elapsed().as_millis() as u64,
                "pruned old table versions"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "pruning old table versions failed; will retry"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_a_quarter_of_retention_within_bounds() {
        assert_eq!(
            prune_interval(Duration::from_secs(3600)),
            Duration::from_secs(600)
        );
        assert_eq!(
            prune_interval(Duration::from_secs(60)),
            Duration::from_secs(15)
        );
        assert_eq!(prune_interval(Duration::ZERO), Duration::from_millis(100));
    }

    #[test]
    fn disk_bytes_sums_nested_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("x"), [0u8; 10]).unwrap();
        std::fs::write(dir.path().join("a/b/y"), [0u8; 32]).unwrap();
        assert_eq!(disk_bytes(dir.path()), 42);
        assert_eq!(disk_bytes(&dir.path().join("missing")), 0);
    }
}
