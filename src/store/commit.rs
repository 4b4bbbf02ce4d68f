//! What every commit to the table shares, whoever makes it: the writer's settings and
//! counters, the fsync that `Durability::Power` adds after a commit, and the one retry loop.
//!
//! The writer (appends, updates, erases) and maintenance (compaction, index refresh, the
//! erase's rewrite) both commit; they used to import these from each other. Here they depend
//! on this module and not on one another.
//!
//! One loop, [`retrying`], decides when an operation on the table is tried again; the
//! [`RetryPolicy`] says what for:
//! - a read ([`read_retrying`]) is tried again, from the latest version, when another
//!   process's prune removed a file of the version it had started on;
//! - a commit ([`retry`]) also when it lost a race to a concurrent commit, after a jittered
//!   backoff, and the writer counts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lancedb::Table;

use super::StoreError;

/// Tunables for the writer (from the `storage` config section).
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// Most rows merged into one commit.
    pub max_batch_rows: usize,
    /// How long the writer waits for appends that are announced ([`super::WriterHandle::announce`])
    /// but not queued yet before it commits a group. A lone append, or a group holding every
    /// announced one, commits at once.
    pub commit_linger: Duration,
    /// How often to check whether compaction is due.
    pub maintenance_interval: Duration,
    /// Compact as soon as the table has this many fragments (checked after every commit), so a
    /// stream of single writes never piles up hundreds of fragments between timer ticks.
    pub compact_min_fragments: usize,
    /// Retries of a conflicting commit before giving up.
    pub max_retries: u32,
    /// What an acknowledged write survives.
    pub durability: super::durability::Durability,
    /// The table's directory, for `Durability::Power` (set by `Store::attach`).
    pub table_dir: Option<std::path::PathBuf>,
    /// The model that made the appended vectors (set by `Store::attach`): during a re-embed to
    /// it they go to `vector_next` (see `store::reembed`).
    pub model_id: Option<String>,
}

impl Default for WriterSettings {
    fn default() -> Self {
        WriterSettings {
            max_batch_rows: 512,
            commit_linger: Duration::ZERO,
            maintenance_interval: Duration::from_secs(60),
            compact_min_fragments: 64,
            max_retries: 6,
            durability: super::durability::Durability::Process,
            table_dir: None,
            model_id: None,
        }
    }
}

/// Counters the writer keeps, for status and metrics.
#[derive(Debug, Default)]
pub struct WriterCounters {
    pub commits: AtomicU64,
    pub rows_appended: AtomicU64,
    pub conflicts_retried: AtomicU64,
    pub compactions: AtomicU64,
    /// Vector index retrains (the table grew by half since the last training).
    pub retrains: AtomicU64,
    /// Commits whose files were fsynced before the acknowledgement (`Durability::Power`).
    pub durable_syncs: AtomicU64,
}

/// With `Durability::Power`, fsync what the commit(s) since `started` wrote before the caller
/// is answered; a failure fails the write (it may be lost on power loss).
pub(super) async fn make_durable(
    settings: &WriterSettings,
    counters: &WriterCounters,
    started: std::time::SystemTime,
) -> Result<(), StoreError> {
    if settings.durability != super::durability::Durability::Power {
        return Ok(());
    }
    let Some(dir) = settings.table_dir.clone() else {
        return Ok(());
    };
    tokio::task::spawn_blocking(move || super::durability::sync_since(&dir, started))
        .await
        .map_err(|e| StoreError::Commit(format!("fsync task failed: {e}")))?
        .map_err(|e| StoreError::Commit(format!("fsync after commit failed: {e}")))?;
    counters.durable_syncs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// How many different ids: an update keyed by id changed them all when it reports this many.
pub(super) fn distinct<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    ids.collect::<std::collections::HashSet<_>>().len()
}

/// When an operation on the table is tried again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Tries after the first.
    pub retries: u32,
    /// Commit conflicts are retried too, not only reads that found a file pruned under them.
    pub conflicts: bool,
    /// The unit of the jittered, doubling pause before each retry (0: none).
    pub pause_ms: u64,
}

impl RetryPolicy {
    /// A read that hit a pruned version: read the latest, at most six times more, pausing a
    /// little longer each time (from ~10 ms, doubling, jittered; ~1.3 s at most in all).
    /// Another process erasing in a loop prunes every older version after each delete; three
    /// immediate retries could each land on a version it was about to prune, and the caller
    /// got `store_busy`.
    pub const READ: RetryPolicy = RetryPolicy {
        retries: 6,
        conflicts: false,
        pause_ms: 5,
    };

    /// A commit: conflicts and pruned files, up to `max_retries` times.
    pub(crate) fn commit(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            retries: max_retries,
            conflicts: true,
            pause_ms: 20,
        }
    }
}

/// Run `op`, and again (each time on the latest version) while it fails in a way `policy`
/// retries and tries are left. A commit conflict or a vanished file leaves nothing behind, so
/// trying again is safe; the caller's closure rebuilds whatever depends on the version.
/// `counters`, when given, count the retried conflicts.
pub(crate) async fn retrying<T, F, Fut>(
    table: &Table,
    policy: RetryPolicy,
    counters: Option<&WriterCounters>,
    mut op: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Err(e)
                if attempt < policy.retries
                    && (e.is_vanished_file() || (policy.conflicts && e.is_retryable())) =>
            {
                attempt += 1;
                if policy.conflicts {
                    if let Some(c) = counters {
                        c.conflicts_retried.fetch_add(1, Ordering::Relaxed);
                    }
                    tracing::warn!(attempt, error = %e, "commit conflict; retrying");
                } else {
                    tracing::debug!(attempt, error = %e, "read hit a pruned version; reading the latest");
                }
                if policy.pause_ms > 0 {
                    tokio::time::sleep(backoff(policy.pause_ms, attempt)).await;
                }
                table.checkout_latest().await?;
            }
            other => return other,
        }
    }
}

/// Jittered, so instances that lost the same race do not retry in lockstep.
fn backoff(unit_ms: u64, attempt: u32) -> Duration {
    let base = unit_ms * (1u64 << attempt.min(6));
    let jitter = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0),
    ) % base;
    Duration::from_millis(base + jitter)
}

/// Run a commit, and again (up to `max_retries` times, with jittered backoff, each time on the
/// latest version) when it lost a race: a concurrent commit conflicted, or another process's
/// erase pruned a manifest or file the commit was reading. Neither left a commit behind.
pub(super) async fn retry<T, F, Fut>(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    op: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    retrying(
        table,
        RetryPolicy::commit(settings.max_retries),
        Some(counters),
        op,
    )
    .await
}

/// Run a read again (up to six times, see [`RetryPolicy::READ`]) when another process's erase or prune removed the
/// files of the version it started on: move to the latest version first, where the read
/// succeeds. (Without the move, the cached version stays the pruned one until
/// `read_consistency` passes, and every retry fails the same way.)
pub(crate) async fn read_retrying<T, F, Fut>(table: &Table, read: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    retrying(table, RetryPolicy::READ, None, read).await
}
