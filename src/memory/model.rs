//! The memory as callers see it, and the requests that create and recall memories.

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};

use crate::store::MemoryRecord;

pub use crate::config::MEMORY_TYPES;

/// Memory JSON (docs/design.md section 8). Vectors never leave the store.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Memory {
    pub id: String,
    pub content: String,
    pub reasoning: Option<String>,
    pub tags: Vec<String>,
    pub memory_type: String,
    pub strength: i32,
    pub is_active: bool,
    pub memory_scope: Option<String>,
    pub scope_source: Option<String>,
    /// RFC 3339; null only for damaged legacy rows.
    pub created_at: Option<String>,
    /// RFC 3339; null: never expires.
    pub expires_at: Option<String>,
    /// Who said it (sender id, and the name they had then); null when nobody in particular.
    pub speaker_id: Option<String>,
    pub speaker_name: Option<String>,
    /// The working-memory messages a consolidated memory came from; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub source_ids: Vec<String>,
    /// The members it is about, by sender id; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub about_ids: Vec<String>,
}

impl From<MemoryRecord> for Memory {
    fn from(r: MemoryRecord) -> Self {
        Memory {
            id: r.id,
            content: r.content,
            reasoning: r.reasoning,
            tags: r.tags,
            memory_type: r.memory_type,
            strength: r.strength,
            is_active: r.is_active,
            memory_scope: r.memory_scope,
            scope_source: r.scope_source,
            created_at: r
                .created_at
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Micros, true)),
            expires_at: r
                .expires_at
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Micros, true)),
            speaker_id: r.speaker_id,
            speaker_name: r.speaker_name,
            source_ids: r.source_ids,
            about_ids: r.about_ids,
        }
    }
}

/// A recalled memory with its similarity to the query (1 - cosine distance).
#[derive(Debug, Clone, Serialize)]
pub struct ScoredMemory {
    #[serde(flatten)]
    pub memory: Memory,
    pub score: f32,
}

/// `POST /v1/remember`. Unknown fields are refused, so nobody can smuggle in a scope.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RememberRequest {
    pub conversation_id: String,
    #[serde(alias = "judgment")]
    pub content: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default)]
    pub memory_type: Option<String>,
    #[serde(default)]
    pub strength: Option<i64>,
    #[serde(default)]
    pub persona: Option<String>,
    /// RFC 3339; overrides the memory type's TTL (`retention.*_ttl_days`).
    #[serde(default)]
    pub expires_at: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecallMode {
    #[default]
    Comprehensive,
    Chained,
}

/// `POST /v1/people/browse` and `/v1/people/forget`: a member of the platform the conversation
/// is on (`memory::person`), as the plugins send them; the conversation decides what a browse
/// may read and names the platform, nothing else.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonRequest {
    pub conversation_id: String,
    pub sender_id: String,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `POST /v1/people`: the members a conversation may read rows of.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeopleRequest {
    pub conversation_id: String,
}

/// One member in [`PeopleList`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PersonSeen {
    pub sender_id: String,
    /// The names they went by in the rows, in the order first seen.
    pub names: Vec<String>,
    /// Rows they said (messages and memories).
    pub said: usize,
    /// Long-term memories about them.
    pub about: usize,
}

impl PersonSeen {
    pub(crate) fn new(sender_id: String) -> PersonSeen {
        PersonSeen {
            sender_id,
            names: Vec::new(),
            said: 0,
            about: 0,
        }
    }
}

/// What `POST /v1/people` answers.
#[derive(Debug, Clone, Serialize)]
pub struct PeopleList {
    pub memory_scope: String,
    pub platform: String,
    pub people: Vec<PersonSeen>,
}

/// `POST /v1/recall`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallRequest {
    pub conversation_id: String,
    pub query: String,
    #[serde(default)]
    pub limit: Option<i64>,
    #[serde(default)]
    pub mode: RecallMode,
    /// Which searches to run; `recall.search` when absent.
    #[serde(default)]
    pub search: Option<crate::config::SearchKind>,
    #[serde(default)]
    pub entities: Vec<String>,
    #[serde(default)]
    pub persona: Option<String>,
    /// `true` holds the memories back for a message that asks for none (small talk, or a
    /// question whose answer is not visible; `memory::relevance`). Off by default: a recall
    /// through the API, an LLM tool or MCP is an explicit ask. The injection event
    /// (`on_llm_request`) sets it from `recall.relevance_gate`.
    #[serde(default)]
    pub relevance_gate: Option<bool>,
    /// The caller's IANA time zone, for time words in the query (`recall.timezone` when
    /// absent; `memory::time_words`).
    #[serde(default)]
    pub timezone: Option<String>,
    /// `false` searches the query as written, with no time window even when it names a time
    /// (to compare, or to find a memory by the words themselves). Default `true`.
    #[serde(default)]
    pub time_words: Option<bool>,
    /// The conversation's earlier turns, oldest first: the search asks with them beside the
    /// query, which weighs most (`memory::turns`). At most `turns::MAX_TURNS`.
    #[serde(default)]
    pub history: Vec<super::turns::Turn>,
    /// The asking member's sender id, as the plugins send it: a question in the first person
    /// ("我对什么过敏？") lifts what they said and what is about them (`memory::asker`).
    #[serde(default)]
    pub sender_id: Option<String>,
    /// Set by the injection path (`on_llm_request`) only, never by a caller: the recent
    /// messages are chosen for a prompt (`working::shown`).
    #[serde(skip)]
    pub for_prompt: bool,
    /// Set by the injection path only, when it is not a preview: only a recall for a prompt the
    /// bot is about to answer counts toward the threshold rule ("recalled a second time",
    /// design 5.13); a search from the operator page, a preview on the AstrBot dashboard or
    /// `/v1/recall` by hand does not.
    #[serde(skip)]
    pub counted: bool,
}

