//! LanceDB storage: the `memories` table, its single writer and its scope-prefiltered search.
//!
//! Reads go straight to a shared [`lancedb::Table`] clone; every mutation goes through the
//! [`writer`] task so appends are group-committed and commit conflicts retried in one place.

pub mod beside;
pub(crate) mod cache;
pub(crate) mod commit;
pub(crate) mod commit_rows;
pub(crate) mod durability;
pub(crate) mod filter;
pub mod fulltext;
pub(crate) mod heap;
pub(crate) mod index_state;
pub mod lease;
pub mod maintenance;
pub(crate) mod orphans;
pub(crate) mod page;
pub mod record;
pub(crate) mod reembed;
pub mod resident;
pub mod schema;
pub(crate) mod scope_counts;
pub mod search;
pub(crate) mod shared_terms;
pub(crate) mod speakers;
pub(crate) mod strengths;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod writer;

use std::collections::BTreeMap;
use std::path::Path;

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::Table;

use crate::config::DbLocation;
use crate::embed::ModelInfo;
use commit::read_retrying;

pub use commit::WriterSettings;
pub(crate) use filter::{made_of, target_still};
pub use filter::{sql_literal, timestamp_literal, RowFilter, ScopeSet, Selection, Tier, TimeRange};
pub use fulltext::{FulltextSearch, KeywordHit, KeywordMatching, KeywordRequest};
pub use index_state::IndexState;
pub use maintenance::pruning::PruneReport;
pub use page::Page;
pub use record::MemoryRecord;
use schema::*;
pub use search::{Hit, LanceSearch, NearestVisible, SearchRequest};
pub use strengths::{StrengthChange, StrengthSet};
pub use writer::{EraseReport, WriterHandle};

/// Store failures. Lance errors are kept as text plus a retry hint: callers only need to know
/// whether retrying can help and what to tell the operator.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("lancedb: {0}")]
    Lance(#[from] lancedb::Error),
    #[error("arrow: {0}")]
    Arrow(#[from] lancedb::arrow::arrow_schema::ArrowError),
    #[error(
        "embedding dimension mismatch: the table holds {table}-d vectors but the model produces \
         {model}-d; point embedding.model_dir at the model the table was built with, use a \
         new storage.db_dir, or re-embed every memory with the new model: set \
         migration.reembed to \"auto\" (serve re-embeds in the background) or run \
         `scopemem migrate reembed`"
    )]
    DimensionMismatch { table: usize, model: usize },
    #[error(
        "embedding model mismatch: the table was built with '{table}' but the configured model \
         is '{model}'; vectors from different models cannot be compared. To re-embed every \
         memory with the configured model, set migration.reembed to \"auto\" (serve re-embeds \
         in the background) or run `scopemem migrate reembed`"
    )]
    ModelMismatch { table: String, model: String },
    #[error("table schema: {0}")]
    Schema(String),
    #[error("commit failed: {0}")]
    Commit(String),
    #[error("the store writer has stopped")]
    WriterGone,
    #[error(transparent)]
    Beside(#[from] beside::BesideError),
}

/// Errors from reading the Lance dataset directly (commit transactions, the resident load's
/// scan), reported as lancedb reports its own.
impl From<lance::Error> for StoreError {
    fn from(source: lance::Error) -> Self {
        StoreError::Lance(lancedb::Error::Lance { source })
    }
}

impl StoreError {
    /// A file vanished under a read: a concurrent erase or prune removed the version the read
    /// had started on. Reading again from the latest version succeeds.
    pub(crate) fn is_vanished_file(&self) -> bool {
        match self {
            StoreError::Lance(lancedb::Error::Lance { source }) => {
                is_not_found(source) || caused_by_not_found(source)
            }
            // A scan inside DataFusion (a delete's, a merge's) hands Lance's error back boxed,
            // wrapped in DataFusion's own.
            StoreError::Lance(lancedb::Error::External { source }) => {
                caused_by_not_found(source.as_ref())
            }
            _ => false,
        }
    }

