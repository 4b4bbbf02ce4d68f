//! The expiry sweeper: erases memories whose `expires_at` has passed, and the oldest chat
//! messages of a scope past its working-memory cap.
//!
//! Recall already hides them (the alive clause is in its prefilter); the sweeper makes the
//! expiry real on disk through the service's one erase path, the same as `forget`: delete on
//! the latest version, rewrite the fragments that held the rows, prune every older version,
//! and drop the feedback jobs and journal lines that would write an expired row's text back.
//! It runs only in the process holding the maintenance lease, like compaction and version
//! pruning.

use std::sync::Weak;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::MemoryService;
use crate::memory::MemoryError;
use crate::store::filter::expired_clause;
use crate::store::StoreError;

/// Sweep every `interval` while this process is the maintainer, until the service or its
/// writer is gone.
pub(crate) async fn run_sweeper(memory: Weak<MemoryService>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let Some(memory) = memory.upgrade() else {
            return;
        };
        if !memory.is_maintainer() {
            continue;
        }
        match sweep_once(&memory).await {
            Ok(_) => {}
            Err(MemoryError::Store(StoreError::WriterGone)) => return,
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed; retrying next interval"),
        }
    }
}

/// Erase what has expired by now; returns how many rows went.
pub async fn sweep_once(memory: &MemoryService) -> Result<usize, MemoryError> {
    let started = Instant::now();
    let predicate = expired_clause(Utc::now());
    memory.store().refresh().await?;
    let over_cap = memory.erase_messages_over_cap().await?;
    let due = memory.store().count(Some(predicate.clone())).await?;
    if due == 0 {
        return Ok(over_cap);
    }
    let outcome = memory.erase_expired(predicate).await?;
    tracing::info!(
        rows = outcome.deleted,
        pending_feedback_dropped = outcome.pending_feedback_dropped,
        ms = started.elapsed().as_millis() as u64,
        "expired memories erased"
    );
    Ok(outcome.deleted as usize + over_cap)
}
