//! The table side of a model change; the whole design, and why nothing is lost or brought
//! back, is in `migrate::reembed`.
//!
//! While a re-embed is under way the table has a second vector column, `vector_next`, with the
//! new model's vectors; `vector` keeps the old model's (nullable meanwhile, so rows written
//! with the new model need none). The switch is one Lance commit (a `Project`) that drops
//! `vector`, renames `vector_next` to `vector` and makes it non-null: every row moves to the
//! new model in that commit, or none does.
//!
//! Each vector column names its model in its field metadata ([`FIELD_MODEL`]), so the schema
//! alone says what `vector` holds, in the same commit that changes it. A column without that
//! metadata (tables from before re-embedding existed) holds the model the table config
//! records; the config is brought in line after a switch (a second, guarded step: until it is,
//! the field metadata is what counts).

use std::collections::HashMap;
use std::sync::Arc;

use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::{CommitBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched};
use lance_table::format::Fragment;
use lancedb::arrow::arrow_array::{
    FixedSizeListArray, Float32Array, RecordBatch, RecordBatchIterator, StringArray,
};
use lancedb::arrow::arrow_schema::{DataType, Field, Schema};
use lancedb::table::{ColumnAlteration, NewColumnTransform};
use lancedb::Table;

use super::schema::{
    field_dimension, item_field, vector_type, COL_ID, COL_VECTOR, COL_VECTOR_NEXT, FIELD_MODEL,
    META_DIMENSION, META_MODEL_ID, META_REEMBED_TARGET,
};
use super::{update_config_settled, StoreError};
use crate::embed::ModelInfo;

/// What the table's vector columns hold.
#[derive(Debug, Clone)]
pub struct VectorColumns {
    /// The model of `vector`: its field metadata, else the table config (`None`: unrecorded).
    pub current: Option<String>,
    /// The model the table config records (behind `current` right after a switch).
    pub recorded: Option<String>,
    /// Dimension of `vector`.
    pub dimension: usize,
    /// The re-embed under way: the model and dimension of `vector_next`.
    pub next: Option<ModelInfo>,
}

impl VectorColumns {
    /// `vector` holds `model`'s vectors and no re-embed is under way.
    pub(crate) fn is_current(&self, model: &ModelInfo) -> bool {
        self.next.is_none()
            && self.current.as_deref() == Some(model.id.as_str())
            && self.dimension == model.dimension
    }

    /// A re-embed to `model` is under way.
    pub(crate) fn reembedding_to(&self, model: &ModelInfo) -> bool {
        self.next
            .as_ref()
            .is_some_and(|n| n.id == model.id && n.dimension == model.dimension)
    }
}

fn field_model(field: &Field) -> Option<String> {
    field.metadata().get(FIELD_MODEL).cloned()
}

fn native(table: &Table) -> Result<&lancedb::table::NativeTable, StoreError> {
    table
        .as_native()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))
}

/// Read the vector columns of the table's current version (which follows other processes'
/// commits within the read-consistency interval).
pub(crate) async fn vector_columns(table: &Table) -> Result<VectorColumns, StoreError> {
    let schema = table.schema().await?;
    let vector = schema.field_with_name(COL_VECTOR).map_err(|_| {
        StoreError::Schema("the table has no FixedSizeList<Float32> 'vector' column".into())
    })?;
    let dimension = field_dimension(vector).ok_or_else(|| {
        StoreError::Schema("the table's 'vector' column is not FixedSizeList<Float32>".into())
    })?;
    let recorded = native(table)?
        .manifest()
        .await?
        .config
        .get(META_MODEL_ID)
        .cloned();
    let next = schema
        .field_with_name(COL_VECTOR_NEXT)
        .ok()
        .map(|f| ModelInfo {
            id: field_model(f).unwrap_or_default(),
            dimension: field_dimension(f).unwrap_or(0),
        });
    Ok(VectorColumns {
        current: field_model(vector).or_else(|| recorded.clone()),
        recorded,
        dimension,
        next,
    })
}