    /// Lance reports concurrent-commit races as a retryable conflict, and gives up with "too
    /// much write contention" after its own retries when several instances commit to one
    /// bucket at once. A merge that Lance re-ran on its own after a conflict with a re-embed's
    /// switch finds the schema moved under the rows it was given ("append with different
    /// schema"). None of these committed, so the write can be tried again whole, shaped for
    /// the latest version; anything else is final.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            StoreError::Lance(lancedb::Error::Lance { source }) => matches!(
                source,
                lance_core::Error::RetryableCommitConflict { .. }
                    | lance_core::Error::CommitConflict { .. }
                    | lance_core::Error::TooMuchWriteContention { .. }
                    | lance_core::Error::SchemaMismatch { .. }
            ),
            _ => false,
        }
    }
}

#[cfg(test)]
mod retryable_tests {
    use super::*;

    fn lance(source: lance_core::Error) -> StoreError {
        StoreError::from(source)
    }

    #[test]
    fn commit_races_and_contention_are_retried_other_errors_are_not() {
        assert!(lance(lance_core::Error::too_much_write_contention("7 attempts")).is_retryable());
        assert!(lance(lance_core::Error::retryable_commit_conflict_source(
            3,
            "race".into()
        ))
        .is_retryable());
        assert!(!lance(lance_core::Error::invalid_input("bad")).is_retryable());
        assert!(!StoreError::WriterGone.is_retryable());
    }

    /// A file pruned under a delete's scan comes back boxed inside DataFusion's error; it is
    /// still a vanished file, which the writer retries on the latest version (seen as a forget
    /// answering 500 while another process's update pruned the version it scanned).
    #[test]
    fn a_vanished_file_is_recognised_inside_an_external_error() {
        /// DataFusion's `External` as it wraps Lance's error: its own text, the cause below.
        #[derive(Debug)]
        struct Wrapped(lance_core::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "External error: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            Box::new(lance_core::Error::not_found("data/abc.lance"));
        let external = StoreError::Lance(lancedb::Error::External { source: boxed });
        assert!(external.is_vanished_file(), "{external}");
        let wrapped = Wrapped(lance_core::Error::not_found("data/abc.lance"));
        let external = StoreError::Lance(lancedb::Error::External {
            source: Box::new(wrapped),
        });
        assert!(external.is_vanished_file(), "{external}");
        let other: Box<dyn std::error::Error + Send + Sync> = "disk on fire".into();
        let other = StoreError::Lance(lancedb::Error::External { source: other });
        assert!(!other.is_vanished_file());
    }
}

/// The default of `storage.read_consistency_ms`.
pub const DEFAULT_READ_CONSISTENCY: std::time::Duration = std::time::Duration::from_millis(500);

/// An opened `memories` table plus its writer.
#[derive(Clone)]
pub struct Store {
    table: Table,
    writer: WriterHandle,
    dimension: usize,
    location: DbLocation,
    /// The state beside the table (backfill checkpoint, lease record).
    beside: beside::Beside,
    /// Stops the background version pruner.
    pruner_stop: std::sync::Arc<tokio::sync::Notify>,
    /// Rows per scope, kept from the writer's appends and reconciled in the background.
    scope_counts: std::sync::Arc<scope_counts::ScopeCounts>,
    /// Every row in memory for the resident search, once a search asks for it.
    resident: std::sync::Arc<resident::ResidentVectors>,
    /// Stops the counts' background reconciliation.
    counts_stop: std::sync::Arc<tokio::sync::Notify>,
    /// Whether this process does the table's maintenance (compaction, pruning, index builds):
    /// true for a store used alone; a service sharing the directory sets it from its lease.
    maintainer: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Counts for `/v1/status`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StoreStats {
    pub rows: usize,
    pub rows_by_scope: BTreeMap<String, usize>,
    pub null_scope_rows: usize,
    pub fragments: usize,
    /// Table versions on disk (each may hold rows that later versions deleted or changed).
    pub versions: usize,
    /// Bytes of every file under the database directory (0 for a table in an object store,
    /// where listing every object would cost a request per thousand).
    pub disk_bytes: u64,
}

impl Store {
    /// Connect to the database directory (created if missing) or bucket prefix. A read sees
    /// other processes' commits at most `read_consistency` late (several processes, on one
    /// machine or several, may share one table; `ZERO` checks on every read). Which table to
    /// open, and how to migrate it, is for the caller (`migrate::open_store`) to decide.
    /// Also returns the small state beside the tables (backfill checkpoint, lease record); a
    /// bucket is listed once first, so a wrong endpoint, bucket or credentials fail here with
    /// a one-line reason.
    pub(crate) async fn connect(
        db: &DbLocation,
        read_consistency: std::time::Duration,
    ) -> Result<(lancedb::Connection, beside::Beside), StoreError> {
        if let Some(dir) = db.local_dir() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Schema(format!("cannot create {}: {e}", dir.display())))?;
        }
        let beside = beside::Beside::open(db).await?;
        beside.probe().await?;
        let conn = lancedb::connect(&db.uri())
            .storage_options(db.options().clone())
            .read_consistency_interval(read_consistency)
            .session(cache::shared())
            .execute()
            .await?;
        Ok((conn, beside))
    }

