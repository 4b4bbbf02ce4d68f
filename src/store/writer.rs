//! The one writer task per table. Appends that arrive while a commit is in flight are merged
//! into the next commit (group commit: many remembers, one fragment); commit conflicts are
//! retried here. Compaction, the index refresh and the rewrite half of an erase run beside it
//! (`maintenance`), so no write waits for them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lancedb::Table;
use tokio::sync::{mpsc, oneshot};

use super::commit::{distinct, make_durable, retry, WriterCounters, WriterSettings};
use super::maintenance::Maintenance;
pub use super::maintenance::MaintenanceReport;
use super::record::{to_batch_for, MemoryRecord};
use super::strengths::StrengthSet;
use super::StoreError;

/// Told what the writer's commits changed, at the version each created, so caches of the
/// table (scope counts, resident vectors) follow them without reading them back.
pub trait CommitObserver: Send + Sync {
    fn appended(&self, version: u64, rows: &[(MemoryRecord, Vec<f32>)]);
    /// A strength set that changed every row it lists (one that missed a row is not reported).
    fn strengths_set(&self, _version: u64, _set: &Arc<StrengthSet>) {}
    /// Blank text columns filled on every listed row (`fill_blank`; one that skipped a row is
    /// not reported).
    fn blanks_filled(&self, _version: u64, _filled: &Arc<FilledBlanks>) {}
    /// A commit that changed no record column and no `vector` (a re-embed's staged vectors).
    fn unchanged(&self, _version: u64) {}
    /// Whether this observer wants [`CommitObserver::deleted`]: the writer reads the removed
    /// ids back from the commit only if one does.
    fn follows_deletes(&self) -> bool {
        false
    }
    /// The rows a delete removed, by id (reported only when their count is the delete's).
    fn deleted(&self, _version: u64, _ids: &HashSet<String>) {}
}

/// What a `fill_blank` changed: these rows' columns set to these literal values.
#[derive(Debug, Clone)]
pub struct FilledBlanks {
    pub ids: Vec<String>,
    pub values: Vec<(String, String)>,
}

/// Rows to append, already paired with their vectors.
pub type Rows = Vec<(MemoryRecord, Vec<f32>)>;
type AppendReply = oneshot::Sender<Result<(), StoreError>>;

enum Op {
    Append {
        rows: Rows,
        done: AppendReply,
    },
    Delete {
        predicate: String,
        done: oneshot::Sender<Result<u64, StoreError>>,
    },
    InsertMissing {
        rows: Rows,
        done: oneshot::Sender<Result<u64, StoreError>>,
    },
    FillBlank {
        ids: Vec<String>,
        values: Vec<(String, String)>,
        done: oneshot::Sender<Result<u64, StoreError>>,
    },
    Update {
        predicate: String,
        columns: Vec<(String, String)>,
        done: oneshot::Sender<Result<u64, StoreError>>,
    },
    SetStrengths {
        set: Arc<StrengthSet>,
        done: oneshot::Sender<Result<u64, StoreError>>,
    },
    StageVectors {
        ids: Vec<String>,
        vectors: Vec<Vec<f32>>,
        dimension: usize,
        done: oneshot::Sender<Result<u64, StoreError>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// What an erase did: rows deleted, and the old versions and bytes that went with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EraseReport {
    /// Rows deleted.
    pub deleted: u64,
    /// Table versions removed (each still held the deleted rows).
    pub versions_removed: u64,
    /// Bytes of files removed.
    pub bytes_removed: u64,
}

/// Cheap-to-clone handle to the writer task.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Op>,
    counters: Arc<WriterCounters>,
    maintenance: Arc<Maintenance>,
    /// Appends announced and not yet answered.
    announced: Arc<AtomicU64>,
}

/// An append on its way (its rows are still being embedded), from
/// [`WriterHandle::announce`] until dropped.
pub struct Announced(Arc<AtomicU64>);

impl Drop for Announced {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WriterHandle {
    /// Say that an append is coming (call before the slow work that produces its rows, and
    /// keep the guard until `append` returns): a group commit waits up to `commit_linger` for
    /// the announced appends, so concurrent writers share one commit.
    pub fn announce(&self) -> Announced {
        self.announced.fetch_add(1, Ordering::AcqRel);
        Announced(self.announced.clone())
    }