/// What a recall returns: the scope it ran under, whether legacy NULL rows were visible, hits.
#[derive(Debug, Clone, Serialize)]
pub struct RecallResponse {
    pub memory_scope: String,
    pub migration_mode: bool,
    pub memories: Vec<ScoredMemory>,
    /// Present when a search was left out: `"embedding_unavailable"` (the embedding provider
    /// failed; these came from the keyword search alone) or `"reembedding"` (keyword-only
    /// while the table's vectors are another model's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<&'static str>,
    /// Present when the relevance gate held the memories back: `"no_relevant_memory"` (the
    /// message reads as small talk, or no visible memory answers it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gated: Option<&'static str>,
    /// Present when the query named a time: the window searched, and whether it held nothing
    /// (then the memories come from a search without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_window: Option<TimeWindow>,
    /// Hits left out as the same fact as a returned memory in other words
    /// (`memory::distinct`); absent when none was.
    #[serde(skip_serializing_if = "is_zero")]
    pub merged_duplicates: usize,
    /// The working memory's tier (design 5.13): recent chat messages that answer the query,
    /// searched on their own beside the memories, with speaker and time.
    pub recent_messages: Vec<ScoredMemory>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The creation-time window a query's time words named (`memory::time_words`).
#[derive(Debug, Clone, Serialize)]
pub struct TimeWindow {
    /// The words, as the query wrote them.
    pub words: String,
    /// RFC 3339, inclusive.
    pub from: String,
    /// RFC 3339, exclusive.
    pub until: String,
    pub timezone: String,
    /// Nothing visible was created in the window; recall searched without it.
    pub empty: bool,
}

/// `POST /v1/forget`: without `memory_ids`, every memory written from the conversation; with
/// them, only those the conversation's own scope holds.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    pub conversation_id: String,
    #[serde(default)]
    pub memory_ids: Option<Vec<String>>,
    #[serde(default)]
    pub persona: Option<String>,
}

/// What a forget did. Rows are erased: no older table version or journal copy remains.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ForgetOutcome {
    /// Rows deleted.
    pub deleted: u64,
    /// Ids that were not deleted because this conversation cannot delete them (not in its own
    /// scope, or no such memory).
    pub refused: Vec<String>,
    /// Feedback jobs dropped before they were applied, because they would write what was erased.
    pub pending_feedback_dropped: usize,
}

/// `POST /v1/memories/browse`: the memories a conversation can see, newest first, without a
/// query (the operator page's list). Same scope rules as recall.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowseRequest {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub offset: Option<i64>,
    #[serde(default)]
    pub limit: Option<i64>,
    /// `true` lists the working memory's recent messages instead of the memories.
    #[serde(default)]
    pub messages: bool,
}

/// One page of visible memories and how many the conversation can see in all.
#[derive(Debug, Clone, Serialize)]
pub struct BrowseResponse {
    pub memory_scope: String,
    pub migration_mode: bool,
    pub total: usize,
    pub offset: usize,
    pub limit: usize,
    pub memories: Vec<Memory>,
}

/// What a remember did: the memory as stored, and whether the text was a fact the scope
/// already held (`memory::fact`), in which case `memory` is that existing memory, reinforced.
#[derive(Debug, Clone, Serialize)]
pub struct Remembered {
    pub memory: Memory,
    pub deduplicated: bool,
}

/// `POST /v1/memories/update`: correct a memory the conversation may recall. At least one of
/// `content`, `tags` and `expires_at`; the scope never changes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
    pub memory_id: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// RFC 3339, in the future.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// What an update wrote, and the scope of the conversation it ran as.
#[derive(Debug, Clone, Serialize)]
pub struct Updated {
    pub memory: Memory,
    pub memory_scope: String,
}
