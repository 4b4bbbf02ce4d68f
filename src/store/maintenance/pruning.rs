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
//! And by bytes (`storage.keep_bytes_factor`): compactions and index refreshes during a burst
//! leave rewritten files behind, so a few hundred versions can hold more than the live table;
//! when the files only older versions hold pass that share of the live bytes
//! ([`table_bytes`]), every version past the reader grace goes ([`prune_to_grace`]).
//!
//! Pruning commits nothing, so it runs beside the writer; files a concurrent write has not
//! committed yet are younger than Lance's unverified-file threshold and are left alone.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
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
pub(crate) async fn purge_deleted_rows(
    table: &Table,
    target_rows: usize,
) -> Result<(), StoreError> {
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
pub(crate) async fn prune_versions(
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
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
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
    /// When the files only older versions reference take more than this share of what the
    /// latest version references, every version past the reader grace is removed
    /// (`storage.keep_bytes_factor`; 0: no bytes limit).
    pub max_old_bytes_factor: f64,
    /// No version younger than this is removed for count or bytes.
    pub reader_grace: Duration,
}

impl VersionLimits {
    /// The reader grace for a given `read_consistency`: twice it, at least 10 s.
    pub(crate) fn grace_for(read_consistency: Duration) -> Duration {
        (read_consistency * 2).max(Duration::from_secs(10))
    }
}

/// How often the pruner checks the version count (a cheap look at the latest version number;
/// the versions are listed only when the count may be past the limit).
const COUNT_CHECK: Duration = Duration::from_secs(2);

/// How often the pruner looks: a quarter of the retention period, between 100 ms and 10 min,
/// so a version is removed at most ~25% after it expires.
pub(crate) fn prune_interval(keep: Duration) -> Duration {
    (keep / 4).clamp(Duration::from_millis(100), Duration::from_secs(600))
}

/// When `table` holds more than `limits.max_count` versions, remove the oldest down to half of
/// that, keeping every version younger than the reader grace. Returns the version number the
/// count cannot pass before it must be listed again (`None` without a count limit).
pub(crate) async fn prune_to_count(
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

/// What a table keeps in storage: every object under its directory, and the part its latest
/// version references (data and deletion files, index directories, its manifest). The rest is
/// what older versions hold, plus files of commits in flight or abandoned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableBytes {
    pub total: u64,
    pub live: u64,
}

impl TableBytes {
    /// Bytes the latest version does not reference.
    pub(crate) fn old(&self) -> u64 {
        self.total.saturating_sub(self.live)
    }
}

/// Measure [`TableBytes`] by listing the table's objects (local or in an object store) against
/// the latest manifest.
pub(crate) async fn table_bytes(table: &Table) -> Result<TableBytes, StoreError> {
    let Some(wrapper) = table.dataset() else {
        return Ok(TableBytes::default());
    };
    let dataset = wrapper.get().await?.clone();
    let live = referenced_by_latest(&dataset).await?;
    let store = dataset.object_store(None).await?;
    let data_dir = dataset.data_dir();
    let data_dir = data_dir.as_ref();
    let Some(base) = data_dir.strip_suffix("data") else {
        return Err(StoreError::Schema(format!(
            "unexpected data directory {data_dir}"
        )));
    };
    let base = base.trim_end_matches('/').to_string();
    let mut bytes = TableBytes::default();
    let mut listing = store.read_dir_all(&object_store::path::Path::from(base.as_str()), None);
    while let Some(meta) = listing.try_next().await? {
        bytes.total += meta.size;
        let path = meta.location.as_ref();
        let relative = path
            .strip_prefix(base.as_str())
            .map_or(path, |p| p.trim_start_matches('/'));
        if live.holds(relative) {
            bytes.live += meta.size;
        }
    }
    Ok(bytes)
}

/// The paths (relative to the table) the latest version references.
struct Referenced {
    files: HashSet<String>,
    index_dirs: Vec<String>,
}

impl Referenced {
    fn holds(&self, relative: &str) -> bool {
        self.files.contains(relative) || self.index_dirs.iter().any(|d| relative.starts_with(d))
    }
}

async fn referenced_by_latest(dataset: &lance::Dataset) -> Result<Referenced, StoreError> {
    use lance::index::DatasetIndexExt;
    let mut files = HashSet::new();
    for fragment in dataset.get_fragments() {
        let meta = fragment.metadata();
        for file in &meta.files {
            files.insert(format!("data/{}", file.path));
        }
        if let Some(deletion) = &meta.deletion_file {
            files.insert(lance_table::io::deletion::relative_deletion_file_path(
                meta.id, deletion,
            ));
        }
    }
    if let Some(name) = dataset.manifest_location().path.filename() {
        files.insert(format!("_versions/{name}"));
    }
    let index_dirs = dataset
        .load_indices()
        .await?
        .iter()
        .map(|i| format!("_indices/{}/", i.uuid))
        .collect();
    Ok(Referenced { files, index_dirs })
}

/// Remove every version older than the reader grace (the latest is always kept).
pub(crate) async fn prune_to_grace(
    table: &Table,
    reader_grace: Duration,
) -> Result<PruneReport, StoreError> {
    let Some(wrapper) = table.dataset() else {
        return Ok(PruneReport::default());
    };
    let grace = chrono::Duration::from_std(reader_grace)
        .map_err(|e| StoreError::Schema(format!("reader grace out of range: {e}")))?;
    let dataset = wrapper.get().await?.clone();
    let policy = CleanupPolicy {
        before_version: Some(dataset.version().version),
        before_timestamp: Some(chrono::Utc::now() - grace),
        // As in `prune_versions`: another process may be writing unreferenced files now.
        delete_unverified: false,
        error_if_tagged_old_versions: false,
        ..CleanupPolicy::default()
    };
    let stats = dataset.cleanup_with_policy(policy).await?;
    Ok(PruneReport {
        versions_removed: stats.old_versions,
        bytes_removed: stats.bytes_removed,
    })
}

/// Old bytes below this never trigger a prune for bytes: a small table's few old versions are
/// not worth a listing of its directory.
pub const MIN_OLD_BYTES: u64 = 8 << 20;

/// How often the pruner measures the bytes, when the table has changed since the last look.
const BYTES_CHECK: Duration = Duration::from_secs(10);

/// The bytes part of the pruner: measures when the table moved, prunes to the reader grace
/// when older versions hold more than `factor` × the live bytes beyond what the last prune
/// could not remove (files of commits in flight, kept a week by Lance), so an unremovable
/// remainder does not make it prune on every look.
///
/// What a prune could not remove includes the versions still inside the reader grace, and a
/// burst's last seconds of commits are all inside it. So a prune that left old bytes looks
/// again once the grace has passed, whether or not the table moved, and counts the old bytes
/// afresh: without that look, the end of a 100k burst kept 288 MB of old files beside 241 MB of
/// live ones until `keep_versions_minutes` (nothing committed during the 10 idle minutes, so
/// nothing was measured).
#[derive(Debug, Default)]
struct BytesBound {
    factor: f64,
    checked_version: u64,
    checked_at: Option<Instant>,
    /// Old bytes left right after the last prune for bytes.
    residue: u64,
    /// When to look again although the table has not moved: a reader grace after a prune that
    /// left old bytes behind.
    recheck_at: Option<Instant>,
}

impl BytesBound {
    /// Whether the old bytes are past the bound.
    fn exceeded(&self, bytes: &TableBytes) -> bool {
        let old = bytes.old().saturating_sub(self.residue);
        old > MIN_OLD_BYTES && old as f64 > self.factor * bytes.live as f64
    }

    async fn tick(&mut self, table: &Table, reader_grace: Duration, started: Instant) {
        // A second look is due when the grace has passed, not at the next measuring interval.
        let recheck = self.recheck_at.is_some_and(|t| Instant::now() >= t);
        if self.factor <= 0.0
            || (!recheck && self.checked_at.is_some_and(|t| t.elapsed() < BYTES_CHECK))
        {
            return;
        }
        let version = table.version().await.unwrap_or(0);
        if version == self.checked_version && !recheck {
            return;
        }
        if recheck {
            // The versions the last prune had to keep are past the grace now.
            self.recheck_at = None;
            self.residue = 0;
        }
        self.checked_version = version;
        self.checked_at = Some(Instant::now());
        let bytes = match table_bytes(table).await {
            Ok(b) => b,
            Err(e) => return log_prune("bytes", started, Err(e)),
        };
        if !self.exceeded(&bytes) {
            return;
        }
        let result = prune_to_grace(table, reader_grace).await;
        // A second look that removed nothing found only what no prune removes: no third.
        let removed = result.as_ref().is_ok_and(|r| r.versions_removed > 0);
        if let Ok(after) = table_bytes(table).await {
            self.residue = after.old();
            if self.residue > MIN_OLD_BYTES && (removed || !recheck) {
                self.recheck_at = Some(Instant::now() + reader_grace);
            }
            tracing::debug!(
                live = after.live,
                old = after.old(),
                before_old = bytes.old(),
                "table bytes after a prune for bytes"
            );
        }
        log_prune("bytes", started, result);
    }
}

/// The routine pruner, while this process holds the maintenance lease and until `stop` is
/// notified: removes versions older than `limits.max_age` every [`prune_interval`], and
/// checks the count every [`COUNT_CHECK`]. Failures are logged and retried at the next tick.
pub(crate) async fn run_pruner(
    table: Table,
    limits: VersionLimits,
    maintainer: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<Notify>,
) {
    let by_age = prune_interval(limits.max_age);
    let mut every = by_age;
    if limits.max_count > 0 {
        every = every.min(COUNT_CHECK);
    }
    if limits.max_old_bytes_factor > 0.0 {
        every = every.min(BYTES_CHECK);
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut aged_at = Instant::now();
    let mut bytes = BytesBound {
        factor: limits.max_old_bytes_factor,
        ..BytesBound::default()
    };
    // The count cannot pass the limit before the latest version reaches this.
    let mut list_at: u64 = 0;
    loop {
        // The bytes' second look wakes the pruner when it is due, not at the next tick (one
        // already due, say while another process held the lease, waits for the tick).
        let wake = bytes.recheck_at.filter(|t| *t > Instant::now());
        let second_look = async {
            match wake {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => {}
            _ = second_look => {}
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
        bytes.tick(&table, limits.reader_grace, started).await;
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
    use crate::store::testing::{open, row};
    use crate::store::Store;

    /// `storage.keep_versions_max`: a burst of single appends (one version each) past the limit is
    /// pruned down to half of it, keeping the rows; without a count limit nothing is pruned before
    /// `keep_versions_minutes`.
    #[tokio::test]
    async fn versions_past_the_count_limit_are_pruned_to_half_and_the_disk_shrinks() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        for i in 0..60 {
            store.append(vec![row(i, "public")]).await.unwrap();
        }
        let before = store.version_count().await.unwrap();
        assert!(before >= 60, "{before} versions");
        let unlimited = VersionLimits {
            max_age: Duration::from_secs(3600),
            max_count: 0,
            max_old_bytes_factor: 0.0,
            reader_grace: Duration::ZERO,
        };
        let (next, report) = prune_to_count(store.table(), &unlimited).await.unwrap();
        assert_eq!((next, report.versions_removed), (None, 0));
        // A reader grace longer than the burst keeps every version.
        let graced = VersionLimits {
            max_count: 20,
            reader_grace: Duration::from_secs(3600),
            ..unlimited
        };
        prune_to_count(store.table(), &graced).await.unwrap();
        assert_eq!(store.version_count().await.unwrap(), before);
        let disk = store.disk_bytes().await;
        let limited = VersionLimits {
            max_count: 20,
            ..unlimited
        };
        let (next, report) = prune_to_count(store.table(), &limited).await.unwrap();
        let after = store.version_count().await.unwrap();
        assert_eq!(after, 10, "pruned to half the limit: {report:?}");
        assert_eq!(report.versions_removed as usize, before - after);
        assert!(store.disk_bytes().await < disk, "old manifests are gone");
        let latest = store.table().version().await.unwrap();
        assert_eq!(
            next,
            Some(latest + 10),
            "listed again after 10 more versions"
        );
        assert_eq!(store.count(None).await.unwrap(), 60, "no row lost");
    }

    /// The background pruner applies the count limit while this process holds the maintenance
    /// lease, once the versions are older than the reader grace (2 s here; `grace_for` gives at
    /// least 10 s, which this test only waited out).
    #[tokio::test]
    async fn the_pruner_keeps_the_version_count_bounded() {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        store
            .maintainer()
            .store(true, std::sync::atomic::Ordering::Release);
        store.start_pruner(VersionLimits {
            max_age: Duration::from_secs(3600),
            max_count: 16,
            max_old_bytes_factor: 0.0,
            reader_grace: Duration::from_secs(2),
        });
        for i in 0..48 {
            store.append(vec![row(i, "public")]).await.unwrap();
        }
        // Each append committed a version of its own (48 more than the first). Not the version
        // count: on a loaded machine the appends outlast the reader grace and the pruner starts
        // before they end.
        assert!(store.table().version().await.unwrap() > 48);
        let started = Instant::now();
        loop {
            let n = store.version_count().await.unwrap();
            if n <= 16 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{n} versions after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(store.count(None).await.unwrap(), 48);
        store.shutdown().await;
    }

    /// Compacting a burst of small appends: the compaction leaves the files it rewrote to the
    /// older versions, as much again as the live table, in fewer versions than any count limit.
    /// Returns the bytes right after it.
    async fn old_bytes_past_the_share(store: &Store) -> TableBytes {
        // Text that does not compress, so the files are as large as the rows. It goes in
        // `reasoning`, which no index holds: the rows' data files are what the test weighs, not
        // a full-text index of random letters (three grams a letter, nearly all distinct).
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut text = |len: usize| -> String {
            (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    char::from(
                        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ."
                            [(seed % 64) as usize],
                    )
                })
                .collect()
        };
        for commit in 0..30 {
            let rows = (0..200)
                .map(|i| {
                    let (mut record, vector) = row(commit * 200 + i, "public");
                    record.reasoning = Some(text(3000));
                    (record, vector)
                })
                .collect();
            store.append(rows).await.unwrap();
        }
        store.writer().maintain_with(true).await.unwrap();
        let before = table_bytes(store.table()).await.unwrap();
        assert!(
            before.old() > MIN_OLD_BYTES && before.old() as f64 > 0.5 * before.live as f64,
            "the compaction left its inputs to older versions: {before:?}"
        );
        assert!(before.live > 0 && before.total >= before.live, "{before:?}");
        before
    }

    /// Wait up to `limit` for the old bytes to fall to half the live ones.
    async fn old_bytes_within_the_share(store: &Store, limit: std::time::Duration) -> TableBytes {
        let started = std::time::Instant::now();
        loop {
            let b = table_bytes(store.table()).await.unwrap();
            if b.old() as f64 <= 0.5 * b.live as f64 {
                return b;
            }
            assert!(
                started.elapsed() < limit,
                "old bytes still past the share after {limit:?}: {b:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// Only the bytes limit can act: no count limit, an hour of age.
    fn bytes_limit_only(grace: std::time::Duration) -> VersionLimits {
        VersionLimits {
            max_age: std::time::Duration::from_secs(3600),
            max_count: 0,
            max_old_bytes_factor: 0.5,
            reader_grace: grace,
        }
    }

    /// `storage.keep_bytes_factor`: once the old versions hold more than the share of the live
    /// bytes, the pruner removes every version past the reader grace, and no row is lost.
    #[tokio::test]
    async fn old_versions_past_the_bytes_share_are_pruned_and_the_rows_stay() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let before = old_bytes_past_the_share(&store).await;
        let versions = store.version_count().await.unwrap();
        let grace = Duration::from_secs(1);
        tokio::time::sleep(grace).await;
        store
            .maintainer()
            .store(true, std::sync::atomic::Ordering::Release);
        store.start_pruner(bytes_limit_only(grace));
        let after = old_bytes_within_the_share(&store, Duration::from_secs(30)).await;
        assert!(store.version_count().await.unwrap() < versions);
        assert_eq!(after.live, before.live, "the live table is untouched");
        assert!(store.disk_bytes().await < before.total);
        assert_eq!(store.count(None).await.unwrap(), 6000, "no row lost");
        store.shutdown().await;
    }

    /// The end of a burst: the old bytes are past the share, but the versions holding them are
    /// inside the reader grace, so the pruner's first look removes nothing, and nothing is
    /// committed after it. The pruner looks again once the grace has passed, with no commit to
    /// make it look (before, the old files stayed for `keep_versions_minutes`: 288 MB beside
    /// 241 MB live after a 100k `make bench-burst` and 10 idle minutes).
    #[tokio::test]
    async fn old_bytes_held_inside_the_reader_grace_go_once_it_passes_without_a_commit() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let before = old_bytes_past_the_share(&store).await;
        let version = store.table().version().await.unwrap();
        store
            .maintainer()
            .store(true, std::sync::atomic::Ordering::Release);
        store.start_pruner(bytes_limit_only(Duration::from_secs(5)));
        let after = old_bytes_within_the_share(&store, Duration::from_secs(40)).await;
        assert_eq!(
            store.table().version().await.unwrap(),
            version,
            "pruned without any commit after the burst"
        );
        assert_eq!(after.live, before.live, "the live table is untouched");
        assert_eq!(store.count(None).await.unwrap(), 6000, "no row lost");
        store.shutdown().await;
    }

    #[test]
    fn the_bytes_bound_counts_old_bytes_beyond_what_a_prune_could_not_remove() {
        let mb = 1u64 << 20;
        let mut bound = BytesBound {
            factor: 0.5,
            ..BytesBound::default()
        };
        let bytes = |live: u64, old: u64| TableBytes {
            total: (live + old) * mb,
            live: live * mb,
        };
        assert!(!bound.exceeded(&bytes(100, 50)), "at the share");
        assert!(bound.exceeded(&bytes(100, 51)));
        assert!(
            !bound.exceeded(&bytes(4, 7)),
            "too small to be worth a prune"
        );
        // 30 MB a prune could not remove (commits in flight) does not count.
        bound.residue = 30 * mb;
        assert!(!bound.exceeded(&bytes(100, 75)));
        assert!(bound.exceeded(&bytes(100, 81)));
        bound.factor = 0.0;
        assert!(
            bound.exceeded(&bytes(100, 81)),
            "exceeded() is only asked when on"
        );
    }

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