    pub async fn append(&self, rows: Rows) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::Append { rows, done })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Delete rows matching a SQL predicate; returns how many were deleted.
    pub async fn delete(&self, predicate: String) -> Result<u64, StoreError> {
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::Delete { predicate, done })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Delete rows matching a SQL predicate so that nothing on disk still holds them: rewrite
    /// the fragments they were in, then remove every older table version (and its files).
    /// When this returns, only the latest version exists and it does not reference them.
    /// The delete goes through the writer (ordered with every other write); the rewrite and the
    /// prune run beside it, so appends keep committing meanwhile.
    pub async fn erase(&self, predicate: String) -> Result<EraseReport, StoreError> {
        let started = Instant::now();
        let wall = std::time::SystemTime::now();
        let deleted = self.delete(predicate).await?;
        let pruned = self.maintenance.purge_and_prune(deleted, wall).await?;
        tracing::info!(
            rows = deleted,
            versions = pruned.versions_removed,
            bytes = pruned.bytes_removed,
            ms = started.elapsed().as_millis() as u64,
            "erased rows and pruned old versions"
        );
        Ok(EraseReport {
            deleted,
            versions_removed: pruned.versions_removed,
            bytes_removed: pruned.bytes_removed,
        })
    }

    /// Compact fragments and fold new rows into indexes now (also runs on a timer, beside the
    /// writer).
    pub async fn maintain(&self) -> Result<MaintenanceReport, StoreError> {
        self.maintain_with(false).await
    }

    /// Like [`maintain`](Self::maintain), but `full` merges every fragment below Lance's
    /// default target (1M rows): once, after a whole-table rewrite such as the backfill.
    pub async fn maintain_with(&self, full: bool) -> Result<MaintenanceReport, StoreError> {
        if self.is_stopped() {
            return Err(StoreError::WriterGone);
        }
        self.maintenance.run(full).await
    }

    /// Insert the rows whose id the table does not hold yet, atomically with respect to other
    /// writers: a merge on the table's (unenforced) primary key, so two processes inserting the
    /// same id concurrently leave one row. Returns rows inserted.
    pub async fn insert_missing(&self, rows: Rows) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::InsertMissing { rows, done })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Set text columns to literal values on the rows with these ids, only where the first
    /// column is still NULL or blank (so a row is never changed twice). Patches just those
    /// columns where Lance allows it instead of rewriting rows. Returns rows changed.
    pub async fn fill_blank(
        &self,
        ids: Vec<String>,
        values: Vec<(String, String)>,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() || values.is_empty() {
            return Ok(0);
        }
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::FillBlank { ids, values, done })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Set columns to SQL expressions on the rows matching a predicate; returns rows changed.
    /// Lance rewrites whole rows for this: use it for small sets of rows.
    pub async fn update(
        &self,
        predicate: String,
        columns: Vec<(String, String)>,
    ) -> Result<u64, StoreError> {
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::Update {
                predicate,
                columns,
                done,
            })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Set many rows' strengths in one commit, each compare-and-set (see [`StrengthSet`]).
    /// Returns rows changed.
    pub async fn set_strengths(&self, set: StrengthSet) -> Result<u64, StoreError> {
        if set.changes.is_empty() {
            return Ok(0);
        }
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::SetStrengths {
                set: Arc::new(set),
                done,
            })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Write a re-embed's new vectors into `vector_next` where it is still NULL, on rows that
    /// still exist (see `store::reembed::stage_vectors`). Returns rows changed.
    pub async fn stage_vectors(
        &self,
        ids: Vec<String>,
        vectors: Vec<Vec<f32>>,
        dimension: usize,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Op::StageVectors {
                ids,
                vectors,
                dimension,
                done,
            })
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Commit everything queued so far, then stop.
    pub async fn shutdown(&self) {
        self.maintenance.stop();
        let (done, rx) = oneshot::channel();
        if self.tx.send(Op::Shutdown { done }).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Whether the writer task has stopped (after shutdown): background loops end with it.
    pub fn is_stopped(&self) -> bool {
        self.tx.is_closed()
    }

    pub fn counters(&self) -> &WriterCounters {
        &self.counters
    }
}