/// Start a re-embed to `model`: make `vector` nullable (rows written with the new model carry
/// none), add `vector_next` for `model` (metadata only: no row is rewritten) and note the
/// target in the table config. Idempotent, and safe with other processes doing the same at
/// once: every step re-reads the latest schema, and a lost race is tried again.
pub(crate) async fn prepare(table: &Table, model: &ModelInfo) -> Result<(), StoreError> {
    let mut attempt: u64 = 0;
    loop {
        table.checkout_latest().await?;
        let cols = vector_columns(table).await?;
        if cols.is_current(model) {
            return Ok(());
        }
        if let Some(next) = cols.next.as_ref().filter(|_| !cols.reembedding_to(model)) {
            return Err(StoreError::ModelMismatch {
                table: format!(
                    "{} (being re-embedded to '{}')",
                    cols.current.unwrap_or_default(),
                    next.id
                ),
                model: model.id.clone(),
            });
        }
        let schema = table.schema().await?;
        let vector_required = schema
            .field_with_name(COL_VECTOR)
            .is_ok_and(|f| !f.is_nullable());
        let step = if vector_required {
            table
                .alter_columns(&[ColumnAlteration::new(COL_VECTOR.to_string()).set_nullable(true)])
                .await
                .map(|_| ())
        } else if cols.next.is_none() {
            let field = Field::new(COL_VECTOR_NEXT, vector_type(model.dimension), true)
                .with_metadata(HashMap::from([(FIELD_MODEL.to_string(), model.id.clone())]));
            table
                .add_columns()
                .transform(NewColumnTransform::AllNulls(Arc::new(Schema::new(vec![
                    field,
                ]))))
                .execute()
                .await
                .map(|_| ())
        } else {
            break;
        };
        match step {
            Ok(()) => {}
            Err(e) if attempt < 5 => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "preparing the re-embed raced another process; re-checking");
                tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let entries = [(META_REEMBED_TARGET.to_string(), model.id.clone())];
    update_config_settled(table, &entries, |c| {
        Ok(c.get(META_REEMBED_TARGET) == Some(&model.id))
    })
    .await?;
    tracing::info!(
        to_model = %model.id,
        dimension = model.dimension,
        "re-embed prepared: new vectors go to the vector_next column until the switch"
    );
    Ok(())
}

/// Write the new model's vectors of these rows into `vector_next` (a merge keyed by `id` that
/// patches that one column), only where it is still NULL, so a row is never staged twice, and
/// only on rows that still exist: a row erased meanwhile matches nothing, and a merge without
/// an insert clause inserts nothing. Returns rows changed and the version committed.
///
/// The merge is planned here and committed with Lance's `CommitBuilder` rather than through
/// lancedb's `merge_insert`, for one reason: on a table with an unenforced primary key (the
/// ones scopemem creates) Lance attaches a filter of inserted keys to every merge keyed by
/// it, and a transaction carrying that filter conflicts with *every* append committed after
/// its read version ("we don't know if the appended rows conflict with inserted rows"). A
/// staging batch inserts nothing, so the filter is empty by construction; dropping it lets the
/// batch rebase over the remembers other processes append meanwhile instead of losing every
/// commit race to them. Conflicts with updates and deletes of the same fragments stay.
pub(crate) async fn stage_vectors(
    table: &Table,
    ids: &[String],
    vectors: &[Vec<f32>],
    dimension: usize,
) -> Result<(u64, u64), StoreError> {
    let batch = staging_batch(ids, vectors, dimension)?;
    let wrapper = table
        .dataset()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    let dataset = wrapper.get().await?;
    let mut merge = MergeInsertBuilder::try_new(dataset.clone(), vec![COL_ID.to_string()])?;
    merge
        .when_matched(WhenMatched::update_if(
            &dataset,
            &format!("target.{COL_VECTOR_NEXT} IS NULL"),
        )?)
        .when_not_matched(WhenNotMatched::DoNothing)
        // The index-probing path patches the column in place, which Lance refuses on a table
        // with an unenforced primary key ("primary key column ... must not be nullable"); the
        // plain join rewrites the matched rows instead (its cost: `make bench-reembed`,
        // benches/reembed.rs).
        .use_index(false);
    let schema = batch.schema();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    let uncommitted = merge.try_build()?.execute_uncommitted(reader).await?;
    let updated = uncommitted.stats.num_updated_rows;
    let mut transaction = uncommitted.transaction;
    if let Operation::Update {
        inserted_rows_filter,
        ..
    } = &mut transaction.operation
    {
        *inserted_rows_filter = None;
    }
    let written: Vec<String> = match &transaction.operation {
        Operation::Update { new_fragments, .. } => new_fragments
            .iter()
            .flat_map(|f| f.files.iter().map(|d| d.path.clone()))
            .collect(),
        _ => Vec::new(),
    };
    let mut commit = CommitBuilder::new(dataset.clone());
    if let Some(rows) = uncommitted.affected_rows {
        commit = commit.with_affected_rows(rows);
    }
    match commit.execute(transaction).await.map_err(StoreError::from) {
        Ok(committed) => {
            let version = committed.version().version;
            table.checkout_latest().await?;
            Ok((updated, version))
        }
        Err(e) => {
            if e.is_retryable() {
                remove_uncommitted(&dataset, &written).await;
            }
            Err(e)
        }
    }
}

/// Remove the data files of a staging batch whose commit was refused (certainly not
/// committed: a conflict). They hold copies of the rows the batch rewrote; when the conflict
/// was another process's erase of one of them, an erase that already swept the unreferenced
/// files (`store::orphans`) would otherwise leave that copy on disk for good.
async fn remove_uncommitted(dataset: &lance::Dataset, files: &[String]) {
    let store = match dataset.object_store(None).await {
        Ok(store) => store,
        Err(e) => {
            tracing::warn!(error = %e, "could not remove a refused staging batch's files");
            return;
        }
    };
    let data_dir = dataset.data_dir();
    for name in files {
        if let Err(e) = store.delete(&data_dir.clone().join(name.as_str())).await {
            tracing::warn!(file = %name, error = %e, "could not remove a refused staging batch's file");
        }
    }
}

/// `id` and `vector_next` of the rows to stage, checked against the column's dimension.
fn staging_batch(
    ids: &[String],
    vectors: &[Vec<f32>],
    dimension: usize,
) -> Result<RecordBatch, StoreError> {
    if ids.len() != vectors.len() {
        return Err(StoreError::Schema(format!(
            "{} ids but {} vectors",
            ids.len(),
            vectors.len()
        )));
    }
    let mut flat = Vec::with_capacity(ids.len() * dimension);
    for v in vectors {
        if v.len() != dimension {
            return Err(StoreError::DimensionMismatch {
                table: dimension,
                model: v.len(),
            });
        }
        flat.extend_from_slice(v);
    }
    let list = FixedSizeListArray::try_new(
        item_field(DataType::Float32),
        dimension as i32,
        Arc::new(Float32Array::from(flat)),
        None,
    )?;
    let schema = Arc::new(Schema::new(vec![
        Field::new(COL_ID, DataType::Utf8, false),
        Field::new(COL_VECTOR_NEXT, vector_type(dimension), true),
    ]));
    Ok(RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(ids.iter())),
            Arc::new(list),
        ],
    )?)
}

