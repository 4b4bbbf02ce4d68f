//! The expiry sweeper: erases memories whose `expires_at` has passed.
//!
//! Recall already hides them (the alive clause is in its prefilter); the sweeper makes the
//! expiry real on disk with the same erase as `forget`: delete, rewrite the fragments that held
//! the rows, prune every older version. It runs only in the process holding the maintenance
//! lease, like compaction and version pruning.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::retention::expired_clause;
use crate::store::{Store, StoreError};

/// Sweep every `interval` while this process is the maintainer, until the writer is gone.
pub async fn run_sweeper(store: Store, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        if !store.is_maintainer() {
            continue;
        }
        match sweep_once(&store).await {
            Ok(_) => {}
            Err(StoreError::WriterGone) => return,
            Err(e) => tracing::warn!(error = %e, "expiry sweep failed; retrying next interval"),
        }
    }
}

/// Erase what has expired by now; returns how many rows went.
pub async fn sweep_once(store: &Store) -> Result<usize, StoreError> {
    let started = Instant::now();
    let predicate = expired_clause(Utc::now());
    let due = store.count(Some(predicate.clone())).await?;
    if due == 0 {
        return Ok(0);
    }
    let report = store.writer().erase(predicate).await?;
    tracing::info!(
        rows = report.deleted,
        versions_removed = report.versions_removed,
        bytes_removed = report.bytes_removed,
        ms = started.elapsed().as_millis() as u64,
        "expired memories erased"
    );
    Ok(report.deleted as usize)
}