/// Start the writer. Routine compaction runs only while `maintainer` is set (this process
/// holds the maintenance lease); erases always purge what they delete.
pub fn spawn(
    table: Table,
    settings: WriterSettings,
    maintainer: Arc<AtomicBool>,
    observers: Vec<Arc<dyn CommitObserver>>,
) -> WriterHandle {
    let (tx, rx) = mpsc::channel(1024);
    let counters = Arc::new(WriterCounters::default());
    let kept_for = observers.clone();
    let maintenance = Maintenance::new(
        table.clone(),
        settings.clone(),
        counters.clone(),
        maintainer,
        Box::new(move |version| {
            for observer in &kept_for {
                observer.unchanged(version);
            }
        }),
    );
    let announced = Arc::new(AtomicU64::new(0));
    let shared = Shared {
        counters: counters.clone(),
        observers,
        maintenance: maintenance.clone(),
        announced: announced.clone(),
    };
    tokio::spawn(run(table, settings, rx, shared));
    WriterHandle {
        tx,
        counters,
        maintenance,
        announced,
    }
}

/// What the writer task shares with readers.
struct Shared {
    counters: Arc<WriterCounters>,
    /// Told what each append added, at the version it committed.
    observers: Vec<Arc<dyn CommitObserver>>,
    /// Told about every write, so it compacts when due.
    maintenance: Arc<Maintenance>,
    /// Appends announced and not yet answered (see [`WriterHandle::announce`]).
    announced: Arc<AtomicU64>,
}

/// How often a lingering group commit looks again at the announced count (an announced
/// append whose embedding failed never arrives, and only its guard's drop says so).
const LINGER_POLL: Duration = Duration::from_millis(2);

/// Group commit: add every append already queued to `group`, then, while more appends are
/// announced than the group holds, those arriving within `commit_linger`, up to the batch
/// cap. Returns the first other op met, to run next.
async fn gather(
    rx: &mut mpsc::Receiver<Op>,
    group: &mut Vec<(Rows, AppendReply)>,
    settings: &WriterSettings,
    announced: &AtomicU64,
) -> Option<Op> {
    let deadline = tokio::time::Instant::now() + settings.commit_linger;
    let mut total: usize = group.iter().map(|(rows, _)| rows.len()).sum();
    while total < settings.max_batch_rows {
        let next = match rx.try_recv() {
            Ok(op) => Some(op),
            Err(_) => {
                let coming = announced.load(Ordering::Acquire) > group.len() as u64;
                let now = tokio::time::Instant::now();
                if !coming || now >= deadline {
                    return None;
                }
                match tokio::time::timeout_at(deadline.min(now + LINGER_POLL), rx.recv()).await {
                    Ok(Some(op)) => Some(op),
                    Ok(None) => return None,
                    Err(_) => continue, // look at the announced count again
                }
            }
        };
        match next {
            Some(Op::Append { rows, done }) => {
                total += rows.len();
                group.push((rows, done));
            }
            Some(other) => return Some(other),
            None => return None,
        }
    }
    None
}

