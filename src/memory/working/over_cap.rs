//! Which messages the working memory's cap lets go (`working_memory.max_per_scope`): in every
//! scope holding more rows than the cap, its messages past the newest `cap`. The sweeper erases
//! them through the one erase path, so an erased message leaves disk, the pending queue and the
//! other processes as any forget does; this file only chooses them.

use super::MESSAGE_TYPE;
use crate::store::schema::COL_MEMORY_TYPE;
use crate::store::{sql_literal, Selection, Store, StoreError};

/// The ids of the oldest messages over the cap, per scope (scopes with none left out).
pub(crate) async fn oldest_over_cap(
    store: &Store,
    cap: usize,
) -> Result<Vec<(String, Vec<String>)>, StoreError> {
    let stats = store.stats().await?;
    let mut over = Vec::new();
    for (scope, rows) in stats.rows_by_scope {
        if rows <= cap {
            continue;
        }
        let messages = Selection::scope(&scope).and_sql(&format!(
            "{COL_MEMORY_TYPE} = {}",
            sql_literal(MESSAGE_TYPE)
        ));
        let oldest = store.page_newest(Some(&messages), cap, usize::MAX).await?;
        if !oldest.rows.is_empty() {
            over.push((scope, oldest.rows.into_iter().map(|r| r.id).collect()));
        }
    }
    Ok(over)
}