    /// The model and dimension an existing table's vectors came from, without opening it for
    /// writing: what chooses the embedder for `embedding.provider: auto`, and the dimension a
    /// provider that cannot be asked at start-up falls back to. `None` when the table does not
    /// exist yet.
    pub(crate) async fn recorded_model(
        db: &DbLocation,
        table_name: &str,
    ) -> Result<Option<reembed::VectorColumns>, StoreError> {
        let (conn, _) = Self::connect(db, std::time::Duration::ZERO).await?;
        if !conn
            .table_names()
            .execute()
            .await?
            .iter()
            .any(|n| n == table_name)
        {
            return Ok(None);
        }
        let table = conn.open_table(table_name).execute().await?;
        Ok(Some(reembed::vector_columns(&table).await?))
    }

    /// Take an opened (and migrated) table: check it was built for `model` (a new table records
    /// it, and gets its scalar indexes while it is empty) and start the writer. Scalar indexes
    /// of an existing table are not built here (start-up would grow with the table): call
    /// [`Store::ensure_indexes`] in the background.
    pub(crate) async fn attach(
        table: Table,
        db: &DbLocation,
        beside: beside::Beside,
        model: &ModelInfo,
        settings: WriterSettings,
        created: bool,
    ) -> Result<Store, StoreError> {
        if created {
            // Other processes starting beside this one commit their migrations meanwhile.
            adopt_model(&table, model).await?;
            ensure_scalar_indexes_settled(&table).await?;
        } else {
            check_model(&table, model).await?;
        }
        let maintainer = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let settings = WriterSettings {
            table_dir: db.table_dir(table.name()),
            model_id: Some(model.id.clone()),
            ..settings
        };
        let scope_counts = std::sync::Arc::new(scope_counts::ScopeCounts::default());
        let counts_stop = std::sync::Arc::new(tokio::sync::Notify::new());
        scope_counts.clone().reconcile_every(
            table.clone(),
            std::time::Duration::from_secs(5),
            counts_stop.clone(),
        );
        let resident = std::sync::Arc::new(resident::ResidentVectors::new(model.dimension));
        let writer = writer::spawn(
            table.clone(),
            settings,
            maintainer.clone(),
            vec![scope_counts.clone(), resident.clone()],
        );
        Ok(Store {
            table,
            writer,
            dimension: model.dimension,
            location: db.clone(),
            beside,
            pruner_stop: Default::default(),
            scope_counts,
            counts_stop,
            maintainer,
            resident,
        })
    }

    /// Rebuild the `memory_scope` bitmap from scratch. After the backfill rewrote that column
    /// and compaction rewrote the fragments, Lance's incremental index optimisation leaves the
    /// rewritten rows unindexed (pinned by a test); a fresh bitmap covers every row again.
    pub(crate) async fn rebuild_scope_index(&self) -> Result<(), StoreError> {
        maintenance::indexes::rebuild_scope_index(&self.table).await
    }