/// The writer task: receive each op (or the one a group commit met), commit it, reply.
async fn run(table: Table, settings: WriterSettings, mut rx: mpsc::Receiver<Op>, shared: Shared) {
    let (table, settings, shared) = (&table, &settings, &shared);
    let mut pending: Option<Op> = None;
    loop {
        let op = match pending.take() {
            Some(op) => op,
            None => match rx.recv().await {
                Some(op) => op,
                None => break,
            },
        };
        match op {
            Op::Append { rows, done } => {
                pending = append_group(table, settings, &mut rx, shared, (rows, done)).await;
            }
            Op::Delete { predicate, done } => {
                let result = commit_delete(table, settings, shared, &predicate).await;
                let _ = done.send(result);
                shared.maintenance.wrote(0);
            }
            Op::InsertMissing { rows, done } => {
                let result = commit_insert_missing(table, settings, shared, &rows).await;
                reply(shared, done, result);
            }
            Op::FillBlank { ids, values, done } => {
                let result = commit_fill_blank(table, settings, shared, ids, values).await;
                reply(shared, done, result);
            }
            Op::Update {
                predicate,
                columns,
                done,
            } => {
                let result = commit_update(table, settings, shared, &predicate, &columns).await;
                reply(shared, done, result);
            }
            Op::SetStrengths { set, done } => {
                let result = commit_strengths(table, settings, shared, &set).await;
                reply(shared, done, result);
            }
            Op::StageVectors {
                ids,
                vectors,
                dimension,
                done,
            } => {
                let result =
                    commit_staged_vectors(table, settings, shared, &ids, &vectors, dimension).await;
                reply(shared, done, result);
            }
            Op::Shutdown { done } => {
                let _ = done.send(());
                break;
            }
        }
    }
    tracing::info!("store writer stopped");
}

/// Reply stage of every op but appends and deletes: tell maintenance a write happened, then
/// answer the caller.
fn reply(
    shared: &Shared,
    done: oneshot::Sender<Result<u64, StoreError>>,
    result: Result<u64, StoreError>,
) {
    shared.maintenance.wrote(0);
    let _ = done.send(result);
}

/// A committed write made durable (in `power` mode: the files written since `wall` synced);
/// a failed one as it is.
async fn durable(
    settings: &WriterSettings,
    shared: &Shared,
    wall: std::time::SystemTime,
    result: Result<u64, StoreError>,
) -> Result<u64, StoreError> {
    match result {
        Ok(n) => make_durable(settings, &shared.counters, wall)
            .await
            .map(|()| n),
        Err(e) => Err(e),
    }
}

/// Group, commit and reply stages of an append: gather the appends queued behind `first`,
/// commit them as one, make that durable, answer every request. Returns the first other op
/// met, to run next.
async fn append_group(
    table: &Table,
    settings: &WriterSettings,
    rx: &mut mpsc::Receiver<Op>,
    shared: &Shared,
    first: (Rows, AppendReply),
) -> Option<Op> {
    let counters = &shared.counters;
    let mut group = vec![first];
    let pending = gather(rx, &mut group, settings, &shared.announced).await;
    let wall = std::time::SystemTime::now();
    let mut result = commit_group(table, settings, counters, &shared.observers, &mut group).await;
    if result.is_ok() {
        result = make_durable(settings, counters, wall).await;
    }
    let fragments = match table.as_native() {
        Some(native) => native.count_fragments().await.unwrap_or(0),
        None => 0,
    };
    for (_, done) in group {
        let _ = done.send(match &result {
            Ok(()) => Ok(()),
            Err(e) => Err(StoreError::Commit(e.to_string())),
        });
    }
    shared.maintenance.wrote(fragments);
    pending
}

/// Commit stage of a delete: on the latest version, report the removed ids to the observers
/// before the reply, then make it durable.
async fn commit_delete(
    table: &Table,
    settings: &WriterSettings,
    shared: &Shared,
    predicate: &str,
) -> Result<u64, StoreError> {
    let wall = std::time::SystemTime::now();
    // On the latest version, every attempt: Lance commits a delete planned on a stale
    // version without conflicting with the append it did not see, and that row would
    // survive the erase.
    let result = retry(table, settings, &shared.counters, || async {
        table.checkout_latest().await?;
        let deleted = table.delete(predicate).await?;
        Ok((deleted.num_deleted_rows, deleted.version))
    })
    .await;
    if let Ok((n, version)) = result {
        // Before the reply: an erase prunes the versions a reader would need to work the
        // ids out for itself.
        report_deleted(table, &shared.observers, n, version).await;
    }
    durable(settings, shared, wall, result.map(|(n, _)| n)).await
}

/// Commit stage of an insert of the rows not already in the table, made durable.
async fn commit_insert_missing(
    table: &Table,
    settings: &WriterSettings,
    shared: &Shared,
    rows: &Rows,
) -> Result<u64, StoreError> {
    let wall = std::time::SystemTime::now();
    let model = settings.model_id.as_deref();
    let result = retry(table, settings, &shared.counters, || {
        insert_missing(table, rows, model)
    })
    .await;
    durable(settings, shared, wall, result).await
}

