//! The intake: one path for everything the service is told to write later (design section 6).
//! A reflection's feedback and a chat message are both a [`Job`]; each is journaled durably
//! before it is acknowledged, queued, and applied in the order it came by one worker. One file
//! per stage:
//! - [`job`]: the job type and its journaled layout (older releases' journals replay as is);
//! - [`queue`]: journal a job before the reply, queue it, pause for erases, keep outcomes;
//! - [`worker`]: apply jobs in order, retry a failing one in place, dead-letter it at the end;
//! - [`batch`]: apply the jobs waiting together (one lookup, embedding, insert, update, two
//!   fsyncs), falling back to one at a time when a batch fails;
//! - [`message`]: store one message as it is (no plan, no folding into a stored fact);
//! - [`journal`] / [`journal_files`]: the per-process journal and adoption of dead ones;
//! - [`shared`]: what the worker and its stages share.
//!
//! What a reflection's job does is `memory::feedback`'s (accept, plan, apply); what a message
//! is, `memory::working`'s. The intake only runs them.

mod batch;
pub mod job;
pub mod journal;
pub mod journal_files;
mod message;
mod queue;
mod shared;
mod worker;

use std::time::Duration;

use crate::memory::feedback::{FeedbackPlan, JobOutcome, JobState};
use crate::memory::MemoryError;

pub use job::{Job, MessageTold};
pub use queue::FeedbackQueue;

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
    pub(crate) fn backoff(&self, failed: u32) -> Duration {
        let factor = 1u32 << failed.saturating_sub(1).min(16);
        self.base.saturating_mul(factor).min(self.cap)
    }
}

/// Why a job could not be accepted.
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
