//! A fact's sources, checked: what a fact made of messages must stand on (design section 2).
//!
//! Every source is a message of the fact's own scope, still stored on the table's latest
//! version, at least one a member's (the bot's replies echo what it was told, or what it made
//! up), and none a message a forgotten fact was made of; the fact itself is not one a forget by
//! id erased. The messages' conversations are the conversations whose words the fact holds:
//! a forget of any of them erases it (`source_conversations`). The caller holds the erase lock,
//! so a forget either ran before this read (and the fact is refused) or waits for the write
//! (and erases it).

use std::collections::BTreeSet;

use super::{Forgotten, Refusal};
use crate::memory::MemoryError;
use crate::store::schema::BOT_TAG;
use crate::store::schema::MESSAGE_TYPE;
use crate::store::Store;

/// What checked sources give a fact: the conversations they were said in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SaidIn(pub(crate) BTreeSet<String>);

impl SaidIn {
    /// The conversations other than `writer`'s, for `source_conversations`.
    pub(crate) fn besides(&self, writer: &str) -> Vec<String> {
        self.0.iter().filter(|c| *c != writer).cloned().collect()
    }
}

/// Check `ids` as the sources of a fact of `scope` whose derived id is `fact_id`.
pub(crate) async fn check(
    store: &Store,
    forgotten: &Forgotten,
    ids: &[String],
    scope: &str,
    fact_id: Option<&str>,
) -> Result<Result<SaidIn, Refusal>, MemoryError> {
    if ids.is_empty() {
        return Ok(Err(Refusal::NoMemberSource));
    }
    store.refresh().await?;
    let rows = store.get_by_ids(ids, None).await?;
    if !ids.iter().all(|id| rows.iter().any(|r| &r.id == id)) {
        return Ok(Err(Refusal::SourcesGone));
    }
    let foreign = |r: &crate::store::MemoryRecord| {
        r.memory_type != MESSAGE_TYPE || r.memory_scope.as_deref() != Some(scope)
    };
    if rows.iter().any(foreign) {
        return Ok(Err(Refusal::ForeignSource));
    }
    let members = rows
        .iter()
        .any(|r| r.speaker_id.is_some() && !r.tags.iter().any(|t| t == BOT_TAG));
    if !members {
        return Ok(Err(Refusal::NoMemberSource));
    }
    let was_forgotten = forgotten.holds(fact_id, ids).await.map_err(|e| {
        MemoryError::Internal(format!("the forgotten facts could not be read: {e}"))
    })?;
    if was_forgotten {
        return Ok(Err(Refusal::Forgotten));
    }
    Ok(Ok(SaidIn(
        rows.into_iter().filter_map(|r| r.conversation_id).collect(),
    )))
}