/// Commit stage of a `fill_blank`, telling the observers when it filled every listed row.
async fn commit_fill_blank(
    table: &Table,
    settings: &WriterSettings,
    shared: &Shared,
    ids: Vec<String>,
    values: Vec<(String, String)>,
) -> Result<u64, StoreError> {
    retry(table, settings, &shared.counters, || {
        fill_blank(table, &ids, &values)
    })
    .await
    .map(|(rows, version)| {
        if rows as usize == distinct(ids.iter().map(String::as_str)) {
            let filled = Arc::new(FilledBlanks { ids, values });
            for observer in &shared.observers {
                observer.blanks_filled(version, &filled);
            }
        }
        rows
    })
}

/// Commit stage of an update of `columns` where `predicate` holds, made durable.
async fn commit_update(
    table: &Table,
    settings: &WriterSettings,
    shared: &Shared,
    predicate: &str,
    columns: &[(String, String)],
) -> Result<u64, StoreError> {
    let wall = std::time::SystemTime::now();
    let result = retry(table, settings, &shared.counters, || {
        update(table, predicate, columns)
    })
    .await
    .map(|(rows, _)| rows);
    durable(settings, shared, wall, result).await
}

/// Commit stage of a strength set, telling the observers when it changed every listed row;
/// made durable.
async fn commit_strengths(
    table: &Table,
    settings: &WriterSettings,
    shared: &Shared,
    set: &Arc<StrengthSet>,
) -> Result<u64, StoreError> {
    let wall = std::time::SystemTime::now();
    let result = match set.update_sql() {
        None => Ok(0),
        Some((predicate, columns)) => retry(table, settings, &shared.counters, || {
            update(table, &predicate, &columns)
        })
        .await
        .map(|(rows, version)| {
            let listed = set.changes.iter().map(|c| c.id.as_str());
            if rows as usize == distinct(listed) {
                for observer in &shared.observers {
                    observer.strengths_set(version, set);
                }
            }
            rows
        }),
    };
    durable(settings, shared, wall, result).await
}

/// Commit stage of a re-embed's staged vectors (`ids`, `vectors`, `dimension`), made durable.
async fn commit_staged_vectors(
    table: &Table,
    settings: &WriterSettings,
    shared: &Shared,
    ids: &[String],
    vectors: &[Vec<f32>],
    dimension: usize,
) -> Result<u64, StoreError> {
    let wall = std::time::SystemTime::now();
    let result = retry(table, settings, &shared.counters, || {
        super::reembed::stage_vectors(table, ids, vectors, dimension)
    })
    .await
    .map(|(rows, version)| {
        // The records and `vector` are as they were: caches need not reload.
        for observer in &shared.observers {
            observer.unchanged(version);
        }
        rows
    });
    durable(settings, shared, wall, result).await
}

async fn commit_group(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    observers: &[Arc<dyn CommitObserver>],
    group: &mut [(Rows, AppendReply)],
) -> Result<(), StoreError> {
    let started = Instant::now();
    let rows: Vec<(MemoryRecord, Vec<f32>)> = group
        .iter_mut()
        .flat_map(|(rows, _)| std::mem::take(rows))
        .collect();
    let n = rows.len();
    let model = settings.model_id.as_deref();
    // Shaped anew for every attempt: a re-embed's switch between two attempts changes where
    // the vectors go (and refuses an append staged for the schema before it).
    let version = retry(table, settings, counters, || {
        let rows = &rows;
        async move {
            let schema = table.schema().await?;
            let batch = to_batch_for(&schema, rows, model)?;
            Ok(table.add(batch).execute().await?.version)
        }
    })
    .await?;
    for observer in observers {
        observer.appended(version, &rows);
    }
    counters.commits.fetch_add(1, Ordering::Relaxed);
    counters
        .rows_appended
        .fetch_add(n as u64, Ordering::Relaxed);
    tracing::debug!(
        rows = n,
        requests = group.len(),
        ms = started.elapsed().as_millis() as u64,
        "group commit"
    );
    Ok(())
}

