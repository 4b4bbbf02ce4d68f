//! Correcting a memory (`POST /v1/memories/update`, the `core_memory_update` tool, MCP).
//!
//! Why a path of its own: a wrong memory could only be deleted; users want "不对，妈妈是对阿莫西林
//! 过敏" to fix it. The request is checked here; the change itself is the door's
//! (`memory::door::change`): the row read with the conversation's recall predicate, changed
//! only when it is a memory of a scope the conversation writes (its scope or its chat scope,
//! never `public` from a mapped chat: `read_only`), replaced by one conditional merge and its
//! old copy erased from disk. Then every other process is told to drop journal copies of the
//! old text (`service/erase.rs`).

use chrono::Utc;

use super::{conversation, invalid, MemoryService};
use crate::memory::door::{self, Change, Changed, Refusal, Writer};
use crate::memory::model::{Memory, UpdateRequest, Updated};
use crate::memory::new_memory::MAX_ID_BYTES;
use crate::memory::MemoryError;

impl MemoryService {
    /// Replace a memory's text, tags or expiry, as a conversation that may write it.
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
        let expires_at = match req.expires_at.as_deref() {
            Some(raw) => Some(crate::memory::retention::parse_expires_at(raw, Utc::now())?),
            None => None,
        };
        let persona = req.persona.as_deref();
        let visible = self.visibility(&conversation, persona);
        let map = self.scopes.snapshot();
        let change = Change {
            writer: Writer::Correction,
            writable: door::writable(
                Writer::Correction,
                &map,
                &conversation,
                persona,
                self.migration_active(),
            ),
            conversation,
            memory_id: id.to_string(),
            content: req.content,
            tags: req.tags,
            expires_at,
            visible: visible.to_sql(),
            source_ids: vec![],
            about: vec![],
        };
        match self.changer().change(change).await? {
            Changed::Done { memory, began } => {
                self.tell_others_update_erased(began, &memory.id).await?;
                Ok(Updated {
                    memory_scope: visible.memory_scope,
                    memory: Memory::from(*memory),
                })
            }
            Changed::NotFound => Err(MemoryError::NotFound("memory_id")),
            Changed::Refused(Refusal::ReadOnly) => Err(MemoryError::ReadOnly),
            Changed::Refused(why) => Err(MemoryError::Internal(format!(
                "a correction was refused: {}",
                why.as_str()
            ))),
        }
    }
}
