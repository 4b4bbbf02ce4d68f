//! The working memory wired into the service (docs/design.md section 5.13): a message's stages
//! (`WorkingMemory::admit`) handed to the intake, the recent messages searched as a recall's
//! second tier through the recall path's own stages, the oldest messages over a scope's cap
//! erased through the one erase path, and the two rules' background tasks (the threshold rule
//! for a message recalls keep wanting, the restatement rule for each message the worker
//! stores), which hand their facts to the door's writer of a fact made of messages
//! (`door::fact`). What a message is and what the rules decide lives in
//! `memory::working`; this file holds what needs the service's other parts.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use chrono::Utc;

use super::erase::EraseJobs;
use super::{Asked, MemoryService, Visibility};
use crate::memory::door::{Changer, FactWriter};
use crate::memory::intake::AcceptError;
use crate::memory::model::{RecallMode, ScoredMemory};
use crate::memory::working::{self, MessageEvent, MessageOutcome, StoredMessage, WorkingStatus};
use crate::memory::MemoryError;
use crate::scope::ConversationId;
use crate::store::Selection;

/// Make each message a recall returned a second time a long-term memory (the threshold rule),
/// until the service is gone. Off the recall's path: see `working::handoff`.
pub(super) async fn consolidate_returned_again(
    service: Weak<MemoryService>,
    mut returned: tokio::sync::mpsc::Receiver<String>,
) {
    while let Some(id) = returned.recv().await {
        let Some(service) = service.upgrade() else {
            return;
        };
        if let Err(e) = service.facts().recalled_again(&id).await {
            tracing::warn!(id = %id, error = %e, "could not consolidate a recent message");
        }
    }
}

/// Check every message the worker stores for a fact another member stated before it (the
/// restatement rule), until the service is gone.
pub(super) async fn follow_stored_messages(
    service: Weak<MemoryService>,
    mut stored: tokio::sync::mpsc::Receiver<StoredMessage>,
) {
    while let Some(message) = stored.recv().await {
        let Some(service) = service.upgrade() else {
            return;
        };
        if !service.consolidator.settings.rules.restated {
            continue;
        }
        let bound = service.calibration.get().map(|fit| fit.duplicates);
        let checked = service
            .working
            .consolidate_if_restated(&message, bound.as_ref(), &service.facts())
            .await;
        if let Err(e) = checked {
            tracing::warn!(id = %message.record.id, error = %e, "could not check a message for a restated fact");
        }
    }
}

impl MemoryService {
    /// Check a chat message, derive its scope from the conversation id, redact it and journal it
    /// for the working memory. Incognito chats store nothing.
    /// The line also tells the conversation's foresight what was said (`service::prefetch`),
    /// but for an incognito chat's, of which nothing is kept.
    pub(crate) fn accept_message(&self, ev: MessageEvent) -> Result<MessageOutcome, AcceptError> {
        let said = (
            ev.text.clone(),
            ev.is_bot == Some(true),
            ev.to_bot == Some(true),
        );
        let conversation = ev.conversation_id.clone();
        let outcome = self.store_message(ev)?;
        let incognito = outcome == MessageOutcome::NotStored("incognito");
        match ConversationId::parse(&conversation) {
            Ok(conversation) if !incognito => {
                if said.2 {
                    // A member addressed the bot: the chat gets LLM passes (`budget::Active`).
                    self.consolidator.active.addressed(conversation.as_str());
                }
                self.foresee(conversation.as_str(), &said.0, said.1, said.2)
            }
            _ => {}
        }
        Ok(outcome)
    }

    fn store_message(&self, ev: MessageEvent) -> Result<MessageOutcome, AcceptError> {
        let settings = &self.settings.working;
        if !settings.enabled {
            ConversationId::parse(&ev.conversation_id).map_err(MemoryError::Scope)?;
            return Ok(MessageOutcome::NotStored("disabled"));
        }
        let admitted = self
            .working
            .admit(ev, &self.scopes, settings.ttl, Utc::now())?;
        match admitted {
            None => Ok(MessageOutcome::NotStored("incognito")),
            Some(accepted) => {
                if let (false, Some(name)) = (accepted.job.is_bot, &accepted.job.speaker_name) {
                    self.speakers
                        .learn(accepted.scope.as_str(), &accepted.job.speaker_id, name);
                }
                let memory_scope = accepted.scope.as_str().to_string();
                let conversation = accepted.conversation_id.clone();
                let id = self.feedback.accept_message(accepted)?;
                self.working.present.note();
                self.consolidator.triggers.message(conversation.as_str());
                Ok(MessageOutcome::Accepted { id, memory_scope })
            }
        }
    }