    /// Build missing scalar indexes: the bitmap on `memory_scope` (recall prefilter), a BTree
    /// on `id` (lets the backfill patch scope columns without rewriting rows), the BTree on
    /// `expires_at` and the full-text indexes of keyword recall.
    pub async fn ensure_indexes(&self) -> Result<(), StoreError> {
        maintenance::indexes::ensure_scalar_indexes(&self.table).await
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Where the table lives.
    pub(crate) fn location(&self) -> &DbLocation {
        &self.location
    }

    /// Where the state beside the table lives.
    pub(crate) fn beside(&self) -> &beside::Beside {
        &self.beside
    }

    pub fn writer(&self) -> &WriterHandle {
        &self.writer
    }

    pub(crate) fn dimension(&self) -> usize {
        self.dimension
    }

    /// Append records (group-committed with concurrent appends by the writer).
    pub async fn append(&self, rows: Vec<(MemoryRecord, Vec<f32>)>) -> Result<(), StoreError> {
        self.writer.append(rows).await
    }

    /// Say that an append is coming (see [`writer::WriterHandle::announce`]).
    pub(crate) fn announce_append(&self) -> writer::Announced {
        self.writer.announce()
    }

    /// Move this process's view of the table to the latest committed version now, instead of
    /// up to `read_consistency` later. Erases read and delete here: Lance commits a delete
    /// made on a stale version without conflicting with a newer append, so a delete that
    /// did not see the append leaves its row behind.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        Ok(self.table.checkout_latest().await?)
    }

    /// Remove the data files no version references that hold any of `erased` (see
    /// [`orphans`]): what a commit that failed while an erase ran left behind.
    pub(crate) async fn remove_orphans_holding(
        &self,
        erased: &std::collections::HashSet<String>,
    ) -> Result<orphans::OrphanReport, StoreError> {
        orphans::remove_orphans_holding(&self.table, erased).await
    }

