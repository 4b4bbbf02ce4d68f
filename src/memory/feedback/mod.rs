//! The feedback (reflection) write path (docs/design.md section 6): where most memories are born.
//! One file per stage:
//! - [`accept`]: validate, derive the scope once from the conversation id (the same
//!   [`derive_scope`](crate::scope::derive_scope) as every other write), pre-assign ids;
//! - [`queue`]: journal the job durably before the 202, queue it, pause for erases, keep outcomes;
//! - [`worker`]: apply jobs in order, retry a failing one in place, dead-letter it at the end;
//! - [`batch`]: apply the jobs waiting together (one lookup, embedding, insert, update, two
//!   fsyncs), falling back to one at a time when a batch fails;
//! - [`plan`]: check ids against what the conversation may see, decide absolute changes;
//! - [`apply`]: embed, compare-and-set strengths, insert what is missing, delete what merges
//!   replace;
//! - [`journal`] / [`journal_files`]: the per-process journal and adoption of dead ones.

mod accept;
mod apply;
mod batch;
pub mod journal;
pub mod journal_files;
mod plan;
mod queue;
mod shared;
mod worker;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::memory::MemoryError;

pub(crate) use queue::QueueWrites;
pub use queue::{FeedbackPause, FeedbackQueue};

const MAX_IDS: usize = 100;
const MAX_NEW: usize = 50;
const MAX_GROUPS: usize = 20;
const MAX_GROUP_LEN: usize = 20;
const REINFORCE: i32 = 3;
const PASSIVE_STRENGTH: i32 = 10;

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

/// An accepted job as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeedbackJob {
    pub job_id: String,
    pub conversation_id: String,
    pub scope: String,
    pub scope_source: String,
    pub accepted_at: DateTime<Utc>,
    pub useful_memory_ids: Vec<String>,
    pub new_memories: Vec<NewMemoryJob>,
    pub merge_groups: Vec<MergeGroupJob>,
    /// A working-memory message (`memory::working`): a job holds feedback or one message,
    /// which is stored as it is (no plan, no folding into a stored fact).
    #[serde(default)]
    pub message: Option<crate::memory::working::MessageJob>,
}

/// The job ids of messages start so: their outcomes are not kept for `GET /v1/feedback`.
pub(crate) const MESSAGE_JOB_PREFIX: &str = "msgjob-";

impl FeedbackJob {
    /// A message's job, journal-ready.
    pub(crate) fn of_message(m: crate::memory::working::MessageAccepted) -> FeedbackJob {
        FeedbackJob {
            job_id: format!("{MESSAGE_JOB_PREFIX}{}", uuid::Uuid::now_v7()),
            conversation_id: m.conversation_id,
            scope: m.scope,
            scope_source: m.scope_source,
            accepted_at: Utc::now(),
            useful_memory_ids: vec![],
            new_memories: vec![],
            merge_groups: vec![],
            message: Some(m.job),
        }
    }

    /// The row of its message, if it is a message's job.
    pub(crate) fn message_record(&self) -> Option<crate::store::MemoryRecord> {
        let m = self.message.as_ref()?;
        Some(m.record(&self.conversation_id, &self.scope, &self.scope_source))
    }
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
    fn unapplied(job_id: String, state: JobState, error: String, attempts: u32) -> JobOutcome {
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

/// Queue size and retry policy (the `feedback` config section).
#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// Jobs that may wait before new feedback is answered 503.
    pub capacity: usize,
    pub retry: RetryPolicy,
    /// TTLs per memory type for the new memories feedback writes.
    pub retention: crate::memory::retention::Retention,
    /// Working-memory messages that may wait for their vectors before new ones get 503.
    pub message_capacity: usize,
}

/// How failed jobs are retried: in place (later jobs wait, so none overtakes it), with a
/// backoff doubling from `base` up to `cap`, and dead-lettered after `max_attempts`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl RetryPolicy {
    /// The pause before the attempt after `failed` failures.
    pub fn backoff(&self, failed: u32) -> Duration {
        let factor = 1u32 << failed.saturating_sub(1).min(16);
        self.base.saturating_mul(factor).min(self.cap)
    }
}

/// Why feedback could not be accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error(transparent)]
    Invalid(#[from] MemoryError),
    #[error("the feedback queue is full ({0} jobs waiting); retry later")]
    QueueFull(usize),
    #[error("{0} messages are waiting to be embedded; retry later")]
    MessagesFull(usize),
    #[error("{0}")]
    Journal(String),
}

fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
    MemoryError::InvalidInput {
        field,
        message: message.into(),
    }
}
