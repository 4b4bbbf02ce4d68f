//! What one commit did to the rows, read back from its Lance transaction and the fragments it
//! names: the rows it added and the ids it removed. Caches of the table (the resident copy)
//! follow a delete or another process's write this way instead of reading the whole table again.
//!
//! Why the diff of fragments and not the delete's predicate: the predicate is SQL the cache
//! cannot evaluate, and it says nothing about rows another process appended meanwhile. The
//! ids a fragment held before the commit, minus the ones it still holds after, are exactly
//! the rows the commit removed from it, whatever the predicate was.

use std::collections::HashSet;

use futures::TryStreamExt;
use lance::dataset::transaction::Operation;
use lance::table::format::Fragment;
use lance::Dataset;
use lancedb::arrow::arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use lancedb::arrow::arrow_array::{LargeStringArray, StringArray};

use super::record::{from_batch, MemoryRecord};
use super::schema::{COL_ID, COL_VECTOR, RECORD_COLUMNS};

/// The rows one commit removed (by id) and added (with their vectors). A row an update
/// rewrote is in both: removed first, then added with its new values.
#[derive(Debug, Default)]
pub struct RowChanges {
    pub removed: HashSet<String>,
    pub added: Vec<(MemoryRecord, Vec<f32>)>,
}

impl RowChanges {
    pub(crate) fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty()
    }
}

/// What the commit that made `version` did to the rows, or `None` for a commit this cannot
/// follow (an overwrite, a restore, a schema change, an update that rewrote columns in place):
/// then a cache must read the table again. Vectors are read as `dim` wide.
pub(crate) async fn changed(
    dataset: &Dataset,
    version: u64,
    operation: &Operation,
    dim: usize,
) -> lance::Result<Option<RowChanges>> {
    if keeps_rows(operation) {
        return Ok(Some(RowChanges::default()));
    }
    match operation {
        Operation::Append { fragments } => Ok(Some(RowChanges {
            removed: HashSet::new(),
            added: written_rows(dataset, version, fragments, dim).await?,
        })),
        Operation::Delete {
            updated_fragments,
            deleted_fragment_ids,
            ..
        } => Ok(Some(RowChanges {
            removed: removed_ids(dataset, version, updated_fragments, deleted_fragment_ids).await?,
            added: Vec::new(),
        })),
        Operation::Update {
            removed_fragment_ids,
            updated_fragments,
            new_fragments,
            ..
        } => {
            if !only_deletions_changed(dataset, version, updated_fragments).await? {
                return Ok(None);
            }
            Ok(Some(RowChanges {
                removed: removed_ids(dataset, version, updated_fragments, removed_fragment_ids)
                    .await?,
                added: written_rows(dataset, version, new_fragments, dim).await?,
            }))
        }
        _ => Ok(None),
    }
}

/// Whether a commit leaves every row's values as they were: compaction rewrites the same rows
/// into new files, an index build or a config change touches no row.
pub(crate) fn keeps_rows(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Rewrite { .. }
            | Operation::CreateIndex { .. }
            | Operation::ReserveFragments { .. }
            | Operation::UpdateConfig { .. }
    )
}

/// The versions after `from`, up to the dataset's, whose commits left every row as it was.
/// Versions whose transaction cannot be read are left out.
pub(crate) async fn kept_rows_since(dataset: &Dataset, from: u64) -> Vec<u64> {
    let mut kept = Vec::new();
    for v in from + 1..=dataset.version().version {
        if let Ok(Some(t)) = dataset.read_transaction_by_version(v).await {
            if keeps_rows(&t.operation) {
                kept.push(v);
            }
        }
    }
    kept
}

/// The ids a delete at `version` removed; `None` if that commit was not a delete.
pub(crate) async fn deleted(
    dataset: &Dataset,
    version: u64,
) -> lance::Result<Option<HashSet<String>>> {
    let Some(transaction) = dataset.read_transaction_by_version(version).await? else {
        return Ok(None);
    };
    if !matches!(transaction.operation, Operation::Delete { .. }) {
        return Ok(None);
    }
    // A delete adds no rows, so the vector width is never used.
    let changes = changed(dataset, version, &transaction.operation, 0).await?;
    Ok(changes.map(|c| c.removed))
}

/// Ids held before `version` by the fragments the commit updated or dropped, minus the ids
/// the updated ones still hold at `version`.
async fn removed_ids(
    dataset: &Dataset,
    version: u64,
    updated: &[Fragment],
    dropped: &[u64],
) -> lance::Result<HashSet<String>> {
    let updated_ids: HashSet<u64> = updated.iter().map(|f| f.id).collect();
    let touched: HashSet<u64> = updated_ids.iter().chain(dropped).copied().collect();
    if touched.is_empty() {
        return Ok(HashSet::new());
    }
    let before = checkout_before(dataset, version).await?;
    let mut removed = ids_in(&before, |f| touched.contains(&f.id)).await?;
    let after = dataset.checkout_version(version).await?;
    for id in ids_in(&after, |f| updated_ids.contains(&f.id)).await? {
        removed.remove(&id);
    }
    Ok(removed)
}

