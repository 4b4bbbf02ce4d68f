//! What the working memory reports of itself: `working_memory` in `/v1/status` and `/metrics`,
//! and what became of one message sent to it. Plain values the service fills from its
//! [`WorkingMemory`](super::WorkingMemory) and the intake's queue, so the API layers name a
//! message's outcome without reaching into either.

use serde::Serialize;

/// What became of a message sent to the working memory.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageOutcome {
    /// Journaled and queued for embedding; searchable by keyword already.
    Accepted { id: String, memory_scope: String },
    /// Not stored: `"incognito"` or `"disabled"` (`working_memory.enabled` is off).
    NotStored(&'static str),
}

/// `working_memory` in `/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkingStatus {
    pub enabled: bool,
    /// Messages accepted and not yet embedded (keyword-searchable meanwhile).
    pub waiting: usize,
    /// How long the oldest waiting message has waited for its vector (milliseconds).
    pub vector_lag_ms: u64,
    /// Facts made long-term memories because a second member stated them again.
    pub restated: u64,
    /// Stored messages not compared with earlier ones because the check was behind.
    pub restatement_skipped: u64,
    /// Messages that could state a fact and that recalls returned a second time: each handed
    /// to the threshold rule's consolidation, but for the `recurrence_skipped` of them.
    pub recalled_again: u64,
    /// Messages returned a second time and not consolidated because that task was behind.
    pub recurrence_skipped: u64,
}
