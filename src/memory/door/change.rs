//! A memory's text changed: the door's row for a correction (`POST /v1/memories/update`, the
//! `core_memory_update` tool, MCP) and for the LLM pass's UPDATE.
//!
//! Why its own rules: a change writes the changer's words into a row other chats may read. So
//! - the row is read with the changer's recall predicate, inside the query: an id it could not
//!   recall (another scope, expired, missing, deleted) is `not_found`, never a hint that it
//!   exists elsewhere;
//! - it may change only a memory of a scope it writes ([`super::writable`]): a correction its
//!   own scope and its chat scope, the pass its chat scope alone. A memory it may only read
//!   (`public` from a mapped chat, a legacy row) is refused `read_only` and left as it was; the
//!   pass writes the new text as an ADD of its chat scope instead (design section 2);
//! - the pass's new text obeys an ADD's rules: it stands on its own, and its sources are
//!   member messages of the row's scope, still stored, none forgotten (`door::sources`);
//! - the row keeps its scope, conversation, creation time and type, and gains the sources and
//!   the conversations whose words it now holds (`source_ids`, `source_conversations`), so a
//!   forget of the changer's conversation erases it, and the members its new text is about
//!   (`about_ids`);
//! - the new text is validated and redacted like a remember's and embedded again; the
//!   replacement is one merge on the id, conditioned on the row still reading what was read,
//!   and the old row is erased as a forget erases it (its fragment rewritten, older versions
//!   removed). All under the erase lock: a forget waits for the change, or the change finds
//!   its sources gone.

use chrono::{DateTime, Utc};

use super::about::about;
use super::admitted::Admitted;
use super::{derived_id, sources, Forgotten, Refusal, Refusals, Writer};
use crate::embed::Embedder;
use crate::memory::erase_lock::EraseLock;
use crate::memory::new_memory::{NewMemory, ValidMemory};
use crate::memory::speakers::SpeakerNames;
use crate::memory::{embed_passage, MemoryError};
use crate::scope::ConversationId;
use crate::store::{target_still, MemoryRecord, ScopeSet, Store};
use scopemem_core::standalone::means_nothing_alone;

/// Attempts when another write changes the row between the read and the replacement.
const CHANGE_ATTEMPTS: usize = 3;

/// A change asked for.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// [`Writer::Correction`] or [`Writer::Pass`].
    pub(crate) writer: Writer,
    pub(crate) conversation: ConversationId,
    pub(crate) memory_id: String,
    pub(crate) content: Option<String>,
    pub(crate) tags: Option<Vec<String>>,
    pub(crate) expires_at: Option<DateTime<Utc>>,
    /// What the changer may read: the recall rule of its conversation (SQL; `None`: all).
    pub(crate) visible: Option<String>,
    /// What it may change ([`super::writable`]).
    pub(crate) writable: ScopeSet,
    /// The messages the new text comes from (the pass's; none for a correction).
    pub(crate) source_ids: Vec<String>,
    /// The members the pass says the new text is about (checked against what it showed).
    pub(crate) about: Vec<String>,
}

/// What became of a change.
#[derive(Debug)]
pub(crate) enum Changed {
    /// The row as replaced, and when the replacement began (for the erase notice).
    Done {
        memory: Box<MemoryRecord>,
        began: DateTime<Utc>,
    },
    /// No memory under this id that the changer may read.
    NotFound,
    Refused(Refusal),
}

/// What a change needs of the service.
pub(crate) struct Changer<'a> {
    pub(crate) store: &'a Store,
    pub(crate) erase: &'a EraseLock,
    pub(crate) embedder: &'a dyn Embedder,
    pub(crate) forgotten: &'a Forgotten,
    pub(crate) refusals: &'a Refusals,
    pub(crate) speakers: &'a SpeakerNames,
}

