//! A fact made of chat messages, written as a long-term memory: the door's row for the rules
//! without an LLM (`working::recurrence`, `working::restatement`) and the LLM pass's ADD
//! (`memory::consolidation`), so the rules a consolidated memory obeys cannot drift apart
//! between them:
//! - its scope is the chat's, derived again from the conversation id when it is written (design
//!   rule 11: an unmapped conversation's own private scope, never `public` because nobody
//!   mapped it), and when the map moved that conversation since the messages were said, or made
//!   it incognito, nothing is written: a fact never lands in a scope its messages were not said
//!   in;
//! - it stands on its own: words that mean nothing without the line they answer ("me too",
//!   "同上", `scopemem_core::standalone`) are never a memory;
//! - it is written under the erase lock (`memory::erase_lock`) and only while its sources hold
//!   (`door::sources`): every message it was made of is still stored, is a message of its
//!   scope, at least one a member's, and none belongs to a fact a forget by id erased; nor is
//!   the fact itself such a fact (`door::forgotten`). A forget that ran while a rule or an LLM
//!   (the host's answers minutes later) worked on the messages erased them, and the fact with
//!   them; a forget that comes during the write waits for it and erases what it wrote;
//! - it records the conversations its messages were said in besides its own
//!   (`source_conversations`), so a forget of any of them erases it, and the members it is
//!   about (`about_ids`, `door::about`);
//! - its text is redacted again (the rules a message was redacted with may have grown);
//! - one copy of a fact (`door::repetition`): a fact already stored is reinforced;
//! - a fact a rule without an LLM made lives `retention.rule_made_ttl_days` unless recalled
//!   again (`memory::retention`); the LLM pass's keeps its type's TTL.

use chrono::{DateTime, Utc};

use super::about::about;
use super::admitted::Admitted;
use super::{derived_id, sources, Forgotten, Refusal, Refusals, Repetitions, Writer};
use crate::embed::Embedder;
use crate::memory::erase_lock::EraseLock;
use crate::memory::model::Remembered;
use crate::memory::new_memory::DEFAULT_STRENGTH;
use crate::memory::redact::redact;
use crate::memory::retention::{Retention, RECALLED_AGAIN_REASONING, RULE_MADE_REASONINGS};
use crate::memory::speakers::SpeakerNames;
use crate::memory::{embed_passage, MemoryError};
use crate::scope::{derive_chat_scope, ConversationId, ScopeResolver};
use crate::store::schema::MESSAGE_TYPE;
use crate::store::{MemoryRecord, Store};
use scopemem_core::standalone::means_nothing_alone;

/// The memory type a consolidated message becomes.
const CONSOLIDATED_TYPE: &str = "knowledge";

/// A fact consolidated from chat messages, before it is written.
#[derive(Debug, Clone)]
pub(crate) struct Consolidated {
    pub(crate) conversation_id: String,
    /// The scope the messages were stored in.
    pub(crate) said_in: Option<String>,
    pub(crate) content: String,
    pub(crate) reasoning: &'static str,
    pub(crate) speaker_id: Option<String>,
    pub(crate) speaker_name: Option<String>,
    pub(crate) said_at: Option<DateTime<Utc>>,
    pub(crate) source_ids: Vec<String>,
    /// The members the pass says it is about (checked against the members it showed); the door
    /// adds the speaker of a first-person fact and the members it names (`door::about`).
    pub(crate) about: Vec<String>,
}