/// Tell the observers that follow deletes which ids the delete at `version` removed, read back
/// from its fragments. Nothing when it removed none, when the ids cannot be read or when
/// their count is not the delete's: an observer then finds the version unexplained and reads
/// the table again.
async fn report_deleted(
    table: &Table,
    observers: &[Arc<dyn CommitObserver>],
    deleted: u64,
    version: u64,
) {
    if deleted == 0 || !observers.iter().any(|o| o.follows_deletes()) {
        return;
    }
    let Some(wrapper) = table.dataset() else {
        return;
    };
    let dataset = match wrapper.get().await {
        Ok(dataset) => dataset,
        Err(e) => return tracing::debug!(version, error = %e, "could not read a delete's ids"),
    };
    match super::commit_rows::deleted(&dataset, version).await {
        Ok(Some(ids)) if ids.len() as u64 == deleted => {
            for observer in observers {
                observer.deleted(version, &ids);
            }
        }
        Ok(_) => tracing::debug!(version, "a delete's ids did not match its count"),
        Err(e) => tracing::debug!(version, error = %e, "could not read a delete's ids"),
    }
}

/// Rows changed and the version the update committed.
async fn update(
    table: &Table,
    predicate: &str,
    columns: &[(String, String)],
) -> Result<(u64, u64), StoreError> {
    let mut update = table.update().only_if(predicate);
    for (column, value) in columns {
        update = update.column(column.as_str(), value.as_str());
    }
    let result = update.execute().await?;
    Ok((result.rows_updated, result.version))
}

async fn insert_missing(
    table: &Table,
    rows: &Rows,
    model: Option<&str>,
) -> Result<u64, StoreError> {
    use lancedb::arrow::arrow_array::RecordBatchIterator;
    let schema = table.schema().await?;
    let batch = to_batch_for(&schema, rows, model)?;
    let mut merge = table.merge_insert(&["id"]);
    merge.when_not_matched_insert_all();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    Ok(merge.execute(Box::new(reader)).await?.num_inserted_rows)
}

/// A partial-schema merge on the indexed `id` key: Lance patches just the given columns (new
/// column files attached to the fragments) instead of rewriting whole rows and vectors. The
/// condition re-checks the first column, so a row is never changed twice. Returns rows changed
/// and the version committed.
async fn fill_blank(
    table: &Table,
    ids: &[String],
    values: &[(String, String)],
) -> Result<(u64, u64), StoreError> {
    use lancedb::arrow::arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
    use lancedb::arrow::arrow_schema::{DataType, Field, Schema};
    let Some((first, _)) = values.first() else {
        return Ok((0, 0));
    };
    let n = ids.len();
    let mut fields = vec![Field::new("id", DataType::Utf8, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(StringArray::from_iter_values(ids.iter()))];
    for (name, value) in values {
        fields.push(Field::new(name, DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from_iter_values(
            std::iter::repeat_n(value.as_str(), n),
        )));
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    let mut merge = table.merge_insert(&["id"]);
    merge.when_matched_update_all(Some(format!(
        "target.{first} IS NULL OR btrim(target.{first}) = ''"
    )));
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    match merge.execute(Box::new(reader)).await {
        Ok(result) => Ok((result.num_updated_rows, result.version)),
        Err(e) => {
            let e = StoreError::from(e);
            if e.is_retryable() {
                return Err(e);
            }
            // Lance refuses the column patch on tables with an unenforced primary key (the
            // ones scopemem creates); rewrite the rows instead. Same condition, same result.
            tracing::debug!(error = %e, "column-patching merge refused; updating whole rows");
            let list: Vec<String> = ids
                .iter()
                .map(|id| super::filter::sql_literal(id))
                .collect();
            let mut update = table.update().only_if(format!(
                "id IN ({}) AND ({first} IS NULL OR btrim({first}) = '')",
                list.join(", ")
            ));
            for (name, value) in values {
                update = update.column(name.as_str(), super::filter::sql_literal(value));
            }
            let result = update.execute().await?;
            Ok((result.rows_updated, result.version))
        }
    }
}