impl Changer<'_> {
    /// Apply `change` (see the module header).
    pub(crate) async fn change(&self, change: Change) -> Result<Changed, MemoryError> {
        let _held = self.erase.hold().await;
        for _ in 0..CHANGE_ATTEMPTS {
            self.store.refresh().await?;
            let found = self
                .store
                .get_by_ids(
                    std::slice::from_ref(&change.memory_id),
                    change.visible.as_deref(),
                )
                .await?;
            let Some(old) = found.into_iter().next() else {
                return Ok(Changed::NotFound);
            };
            let new = match self.admit(&change, &old).await? {
                Ok(new) => new,
                Err(why) => {
                    self.refusals.count(why);
                    tracing::info!(
                        writer = change.writer.as_str(),
                        reason = why.as_str(),
                        "change refused"
                    );
                    return Ok(Changed::Refused(why));
                }
            };
            let vector = embed_passage(self.embedder, &new.record().content).await?;
            let condition = target_still(old.memory_scope.as_deref(), &old.content);
            let began = Utc::now();
            let memory = new.into_record();
            let replaced = self
                .store
                .writer()
                .replace_erasing((memory.clone(), vector), condition)
                .await?;
            if replaced == 0 {
                continue; // changed or erased since it was read: read it again
            }
            tracing::info!(
                writer = change.writer.as_str(),
                conversation_id = change.conversation.as_str(),
                text_changed = memory.content != old.content,
                "changed a memory"
            );
            return Ok(Changed::Done {
                memory: Box::new(memory),
                began,
            });
        }
        Err(MemoryError::Conflict(
            "the memory kept changing while it was updated; try again".into(),
        ))
    }

    /// The row `old` becomes, or why the door refuses the change.
    async fn admit(
        &self,
        change: &Change,
        old: &MemoryRecord,
    ) -> Result<Result<Admitted, Refusal>, MemoryError> {
        if !change.writable.admits(old.memory_scope.as_deref()) {
            return Ok(Err(Refusal::ReadOnly));
        }
        let mut new = corrected(old, change)?;
        let text_changed = new.content != old.content;
        if change.writer == Writer::Pass {
            if means_nothing_alone(&new.content) {
                return Ok(Err(Refusal::NotAlone));
            }
            let scope = old.memory_scope.clone().unwrap_or_default();
            let fact_id = derived_id(&scope, &new.content);
            let said_in = match sources::check(
                self.store,
                self.forgotten,
                &change.source_ids,
                &scope,
                fact_id.as_deref(),
            )
            .await?
            {
                Ok(said_in) => said_in,
                Err(why) => return Ok(Err(why)),
            };
            for id in &change.source_ids {
                if !new.source_ids.contains(id) {
                    new.source_ids.push(id.clone());
                }
            }
            let writer = old.conversation_id.clone().unwrap_or_default();
            add_all(&mut new.source_conversations, said_in.besides(&writer));
        }
        let changer = change.conversation.as_str();
        if text_changed && old.conversation_id.as_deref() != Some(changer) {
            add_all(&mut new.source_conversations, [changer.to_string()]);
        }
        if text_changed {
            let scope = new.memory_scope.clone().unwrap_or_default();
            let speaker = new.speaker_id.clone();
            let about = about(
                self.speakers,
                &scope,
                speaker.as_deref(),
                &new.content,
                &change.about,
            );
            add_all(&mut new.about_ids, about);
        }
        Ok(Ok(Admitted::new(change.writer, new)))
    }
}

/// `items` added to `list`, each once.
fn add_all(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for item in items {
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

/// The row `old` becomes: new text (validated, redacted), tags and expiry where given, every
/// other column as it was.
fn corrected(old: &MemoryRecord, change: &Change) -> Result<MemoryRecord, MemoryError> {
    let ValidMemory { content, tags, .. } = NewMemory {
        content: change
            .content
            .clone()
            .unwrap_or_else(|| old.content.clone()),
        reasoning: None,
        tags: Some(change.tags.clone().unwrap_or_else(|| old.tags.clone())),
        memory_type: Some(old.memory_type.clone()),
    }
    .parse()?;
    let mut new = old.clone();
    // Unchanged text stays byte for byte (redacting it again could only change a legacy row).
    if change.content.is_some() {
        new.content = content;
    }
    new.tags = tags;
    if change.expires_at.is_some() {
        new.expires_at = change.expires_at;
    }
    Ok(new)
}
