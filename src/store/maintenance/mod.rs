//! Table maintenance beside the writer, in one place: this scheduler (one pass at a time, on its
//! own thread, run on the lease holder's schedule or on demand), [`compaction`] (merging the
//! small tail of fragments), [`pruning`] (old versions and erased rows off the disk) and
//! [`indexes`] (building, refreshing and retraining every index; the full-text and vector
//! ones in tiers, [`index_tiers`]). Appends keep committing while
//! these run: Lance commits a compaction or an index refresh on top of appends that landed
//! meanwhile, and a commit that does conflict (a delete in a fragment being rewritten) is
//! retried. One pass runs at a time, so an erase's prune never removes files a compaction is
//! still reading.
//!
//! Passes run on a thread of their own with its own runtime: a rewrite keeps a runtime worker
//! busy for long stretches, and on two cores that starved the requests' runtime (one append
//! waited 13.5 s behind a 15 s erase at 100k rows before this).

pub(crate) mod compaction;
pub mod index_tiers;
pub mod indexes;
pub mod pruning;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use lancedb::Table;
use tokio::sync::{Mutex, Notify};

use super::commit::{make_durable, retrying, RetryPolicy, WriterCounters, WriterSettings};
use super::commit_rows::kept_rows_since;
use super::StoreError;
use compaction::{others_piled_up, tail_target};
use pruning::{prune_versions, purge_deleted_rows, PruneReport};

/// How often an erase's rewrite is tried again after losing a commit race (see `purge_now`):
/// with the commit backoff (20 ms doubling up to 1.3 s, jittered) about 40 s, enough for a
/// re-embed's batches to pass. Seen on a loaded 2-core machine with the writer's six: every
/// try lost to another process's re-embed updates, and the forget answered 500 after its
/// delete had committed.
const ERASE_REWRITE_RETRIES: u32 = 24;

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
    /// Rows the vector index was last trained on (see [`indexes`]).
    trained_rows: AtomicUsize,
    /// Fragments the last pass left.
    left_by_last_pass: AtomicUsize,
    /// Told each version a pass committed that left the rows as they were (compaction, an
    /// index build), so caches of the table follow it without reading its transaction,
    /// which an erase's prune may remove first.
    on_kept: KeptRows,
}

/// Called with each version that left every row as it was.
pub type KeptRows = Box<dyn Fn(u64) + Send + Sync>;

impl Maintenance {
    pub(crate) fn new(
        table: Table,
        settings: WriterSettings,
        counters: Arc<WriterCounters>,
        maintainer: Arc<AtomicBool>,
        on_kept: KeptRows,
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
            left_by_last_pass: AtomicUsize::new(0),
            on_kept,
        });
        if let Some(started) = started {
            let _ = started.send(Arc::downgrade(&this));
        }
        this
    }

    /// The writer committed something; with `fragments` at the compaction threshold above what
    /// the last pass left, compact now rather than at the next interval, so single writes
    /// never pile up hundreds of fragments. Counted from what the last pass left, not from
    /// zero: fragments of different index segments cannot be merged until their segments are
    /// (see [`index_tiers`]), and a pass that starts again as soon as a few new ones land
    /// spends a burst's CPU on passes that merge little. Returns at once: the pass runs on the
    /// maintenance task.
    pub(crate) fn wrote(&self, fragments: usize) {
        self.dirty.store(true, Ordering::Release);
        if self.past_the_limit(fragments) {
            self.wake.notify_one();
        }
    }

    /// `fragments` reach the compaction threshold above what the last pass left.
    fn past_the_limit(&self, fragments: usize) -> bool {
        let left = self.left_by_last_pass.load(Ordering::Relaxed);
        fragments >= left + self.settings.compact_min_fragments
    }

    /// One pass now (and wait for it): compact, then fold new rows into the indexes.
    pub(crate) async fn run(self: &Arc<Self>, full: bool) -> Result<MaintenanceReport, StoreError> {
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
        // Before `dirty` is cleared: a pass that cannot start stays due.
        let from = self.table.version().await?;
        self.dirty.store(false, Ordering::Release);
        let result = compaction::maintain(
            &self.table,
            &self.settings,
            &self.counters,
            full,
            &self.trained_rows,
        )
        .await;
        match &result {
            Ok(report) => self
                .left_by_last_pass
                .store(report.fragments_after, Ordering::Relaxed),
            Err(_) => self.dirty.store(true, Ordering::Release),
        }
        self.report_kept(from).await;
        result
    }

    /// Tell `on_kept` which versions after `from` left the rows as they were: this pass's own
    /// commits, and any other process's compaction that landed meanwhile.
    async fn report_kept(&self, from: u64) {
        let Some(wrapper) = self.table.dataset() else {
            return;
        };
        match wrapper.get().await {
            Ok(dataset) => {
                for v in kept_rows_since(&dataset, from).await {
                    (self.on_kept)(v);
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not read the versions a pass committed"),
        }
    }

    /// After a delete committed at `since`: rewrite the fragments that held the deleted rows,
    /// make that durable, and remove every older version, so no file keeps them.
    pub(crate) async fn purge_and_prune(
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
            let from = self.table.version().await?;
            let rows = self.table.count_rows(None).await?;
            // The rewrite loses to any update of its fragments that commits while it runs,
            // from this process or another (a re-embed in the lease holder stages vectors batch
            // after batch). An erase must still finish: it keeps trying, with backoff, well
            // past what a plain commit would.
            let policy = RetryPolicy::commit(ERASE_REWRITE_RETRIES);
            retrying(&self.table, policy, Some(&self.counters), || {
                purge_deleted_rows(&self.table, tail_target(rows))
            })
            .await?;
            // Before the prune removes the transactions that say so.
            self.report_kept(from).await;
        }
        // Old files go only once the rewritten ones are durable (a power loss in between must
        // not leave neither).
        make_durable(&self.settings, &self.counters, since).await?;
        // Even with nothing deleted now, older versions may still hold rows deleted before.
        let report = prune_versions(&self.table, std::time::Duration::ZERO).await;
        crate::store::heap::release_freed_memory();
        report
    }

    /// Whether the fragment limit has been reached above what the last pass left (see
    /// [`Self::wrote`]).
    async fn piled_up_since_last_pass(&self) -> bool {
        let fragments = match self.table.as_native() {
            Some(native) => native.count_fragments().await.unwrap_or(usize::MAX),
            None => usize::MAX,
        };
        self.past_the_limit(fragments)
    }

    /// End the background loop.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// One turn of the background loop: compact if this process maintains the table and
    /// something was written (here or, for the lease holder, by other processes).
    async fn scheduled(&self, woken: bool) {
        if !self.maintainer.load(Ordering::Acquire) {
            return;
        }
        // A wake stored while a pass ran may be stale: that pass merged what set it off.
        if woken && !self.piled_up_since_last_pass().await {
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
        let woken = tokio::select! {
            _ = tokio::time::sleep(interval) => false,
            _ = wake.notified() => true,
        };
        let Some(maintenance) = weak.upgrade() else {
            return;
        };
        if maintenance.stopped.load(Ordering::Acquire) {
            // Let a pass in flight finish before the runtime goes.
            let _pass = maintenance.pass.lock().await;
            return;
        }
        maintenance.scheduled(woken).await;
    }
}
