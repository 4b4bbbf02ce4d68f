//! Table maintenance beside the writer: compaction, the index refresh, and the rewrite-and-prune
//! half of an erase. Appends keep committing while these run: Lance commits a compaction or an
//! index refresh on top of appends that landed meanwhile, and a commit that does conflict (a
//! delete in a fragment being rewritten) is retried. One pass runs at a time, so an erase's
//! prune never removes files a compaction is still reading.
//!
//! Passes run on a thread of their own with its own runtime: a rewrite keeps a runtime worker
//! busy for long stretches, and on two cores that starved the requests' runtime (one append
//! waited 13.5 s behind a 15 s erase at 100k rows before this).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use lancedb::table::{CompactionOptions, OptimizeAction};
use lancedb::Table;
use tokio::sync::{Mutex, Notify};

use super::commit::{make_durable, retry, WriterCounters, WriterSettings};
use super::retention::{prune_versions, purge_deleted_rows, PruneReport};
use super::StoreError;

/// What a maintenance pass did.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceReport {
    pub fragments_before: usize,
    pub fragments_after: usize,
}

/// The maintenance of one table, shared by the writer (which reports its writes), the handle
/// (explicit passes, erases) and the background loop.
pub struct Maintenance {
    table: Table,
    settings: WriterSettings,
    counters: Arc<WriterCounters>,
    /// Only the process holding the maintenance lease compacts on its own schedule.
    maintainer: Arc<AtomicBool>,
    /// One pass at a time.
    pass: Mutex<()>,
    /// Writes happened since the last pass.
    dirty: AtomicBool,
    /// Wakes the loop before its interval (fragments piled up, or stop).
    wake: Arc<Notify>,
    stopped: AtomicBool,
    /// The maintenance thread's runtime, where every pass runs.
    runtime: tokio::runtime::Handle,
    /// Rows the vector index was last trained on (see `retrain`).
    trained_rows: AtomicUsize,
}

impl Maintenance {
    pub fn new(
        table: Table,
        settings: WriterSettings,
        counters: Arc<WriterCounters>,
        maintainer: Arc<AtomicBool>,
    ) -> Arc<Self> {
        let wake = Arc::new(Notify::new());
        let (runtime, started) = maintenance_thread(wake.clone());
        let this = Arc::new(Maintenance {
            table,
            settings,
            counters,
            maintainer,
            pass: Mutex::new(()),
            dirty: AtomicBool::new(false),
            wake,
            stopped: AtomicBool::new(false),
            runtime,
            trained_rows: AtomicUsize::new(0),
        });
        if let Some(started) = started {
            let _ = started.send(Arc::downgrade(&this));
        }
        this
    }

    /// The writer committed something; with `fragments` at the compaction threshold, compact
    /// now rather than at the next interval, so single writes never pile up hundreds of
    /// fragments. Returns at once: the pass runs on the maintenance task.
    pub fn wrote(&self, fragments: usize) {
        self.dirty.store(true, Ordering::Release);
        if fragments >= self.settings.compact_min_fragments {
            self.wake.notify_one();
        }
    }

    /// One pass now (and wait for it): compact, then fold new rows into the indexes.
    pub async fn run(self: &Arc<Self>, full: bool) -> Result<MaintenanceReport, StoreError> {
        let this = self.clone();
        self.on_thread(async move { this.pass_now(full).await })
            .await
    }

    /// Run `job` on the maintenance thread and wait for it.
    async fn on_thread<T: Send + 'static>(
        &self,
        job: impl std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.runtime
            .spawn(job)
            .await
            .map_err(|e| StoreError::Commit(format!("maintenance task ended: {e}")))?
    }

    async fn pass_now(&self, full: bool) -> Result<MaintenanceReport, StoreError> {
        let _pass = self.pass.lock().await;
        self.dirty.store(false, Ordering::Release);
        let result = maintain(
            &self.table,
            &self.settings,
            &self.counters,
            full,
            &self.trained_rows,
        )
        .await;
        if result.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        result
    }

    /// After a delete committed at `since`: rewrite the fragments that held the deleted rows,
    /// make that durable, and remove every older version, so no file keeps them.
    pub async fn purge_and_prune(
        self: &Arc<Self>,
        deleted: u64,
        since: std::time::SystemTime,
    ) -> Result<PruneReport, StoreError> {
        let this = self.clone();
        self.on_thread(async move { this.purge_now(deleted, since).await })
            .await
    }

    async fn purge_now(
        &self,
        deleted: u64,
        since: std::time::SystemTime,
    ) -> Result<PruneReport, StoreError> {
        let _pass = self.pass.lock().await;
        if deleted > 0 {
            let rows = self.table.count_rows(None).await?;
            retry(&self.table, &self.settings, &self.counters, || {
                purge_deleted_rows(&self.table, tail_target(rows))
            })
            .await?;
        }
        // Old files go only once the rewritten ones are durable (a power loss in between must
        // not leave neither).
        make_durable(&self.settings, &self.counters, since).await?;
        // Even with nothing deleted now, older versions may still hold rows deleted before.
        prune_versions(&self.table, std::time::Duration::ZERO).await
    }

    /// End the background loop.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// One turn of the background loop: compact if this process maintains the table and
    /// something was written (here or, for the lease holder, by other processes).
    async fn scheduled(&self) {
        if !self.maintainer.load(Ordering::Acquire) {
            return;
        }
        let due = self.dirty.load(Ordering::Acquire)
            || others_piled_up(&self.table, &self.settings).await;
        if due {
            if let Err(e) = self.pass_now(false).await {
                tracing::warn!(error = %e, "compaction failed; will retry next interval");
            }
        }
    }
}

