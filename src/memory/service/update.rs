//! Correcting a memory (`POST /v1/memories/update`, the `core_memory_update` tool, MCP).
//!
//! Why a path of its own: a wrong memory could only be deleted; users want "不对，妈妈是对阿莫西林
//! 过敏" to fix it. The rules are those of recall and erase together:
//! - the row is read with the recall predicate of the caller's conversation, inside the query,
//!   so an id the conversation could not recall (another scope, expired, missing, deleted) is
//!   `not_found`, never a hint that it exists elsewhere;
//! - the scope, conversation, creation time and type never change; new text is validated and
//!   redacted like a remember's and embedded again;
//! - the replacement is one merge on the id, conditioned on the row still reading what was read
//!   (in its scope), and then the old row is erased as a forget erases it: its fragment is
//!   rewritten and older versions removed, and an erase notice makes every other process drop
//!   journal copies (`service/erase.rs`). The resident copy and its keyword index follow the
//!   commit like any other (`store::resident`).

use chrono::Utc;

use super::{conversation, invalid, MemoryService};
use crate::memory::model::{Memory, UpdateRequest, Updated};
use crate::memory::new_memory::{NewMemory, ValidMemory, MAX_ID_BYTES};
use crate::memory::{embed_passage, MemoryError};
use crate::store::{target_still, MemoryRecord};

/// Attempts when another write changes the row between the read and the replacement.
const UPDATE_ATTEMPTS: usize = 3;

impl MemoryService {
    /// Replace a memory's text, tags or expiry, as a conversation that may recall it.
    pub(crate) async fn update(&self, req: UpdateRequest) -> Result<Updated, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        if req.content.is_none() && req.tags.is_none() && req.expires_at.is_none() {
            return Err(invalid(
                "content",
                "give at least one of content, tags and expires_at",
            ));
        }
        let id = req.memory_id.trim();
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(invalid(
                "memory_id",
                format!("memory_id must be 1 to {MAX_ID_BYTES} bytes"),
            ));
        }
        let now = Utc::now();
        let expires_at = match req.expires_at.as_deref() {
            Some(raw) => Some(crate::memory::retention::parse_expires_at(raw, now)?),
            None => None,
        };
        for _ in 0..UPDATE_ATTEMPTS {
            let visible = self.visibility(&conversation, req.persona.as_deref());
            self.store.refresh().await?;
            let found = self
                .store
                .get_by_ids(&[id.to_string()], visible.to_sql().as_deref())
                .await?;
            let Some(old) = found.into_iter().next() else {
                return Err(MemoryError::NotFound("memory_id"));
            };
            let new = corrected(&old, &req, expires_at)?;
            let vector = embed_passage(self.embedder.as_ref(), &new.content).await?;
            let condition = target_still(old.memory_scope.as_deref(), &old.content);
            let began = Utc::now();
            let replaced = self
                .store
                .writer()
                .replace_erasing((new.clone(), vector), condition)
                .await?;
            if replaced == 0 {
                continue; // changed or erased since it was read: read it again
            }
            self.tell_others_update_erased(began, &new.id).await?;
            tracing::info!(
                conversation_id = conversation.as_str(),
                memory_scope = visible.memory_scope.as_str(),
                text_changed = new.content != old.content,
                "updated a memory"
            );
            return Ok(Updated {
                memory_scope: visible.memory_scope,
                memory: Memory::from(new),
            });
        }
        Err(MemoryError::Conflict(
            "the memory kept changing while it was updated; try again".into(),
        ))
    }
}

/// The row `old` becomes: new text (validated, redacted), tags and expiry where given, every
/// other column as it was.
fn corrected(
    old: &MemoryRecord,
    req: &UpdateRequest,
    expires_at: Option<chrono::DateTime<Utc>>,
) -> Result<MemoryRecord, MemoryError> {
    let ValidMemory { content, tags, .. } = NewMemory {
        content: req.content.clone().unwrap_or_else(|| old.content.clone()),
        reasoning: None,
        tags: Some(req.tags.clone().unwrap_or_else(|| old.tags.clone())),
        memory_type: Some(old.memory_type.clone()),
    }
    .parse()?;
    let mut new = old.clone();
    // Unchanged text stays byte for byte (redacting it again could only change a legacy row).
    if req.content.is_some() {
        new.content = content;
    }
    new.tags = tags;
    if expires_at.is_some() {
        new.expires_at = expires_at;
    }
    Ok(new)
}
