//! Read the whole table into a [`Snapshot`]: one streamed scan of the record columns and the
//! vector at one version, which gives way to foreground LanceDB searches for a while.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::RecordBatch;
use lancedb::Table;
use tokio::sync::{mpsc, oneshot};

use super::super::commit_rows::vectors;
use super::super::record::{from_batch, unreadable_columns};
use super::super::schema::{COL_VECTOR, RECORD_COLUMNS};
use super::super::StoreError;
use super::Snapshot;

/// Rows per scanned batch, and batches (and bytes) the scan may read ahead of the indexing.
const BATCH_ROWS: usize = 8192;
const READ_AHEAD: usize = 2;
const READ_AHEAD_BYTES: u64 = 64 << 20;

/// How long one load gives way to foreground searches in all: about one flat LanceDB search
/// at 1M rows on 2 cores.
const YIELD_AT_MOST: Duration = Duration::from_secs(2);
/// The same per row: a load gives way about as long as one flat search of its table takes.
const YIELD_PER_ROW: Duration = Duration::from_nanos(2_000);

/// How long a load of `rows` rows gives way in all. Proportional: a small table's load is
/// quicker than the searches it would wait for. With a fixed 2 s, the 200-row table of
/// `make bench-erase-reads` took 1.2 to 2 s to load after each of another process's erases
/// (which prune the versions the copy would have followed), and every read went to LanceDB
/// meanwhile: p50 38 ms instead of a few.
fn yield_budget(rows: usize) -> Duration {
    YIELD_PER_ROW
        .saturating_mul(u32::try_from(rows).unwrap_or(u32::MAX))
        .min(YIELD_AT_MOST)
}

/// The table at its current version, or `None` when it holds more than `max_rows` rows, stores
/// a record column in a type `from_batch` cannot read, or is not a Lance dataset on this
/// machine's reach.
///
/// The scan reads one dataset version, so the snapshot is that version exactly. Batches are
/// indexed as they stream in, on a thread of the load's own, and the scan reads only a few
/// batches ahead: between batches the load waits ([`yield_budget`] in all) while `yield_to` says a
/// foreground search is running on LanceDB. Without that, Lance's default read-ahead (up to
/// 2 GiB) read the whole table beside the first recalls: at 1M rows on 2 cores the first
/// recall took 8.9 s with the load running and 1.4 s without it.
pub(crate) async fn snapshot(
    table: &Table,
    dim: usize,
    max_rows: usize,
    yield_to: &Foreground,
) -> Result<Option<Snapshot>, StoreError> {
    // Brings the table up to date first, as every read does under the read-consistency
    // setting; the dataset below is then that version or newer.
    table.version().await?;
    let Some(wrapper) = table.dataset() else {
        return Ok(None);
    };
    let dataset = wrapper.get().await?;
    let unreadable = unreadable_columns(&lancedb::arrow::arrow_schema::Schema::from(
        dataset.schema(),
    ));
    if !unreadable.is_empty() {
        // It filters rows on these values itself: read as NULL they would fail open.
        tracing::warn!(columns = ?unreadable, "the table stores record columns in types the resident copy cannot read; searches stay on LanceDB");
        return Ok(None);
    }
    let rows = dataset.count_rows(None).await?;
    if max_rows == 0 || rows > max_rows {
        return Ok(None);
    }
    let budget = yield_budget(rows);
    let mut columns: Vec<&str> = RECORD_COLUMNS.to_vec();
    columns.push(COL_VECTOR);
    let mut scan = dataset.scan();
    scan.project(&columns)?
        .batch_size(BATCH_ROWS)
        .batch_readahead(READ_AHEAD)
        .fragment_readahead(1)
        .io_buffer_size(READ_AHEAD_BYTES);
    let mut stream = scan.try_into_stream().await?;
    let (tx, indexed) = start_indexer(dataset.version().version, dim)?;
    let mut yielded = Duration::ZERO;
    let streamed: Result<(), StoreError> = async {
        loop {
            // Give way for a bounded time only: under steady LanceDB traffic every search is
            // slow until the load ends, so the load must not be starved by them.
            yielded += yield_to.idle(budget.saturating_sub(yielded)).await;
            let Some(batch) = stream.try_next().await? else {
                return Ok(());
            };
            if tx.send(batch).await.is_err() {
                return Err(StoreError::Commit(
                    "the resident load thread stopped".into(),
                ));
            }
        }
    }
    .await;
    drop(tx);
    let snapshot = indexed
        .await
        .map_err(|_| StoreError::Commit("the resident load thread stopped".into()))?;
    streamed?;
    Ok(Some(snapshot))
}

