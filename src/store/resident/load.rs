//! Read the whole table into a [`Snapshot`]: one scan of the record columns and the vector,
//! pinned to the version it read.

use std::collections::{HashMap, HashSet};

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::Table;

use super::super::record::{from_batch, MemoryRecord};
use super::super::schema::{COL_VECTOR, RECORD_COLUMNS};
use super::super::StoreError;
use super::partition::Partition;
use super::Snapshot;

/// Scans that saw the table move while they read are retried this often, then given up (the
/// search stays on LanceDB until the next attempt).
const ATTEMPTS: usize = 3;

/// The table at one version, or `None` when every attempt raced a commit, or when it holds
/// more than `max_rows` rows.
pub async fn snapshot(
    table: &Table,
    dim: usize,
    max_rows: usize,
) -> Result<Option<Snapshot>, StoreError> {
    for _ in 0..ATTEMPTS {
        let before = table.version().await?;
        if max_rows == 0 || table.count_rows(None).await? > max_rows {
            return Ok(None);
        }
        let mut columns: Vec<&str> = RECORD_COLUMNS.to_vec();
        columns.push(COL_VECTOR);
        let batches: Vec<RecordBatch> = table
            .query()
            .select(Select::columns(&columns))
            .execute()
            .await?
            .try_collect()
            .await?;
        if table.version().await? != before {
            continue;
        }
        let mut partitions: HashMap<Option<String>, Partition> = HashMap::new();
        for batch in &batches {
            let vectors = vectors(batch, dim);
            for (record, vector) in from_batch(batch).into_iter().zip(vectors) {
                partitions
                    .entry(record.memory_scope.clone())
                    .or_insert_with(|| Partition::new(dim))
                    .push(record, &vector);
            }
        }
        return Ok(Some(Snapshot::new(before, dim, partitions)));
    }
    Ok(None)
}

/// The rows another process appended in the commit that made `version`: the fragments of
/// that version whose data files the Append transaction wrote (its own fragment ids are only
/// assigned when the manifest is built, so they are matched by file), read from the bucket or
/// directory with the record columns and the vector.
pub async fn appended_rows(
    dataset: &lance::Dataset,
    version: u64,
    written: &[lance::table::format::Fragment],
    dim: usize,
) -> lance::Result<Vec<(MemoryRecord, Vec<f32>)>> {
    let files: HashSet<&str> = written
        .iter()
        .flat_map(|f| f.files.iter().map(|d| d.path.as_str()))
        .collect();
    let at = dataset.checkout_version(version).await?;
    let fragments: Vec<lance::table::format::Fragment> = at
        .get_fragments()
        .into_iter()
        .map(|f| f.metadata().clone())
        .filter(|f| f.files.iter().any(|d| files.contains(d.path.as_str())))
        .collect();
    if fragments.len() != written.len() {
        return Err(lance::Error::invalid_input(format!(
            "version {version}: {} of the {} appended fragments found",
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
        .flat_map(|b| from_batch(b).into_iter().zip(vectors(b, dim)))
        .collect())
}

/// The vector column of a batch as one `Vec` per row (a NULL vector reads as zeros, which
/// matches nothing).
fn vectors(batch: &RecordBatch, dim: usize) -> Vec<Vec<f32>> {
    let n = batch.num_rows();
    let Some(list) = batch
        .column_by_name(COL_VECTOR)
        .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>())
    else {
        return vec![vec![0.0; dim]; n];
    };
    let Some(values) = list.values().as_any().downcast_ref::<Float32Array>() else {
        return vec![vec![0.0; dim]; n];
    };
    let width = list.value_length() as usize;
    (0..n)
        .map(|i| {
            if list.is_null(i) {
                return vec![0.0; dim];
            }
            let start = list.value_offset(i) as usize;
            values.values()[start..start + width].to_vec()
        })
        .collect()
}
