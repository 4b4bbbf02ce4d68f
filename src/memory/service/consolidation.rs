//! The LLM consolidation pass of the service (docs/design.md section 5.13,
//! `memory::consolidation`): a due conversation's recent messages and its scope's nearest
//! memories go to the chat endpoint; the checked decisions are applied as the conversation,
//! through the door (`memory::door`): an ADD as a fact made of messages, an UPDATE as a change
//! of a memory of the chat's own scope, and an UPDATE of a memory the pass may only read as an
//! ADD of the chat's scope, the memory left as it was.

use std::sync::Weak;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Asked, MemoryService};
use crate::memory::consolidation::budget::{estimate_tokens, Usage};
use crate::memory::consolidation::decisions::{self, ShownMemory, ShownMessage};
use crate::memory::consolidation::{Counters, Decision, PreparedPass, Shown};
use crate::memory::door::{self, Change, Changed, Consolidated, Refusal, Writer, Written};
use crate::memory::model::RecallRequest;
use crate::memory::working;
use crate::memory::MemoryError;
use crate::scope::ConversationId;
use crate::store::schema::BOT_TAG;

/// Stored memories shown beside the messages, nearest first.
const MEMORIES_SHOWN: usize = 10;
/// The query the nearest memories are found with: the messages' last characters.
const QUERY_CHARS: usize = 600;
/// How often the due conversations are looked for.
const TICK: Duration = Duration::from_secs(2);

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PassOutcome {
    pub messages: usize,
    pub added: usize,
    pub updated: usize,
    pub refused: usize,
}

impl MemoryService {
    /// Run the pass of every conversation that is due; returns how many ran.
    pub(crate) async fn consolidate_due(&self) -> usize {
        let c = &self.consolidator;
        if !c.budget.open() {
            return 0;
        }
        let admitted = self.admitted_to_passes();
        let due = c.triggers.due(
            c.settings.every_messages.max(1),
            c.settings.quiet,
            usize::MAX,
            &admitted,
        );
        let ran = due.len();
        for (conversation, since) in due {
            if !c.budget.open() {
                // The day's tokens are spent: the rest wait for tomorrow.
                c.triggers.later(&conversation);
                continue;
            }
            if self.feedback.pending().holds_conversation(&conversation) {
                c.triggers.later(&conversation);
                continue;
            }
            let outcome = self.consolidation_pass(&conversation, since).await;
            if matches!(outcome, Ok((PassOutcome { messages: 0, .. }, None))) {
                c.triggers.nothing_to_read(&conversation);
                continue;
            }
            let (read, until) = match &outcome {
                Ok((o, until)) => (o.messages, *until),
                Err(e) => {
                    tracing::warn!(error = %e, "consolidation pass failed; its messages are read again next time");
                    (0, None)
                }
            };
            c.triggers.finished(&conversation, read, until);
        }
        ran
    }

