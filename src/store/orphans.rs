//! Data files no table version references that still hold erased rows.
//!
//! A commit writes its data files first and the manifest last. When the commit then fails (a
//! compaction that conflicts with a concurrent delete, an append whose manifest read vanished
//! under another process's prune, a crash in between), its files stay in `data/` referenced by
//! nothing; and the version pruner keeps such files for a week (`delete_unverified = false`),
//! because from outside they look the same as the files of a commit still in flight. A
//! compaction that lost the race to an erase holds copies of the rows the erase deleted.
//!
//! After an erase, every unreferenced data file is opened as a fragment of the table and its
//! ids are read; a file holding an erased id is removed. That is safe beside commits in
//! flight: a commit whose files hold a row deleted before it could only succeed by writing the
//! row back, and Lance refuses such a rewrite or update of a fragment a delete touched
//! (a retryable conflict: the commit is planned again, with new files). Unreferenced files
//! holding none of the ids (another process's append in flight) are left alone.

use std::collections::HashSet;
use std::sync::Arc;

use futures::TryStreamExt;
use lance::dataset::fragment::FileFragment;
use lancedb::arrow::arrow_array::{Array, RecordBatch, StringArray};
use lancedb::arrow::arrow_cast::cast;
use lancedb::arrow::arrow_schema::DataType;
use lancedb::Table;

use super::schema::COL_ID;
use super::StoreError;

/// What [`remove_orphans_holding`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrphanReport {
    /// Data files no version referenced.
    pub unreferenced: usize,
    /// Of those, files that held an erased row and were removed.
    pub removed: usize,
}

/// Remove the unreferenced data files that hold any of `erased` (ids of rows just deleted).
pub(crate) async fn remove_orphans_holding(
    table: &Table,
    erased: &HashSet<String>,
) -> Result<OrphanReport, StoreError> {
    let mut report = OrphanReport::default();
    if erased.is_empty() {
        return Ok(report);
    }
    table.checkout_latest().await?;
    let Some(wrapper) = table.dataset() else {
        return Ok(report);
    };
    let dataset = Arc::new(wrapper.get().await?.clone());
    let referenced = referenced_files(&dataset).await?;
    let store = dataset.object_store(None).await?;
    let data_dir = dataset.data_dir();
    let listed = match store.read_dir(data_dir.clone()).await {
        Ok(names) => names,
        Err(e) if e.to_string().contains("Not found") => return Ok(report),
        Err(e) => return Err(e.into()),
    };
    for name in listed {
        if referenced.contains(&name) || !name.ends_with(".lance") {
            continue;
        }
        report.unreferenced += 1;
        match holds_any(&dataset, &name, erased).await {
            Ok(true) => {
                store.delete(&data_dir.clone().join(name.as_str())).await?;
                report.removed += 1;
                tracing::info!(file = %name, "removed an unreferenced data file holding erased rows");
            }
            Ok(false) => {}
            // Not readable as a fragment: still being written, cut short by a writer killed
            // mid-write (kill -9), of another schema (a partial-column update), or gone. Its
            // bytes may still hold an erased row: ids are stored as plain strings, so look for
            // them there. A file still being written that holds a row deleted before it could
            // only commit by writing the row back, which Lance refuses (see the module header).
            Err(e) => {
                let path = data_dir.clone().join(name.as_str());
                let holds = match store.read_one_all(&path).await {
                    Ok(bytes) => bytes_hold_any(&bytes, erased),
                    Err(_) => false,
                };
                if holds {
                    store.delete(&path).await?;
                    report.removed += 1;
                    tracing::info!(file = %name, "removed an unreadable unreferenced data file holding erased rows");
                } else {
                    tracing::debug!(file = %name, error = %e, "unreferenced data file not read");
                }
            }
        }
    }
    Ok(report)
}

/// Whether any of `erased` appears in `bytes` as a plain string.
fn bytes_hold_any(bytes: &[u8], erased: &HashSet<String>) -> bool {
    erased.iter().any(|id| {
        let id = id.as_bytes();
        !id.is_empty() && bytes.windows(id.len()).any(|w| w == id)
    })
}

/// Every data file (relative to `data/`) some version of the table still references.
async fn referenced_files(dataset: &lance::Dataset) -> Result<HashSet<String>, StoreError> {
    let mut files = HashSet::new();
    for version in dataset.versions().await? {
        // Pruned since the listing by another process: its files are no longer protected.
        let Ok(at) = dataset.checkout_version(version.version).await else {
            continue;
        };
        for fragment in at.get_fragments() {
            for file in &fragment.metadata().files {
                files.insert(file.path.clone());
            }
        }
    }
    Ok(files)
}

/// Whether the data file `name` holds a row whose id is in `erased`.
async fn holds_any(
    dataset: &Arc<lance::Dataset>,
    name: &str,
    erased: &HashSet<String>,
) -> Result<bool, StoreError> {
    let fragment = FileFragment::create_from_file(name, dataset, 0, None).await?;
    let file = FileFragment::new(dataset.clone(), fragment);
    let mut scan = file.scan();
    scan.project(&[COL_ID])?;
    let batches: Vec<RecordBatch> = scan.try_into_stream().await?.try_collect().await?;
    for batch in batches {
        let Some(col) = batch.column_by_name(COL_ID) else {
            continue;
        };
        let ids = cast(col, &DataType::Utf8)?;
        let Some(ids) = ids.as_any().downcast_ref::<StringArray>() else {
            continue;
        };
        if (0..ids.len()).any(|i| ids.is_valid(i) && erased.contains(ids.value(i))) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod raw_bytes_tests {
    use super::bytes_hold_any;
    use std::collections::HashSet;

    #[test]
    fn an_erased_id_is_found_in_raw_bytes_and_nothing_else_is() {
        let erased: HashSet<String> = ["0b1d-erased".to_string()].into();
        assert!(bytes_hold_any(b"\x00\x07junk0b1d-erased\xff", &erased));
        assert!(!bytes_hold_any(b"\x00\x07junk0b1d-erase\xff", &erased));
        assert!(!bytes_hold_any(b"", &erased));
        assert!(!bytes_hold_any(
            b"anything",
            &HashSet::from([String::new()])
        ));
    }
}