/// Whether each fragment the commit updated kept its data files (only its deletion file
/// changed), as an update that moves rewritten rows to new fragments leaves it.
async fn only_deletions_changed(
    dataset: &Dataset,
    version: u64,
    updated: &[Fragment],
) -> lance::Result<bool> {
    if updated.is_empty() {
        return Ok(true);
    }
    let before = checkout_before(dataset, version).await?;
    let old: Vec<Fragment> = before
        .get_fragments()
        .into_iter()
        .map(|f| f.metadata().clone())
        .collect();
    Ok(updated.iter().all(|new| {
        old.iter()
            .find(|f| f.id == new.id)
            .is_some_and(|f| f.files == new.files && f.overlays == new.overlays)
    }))
}

async fn checkout_before(dataset: &Dataset, version: u64) -> lance::Result<Dataset> {
    let previous = version.checked_sub(1).filter(|v| *v > 0).ok_or_else(|| {
        lance::Error::invalid_input(format!("version {version} has no previous version"))
    })?;
    dataset.checkout_version(previous).await
}

/// The `id` of every live row in the fragments of `at` that `keep` selects.
async fn ids_in(at: &Dataset, keep: impl Fn(&Fragment) -> bool) -> lance::Result<HashSet<String>> {
    let fragments: Vec<Fragment> = at
        .get_fragments()
        .into_iter()
        .map(|f| f.metadata().clone())
        .filter(|f| keep(f))
        .collect();
    let mut ids = HashSet::new();
    if fragments.is_empty() {
        return Ok(ids);
    }
    let mut scan = at.scan();
    scan.with_fragments(fragments).project(&[COL_ID])?;
    let batches: Vec<RecordBatch> = scan.try_into_stream().await?.try_collect().await?;
    for batch in &batches {
        let Some(column) = batch.column_by_name(COL_ID) else {
            continue;
        };
        if let Some(a) = column.as_any().downcast_ref::<StringArray>() {
            ids.extend(a.iter().flatten().map(str::to_owned));
        } else if let Some(a) = column.as_any().downcast_ref::<LargeStringArray>() {
            ids.extend(a.iter().flatten().map(str::to_owned));
        }
    }
    Ok(ids)
}

/// The rows of the fragments a commit wrote, as of `version`, with the record columns and the
/// vector. A commit's new fragments get their ids only when the manifest is built, so they
/// are matched by data file.
pub(crate) async fn written_rows(
    dataset: &Dataset,
    version: u64,
    written: &[Fragment],
    dim: usize,
) -> lance::Result<Vec<(MemoryRecord, Vec<f32>)>> {
    if written.is_empty() {
        return Ok(Vec::new());
    }
    let files: HashSet<&str> = written
        .iter()
        .flat_map(|f| f.files.iter().map(|d| d.path.as_str()))
        .collect();
    let at = dataset.checkout_version(version).await?;
    let fragments: Vec<Fragment> = at
        .get_fragments()
        .into_iter()
        .map(|f| f.metadata().clone())
        .filter(|f| f.files.iter().any(|d| files.contains(d.path.as_str())))
        .collect();
    if fragments.len() != written.len() {
        return Err(lance::Error::invalid_input(format!(
            "version {version}: {} of the {} written fragments found",
            fragments.len(),
            written.len()
        )));
    }
    let mut columns: Vec<&str> = RECORD_COLUMNS.to_vec();
    columns.push(COL_VECTOR);
    let mut scan = at.scan();
    scan.with_fragments(fragments).project(&columns)?;
    let batches: Vec<RecordBatch> = scan.try_into_stream().await?.try_collect().await?;
    Ok(batches
        .iter()
        .flat_map(|b| {
            let vectors = vectors(b);
            from_batch(b)
                .into_iter()
                .enumerate()
                .map(|(i, record)| {
                    let mut v = vectors.row(i, dim).to_vec();
                    v.resize(dim, 0.0);
                    (record, v)
                })
                .collect::<Vec<_>>()
        })
        .collect())
}

/// The vector column of a batch, read row by row without copying.
pub(crate) fn vectors(batch: &RecordBatch) -> Vectors<'_> {
    let list = batch
        .column_by_name(COL_VECTOR)
        .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>());
    let values = list.and_then(|l| l.values().as_any().downcast_ref::<Float32Array>());
    match (list, values) {
        (Some(list), Some(values)) => Vectors(Some((list, values.values()))),
        _ => Vectors(None),
    }
}

pub struct Vectors<'a>(Option<(&'a FixedSizeListArray, &'a [f32])>);

impl Vectors<'_> {
    /// Row `i`'s vector; a NULL or missing vector reads as empty, which the resident copy
    /// pads with zeros (matching nothing).
    pub(crate) fn row(&self, i: usize, dim: usize) -> &[f32] {
        let Some((list, values)) = self.0 else {
            return &[];
        };
        if list.is_null(i) {
            return &[];
        }
        let start = list.value_offset(i) as usize;
        let width = (list.value_length() as usize).min(dim);
        values.get(start..start + width).unwrap_or(&[])
    }
}