    /// One pass over `conversation_id`'s messages sent after `since`: the outcome, and the
    /// time of the newest message read (`None` when it applied nothing: read again next time).
    pub async fn consolidation_pass(
        &self,
        conversation_id: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<(PassOutcome, Option<DateTime<Utc>>), MemoryError> {
        let c = &self.consolidator;
        let Some(client) = c.client.as_ref() else {
            return Ok((PassOutcome::default(), None));
        };
        let Some(pass) = self.prepare_pass(conversation_id, since).await? else {
            return Ok((PassOutcome::default(), None));
        };
        Counters::bump(&c.counters.passes, 1);
        let prompt = pass.shown.prompt();
        let (answer, usage) = match client.complete(decisions::SYSTEM, &prompt).await {
            Ok(a) => a,
            Err(e) => {
                // A failed call is billed by some providers too: its prompt counts.
                c.budget
                    .spend(conversation_id, pass_tokens(&prompt, "", None));
                Counters::bump(&c.counters.failed, 1);
                return Err(MemoryError::Internal(format!("consolidation call: {e}")));
            }
        };
        c.budget
            .spend(conversation_id, pass_tokens(&prompt, &answer, usage));
        let newest = pass.newest;
        match self.apply_answer(pass, &answer).await? {
            Some(outcome) => Ok((outcome, Some(newest))),
            None => Err(MemoryError::Internal(
                "the consolidation answer was not the decisions JSON asked for".into(),
            )),
        }
    }

    /// What a pass over `conversation_id`'s messages sent after `since` shows the model; `None`
    /// when there is no such message.
    pub(super) async fn prepare_pass(
        &self,
        conversation_id: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<Option<PreparedPass>, MemoryError> {
        let conversation = ConversationId::parse(conversation_id)?;
        let (messages, said_in) = self.messages_since(&conversation, since).await?;
        let Some(newest) = messages.iter().map(|m| m.sent_at).max() else {
            return Ok(None);
        };
        let shown = Shown {
            memories: self.nearest_memories(&conversation, &messages).await?,
            messages,
        };
        Ok(Some(PreparedPass {
            conversation_id: conversation.as_str().to_string(),
            said_in,
            shown,
            newest,
        }))
    }

    /// Check the model's `answer` against what `pass` showed and apply its decisions as the
    /// conversation. A malformed answer applies nothing, is counted, and is `None`.
    pub(super) async fn apply_answer(
        &self,
        pass: PreparedPass,
        answer: &str,
    ) -> Result<Option<PassOutcome>, MemoryError> {
        let c = &self.consolidator;
        let conversation = ConversationId::parse(&pass.conversation_id)?;
        let parsed = match decisions::parse(answer, &pass.shown) {
            Ok(p) => p,
            Err(e) => {
                Counters::bump(&c.counters.malformed, 1);
                tracing::warn!(error = %e, "consolidation answer dropped");
                return Ok(None);
            }
        };
        let mut outcome = PassOutcome {
            messages: pass.shown.messages.len(),
            refused: parsed.refused,
            ..PassOutcome::default()
        };
        for decision in parsed.decisions {
            self.apply_decision(
                &conversation,
                &pass.said_in,
                &pass.shown,
                decision,
                &mut outcome,
            )
            .await?;
        }
        Counters::bump(&c.counters.added, outcome.added as u64);
        Counters::bump(&c.counters.updated, outcome.updated as u64);
        Counters::bump(&c.counters.refused, outcome.refused as u64);
        tracing::info!(
            conversation_id = conversation.as_str(),
            messages = outcome.messages,
            added = outcome.added,
            updated = outcome.updated,
            refused = outcome.refused,
            "consolidation pass applied"
        );
        Ok(Some(outcome))
    }

    async fn apply_decision(
        &self,
        conversation: &ConversationId,
        said_in: &Option<String>,
        shown: &Shown,
        decision: Decision,
        outcome: &mut PassOutcome,
    ) -> Result<(), MemoryError> {
        match decision {
            Decision::Add {
                content,
                source_ids,
                about,
            } => {
                let fact = pass_fact(conversation, said_in, shown, content, source_ids, about);
                match self.facts().write(Writer::Pass, fact).await? {
                    Written::Fact(_) => outcome.added += 1,
                    Written::Refused(_) => outcome.refused += 1,
                }
            }
            Decision::Update {
                id,
                content,
                source_ids,
                about,
            } => {
                let map = self.scopes.snapshot();
                let change = Change {
                    writer: Writer::Pass,
                    writable: door::writable(Writer::Pass, &map, conversation, None, false),
                    conversation: conversation.clone(),
                    memory_id: id,
                    content: Some(content.clone()),
                    tags: None,
                    expires_at: None,
                    visible: self.visibility(conversation, None).to_sql(),
                    source_ids: source_ids.clone(),
                    about: about.clone(),
                };
                match self.changer().change(change).await? {
                    Changed::Done { memory, began } => {
                        self.tell_others_update_erased(began, &memory.id).await?;
                        outcome.updated += 1;
                    }
                    // A memory the pass may only read stays as it was; the new text becomes a
                    // fact of the chat's own scope, under an ADD's rules (design section 2).
                    Changed::Refused(Refusal::ReadOnly) => {
                        let fact =
                            pass_fact(conversation, said_in, shown, content, source_ids, about);
                        match self.facts().write(Writer::Pass, fact).await? {
                            Written::Fact(_) => {
                                Counters::bump(&self.consolidator.counters.updates_added, 1);
                                outcome.added += 1;
                            }
                            Written::Refused(_) => outcome.refused += 1,
                        }
                    }
                    Changed::Refused(_) | Changed::NotFound => outcome.refused += 1,
                }
            }
        }
        Ok(())
    }

    /// The conversation's live messages sent after `since` as the pass shows them (at most
    /// `consolidation.max_messages`, the newest, oldest first), and the scope they were stored
    /// in (one conversation's messages share it).
    async fn messages_since(
        &self,
        conversation: &ConversationId,
        since: Option<DateTime<Utc>>,
    ) -> Result<(Vec<ShownMessage>, Option<String>), MemoryError> {
        let max = self.consolidator.settings.max_messages;
        let rows = working::said_since(&self.store, conversation, since, max).await?;
        let said_in = rows
            .iter()
            .find(|r| r.created_at.is_some())
            .and_then(|r| r.memory_scope.clone());
        let shown = rows
            .into_iter()
            .filter_map(|r| {
                let role = match r.tags.iter().any(|t| t == BOT_TAG) {
                    true => decisions::BOT,
                    false => decisions::MEMBER,
                };
                Some(ShownMessage {
                    role,
                    sent_at: r.created_at?,
                    speaker: r.speaker_name.unwrap_or_default(),
                    speaker_id: r.speaker_id.unwrap_or_default(),
                    id: r.id,
                    text: r.content,
                })
            })
            .collect();
        Ok((shown, said_in))
    }

    /// The long-term memories the conversation may recall that are nearest to the messages.
    async fn nearest_memories(
        &self,
        conversation: &ConversationId,
        messages: &[ShownMessage],
    ) -> Result<Vec<ShownMemory>, MemoryError> {
        let joined: Vec<&str> = messages.iter().map(|m| m.text.as_str()).collect();
        let joined = joined.join("\n");
        let skip = joined.chars().count().saturating_sub(QUERY_CHARS);
        let query: String = joined.chars().skip(skip).collect();
        let req = RecallRequest {
            conversation_id: conversation.as_str().to_string(),
            query,
            relevance_gate: Some(false),
            time_words: Some(false),
            ..RecallRequest::default()
        };
        let visible = self.visibility(conversation, None);
        let asked = Asked {
            req: &req,
            query: req.query.trim(),
            about_person: false,
            unforeseen_turns: false,
        };
        let searched = self
            .search_visible(&asked, MEMORIES_SHOWN, 0, &visible)
            .await?;
        let ranked = self.rank_and_select(
            &req,
            MEMORIES_SHOWN,
            searched.search,
            searched.found,
            &Default::default(),
        );
        let writable = door::writable(
            Writer::Pass,
            &self.scopes.snapshot(),
            conversation,
            None,
            false,
        );
        Ok(ranked
            .memories
            .into_iter()
            .map(|m| ShownMemory {
                may_change: writable.admits(m.memory.memory_scope.as_deref()),
                id: m.memory.id,
                content: m.memory.content,
            })
            .collect())
    }

    pub fn consolidation_status(&self) -> crate::memory::consolidation::ConsolidationStatus {
        self.consolidator.status()
    }
}

/// The tokens a pass spent: the provider's count, else an estimate of the system prompt, the
/// prompt and the answer (`budget::estimate_tokens`).
pub(super) fn pass_tokens(prompt: &str, answer: &str, usage: Option<Usage>) -> u64 {
    usage.and_then(|u| u.spent()).unwrap_or_else(|| {
        estimate_tokens(decisions::SYSTEM) + estimate_tokens(prompt) + estimate_tokens(answer)
    })
}

impl MemoryService {
    /// Which conversations get LLM passes now (`budget::Active`): mapped ones, and those that
    /// addressed the bot within `consolidation.active_days`.
    pub(super) fn admitted_to_passes(&self) -> impl Fn(&str) -> bool + '_ {
        let map = self.scopes.snapshot();
        move |conversation: &str| {
            let mapped = ConversationId::parse(conversation).is_ok_and(|c| {
                map.resolve_chat(&c).source == crate::scope::ScopeSource::Conversation
            });
            self.consolidator.active.admits(conversation, mapped)
        }
    }
}

/// The fact an ADD (or an UPDATE of a memory the pass may only read) says, as the conversation,
/// with the speaker of its first source and the time of its newest.
fn pass_fact(
    conversation: &ConversationId,
    said_in: &Option<String>,
    shown: &Shown,
    content: String,
    source_ids: Vec<String>,
    about: Vec<String>,
) -> Consolidated {
    let first = source_ids.first().and_then(|id| shown.message(id));
    let said_at = source_ids
        .iter()
        .filter_map(|id| shown.message(id).map(|m| m.sent_at))
        .max();
    Consolidated {
        conversation_id: conversation.as_str().to_string(),
        said_in: said_in.clone(),
        content,
        reasoning: "consolidated from the chat by the LLM pass",
        speaker_id: first.map(|m| m.speaker_id.clone()),
        speaker_name: first.map(|m| m.speaker.clone()).filter(|n| !n.is_empty()),
        said_at,
        source_ids,
        about,
    }
}

/// Run the due passes every [`TICK`] while the service lives (only with an LLM configured).
pub(crate) async fn run_consolidation(memory: Weak<MemoryService>) {
    loop {
        tokio::time::sleep(TICK).await;
        let Some(memory) = memory.upgrade() else {
            return;
        };
        memory.consolidate_due().await;
    }
}