    pub fn working_status(&self) -> WorkingStatus {
        let pending = self.feedback.pending();
        WorkingStatus {
            enabled: self.settings.working.enabled,
            waiting: pending.len(),
            vector_lag_ms: pending.lag().as_millis() as u64,
            restated: self.working.restated.load(Ordering::Relaxed),
            restatement_skipped: self.feedback.stored_messages().skipped(),
            recalled_again: self.working.recurrences.due_so_far(),
            recurrence_skipped: self.working.returned_again.skipped(),
        }
    }

    /// The recall's second tier: the visible recent messages that answer the query, searched
    /// on their own through the recall path's stages (the same scope filter and relevance gate
    /// as the memories, no time window); what it shows and counts is the working memory's
    /// (`working::second_tier`).
    pub(super) async fn recent_messages(
        &self,
        asked: &Asked<'_>,
        visible: &Visibility,
        person: &crate::memory::speakers::Person,
    ) -> Result<Vec<ScoredMemory>, MemoryError> {
        let limit = self.settings.working.recall_limit;
        if limit == 0
            || !self.settings.working.enabled
            || !self.working.present.any(&self.store).await?
        {
            return Ok(Vec::new());
        }
        let messages = visible.of_messages();
        let mut req = asked.req.clone();
        req.mode = RecallMode::Comprehensive;
        let asked = Asked {
            req: &req,
            query: asked.query,
            about_person: asked.about_person,
            unforeseen_turns: asked.unforeseen_turns,
        };
        let pool = limit * working::CANDIDATES_PER_SHOWN;
        let deeper = match person.ids.is_empty() {
            true => 0,
            false => super::recall::PERSON_POOL,
        };
        let searched = self.search_visible(&asked, pool, deeper, &messages).await?;
        if searched.gated.is_some() {
            return Ok(Vec::new());
        }
        let chorus = working::Chorus::among(
            searched
                .found
                .candidates
                .iter()
                .map(|c| (c.record.content.as_str(), c.record.speaker_id.as_deref())),
        );
        let found = working::Found {
            ranked: self
                .rank_and_select(&req, pool, searched.search, searched.found, person)
                .memories,
            waiting: self
                .feedback
                .pending()
                .matching(&messages.rows, asked.query, pool),
            chorus,
        };
        let shown = working::TierAsked {
            query: asked.query,
            for_prompt: req.for_prompt,
            limit,
            counts: req.counted && self.consolidator.settings.rules.recalled_twice,
        };
        Ok(self.working.second_tier(found, &shown))
    }

    /// Erase the oldest messages of every scope that holds more than
    /// `working_memory.max_per_scope` (the sweeper's pass), through the one erase path.
    pub(crate) async fn erase_messages_over_cap(&self) -> Result<usize, MemoryError> {
        let cap = self.settings.working.max_per_scope;
        let mut erased = 0;
        for (scope, ids) in working::oldest_over_cap(&self.store, cap).await? {
            let outcome = self
                .erase_where(Selection::ids(ids).rows_sql(), EraseJobs::default())
                .await?;
            tracing::info!(
                memory_scope = %scope,
                rows = outcome.deleted,
                "oldest messages over the scope's working-memory cap erased"
            );
            erased += outcome.deleted as usize;
        }
        Ok(erased)
    }

    /// The door's writer of a fact made of messages (`door::fact`): both rules and the pass.
    pub(crate) fn facts(&self) -> FactWriter<'_> {
        FactWriter {
            store: &self.store,
            erase: self.feedback.erase_lock(),
            scopes: &self.scopes,
            embedder: self.embedder.as_ref(),
            repetitions: &self.repetitions,
            retention: &self.settings.retention,
            forgotten: &self.forgotten,
            refusals: &self.refusals,
            speakers: &self.speakers,
        }
    }

    /// The door's change of a stored memory's text (`door::change`): a correction and the
    /// pass's UPDATE.
    pub(crate) fn changer(&self) -> Changer<'_> {
        Changer {
            store: &self.store,
            erase: self.feedback.erase_lock(),
            embedder: self.embedder.as_ref(),
            forgotten: &self.forgotten,
            refusals: &self.refusals,
            speakers: &self.speakers,
        }
    }
}
