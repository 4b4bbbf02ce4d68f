//! Who spoke in each scope, as the table holds it: the (scope, speaker id, speaker name) of
//! every row that names a speaker.
//!
//! Why: the index of names each member went by (`memory::speakers`) is learned from the
//! messages a process accepts, and lived in memory only: after a restart, a member renamed from
//! 张三 to 老张 was two strangers until they spoke again. Every message and fact already records
//! its speaker's id and the name they had, so the index is learned again from the rows when the
//! service starts; an import carries the rows, and with them the names.

use std::collections::BTreeSet;

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};

use super::commit::read_retrying;
use super::record::from_batch;
use super::schema::{COL_ABOUT_IDS, COL_MEMORY_SCOPE, COL_SPEAKER_ID, COL_SPEAKER_NAME, COL_TAGS};
use super::{MemoryRecord, Store, StoreError};

impl Store {
    /// The rows matching `predicate` with only who said them and who they are about (speaker
    /// id and name, `about_ids`, tags; every other field empty): what a list of a chat's people
    /// counts, without reading any text.
    pub(crate) async fn whose(&self, predicate: &str) -> Result<Vec<MemoryRecord>, StoreError> {
        read_retrying(self.table(), || async {
            let mut stream = self
                .table()
                .query()
                .only_if(predicate)
                .select(Select::columns(&[
                    COL_SPEAKER_ID,
                    COL_SPEAKER_NAME,
                    COL_ABOUT_IDS,
                    COL_TAGS,
                ]))
                .execute()
                .await?;
            let mut rows = Vec::new();
            while let Some(batch) = stream.try_next().await? {
                rows.extend(from_batch(&batch));
            }
            Ok(rows)
        })
        .await
    }

    /// Every distinct (scope, speaker id, speaker name) the rows hold, rows without a scope,
    /// an id or a name left out.
    pub(crate) async fn speakers(&self) -> Result<BTreeSet<(String, String, String)>, StoreError> {
        read_retrying(self.table(), || async {
            let mut stream = self
                .table()
                .query()
                .only_if(format!(
                    "{COL_SPEAKER_ID} IS NOT NULL AND {COL_SPEAKER_NAME} IS NOT NULL"
                ))
                .select(Select::columns(&[
                    COL_MEMORY_SCOPE,
                    COL_SPEAKER_ID,
                    COL_SPEAKER_NAME,
                ]))
                .execute()
                .await?;
            let mut seen = BTreeSet::new();
            while let Some(batch) = stream.try_next().await? {
                let col = |name: &str| {
                    batch
                        .column_by_name(name)
                        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                        .cloned()
                };
                let (Some(scope), Some(id), Some(name)) = (
                    col(COL_MEMORY_SCOPE),
                    col(COL_SPEAKER_ID),
                    col(COL_SPEAKER_NAME),
                ) else {
                    continue;
                };
                for i in 0..batch.num_rows() {
                    if scope.is_valid(i) && id.is_valid(i) && name.is_valid(i) {
                        let row = (scope.value(i), id.value(i), name.value(i));
                        seen.insert((row.0.to_owned(), row.1.to_owned(), row.2.to_owned()));
                    }
                }
            }
            Ok(seen)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use crate::store::testing::{open, row};

    #[tokio::test]
    async fn every_speaker_a_row_names_is_read_back_once_per_scope_and_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let mut rows = Vec::new();
        for (i, (scope, id, name)) in [
            ("家人", Some("u-zhang"), Some("张三")),
            ("家人", Some("u-zhang"), Some("老张")),
            ("家人", Some("u-zhang"), Some("张三")),
            ("工作", Some("u-zhang"), Some("张工")),
            ("家人", None, None),
            ("家人", Some("u-li"), None),
        ]
        .into_iter()
        .enumerate()
        {
            let (mut record, vector) = row(i, scope);
            record.speaker_id = id.map(str::to_string);
            record.speaker_name = name.map(str::to_string);
            rows.push((record, vector));
        }
        store.append(rows).await.unwrap();
        let got: Vec<(String, String, String)> =
            store.speakers().await.unwrap().into_iter().collect();
        let want: Vec<(String, String, String)> = [
            ("家人", "u-zhang", "张三"),
            ("家人", "u-zhang", "老张"),
            ("工作", "u-zhang", "张工"),
        ]
        .iter()
        .map(|(s, i, n)| (s.to_string(), i.to_string(), n.to_string()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
        assert_eq!(got, want);
    }
}
