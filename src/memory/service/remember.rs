//! The remember path: validate, let the door stamp the scope (`door::Admitted::remembered`,
//! `derive_scope`: the one place), embed, and then either add the memory or, when its scope
//! already holds the same fact, reinforce that memory instead of adding a second copy
//! (`door::repetition`, shared with every writer).

use std::time::Instant;

use chrono::Utc;

use super::{conversation, invalid, MemoryService, DEFAULT_STRENGTH};
use crate::memory::door::{derived_id, Admitted};
use crate::memory::model::{RememberRequest, Remembered};
use crate::memory::new_memory::{NewMemory, ValidMemory, MAX_STRENGTH};
use crate::memory::{embed_passage, MemoryError};
use crate::store::MemoryRecord;

impl MemoryService {
    /// Write one memory from the remember tool (active, caller-chosen strength), or reinforce
    /// the memory of its scope that states the same fact. `None` when the conversation is
    /// incognito: the input is still validated, nothing is embedded or stored.
    pub(crate) async fn remember(
        &self,
        req: RememberRequest,
    ) -> Result<Option<Remembered>, MemoryError> {
        let started = Instant::now();
        let conversation = conversation(&req.conversation_id)?;
        let strength = req.strength.unwrap_or(DEFAULT_STRENGTH);
        if !(1..=MAX_STRENGTH).contains(&strength) {
            return Err(invalid(
                "strength",
                format!("strength must be between 1 and {MAX_STRENGTH}"),
            ));
        }
        let ValidMemory {
            content,
            reasoning,
            tags,
            memory_type,
        } = NewMemory {
            content: req.content,
            reasoning: req.reasoning,
            tags: req.tags,
            memory_type: req.memory_type,
        }
        .parse()?;
        let now = Utc::now();
        let explicit = match req.expires_at.as_deref() {
            Some(raw) => Some(crate::memory::retention::parse_expires_at(raw, now)?),
            None => None,
        };
        let expires_at = self
            .settings
            .retention
            .expires_at(&memory_type, now, explicit);

        let map = self.scopes.snapshot();
        let draft = MemoryRecord {
            id: String::new(),
            content,
            reasoning,
            tags,
            memory_type,
            strength: strength as i32,
            is_active: true,
            conversation_id: None,
            created_at: Some(now),
            memory_scope: None,
            scope_source: None,
            expires_at,
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        };
        let Some(mut admitted) =
            Admitted::remembered(&map, &conversation, req.persona.as_deref(), draft)
        else {
            return Ok(None);
        };
        // Concurrent remembers share a commit: the writer waits for announced appends.
        let _coming = self.store.announce_append();
        let vector = embed_passage(self.embedder.as_ref(), &admitted.record().content).await?;
        let fresh_id = uuid::Uuid::now_v7().to_string();
        let scope = admitted.record().memory_scope.clone().unwrap_or_default();
        let source = admitted.record().scope_source.clone().unwrap_or_default();
        admitted.set_id(
            derived_id(&scope, &admitted.record().content).unwrap_or_else(|| fresh_id.clone()),
        );
        let outcome = self
            .repetitions
            .add_or_reinforce(admitted, vector, fresh_id)
            .await?;
        self.latency.record(started.elapsed());
        tracing::info!(
            conversation_id = conversation.as_str(),
            memory_scope = scope.as_str(),
            scope_source = source.as_str(),
            deduplicated = outcome.deduplicated,
            ms = started.elapsed().as_millis() as u64,
            "remembered"
        );
        if !outcome.deduplicated {
            if let Err(e) = self.search.maybe_build_index().await {
                tracing::warn!(error = %e, "could not check whether a vector index is due");
            }
        }
        Ok(Some(outcome))
    }
}
