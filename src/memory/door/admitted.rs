//! A row the door let through, and the writes that take one.
//!
//! [`Admitted`] can only be made in `memory::door`, each constructor applying one writer's row
//! of the table (design section 2): its scope is stamped here, from what that writer may
//! write, whatever the draft said. The store's calls that add or replace rows are reached from
//! the memory layer only through the functions here and [`super::Repetitions`], which take an
//! `Admitted`, so a writer cannot hand the table a row the door did not see.

use super::{Refusal, Writer};
use crate::memory::MemoryError;
use crate::scope::{derive_scope, ConversationId, ScopeMap, ScopeName, ScopeSource};
use crate::store::schema::MESSAGE_TYPE;
use crate::store::{MemoryRecord, Store};

/// A memory row as the door let it through (see the module header).
#[derive(Debug, Clone)]
pub(crate) struct Admitted {
    record: MemoryRecord,
    writer: Writer,
}

impl Admitted {
    pub(super) fn new(writer: Writer, record: MemoryRecord) -> Admitted {
        Admitted { record, writer }
    }

    pub(crate) fn record(&self) -> &MemoryRecord {
        &self.record
    }

    pub(crate) fn writer(&self) -> Writer {
        self.writer
    }

    pub(crate) fn into_record(self) -> MemoryRecord {
        self.record
    }

    /// Write it under `id` (a fact's derived id, or the one its job assigned): the id is no
    /// part of what the door checks.
    pub(crate) fn set_id(&mut self, id: String) {
        self.record.id = id;
    }

    /// What the bot remembers (the remember tool, HTTP, MCP) in `conversation`: the scope
    /// `derive_scope` gives it (the map, the persona, else `unmapped_scope`). `None` when the
    /// conversation is incognito: nothing is written.
    pub(crate) fn remembered(
        map: &ScopeMap,
        conversation: &ConversationId,
        persona: Option<&str>,
        draft: MemoryRecord,
    ) -> Option<Admitted> {
        let scope = derive_scope(map, conversation, persona)?;
        Some(Admitted::new(
            Writer::Remember,
            stamped(draft, conversation, &scope.scope, scope.source),
        ))
    }

    /// A reflection's new memory: the scope its job was accepted with (derived then, with the
    /// same `derive_scope`; a map changed since applies to later writes only, rule 9).
    pub(crate) fn reflected(
        conversation: &ConversationId,
        scope: &ScopeName,
        source: ScopeSource,
        draft: MemoryRecord,
    ) -> Admitted {
        Admitted::new(
            Writer::Reflection,
            stamped(draft, conversation, scope, source),
        )
    }

    /// A reflection's merged memory, into `scope` (the job's), as its plan decided it: the plan
    /// merges only memories of that scope ([`may_merge`]), so a merge planned into any other
    /// scope (by an older release, which merged `public` into a private scope) is refused: a
    /// conversation merges what it may change, never a memory it only reads (design section 2).
    pub(crate) fn merged(
        conversation: &ConversationId,
        scope: &ScopeName,
        source: ScopeSource,
        draft: MemoryRecord,
    ) -> Result<Admitted, Refusal> {
        if draft.memory_scope.as_deref() != Some(scope.as_str()) {
            return Err(Refusal::ReadOnly);
        }
        Ok(Admitted::new(
            Writer::Merge,
            stamped(draft, conversation, scope, source),
        ))
    }

    /// A chat message of the working memory, with the chat scope its acceptance derived.
    pub(crate) fn message(record: MemoryRecord) -> Result<Admitted, MemoryError> {
        if record.memory_type != MESSAGE_TYPE
            || record.memory_scope.is_none()
            || record.conversation_id.is_none()
        {
            return Err(MemoryError::Internal(
                "a message row without its type, scope or conversation".into(),
            ));
        }
        Ok(Admitted::new(Writer::Message, record))
    }

    /// A row of an export, restored by the operator (`scopemem import`): its scope is the
    /// file's, checked there like every other field (`transfer::validate`).
    pub(crate) fn restored(record: MemoryRecord) -> Admitted {
        Admitted::new(Writer::Import, record)
    }
}

/// Whether memories of these scopes (`None`: a legacy row) may be merged into one of `scope`:
/// only when each is of that scope, or a legacy row while `null_writable` (a `public`
/// conversation in migration mode).
pub(crate) fn may_merge(
    scope: &str,
    member_scopes: &[Option<&str>],
    null_writable: bool,
) -> Result<(), Refusal> {
    let writable = |s: &Option<&str>| match s {
        Some(s) => *s == scope,
        None => null_writable,
    };
    match member_scopes.iter().all(writable) {
        true => Ok(()),
        false => Err(Refusal::ReadOnly),
    }
}

/// `draft` with the conversation and the scope the door decided.
fn stamped(
    mut draft: MemoryRecord,
    conversation: &ConversationId,
    scope: &ScopeName,
    source: ScopeSource,
) -> MemoryRecord {
    draft.conversation_id = Some(conversation.as_str().to_string());
    draft.memory_scope = Some(scope.as_str().to_string());
    draft.scope_source = Some(source.as_str().to_string());
    draft
}

/// Insert the rows whose id the table does not hold yet (a replay inserts nothing twice).
pub(crate) async fn insert_missing(
    store: &Store,
    rows: Vec<(Admitted, Vec<f32>)>,
) -> Result<u64, MemoryError> {
    let rows = rows.into_iter().map(|(a, v)| (a.record, v)).collect();
    Ok(store.writer().insert_missing(rows).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_takes_only_memories_of_its_own_scope() {
        assert_eq!(
            may_merge("家人", &[Some("家人"), Some("家人")], false),
            Ok(())
        );
        assert_eq!(
            may_merge("家人", &[Some("家人"), Some("public")], false),
            Err(Refusal::ReadOnly)
        );
        assert_eq!(may_merge("public", &[Some("public"), None], true), Ok(()));
        assert_eq!(
            may_merge("public", &[Some("public"), None], false),
            Err(Refusal::ReadOnly)
        );
    }
}