/// Start the maintenance thread: a current-thread runtime that runs the passes and the
/// scheduled loop until the maintenance is stopped or dropped. The loop learns its
/// `Maintenance` through the returned sender. If the thread cannot start, passes run on the
/// caller's runtime and there is no scheduled loop.
#[allow(clippy::type_complexity)]
fn maintenance_thread(
    wake: Arc<Notify>,
) -> (
    tokio::runtime::Handle,
    Option<tokio::sync::oneshot::Sender<Weak<Maintenance>>>,
) {
    let (handle_tx, handle_rx) = std::sync::mpsc::channel();
    let (this_tx, this_rx) = tokio::sync::oneshot::channel::<Weak<Maintenance>>();
    let spawned = std::thread::Builder::new()
        .name("scopemem-maintenance".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the maintenance runtime");
                    return;
                }
            };
            let _ = handle_tx.send(runtime.handle().clone());
            runtime.block_on(scheduled_loop(this_rx, wake));
        });
    match spawned.ok().and_then(|_| handle_rx.recv().ok()) {
        Some(handle) => (handle, Some(this_tx)),
        None => {
            tracing::warn!("maintenance thread unavailable; maintenance runs with requests");
            (tokio::runtime::Handle::current(), None)
        }
    }
}

/// Compact on a timer and when woken, until stopped or dropped. Holds the maintenance only
/// while working, so dropping the store ends the thread.
async fn scheduled_loop(
    this: tokio::sync::oneshot::Receiver<Weak<Maintenance>>,
    wake: Arc<Notify>,
) {
    let Ok(weak) = this.await else { return };
    let Some(interval) = weak.upgrade().map(|m| m.settings.maintenance_interval) else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = wake.notified() => {}
        }
        let Some(maintenance) = weak.upgrade() else {
            return;
        };
        if maintenance.stopped.load(Ordering::Acquire) {
            // Let a pass in flight finish before the runtime goes.
            let _pass = maintenance.pass.lock().await;
            return;
        }
        maintenance.scheduled().await;
    }
}

/// Compact small fragments, then fold unindexed rows into the existing indexes (retraining the
/// vector index when the table has outgrown it).
///
/// Lance merges every adjacent fragment smaller than `target_rows_per_fragment`. With the
/// default (1M rows) each compaction would rewrite the whole growing table; a target of
/// rows/16 (at least 1024) leaves the big fragments alone and merges only the small tail, so
/// each row is rewritten a logarithmic number of times as the table grows.
async fn maintain(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    full: bool,
    trained: &AtomicUsize,
) -> Result<MaintenanceReport, StoreError> {
    let native = table
        .as_native()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    let before = native.count_fragments().await?;
    if before >= 2 {
        let rows = table.count_rows(None).await?;
        let target = if full {
            CompactionOptions::default().target_rows_per_fragment
        } else {
            tail_target(rows)
        };
        let started = Instant::now();
        let wall = std::time::SystemTime::now();
        retry(table, settings, counters, || async {
            table
                .optimize(OptimizeAction::Compact {
                    options: CompactionOptions {
                        target_rows_per_fragment: target,
                        // One core for compaction, the rest for requests.
                        num_threads: Some(1),
                        ..CompactionOptions::default()
                    },
                    remap_options: None,
                })
                .await?;
            Ok(())
        })
        .await?;
        counters.compactions.fetch_add(1, Ordering::Relaxed);
        make_durable(settings, counters, wall).await?;
        tracing::info!(
            fragments_before = before,
            target_rows = target,
            ms = started.elapsed().as_millis() as u64,
            "compacted"
        );
    }
    super::retrain::refresh_indexes(table, settings, counters, trained).await?;
    let after = native.count_fragments().await?;
    Ok(MaintenanceReport {
        fragments_before: before,
        fragments_after: after,
    })
}

/// Compaction target that merges only the small tail of a table of `rows` rows: rows/16, at
/// least 1024 (see [`maintain`]).
fn tail_target(rows: usize) -> usize {
    (rows / 16).clamp(1024, 1024 * 1024)
}

/// Whether enough fragments piled up (from any process) to be worth a compaction.
async fn others_piled_up(table: &Table, settings: &WriterSettings) -> bool {
    let fragments = match table.as_native() {
        Some(native) => native.count_fragments().await.unwrap_or(0),
        None => 0,
    };
    fragments >= (settings.compact_min_fragments / 8).max(2)
}
