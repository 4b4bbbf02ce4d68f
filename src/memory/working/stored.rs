//! The messages the feedback worker has just stored, with their vectors, handed to the
//! service's restatement check (`working::restatement`). The worker writes and goes on: the
//! check runs on its own task, behind a bounded [`Handoff`], so a burst never slows the ingest.
//! What does not fit is not checked, and counted: agreement is a hint, and the recall
//! threshold rule and the LLM pass still see those messages.

use super::handoff::Handoff;
use crate::store::MemoryRecord;

/// Messages waiting for the restatement check at most.
pub const CAPACITY: usize = 4096;

/// A message as stored, with its vector (unit length).
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub record: MemoryRecord,
    pub vector: Vec<f32>,
}

/// The hand-off between the worker (which offers) and the check.
pub type StoredMessages = Handoff<StoredMessage>;

/// An empty hand-off of [`CAPACITY`].
pub(crate) fn stored_messages() -> StoredMessages {
    Handoff::with_capacity(CAPACITY)
}
