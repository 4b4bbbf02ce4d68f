//! The feedback (reflection) write path (docs/design.md section 6): where most memories are born.
//! What a reflection's job is and does, one file per stage; the intake (`memory::intake`)
//! journals, queues and runs it beside the chat messages:
//! - [`accept`]: validate, derive the scope once from the conversation id (the same
//!   [`derive_scope`](crate::scope::derive_scope) as every other write), pre-assign ids;
//! - [`plan`]: check ids against what the conversation may see, decide absolute changes;
//! - [`apply`]: embed, compare-and-set strengths, insert what is missing, delete what merges
//!   replace.

mod accept;
mod apply;
mod plan;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::embed::Embedder;
use crate::memory::MemoryError;
use crate::migrate::MigrationGate;
use crate::scope::{ConversationId, ScopeName, ScopeSource};
use crate::store::Store;

pub(crate) use accept::validate;
pub(crate) use apply::{apply, merged_record, new_memory_record, set_strengths};
pub(crate) use plan::{ids_read, make_plan, plan_from};

/// What a reflection's stages read and write through: the store, the embedder, the migration
/// gate (legacy NULL rows are visible while it is on) and the folding of repeated facts.
pub(crate) struct Writes {
    pub(crate) store: Store,
    pub(crate) embedder: Arc<dyn Embedder>,
    pub(crate) gate: MigrationGate,
    pub(crate) repetitions: crate::memory::door::Repetitions,
}

const MAX_IDS: usize = 100;
const MAX_NEW: usize = 50;
const MAX_GROUPS: usize = 20;
const MAX_GROUP_LEN: usize = 20;
pub(crate) const REINFORCE: i32 = 3;
pub(crate) const PASSIVE_STRENGTH: i32 = 10;

/// `POST /v1/feedback`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub useful_memory_ids: Vec<String>,
    #[serde(default)]
    pub new_memories: Vec<NewMemory>,
    #[serde(default)]
    pub merge_groups: Vec<Vec<String>>,
}

pub use super::new_memory::NewMemory;

/// A new memory with its id assigned at acceptance (so a replay inserts it at most once).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewMemoryJob {
    pub id: String,
    pub content: String,
    pub reasoning: Option<String>,
    pub tags: Vec<String>,
    pub memory_type: String,
    /// Decided at acceptance from the type's TTL, so a replay writes the same expiry.
    /// (Absent in jobs journaled by older versions: they never expire.)
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergeGroupJob {
    pub new_id: String,
    pub ids: Vec<String>,
}

/// An accepted reflection's job, its ids assigned (journaled as an intake `Job`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeedbackJob {
    pub job_id: String,
    pub conversation_id: ConversationId,
    pub scope: ScopeName,
    pub scope_source: ScopeSource,
    pub accepted_at: DateTime<Utc>,
    pub useful_memory_ids: Vec<String>,
    pub new_memories: Vec<NewMemoryJob>,
    pub merge_groups: Vec<MergeGroupJob>,
}

/// A merge, fully decided: the merged memory and the rows it replaces.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergePlan {
    pub new_id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub memory_type: String,
    pub strength: i32,
    pub is_active: bool,
    pub memory_scope: String,
    pub scope_source: String,
    pub delete_ids: Vec<String>,
    /// The latest expiry among the merged memories, or `None` if any of them never expires:
    /// a merge never shortens or extends what its members had.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// The conversations whose words the members held, besides the merging one: a forget of
    /// any of them erases the merged memory. (Absent in plans of older versions.)
    #[serde(default)]
    pub source_conversations: Vec<String>,
}

/// Absolute changes: replaying a plan gives the same result as applying it once.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FeedbackPlan {
    /// (id, new strength).
    pub reinforce: Vec<(String, i32)>,
    /// The strength each reinforced row had when the plan was made: a replay only writes where
    /// it is unchanged, so an old plan never overwrites what a newer job did. (Empty in plans
    /// journaled by older versions, which apply unconditionally.)
    #[serde(default)]
    pub expected_strength: std::collections::BTreeMap<String, i32>,
    pub new_memories: Vec<NewMemoryJob>,
    pub merges: Vec<MergePlan>,
    /// (id or group, why) for everything refused.
    pub refused: Vec<(String, String)>,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Applied.
    Done,
    /// Dead-lettered after `feedback.max_attempts` failed attempts; never applied later.
    Failed,
    /// Dropped unapplied because an erase removed what it would touch.
    Dropped,
}

/// What a finished job did, for `GET /v1/feedback/{job_id}` (kept a day, across restarts).
/// Holds ids and counts, never memory text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobOutcome {
    pub job_id: String,
    pub state: JobState,
    pub reinforced: usize,
    pub created: Vec<String>,
    /// Stored memories a new memory of the job repeated, reinforced instead of copied.
    /// (Absent in outcomes journaled by older versions.)
    #[serde(default)]
    pub deduplicated: Vec<String>,
    pub merged: Vec<String>,
    pub refused: Vec<(String, String)>,
    pub error: Option<String>,
    /// Attempts it took (failed ones included).
    pub attempts: u32,
    pub finished_at: DateTime<Utc>,
}

impl JobOutcome {
    pub(crate) fn unapplied(
        job_id: String,
        state: JobState,
        error: String,
        attempts: u32,
    ) -> JobOutcome {
        JobOutcome {
            job_id,
            state,
            reinforced: 0,
            created: vec![],
            deduplicated: vec![],
            merged: vec![],
            refused: vec![],
            error: Some(error),
            attempts,
            finished_at: Utc::now(),
        }
    }
}

fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
    MemoryError::InvalidInput {
        field,
        message: message.into(),
    }
}