    /// Rows with these ids (vectors excluded) that also match `visible` (a SQL predicate, in
    /// the same query: a duplicate id in another scope is never fetched). Unknown ids are
    /// simply absent.
    pub async fn get_by_ids(
        &self,
        ids: &[String],
        visible: Option<&str>,
    ) -> Result<Vec<MemoryRecord>, StoreError> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            if chunk.is_empty() {
                continue;
            }
            let list: Vec<String> = chunk.iter().map(|id| sql_literal(id)).collect();
            let predicate = match visible {
                Some(v) => format!("{COL_ID} IN ({}) AND ({v})", list.join(", ")),
                None => format!("{COL_ID} IN ({})", list.join(", ")),
            };
            let batch = read_retrying(&self.table, || async {
                let mut rows = Vec::new();
                let mut stream = self
                    .table
                    .query()
                    .only_if(predicate.as_str())
                    .select(Select::columns(&RECORD_COLUMNS))
                    .execute()
                    .await?;
                while let Some(batch) = stream.try_next().await? {
                    rows.extend(record::from_batch(&batch));
                }
                Ok(rows)
            })
            .await?;
            out.extend(batch);
        }
        Ok(out)
    }

    /// Ids of the rows matching a SQL predicate, read at the latest committed version.
    pub async fn ids_where(&self, predicate: &str) -> Result<Vec<String>, StoreError> {
        self.refresh().await?;
        read_retrying(&self.table, || async {
            let mut stream = self
                .table
                .query()
                .only_if(predicate)
                .select(Select::columns(&[COL_ID]))
                .execute()
                .await?;
            let mut ids = Vec::new();
            while let Some(batch) = stream.try_next().await? {
                if let Some(col) = batch
                    .column_by_name(COL_ID)
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                {
                    ids.extend(col.iter().flatten().map(str::to_owned));
                }
            }
            Ok(ids)
        })
        .await
    }

    /// The rows-per-scope cache (its scan counter shows whether status calls scan).
    pub fn resident(&self) -> &std::sync::Arc<resident::ResidentVectors> {
        &self.resident
    }

    pub fn scope_counts(&self) -> &scope_counts::ScopeCounts {
        &self.scope_counts
    }

    pub async fn count(&self, filter: Option<String>) -> Result<usize, StoreError> {
        Ok(self.table.count_rows(filter).await?)
    }

    /// Row counts by scope (O(scopes) while only this process's appends changed the table;
    /// see [`scope_counts`]), fragments, versions and bytes on disk.
    pub async fn stats(&self) -> Result<StoreStats, StoreError> {
        let counts = self.scope_counts.current(&self.table).await?;
        let mut stats = StoreStats {
            rows: counts.rows,
            rows_by_scope: counts.rows_by_scope,
            null_scope_rows: counts.null_scope_rows,
            ..StoreStats::default()
        };
        if let Some(native) = self.table.as_native() {
            stats.fragments = native.count_fragments().await?;
        }
        stats.versions = self.version_count().await?;
        stats.disk_bytes = self.disk_bytes().await;
        Ok(stats)
    }

    /// Table versions on disk. Listing reads each manifest, and the pruner may delete one
    /// between the listing and the read: that race is retried, not reported.
    pub(crate) async fn version_count(&self) -> Result<usize, StoreError> {
        read_retrying(&self.table, || async {
            Ok(self.table.list_versions().await?.len())
        })
        .await
    }

    /// Bytes of every file under the database directory (0 in an object store).
    pub(crate) async fn disk_bytes(&self) -> u64 {
        let Some(dir) = self.location.local_dir().map(Path::to_path_buf) else {
            return 0;
        };
        tokio::task::spawn_blocking(move || maintenance::pruning::disk_bytes(&dir))
            .await
            .unwrap_or(0)
    }

    /// The flag that says whether this process does the maintenance (shared with the writer,
    /// the pruner and the index builder; a [`lease::Lease`] sets it).
    pub(crate) fn maintainer(&self) -> &std::sync::Arc<std::sync::atomic::AtomicBool> {
        &self.maintainer
    }

    /// Whether this process does the maintenance now.
    pub(crate) fn is_maintainer(&self) -> bool {
        self.maintainer.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Start pruning old versions in the background (routine retention: by age and count),
    /// beside the writer. Stopped by [`Store::shutdown`].
    pub(crate) fn start_pruner(&self, limits: maintenance::pruning::VersionLimits) {
        tokio::spawn(maintenance::pruning::run_pruner(
            self.table.clone(),
            limits,
            self.maintainer.clone(),
            self.pruner_stop.clone(),
        ));
    }

    /// Stop the pruner and the writer, after the writer has committed everything queued so far.
    pub async fn shutdown(&self) {
        self.pruner_stop.notify_one();
        self.counts_stop.notify_one();
        self.writer.shutdown().await;
    }
}

/// A file that vanished between listing and reading (removed by a concurrent prune).
/// Whether a Lance "not found" is anywhere in the error's chain of causes.
fn caused_by_not_found(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if err
            .downcast_ref::<lance_core::Error>()
            .is_some_and(is_not_found)
        {
            return true;
        }
        cause = err.source();
    }
    false
}

fn is_not_found(e: &lance_core::Error) -> bool {
    match e {
        lance_core::Error::NotFound { .. } => true,
        lance_core::Error::IO { source, .. } => source
            .to_string()
            .to_ascii_lowercase()
            .contains("not found"),
        _ => false,
    }
}

