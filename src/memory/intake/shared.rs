//! What the worker and its stages share: what jobs write through, this process's journal,
//! the lock an erase holds against the worker, and what recent jobs did. Its own module, below
//! every stage, so that the stages (queue, batch, worker, plan, apply) depend downward on it
//! and not on the queue that owns it.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::Notify;

use super::journal_files::InstanceJournal;
use super::*;
use crate::memory::feedback::Writes;
use std::sync::Arc;

/// What the worker and its stages share.
pub(super) struct Shared {
    /// What a reflection's stages write through; messages use its store and embedder.
    pub(super) writes: Writes,
    /// This process's journal (and the lock that marks it alive).
    pub(super) files: InstanceJournal,
    /// Held by the worker while it applies a job, and by an erase for its whole duration, so an
    /// erase never races a job that would write back what it erases (`memory::erase_lock`).
    pub(super) apply: crate::memory::erase_lock::EraseLock,
    /// Jobs an erase dropped from the journal; the worker skips them when they come up.
    pub(super) dropped: Mutex<std::collections::HashSet<String>>,
    pub(super) outcomes: Mutex<VecDeque<JobOutcome>>,
    /// Rows recent jobs wrote, with when each job was accepted and finished: another
    /// process's erase that began between the two may have missed them (see
    /// `memory::erase_notices`).
    pub(super) written: Mutex<VecDeque<WrittenRows>>,
    pub(super) retry: RetryPolicy,
    /// Failed attempts that were retried, for metrics.
    pub(super) retries: std::sync::atomic::AtomicU64,
    /// Batches applied whole, for metrics.
    pub(super) batches: std::sync::atomic::AtomicU64,
    pub(super) finished: Notify,
    pub(super) depth: std::sync::atomic::AtomicUsize,
    /// Messages accepted and not yet written, searchable by keyword meanwhile.
    pub(super) pending: Arc<crate::memory::working::PendingMessages>,
    /// Messages just stored, with their vectors, for the restatement check.
    pub(super) stored: crate::memory::working::StoredMessages,
}

/// The rows one applied job wrote.
#[derive(Debug, Clone)]
pub(super) struct WrittenRows {
    pub(super) accepted_at: chrono::DateTime<chrono::Utc>,
    pub(super) finished_at: chrono::DateTime<chrono::Utc>,
    pub(super) ids: Vec<String>,
}

/// How long the rows a job wrote are remembered for a late erase notice: far longer than the
/// notices take to arrive (`storage.read_consistency_ms`).
const WRITTEN_KEPT: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

impl Shared {
    /// Remember the rows an applied job wrote (new and merged memories).
    pub(super) fn record_written(&self, job: &Job, outcome: &JobOutcome) {
        let ids: Vec<String> = outcome
            .created
            .iter()
            .chain(&outcome.merged)
            .cloned()
            .collect();
        if ids.is_empty() {
            return;
        }
        if let Ok(mut w) = self.written.lock() {
            let cutoff = chrono::Utc::now() - WRITTEN_KEPT;
            while w.front().is_some_and(|r| r.finished_at < cutoff) {
                w.pop_front();
            }
            w.push_back(WrittenRows {
                accepted_at: job.accepted_at(),
                finished_at: outcome.finished_at,
                ids,
            });
        }
    }
}
