//! Rows matching a predicate, newest first, one page at a time (the operator page's browse).
//!
//! Lance has no `ORDER BY`, so a page reads only `id` and `created_at` of every matching row,
//! sorts those, and then fetches the full rows of the one page by id, under the same predicate.
//! The cost grows with the rows the predicate admits (two narrow columns), not with the page
//! size or the text.

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};

use super::record::{self, MemoryRecord};
use super::schema::{COL_CREATED_AT, COL_ID};
use super::{Store, StoreError};

/// One page of rows and how many rows matched in all.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Rows matching the predicate.
    pub total: usize,
    /// The rows of this page, newest `created_at` first (ties by id, descending).
    pub rows: Vec<MemoryRecord>,
}

impl Store {
    /// Rows matching `predicate` (`None`: every row), newest first, skipping `offset`, at most
    /// `limit`. Rows with no `created_at` (damaged legacy data) come last.
    pub(crate) async fn page_newest(
        &self,
        predicate: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let mut keys =
            super::commit::read_retrying(self.table(), || self.page_keys(predicate)).await?;
        let total = keys.len();
        // Descending: `Some(newer)` > `Some(older)` > `None`.
        keys.sort_unstable_by(|a, b| b.cmp(a));
        let wanted: Vec<String> = keys
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|(_, id)| id)
            .collect();
        // The page's rows under the same predicate: a legacy table may hold an id twice, and
        // the copy in another scope must not come back with it.
        let mut rows = self.get_by_ids(&wanted, predicate).await?;
        rows.sort_by_key(|r| wanted.iter().position(|id| id == &r.id));
        Ok(Page { total, rows })
    }

    /// `(created_at, id)` of every row matching `predicate`.
    async fn page_keys(
        &self,
        predicate: Option<&str>,
    ) -> Result<Vec<(Option<i64>, String)>, StoreError> {
        let mut query = self
            .table()
            .query()
            .select(Select::columns(&[COL_ID, COL_CREATED_AT]));
        if let Some(p) = predicate {
            query = query.only_if(p);
        }
        let mut stream = query.execute().await?;
        let mut keys: Vec<(Option<i64>, String)> = Vec::new();
        while let Some(batch) = stream.try_next().await? {
            let Some(ids) = batch
                .column_by_name(COL_ID)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            else {
                continue;
            };
            let created = record::created_at_micros(&batch);
            for i in 0..ids.len() {
                if ids.is_valid(i) {
                    let at = created
                        .as_ref()
                        .filter(|c| c.is_valid(i))
                        .map(|c| c.value(i));
                    keys.push((at, ids.value(i).to_string()));
                }
            }
        }
        Ok(keys)
    }
}