impl Consolidated {
    /// The stored message `id` as the fact the threshold rule makes of it (its text, speaker
    /// and time), read from the table's latest version; `None` once it is gone (erased or
    /// expired) or when `id` is not a message.
    async fn recalled_again(store: &Store, id: &str) -> Result<Option<Consolidated>, MemoryError> {
        store.refresh().await?;
        let rows = store.get_by_ids(&[id.to_string()], None).await?;
        let Some(message) = rows.into_iter().find(|r| r.memory_type == MESSAGE_TYPE) else {
            return Ok(None);
        };
        let Some(conversation_id) = message.conversation_id.clone() else {
            return Ok(None);
        };
        Ok(Some(Consolidated {
            conversation_id,
            said_in: message.memory_scope.clone(),
            content: message.content,
            reasoning: RECALLED_AGAIN_REASONING,
            speaker_id: message.speaker_id,
            speaker_name: message.speaker_name,
            said_at: message.created_at,
            source_ids: vec![message.id],
            about: vec![],
        }))
    }
}

/// What became of a consolidated fact handed to [`FactWriter::write`].
#[derive(Debug)]
pub(crate) enum Written {
    /// Written, or an equal fact of the scope reinforced.
    Fact(Box<Remembered>),
    /// Not written, and why (counted in the door's refusals).
    Refused(Refusal),
}

impl Written {
    /// The memory written, if any.
    pub(crate) fn fact(self) -> Option<Remembered> {
        match self {
            Written::Fact(m) => Some(*m),
            Written::Refused(_) => None,
        }
    }
}

/// What writing a consolidated fact needs of the service: the table, the erase lock, the scope
/// map, the model, the one-copy-of-a-fact path, the TTLs, the forgotten facts and the door's
/// count of refusals.
pub(crate) struct FactWriter<'a> {
    pub(crate) store: &'a Store,
    pub(crate) erase: &'a EraseLock,
    pub(crate) scopes: &'a ScopeResolver,
    pub(crate) embedder: &'a dyn Embedder,
    pub(crate) repetitions: &'a Repetitions,
    pub(crate) retention: &'a Retention,
    pub(crate) forgotten: &'a Forgotten,
    pub(crate) refusals: &'a Refusals,
    /// The names the scope's members went by, for who a fact is about.
    pub(crate) speakers: &'a SpeakerNames,
}

