//! What stays on disk. Lance never rewrites a file: a delete only marks rows in a deletion
//! file, and every older table version keeps the data files it referenced. So erasing content
//! takes two more steps after the delete, and routine pruning keeps the directory from growing
//! without bound:
//! - [`purge_deleted_rows`] rewrites every fragment that has deleted rows (deletions
//!   materialised, indexes remapped), so the latest version no longer references them;
//! - [`prune_versions`] removes versions older than a cut-off, with the data, deletion,
//!   transaction and index files that only they referenced.
//!
//! Routine pruning bounds the versions by age (`storage.keep_versions_minutes`) and by count
//! (`storage.keep_versions_max`): a burst of writes commits tens of versions a second, each
//! with its own manifest and, after compactions and index refreshes, files nothing current
//! references, so an hour of them filled gigabytes. Past the count, [`prune_to_count`] removes
//! the oldest down to half of it, but never a version younger than the reader grace (twice
//! `read_consistency_ms`, at least 10 s): another process may have opened it and still read it.
//!
//! Pruning commits nothing, so it runs beside the writer; files a concurrent write has not
//! committed yet are younger than Lance's unverified-file threshold and are left alone.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lance::dataset::cleanup::CleanupPolicy;
use lancedb::table::{CompactionOptions, OptimizeAction};
use lancedb::Table;
use tokio::sync::Notify;

use crate::store::StoreError;

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

/// How long old table versions stay on disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VersionLimits {
    /// Versions older than this are removed (`storage.keep_versions_minutes`).
    pub max_age: Duration,
    /// Past this many versions the oldest are removed down to half of it
    /// (`storage.keep_versions_max`; 0: no count limit).
    pub max_count: usize,
    /// No version younger than this is removed for count.
    pub reader_grace: Duration,
}

impl VersionLimits {
    /// The reader grace for a given `read_consistency`: twice it, at least 10 s.
    pub fn grace_for(read_consistency: Duration) -> Duration {
        (read_consistency * 2).max(Duration::from_secs(10))
    }
}

/// How often the pruner checks the version count (a cheap look at the latest version number;
/// the versions are listed only when the count may be past the limit).
const COUNT_CHECK: Duration = Duration::from_secs(2);

/// How often the pruner looks: a quarter of the retention period, between 100 ms and 10 min,
/// so a version is removed at most ~25% after it expires.
pub fn prune_interval(keep: Duration) -> Duration {
    (keep / 4).clamp(Duration::from_millis(100), Duration::from_secs(600))
}

/// When `table` holds more than `limits.max_count` versions, remove the oldest down to half of
/// that, keeping every version younger than the reader grace. Returns the version number the
/// count cannot pass before it must be listed again (`None` without a count limit).
pub async fn prune_to_count(
    table: &Table,
    limits: &VersionLimits,
) -> Result<(Option<u64>, PruneReport), StoreError> {
    if limits.max_count == 0 {
        return Ok((None, PruneReport::default()));
    }
    let mut versions = table.list_versions().await?;
    versions.sort_by_key(|v| v.version);
    let latest = versions.last().map_or(0, |v| v.version);
    let room = |left: usize| latest + limits.max_count.saturating_sub(left) as u64;
    let (Some(wrapper), true) = (table.dataset(), versions.len() > limits.max_count) else {
        return Ok((Some(room(versions.len())), PruneReport::default()));
    };
    let keep = (limits.max_count / 2).max(1);
    let grace = chrono::Duration::from_std(limits.reader_grace)
        .map_err(|e| StoreError::Schema(format!("reader grace out of range: {e}")))?;
    // Both must hold for a version to go: older than the kept half, and than the grace.
    let policy = CleanupPolicy {
        before_version: Some(versions[versions.len() - keep].version),
        before_timestamp: Some(chrono::Utc::now() - grace),
        // As in `prune_versions`: another process may be writing unreferenced files now.
        delete_unverified: false,
        error_if_tagged_old_versions: false,
        ..CleanupPolicy::default()
    };
    let stats = wrapper.get().await?.cleanup_with_policy(policy).await?;
    let report = PruneReport {
        versions_removed: stats.old_versions,
        bytes_removed: stats.bytes_removed,
    };
    let left = versions.len() - (report.versions_removed as usize).min(versions.len());
    Ok((Some(room(left)), report))
}

/// The routine pruner, while this process holds the maintenance lease and until `stop` is
/// notified: removes versions older than `limits.max_age` every [`prune_interval`], and
/// checks the count every [`COUNT_CHECK`]. Failures are logged and retried at the next tick.
pub async fn run_pruner(
    table: Table,
    limits: VersionLimits,
    maintainer: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<Notify>,
) {
    let by_age = prune_interval(limits.max_age);
    let every = if limits.max_count > 0 {
        by_age.min(COUNT_CHECK)
    } else {
        by_age
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut aged_at = Instant::now();
    // The count cannot pass the limit before the latest version reaches this.
    let mut list_at: u64 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.notified() => break,
        }
        if !maintainer.load(std::sync::atomic::Ordering::Acquire) {
            continue; // another process holds the maintenance lease
        }
        let started = Instant::now();
        if aged_at.elapsed() >= by_age {
            aged_at = Instant::now();
            list_at = 0;
            log_prune("age", started, prune_versions(&table, limits.max_age).await);
        }
        if limits.max_count == 0 || table.version().await.unwrap_or(u64::MAX) < list_at {
            continue;
        }
        match prune_to_count(&table, &limits).await {
            Ok((next, report)) => {
                list_at = next.unwrap_or(u64::MAX);
                log_prune("count", started, Ok(report));
            }
            Err(e) => log_prune("count", started, Err(e)),
        }
    }
}

fn log_prune(reason: &'static str, started: Instant, result: Result<PruneReport, StoreError>) {
    match result {
        Ok(r) if r.versions_removed > 0 => tracing::info!(
            reason,
            versions = r.versions_removed,
            bytes = r.bytes_removed,
            ms = started.elapsed().as_millis() as u64,
            "pruned old table versions"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(reason, error = %e, "pruning old table versions failed; will retry")
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
