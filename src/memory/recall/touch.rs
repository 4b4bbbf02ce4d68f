//! Recording recalls, off the request path: which memories a recall returned sets their
//! `last_recalled_at` (the decay clock) and, with `retention.refresh_on_recall`, pushes their
//! expiry out to now + their type's TTL. A memory a rule without an LLM made
//! (`memory::retention`) has its expiry pushed out to now + `retention.rule_made_ttl_days`
//! whatever `refresh_on_recall` says: recalled again is what keeps it.
//!
//! Only on when decay ranking, refresh-on-recall or the rule-made TTL needs it: each flush is a
//! row update, so recalls are collected for a moment and written in one batch per kind. With
//! the rule-made TTL alone (the default), only the rule-made memories a recall returned are
//! sent here, `last_recalled_at` is left alone, and an expiry is pushed out only once it is a
//! day or more short of the TTL: a recall of anything else writes nothing, and a rule-made
//! memory recalled all day long is one update a day.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;

use crate::memory::retention::{Retention, RULE_MADE_REASONINGS, RULE_MADE_SLACK};
use crate::store::schema::{COL_EXPIRES_AT, COL_LAST_RECALLED_AT, COL_MEMORY_TYPE, COL_REASONING};
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
    /// Start the task that writes recorded recalls through `store`'s writer; `stamps`: set
    /// `last_recalled_at` too (decay ranking or refresh-on-recall is on).
    pub(crate) fn spawn(store: Store, retention: Retention, stamps: bool) -> RecallTouches {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, store, retention, stamps));
        RecallTouches { tx }
    }

    /// Record that a recall returned these memories.
    pub(crate) fn record(&self, ids: Vec<String>) {
        if !ids.is_empty() {
            // The receiver is gone only while shutting down.
            let _ = self.tx.send(ids);
        }
    }
}

async fn run(
    mut rx: mpsc::UnboundedReceiver<Vec<String>>,
    store: Store,
    retention: Retention,
    stamps: bool,
) {
    while let Some(first) = rx.recv().await {
        let mut ids: BTreeSet<String> = first.into_iter().collect();
        let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
        while let Ok(Some(more)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            ids.extend(more);
        }
        match flush(&store, &retention, &ids, stamps).await {
            Ok(()) => tracing::debug!(rows = ids.len(), "recalls recorded"),
            Err(StoreError::WriterGone) => return,
            Err(e) => tracing::warn!(error = %e, rows = ids.len(), "could not record recalls"),
        }
    }
}

/// With `stamps`, one update for `last_recalled_at`; with the rule-made TTL, one for the
/// rule-made rows a day or more short of it; with refresh-on-recall, one per memory type with a
/// TTL: `expires_at` becomes `max(expires_at, now + TTL)` (a NULL expiry stays NULL: never).
pub(crate) async fn flush(
    store: &Store,
    retention: &Retention,
    ids: &BTreeSet<String>,
    stamps: bool,
) -> Result<(), StoreError> {
    let now = Utc::now();
    let rows = Selection::ids(ids.iter().cloned()).rows_sql();
    if stamps {
        store
            .writer()
            .update(
                rows.clone(),
                vec![(COL_LAST_RECALLED_AT.into(), timestamp_literal(now))],
            )
            .await?;
    }
    if let Some(ttl) = retention.rule_made_ttl {
        let until = timestamp_literal(now + ttl);
        let short = timestamp_literal(now + ttl - RULE_MADE_SLACK);
        let made_by: Vec<String> = RULE_MADE_REASONINGS
            .iter()
            .map(|r| sql_literal(r))
            .collect();
        let predicate = format!(
            "{rows} AND {COL_REASONING} IN ({}) AND {COL_EXPIRES_AT} IS NOT NULL \
             AND {COL_EXPIRES_AT} < {short}",
            made_by.join(", ")
        );
        store
            .writer()
            .update(predicate, vec![(COL_EXPIRES_AT.into(), until)])
            .await?;
    }
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