/// What [`switch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Committed: `vector` holds the new model's vectors from this version on.
    Done { version: u64 },
    /// Rows without a new vector remain (appended by a process on the old model since the
    /// last pass): embed them first.
    Remaining(u64),
    /// The switch had already happened (another process, or an earlier attempt).
    AlreadyCurrent,
}

/// Rows per fragment when the switch first rewrites fragments (Lance's default target).
const PURGE_TARGET_ROWS: usize = 1 << 20;

/// Whether a fragment holds deleted rows. A row staged (rewritten with its new vector) or
/// erased during the re-embed stays in its old fragment as a deleted row, and its
/// `vector_next` there is NULL (or absent, in a fragment written before the column existed).
/// After the switch it reads as NULL in the non-null `vector`, and the flat vector search,
/// which reads a fragment's rows before it applies the deletion mask, failed with "unmasked
/// nulls for non-nullable field vector". So the switch rewrites such fragments first.
async fn holds_deleted_rows(table: &Table) -> Result<bool, StoreError> {
    table.checkout_latest().await?;
    let Some(wrapper) = table.dataset() else {
        return Ok(false);
    };
    let dataset = wrapper.get().await?;
    Ok(dataset
        .get_fragments()
        .iter()
        .any(|f| f.metadata().deletion_file.is_some()))
}

