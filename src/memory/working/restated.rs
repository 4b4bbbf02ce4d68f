//! The restatement rule applied (design 5.13): each message the worker stores is compared with
//! the recent statements of its scope (`restatement`); when another member said the same fact
//! shortly before, the earlier statement becomes a long-term memory, with its speaker and time
//! and both messages as its sources, through the door's writer of a fact made of messages
//! (`door::fact`: scope derived again, written only while both messages are stored, under the
//! erase lock). A statement whose message is gone leaves the window.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::{StoredMessage, WorkingMemory};
use crate::embed::duplicates::DuplicateBound;
use crate::memory::door::{Consolidated, FactWriter, Refusal, Writer, Written};
use crate::memory::model::Remembered;
use crate::memory::retention::RESTATED_REASONING;
use crate::memory::MemoryError;

impl WorkingMemory {
    /// Make the fact `message` states a long-term memory when another member of its scope
    /// said it shortly before (`bound`: the model's duplicate bound, once measured). Returns
    /// the memory written.
    pub(crate) async fn consolidate_if_restated(
        &self,
        message: &StoredMessage,
        bound: Option<&DuplicateBound>,
        facts: &FactWriter<'_>,
    ) -> Result<Option<Remembered>, MemoryError> {
        let earliest = match self.recent_statements.lock() {
            Ok(mut recent) => recent.restated_by(message, bound),
            Err(_) => None,
        };
        let Some(first) = earliest else {
            return Ok(None);
        };
        let Some(conversation_id) = first.conversation_id.clone() else {
            return Ok(None);
        };
        let sources = vec![first.id.clone(), message.record.id.clone()];
        let fact = Consolidated {
            conversation_id,
            said_in: first.memory_scope.clone(),
            content: first.content,
            reasoning: RESTATED_REASONING,
            speaker_id: first.speaker_id,
            speaker_name: first.speaker_name,
            said_at: first.created_at,
            source_ids: sources.clone(),
            about: vec![],
        };
        match facts.write(Writer::Rule, fact).await? {
            Written::Fact(written) => {
                self.restated.fetch_add(1, Ordering::Relaxed);
                Ok(Some(*written))
            }
            Written::Refused(Refusal::SourcesGone) => {
                self.forget_statements(&sources.iter().map(String::as_str).collect());
                Ok(None)
            }
            Written::Refused(_) => Ok(None),
        }
    }

    /// Drop erased messages from the restatement window (see `RecentStatements::forget`).
    pub(crate) fn forget_statements(&self, erased: &HashSet<&str>) {
        if let Ok(mut recent) = self.recent_statements.lock() {
            recent.forget(erased);
        }
    }
}