/// A table records the model it was built with; a different model or dimension is refused.
/// A table with no record (written by another program) is adopted when the dimension matches.
/// During a re-embed (see [`reembed`]) both the old model and the new one are accepted: the
/// new one's vectors go to `vector_next`, the old one's rows are re-embedded.
async fn check_model(table: &Table, model: &ModelInfo) -> Result<(), StoreError> {
    let cols = reembed::vector_columns(table).await?;
    if cols.reembedding_to(model) {
        tracing::warn!(
            from_model = cols.current.as_deref().unwrap_or("unrecorded"),
            to_model = %model.id,
            "a re-embed to this model is under way: recall is keyword-only until it switches"
        );
        return Ok(());
    }
    if cols.dimension != model.dimension {
        return Err(StoreError::DimensionMismatch {
            table: cols.dimension,
            model: model.dimension,
        });
    }
    match cols.current.as_deref() {
        Some(id) if id != model.id => Err(StoreError::ModelMismatch {
            table: id.to_string(),
            model: model.id.clone(),
        }),
        // A switch committed but its config step did not happen (a crash between the two).
        Some(_) if cols.next.is_none() && cols.recorded.as_deref() != Some(&model.id) => {
            reembed::record_model(table, model).await
        }
        Some(_) => Ok(()),
        None => {
            tracing::warn!(
                model = %model.id,
                dimension = cols.dimension,
                "table has no recorded embedding model; adopting it because the dimension matches"
            );
            adopt_model(table, model).await
        }
    }
}

/// Record the model on a table that has none. Two processes adopting the same table at once
/// make one config commit conflict: the loser accepts the winner's record when it names the
/// same model (a different one is the usual mismatch error).
async fn adopt_model(table: &Table, model: &ModelInfo) -> Result<(), StoreError> {
    let entries = [
        (META_MODEL_ID.to_string(), model.id.clone()),
        (META_DIMENSION.to_string(), model.dimension.to_string()),
    ];
    update_config_settled(table, &entries, |config| match config.get(META_MODEL_ID) {
        Some(id) if id == &model.id => Ok(true),
        Some(id) => Err(StoreError::ModelMismatch {
            table: id.clone(),
            model: model.id.clone(),
        }),
        None => Ok(false),
    })
    .await
}

/// Merge `entries` into the table's config (the Lance manifest). Another process committing
/// config at the same moment makes one of the two commits conflict; the loser re-reads the
/// latest config and `settled` decides: `Ok(true)` it already holds what we wanted, `Ok(false)`
/// try again (up to [`RACE_ATTEMPTS`] times, [`race_pause`]), `Err` give up with that error.
pub(crate) async fn update_config_settled(
    table: &Table,
    entries: &[(String, String)],
    settled: impl Fn(&std::collections::HashMap<String, String>) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let native = table
        .as_native()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    let mut attempt: u32 = 0;
    loop {
        let err = match native.update_config(entries.iter().cloned()).await {
            Ok(_) => return Ok(()),
            Err(e) if attempt >= RACE_ATTEMPTS => return Err(e.into()),
            Err(e) => e,
        };
        attempt += 1;
        table.checkout_latest().await?;
        if settled(&native.manifest().await?.config)? {
            return Ok(());
        }
        tracing::debug!(error = %err, attempt, "a config commit raced another process; retrying");
        tokio::time::sleep(race_pause(attempt)).await;
    }
}

/// Build the scalar indexes of a new table, beside other processes that may be building them
/// too: an index commit that lost to theirs is tried again on the latest version, where theirs
/// is found and skipped.
async fn ensure_scalar_indexes_settled(table: &Table) -> Result<(), StoreError> {
    let mut attempt = 0;
    loop {
        match maintenance::indexes::ensure_scalar_indexes(table).await {
            Ok(()) => return Ok(()),
            Err(e) if attempt < RACE_ATTEMPTS => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "building indexes raced another process; re-checking");
                table.checkout_latest().await?;
                tokio::time::sleep(race_pause(attempt)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Tries at a metadata commit (config, columns, primary key) that keeps losing to other
/// processes' commits: a first start of four processes makes a dozen such commits at once.
pub(crate) const RACE_ATTEMPTS: u32 = 12;

/// The pause before try `attempt` (from 1) of a commit that lost a race: growing, and
/// jittered so that processes which lost together do not collide again in step.
pub(crate) fn race_pause(attempt: u32) -> std::time::Duration {
    let jitter = (uuid::Uuid::new_v4().as_u128() % 40) as u64;
    std::time::Duration::from_millis(20 * u64::from(attempt.min(10)) + jitter)
}