/// The switch: at one table version V, check that every row has its `vector_next`, then
/// commit, based on V, a `Project` that drops `vector` and makes `vector_next` the non-null
/// `vector` (its vector index goes with it). Lance makes a nullability-tightening `Project`
/// conflict with every value-writing commit (append, update, merge) in either order: one
/// staged before this commit fails to commit after it (its writer retries against the new
/// schema), and one committed after V fails this commit. Then the switch looks only at what
/// landed since (fragments it has not seen whole: a few appends) and commits again from the
/// latest version, up to [`SWITCH_COMMIT_TRIES`] times, so a stream of remembers from other
/// processes cannot hold it off: each retry is far shorter than a pass. A landed row without
/// `vector_next` (a process on the old model) or a delete hands back to the pass.
/// Deletes commute with the `Project`. Then the config records the model (guarded step).
pub(crate) async fn switch(table: &Table, model: &ModelInfo) -> Result<Switch, StoreError> {
    if holds_deleted_rows(table).await? {
        super::maintenance::pruning::purge_deleted_rows(table, PURGE_TARGET_ROWS).await?;
    }
    table.checkout_latest().await?;
    let wrapper = table
        .dataset()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    let mut dataset = wrapper.get().await?;
    // Fragments whose rows were all seen with a `vector_next`, as they were then.
    let mut checked: HashMap<u64, Fragment> = HashMap::new();
    let mut attempt = 0;
    loop {
        if let Some(verdict) = check_switchable(table, &dataset, model, &mut checked).await? {
            return Ok(verdict);
        }
        let read_version = dataset.version().version;
        let transaction = Transaction::new(
            read_version,
            Operation::Project {
                schema: switched_schema(&dataset, model),
                preserves_nullability: false,
            },
            None,
        );
        match CommitBuilder::new(dataset.clone())
            .execute(transaction)
            .await
            .map_err(StoreError::from)
        {
            Ok(committed) => {
                let version = committed.version().version;
                table.checkout_latest().await?;
                tracing::info!(
                    to_model = %model.id,
                    dimension = model.dimension,
                    read_version,
                    version,
                    attempts = attempt + 1,
                    "re-embed switched: every row's vector is the new model's"
                );
                record_model(table, model).await?;
                return Ok(Switch::Done { version });
            }
            // An append (or update) committed after the read version: look at what it added,
            // and try again at once from the latest version.
            Err(e) if e.is_retryable() && attempt < SWITCH_COMMIT_TRIES => {
                attempt += 1;
                tracing::debug!(attempt, error = %e, "the switch lost a commit race; re-checking what landed");
                table.checkout_latest().await?;
                dataset = wrapper.get().await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Tries of the switch's commit, each from the latest version, before the pass that called
/// it gives up for now. Remembers arriving every few ms win most races; each retry costs
/// only a look at what they added, so many are cheap.
const SWITCH_COMMIT_TRIES: u32 = 200;

/// Whether `dataset` may be switched as it is: `None` if so, else what to do instead. Every
/// row must have its `vector_next` and no fragment may hold deleted rows (see
/// [`holds_deleted_rows`]). Fragments in `checked` (unchanged since they were seen whole) are
/// not read again, so a retry after losing to a few appends reads only those appends.
async fn check_switchable(
    table: &Table,
    dataset: &lance::Dataset,
    model: &ModelInfo,
    checked: &mut HashMap<u64, Fragment>,
) -> Result<Option<Switch>, StoreError> {
    let Some(next) = dataset.schema().field(COL_VECTOR_NEXT) else {
        let cols = vector_columns(table).await?;
        if cols.is_current(model) {
            record_model(table, model).await?;
            return Ok(Some(Switch::AlreadyCurrent));
        }
        return Err(StoreError::Schema(
            "no re-embed is under way on this table (no vector_next column)".into(),
        ));
    };
    if next.metadata.get(FIELD_MODEL) != Some(&model.id) {
        return Err(StoreError::ModelMismatch {
            table: next.metadata.get(FIELD_MODEL).cloned().unwrap_or_default(),
            model: model.id.clone(),
        });
    }
    let fragments = dataset.fragments();
    if fragments.iter().any(|f| f.deletion_file.is_some()) {
        // A delete (or a staging batch) landed since the rewrite: another pass, and the
        // switch rewrites again.
        return Ok(Some(Switch::Remaining(0)));
    }
    let unseen: Vec<Fragment> = fragments
        .iter()
        .filter(|f| checked.get(&f.id) != Some(*f))
        .cloned()
        .collect();
    if !unseen.is_empty() {
        let remaining = if unseen.len() == fragments.len() {
            dataset
                .count_rows(Some(format!("{COL_VECTOR_NEXT} IS NULL")))
                .await? as u64
        } else {
            let mut scan = dataset.scan();
            scan.with_fragments(unseen.clone())
                .filter(&format!("{COL_VECTOR_NEXT} IS NULL"))?;
            scan.count_rows().await?
        };
        if remaining > 0 {
            return Ok(Some(Switch::Remaining(remaining)));
        }
        checked.extend(unseen.into_iter().map(|f| (f.id, f)));
    }
    Ok(None)
}

/// The schema after the switch: `vector` dropped, `vector_next` renamed to it, non-null, and
/// naming `model`.
fn switched_schema(dataset: &lance::Dataset, model: &ModelInfo) -> lance_core::datatypes::Schema {
    let mut projected = dataset.schema().clone();
    projected.fields.retain(|f| f.name != COL_VECTOR);
    for f in projected
        .fields
        .iter_mut()
        .filter(|f| f.name == COL_VECTOR_NEXT)
    {
        f.name = COL_VECTOR.to_string();
        f.nullable = false;
        f.metadata.insert(FIELD_MODEL.to_string(), model.id.clone());
    }
    projected
}

/// Bring the table config in line with `vector` after a switch (model, dimension, no target).
pub(crate) async fn record_model(table: &Table, model: &ModelInfo) -> Result<(), StoreError> {
    let entries = [
        (META_MODEL_ID.to_string(), model.id.clone()),
        (META_DIMENSION.to_string(), model.dimension.to_string()),
        (META_REEMBED_TARGET.to_string(), String::new()),
    ];
    update_config_settled(table, &entries, |c| {
        Ok(c.get(META_MODEL_ID) == Some(&model.id)
            && c.get(META_REEMBED_TARGET).is_none_or(|t| t.is_empty()))
    })
    .await
}

/// Whether a row delete (a forget, an expiry) committed after version `after`, by any process,
/// and the latest version. An erase rewrites the fragments its delete touched right after it;
/// a re-embed batch committed meanwhile makes that rewrite start over, so the re-embed gives
/// way when this says so. Looks at most the last 64 versions.
pub(crate) async fn deleted_since(table: &Table, after: u64) -> Result<(bool, u64), StoreError> {
    let wrapper = table
        .dataset()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    let dataset = wrapper.get().await?;
    let latest = dataset.version().version;
    let from = after.max(latest.saturating_sub(64)) + 1;
    for v in from..=latest {
        if let Ok(Some(t)) = dataset.read_transaction_by_version(v).await {
            if matches!(t.operation, Operation::Delete { .. }) {
                return Ok((true, latest));
            }
        }
    }
    Ok((false, latest))
}