/// Start the thread that indexes the streamed batches into one snapshot, handed back once
/// the sender is dropped. One thread for the whole load: the snapshot's memory then grows in
/// one allocator arena and reuses what each batch frees. Blocking tasks on varying threads
/// took 15 s for 1M rows, a quarter of it the kernel zeroing fresh pages; this takes 8.5-11 s.
#[allow(clippy::type_complexity)]
fn start_indexer(
    version: u64,
    dim: usize,
) -> Result<(mpsc::Sender<RecordBatch>, oneshot::Receiver<Snapshot>), StoreError> {
    let (tx, mut rx) = mpsc::channel::<RecordBatch>(READ_AHEAD);
    let (done, indexed) = oneshot::channel::<Snapshot>();
    std::thread::Builder::new()
        .name("scopemem-resident-load".into())
        .spawn(move || {
            let mut snapshot = Snapshot::empty(version, dim);
            while let Some(batch) = rx.blocking_recv() {
                let records = from_batch(&batch);
                let vectors = vectors(&batch);
                for (i, record) in records.into_iter().enumerate() {
                    snapshot.push(record, vectors.row(i, dim));
                }
            }
            let _ = done.send(snapshot);
        })
        .map_err(|e| StoreError::Commit(format!("cannot start the resident load thread: {e}")))?;
    Ok((tx, indexed))
}

/// Foreground searches running on LanceDB right now; the background load pauses for them.
#[derive(Default)]
pub struct Foreground {
    running: AtomicUsize,
}

impl Foreground {
    /// Count one search as running until the guard drops.
    pub(crate) fn enter(&self) -> ForegroundGuard<'_> {
        self.running.fetch_add(1, Ordering::AcqRel);
        ForegroundGuard(self)
    }

    /// Returns once no foreground search is running, or after `at_most`; how long it waited
    /// (polled: the wait is rare and short).
    async fn idle(&self, at_most: Duration) -> Duration {
        let started = Instant::now();
        if at_most.is_zero() {
            return Duration::ZERO;
        }
        while self.running.load(Ordering::Acquire) > 0 && started.elapsed() < at_most {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        started.elapsed()
    }
}

pub struct ForegroundGuard<'a>(&'a Foreground);

impl Drop for ForegroundGuard<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_gives_way_in_proportion_to_its_table() {
        assert!(yield_budget(200) < Duration::from_millis(1));
        assert_eq!(yield_budget(100_000), Duration::from_millis(200));
        assert_eq!(yield_budget(1_000_000), YIELD_AT_MOST);
        assert_eq!(yield_budget(usize::MAX), YIELD_AT_MOST);
    }

    #[tokio::test]
    async fn a_load_gives_way_while_a_search_runs_and_no_longer_than_its_budget() {
        let fg = std::sync::Arc::new(Foreground::default());
        assert!(fg.idle(Duration::from_secs(5)).await < Duration::from_millis(50));

        let guard = fg.enter();
        let waited = fg.idle(Duration::from_millis(80)).await;
        assert!(waited >= Duration::from_millis(80), "gave way {waited:?}");
        assert!(
            waited < Duration::from_secs(2),
            "budget ignored: {waited:?}"
        );

        let ended = {
            let fg = fg.clone();
            tokio::spawn(async move { fg.idle(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(guard);
        let waited = ended.await.expect("idle task");
        assert!(
            waited >= Duration::from_millis(50),
            "did not wait: {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(5),
            "kept waiting after the search: {waited:?}"
        );
    }
}
