//! Recording recalls, off the request path: which memories a recall returned sets their
//! `last_recalled_at` (the decay clock) and, with `retention.refresh_on_recall`, pushes their
//! expiry out to now + their type's TTL.
//!
//! Only on when decay ranking or refresh-on-recall is configured: each flush is a row update,
//! so recalls are collected for a moment and written in one batch per kind.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;

use crate::memory::retention::Retention;
use crate::store::schema::{COL_EXPIRES_AT, COL_LAST_RECALLED_AT, COL_MEMORY_TYPE};
use crate::store::timestamp_literal;
use crate::store::{sql_literal, Selection};
use crate::store::{Store, StoreError};

/// How long recalled ids are collected before one batch of updates.
const FLUSH_EVERY: Duration = Duration::from_secs(2);

/// The sending side: cheap to call from every recall.
#[derive(Clone)]
pub struct RecallTouches {
    tx: mpsc::UnboundedSender<Vec<String>>,
}

impl RecallTouches {
    /// Start the task that writes recorded recalls through `store`'s writer.
    pub fn spawn(store: Store, retention: Retention) -> RecallTouches {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, store, retention));
        RecallTouches { tx }
    }

    /// Record that a recall returned these memories.
    pub fn record(&self, ids: Vec<String>) {
        if !ids.is_empty() {
            // The receiver is gone only while shutting down.
            let _ = self.tx.send(ids);
        }
    }
}

async fn run(mut rx: mpsc::UnboundedReceiver<Vec<String>>, store: Store, retention: Retention) {
    while let Some(first) = rx.recv().await {
        let mut ids: BTreeSet<String> = first.into_iter().collect();
        let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
        while let Ok(Some(more)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            ids.extend(more);
        }
        match flush(&store, &retention, &ids).await {
            Ok(()) => tracing::debug!(rows = ids.len(), "recalls recorded"),
            Err(StoreError::WriterGone) => return,
            Err(e) => tracing::warn!(error = %e, rows = ids.len(), "could not record recalls"),
        }
    }
}

/// One update for `last_recalled_at`, and with refresh-on-recall one per memory type with a
/// TTL: `expires_at` becomes `max(expires_at, now + TTL)` (a NULL expiry stays NULL: never).
pub async fn flush(
    store: &Store,
    retention: &Retention,
    ids: &BTreeSet<String>,
) -> Result<(), StoreError> {
    let now = Utc::now();
    let rows = Selection::ids(ids.iter().cloned()).rows_sql();
    store
        .writer()
        .update(
            rows.clone(),
            vec![(COL_LAST_RECALLED_AT.into(), timestamp_literal(now))],
        )
        .await?;
    if !retention.refresh_on_recall {
        return Ok(());
    }
    for (memory_type, ttl) in retention.ttls() {
        let until = timestamp_literal(now + ttl);
        let predicate = format!(
            "{rows} AND {COL_MEMORY_TYPE} = {} AND {COL_EXPIRES_AT} IS NOT NULL \
             AND {COL_EXPIRES_AT} < {until}",
            sql_literal(memory_type)
        );
        store
            .writer()
            .update(predicate, vec![(COL_EXPIRES_AT.into(), until)])
            .await?;
    }
    Ok(())
}
