//! The restatement rule's part of the service (design 5.13, `working::restatement`): each
//! message the worker stores is compared with the recent statements of its scope; when another
//! member said the same fact, the earlier statement becomes a long-term memory, with its
//! speaker and time and both messages as its sources, through the one consolidated-fact writer
//! (scope derived again, redaction, one copy of a fact).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Weak;

use tokio::sync::mpsc;

use super::MemoryService;
use crate::memory::model::Remembered;
use crate::memory::retention::RESTATED_REASONING;
use crate::memory::working::Consolidated;
use crate::memory::working::StoredMessage;
use crate::memory::MemoryError;

/// Check every message the worker stores, until the service is gone.
pub(super) async fn follow_stored_messages(
    service: Weak<MemoryService>,
    mut stored: mpsc::Receiver<StoredMessage>,
) {
    while let Some(message) = stored.recv().await {
        let Some(service) = service.upgrade() else {
            return;
        };
        if let Err(e) = service.consolidate_if_restated(&message).await {
            tracing::warn!(id = %message.record.id, error = %e, "could not check a message for a restated fact");
        }
    }
}

impl MemoryService {
    /// Make the fact `message` states a long-term memory when another member of its scope
    /// said it shortly before (`working::restatement`). Returns the memory written.
    pub(crate) async fn consolidate_if_restated(
        &self,
        message: &StoredMessage,
    ) -> Result<Option<Remembered>, MemoryError> {
        if !self.consolidator.settings.rules.restated {
            return Ok(None);
        }
        let bound = self.calibration.get().map(|fit| fit.duplicates);
        let earliest = match self.working.recent_statements.lock() {
            Ok(mut recent) => recent.restated_by(message, bound.as_ref()),
            Err(_) => None,
        };
        let Some(first) = earliest else {
            return Ok(None);
        };
        let Some(conversation_id) = first.conversation_id.clone() else {
            return Ok(None);
        };
        // Under the erase's own guard, and only while both messages are still stored: the
        // window is this process's memory, and a forget of either conversation (or the expiry
        // sweep) may have erased them since. A forget waits for a write in flight and erases
        // it, or it ran before and this finds a source gone.
        let _paused = self.feedback().pause().await;
        let sources = [first.id.clone(), message.record.id.clone()];
        if !self.all_stored(&sources).await? {
            self.forget_statements(&sources.iter().map(String::as_str).collect());
            return Ok(None);
        }
        let written = self
            .facts()
            .write(Consolidated {
                conversation_id,
                said_in: first.memory_scope.clone(),
                content: first.content,
                reasoning: RESTATED_REASONING,
                speaker_id: first.speaker_id,
                speaker_name: first.speaker_name,
                said_at: first.created_at,
                source_ids: sources.to_vec(),
            })
            .await?;
        if written.is_some() {
            self.working.restated.fetch_add(1, Ordering::Relaxed);
        }
        Ok(written)
    }

    /// Whether every row of `ids` is on the latest version of the table.
    async fn all_stored(&self, ids: &[String]) -> Result<bool, MemoryError> {
        self.store.refresh().await?;
        let rows = self.store.get_by_ids(ids, None).await?;
        Ok(ids.iter().all(|id| rows.iter().any(|r| &r.id == id)))
    }

    /// Drop erased messages from the restatement window (see `RecentStatements::forget`).
    pub(super) fn forget_statements(&self, erased: &HashSet<&str>) {
        if let Ok(mut recent) = self.working.recent_statements.lock() {
            recent.forget(erased);
        }
    }
}
