//! A conversation's messages since a time, as the LLM consolidation pass reads them
//! (`memory::consolidation`): the live ones (not expired) sent after the last pass, oldest
//! first, at most the newest `max`, from the table's latest version so a message another
//! process stored or erased is seen as it is now.

use chrono::{DateTime, Utc};

use super::MESSAGE_TYPE;
use crate::scope::ConversationId;
use crate::store::filter::alive_clause;
use crate::store::schema::{COL_CREATED_AT, COL_MEMORY_TYPE};
use crate::store::{sql_literal, timestamp_literal, MemoryRecord, Selection, Store, StoreError};

/// `conversation`'s live messages sent after `since`, oldest first, at most `max` (the newest).
pub(crate) async fn said_since(
    store: &Store,
    conversation: &ConversationId,
    since: Option<DateTime<Utc>>,
    max: usize,
) -> Result<Vec<MemoryRecord>, StoreError> {
    let mut predicate = format!(
        "{COL_MEMORY_TYPE} = {} AND {}",
        sql_literal(MESSAGE_TYPE),
        alive_clause(Utc::now())
    );
    if let Some(t) = since {
        predicate.push_str(&format!(" AND {COL_CREATED_AT} > {}", timestamp_literal(t)));
    }
    let rows = Selection::conversation(conversation.as_str()).and_sql(&predicate);
    store.refresh().await?;
    let mut page = store.page_newest(Some(&rows), 0, max.max(1)).await?.rows;
    page.reverse();
    Ok(page)
}