impl FactWriter<'_> {
    /// Write `fact` as a long-term memory of its conversation, unless the door refuses it (see
    /// the module header). `writer`: the rule or the pass that made it.
    pub(crate) async fn write(
        &self,
        writer: Writer,
        fact: Consolidated,
    ) -> Result<Written, MemoryError> {
        let _held = self.erase.hold().await;
        self.write_held(writer, fact).await
    }

    /// The threshold rule: make the stored message `id`, which recalls returned a second time,
    /// a long-term memory of its text, speaker and time. `None` when it is gone, moved or
    /// refused. The message is read under the erase lock.
    pub(crate) async fn recalled_again(&self, id: &str) -> Result<Option<Remembered>, MemoryError> {
        let _held = self.erase.hold().await;
        match Consolidated::recalled_again(self.store, id).await? {
            Some(fact) => Ok(self.write_held(Writer::Rule, fact).await?.fact()),
            None => Ok(None),
        }
    }

    /// [`write`](Self::write) once the erase lock is held.
    async fn write_held(&self, writer: Writer, fact: Consolidated) -> Result<Written, MemoryError> {
        match self.admit(writer, fact).await? {
            Ok((admitted, vector)) => {
                let fresh_id = uuid::Uuid::now_v7().to_string();
                let written = self
                    .repetitions
                    .add_or_reinforce(admitted, vector, fresh_id)
                    .await?;
                tracing::info!(
                    writer = writer.as_str(),
                    memory_scope = written.memory.memory_scope.as_deref().unwrap_or_default(),
                    id = %written.memory.id,
                    deduplicated = written.deduplicated,
                    "messages consolidated into a long-term memory"
                );
                Ok(Written::Fact(Box::new(written)))
            }
            Err(why) => {
                self.refusals.count(why);
                tracing::info!(
                    writer = writer.as_str(),
                    reason = why.as_str(),
                    "not consolidated"
                );
                Ok(Written::Refused(why))
            }
        }
    }

    /// The row `fact` becomes and its vector, once the door's checks hold (the erase lock is
    /// held); or why not.
    pub(super) async fn admit(
        &self,
        writer: Writer,
        fact: Consolidated,
    ) -> Result<Result<(Admitted, Vec<f32>), Refusal>, MemoryError> {
        let conversation = ConversationId::parse(&fact.conversation_id)?;
        let map = self.scopes.snapshot();
        let Some(scope) = derive_chat_scope(&map, &conversation) else {
            return Ok(Err(Refusal::ScopeMoved));
        };
        if fact.said_in.as_deref() != Some(scope.scope.as_str()) {
            return Ok(Err(Refusal::ScopeMoved));
        }
        let content = redact(&fact.content);
        if means_nothing_alone(&content) {
            return Ok(Err(Refusal::NotAlone));
        }
        let fact_id = derived_id(scope.scope.as_str(), &content);
        let said_in = match sources::check(
            self.store,
            self.forgotten,
            &fact.source_ids,
            scope.scope.as_str(),
            fact_id.as_deref(),
        )
        .await?
        {
            Ok(said_in) => said_in,
            Err(why) => return Ok(Err(why)),
        };
        let vector = embed_passage(self.embedder, &content).await?;
        let about = about(
            self.speakers,
            scope.scope.as_str(),
            fact.speaker_id.as_deref(),
            &content,
            &fact.about,
        );
        let now = Utc::now();
        let record = MemoryRecord {
            id: fact_id.unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
            content,
            reasoning: Some(fact.reasoning.to_string()),
            tags: vec![],
            memory_type: CONSOLIDATED_TYPE.into(),
            strength: DEFAULT_STRENGTH as i32,
            is_active: false,
            conversation_id: Some(conversation.as_str().to_string()),
            created_at: fact.said_at.or(Some(now)),
            memory_scope: Some(scope.scope.as_str().to_string()),
            scope_source: Some(scope.source.as_str().to_string()),
            expires_at: expiry(self.retention, fact.reasoning, now),
            last_recalled_at: None,
            speaker_id: fact.speaker_id,
            speaker_name: fact.speaker_name,
            source_ids: fact.source_ids,
            about_ids: about,
            source_conversations: said_in.besides(conversation.as_str()),
        };
        Ok(Ok((Admitted::new(writer, record), vector)))
    }
}

/// When a consolidated fact expires: a rule-made one after the rule-made TTL, when set;
/// otherwise (the LLM pass's, or with that TTL off) its type's TTL.
fn expiry(retention: &Retention, reasoning: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match retention.rule_made_ttl {
        Some(ttl) if RULE_MADE_REASONINGS.contains(&reasoning) => Some(now + ttl),
        _ => retention.expires_at(CONSOLIDATED_TYPE, now, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RetentionConfig;
    use crate::memory::retention::RESTATED_REASONING;

    fn retention(rule_made_days: u32, knowledge_days: u32) -> Retention {
        Retention::from_config(&RetentionConfig {
            ttl_days: [(CONSOLIDATED_TYPE.to_string(), knowledge_days)].into(),
            sweep_interval_secs: 60,
            refresh_on_recall: false,
            rule_made_ttl_days: rule_made_days,
        })
    }

    #[test]
    fn a_fact_a_rule_made_lives_the_rule_made_ttl_and_the_llm_pass_keeps_its_types() {
        let now = Utc::now();
        let both = retention(30, 0);
        for rule in [RECALLED_AGAIN_REASONING, RESTATED_REASONING] {
            assert_eq!(
                expiry(&both, rule, now),
                Some(now + chrono::Duration::days(30))
            );
        }
        assert_eq!(expiry(&both, "consolidated by the LLM pass", now), None);
        let typed = retention(0, 90);
        assert_eq!(
            expiry(&typed, RESTATED_REASONING, now),
            Some(now + chrono::Duration::days(90))
        );
        assert_eq!(
            expiry(&retention(30, 90), "consolidated by the LLM pass", now),
            Some(now + chrono::Duration::days(90))
        );
    }
}
