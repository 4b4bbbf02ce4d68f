//! Re-embedding: changing the embedding model loses no memory.
//!
//! A table records the model its vectors came from. Starting with another model is refused
//! (`migration.reembed: "off"`, the default), or turned into a re-embed: `"auto"` in `serve`,
//! or `scopemem migrate reembed` in the foreground. A change of dimension (384 → 1024) is
//! the same operation.
//!
//! **Where the new vectors live.** In the table itself, in a second vector column,
//! `vector_next`, whose field metadata names the new model (`store::reembed`). Starting a
//! re-embed ([`prepare_at`], idempotent, by any process that opens the table with the new
//! model) adds that column and makes `vector` nullable: two metadata-only commits, no row
//! rewritten. A column rather than a side table because everything else then comes free:
//! - **resume** is the column itself: the rows left are `vector_next IS NULL`. A batch is one
//!   merge commit (`vector_next` patched where still NULL, keyed by `id`): after kill -9 the
//!   batch is in the table or not at all, and a row that has its new vector is never embedded
//!   into it again (the merge's condition), so none is written twice and none is skipped;
//! - **remember** during the re-embed writes the new model's vector straight into
//!   `vector_next` (and NULL into `vector`), so new rows are not re-embedded;
//! - **forget and expiry** delete the row, and with it both its vectors; erasing purges the
//!   older versions as always. A batch embedding a row that is erased meanwhile patches
//!   nothing: a merge without an insert clause cannot bring a row back.
//!
//! **Who runs it.** Only the maintenance-lease holder (like the backfill), in batches of
//! `migration.reembed_batch_size`, paced by `backfill.pacing` against the foreground latency
//! ([`super::pacing`]). A pass streams the rows left, embeds them as passages, and stages each
//! batch through the single writer while the next one embeds (the stage is a join over the
//! whole table, ~2 s per batch at 100k rows, which the provider need not wait for). When a
//! pass ends, its last batch is staged, then the switch.
//!
//! **The switch is one commit.** It first rewrites every fragment holding deleted rows (a row
//! staged or erased during the re-embed stays in its old fragment, deleted, with a NULL
//! `vector_next`: after the switch that NULL sat in the non-null `vector`, and the flat vector
//! search, which reads deleted rows before masking them, failed). At one table version V,
//! [`store::reembed::switch`] checks that no row lacks `vector_next` and no fragment holds
//! deleted rows, then commits, based on V, a Lance `Project` that drops
//! `vector`, renames `vector_next` to `vector` (with its model in the field metadata) and
//! makes it non-null. Every row moves to the new model in that commit, or none does: a reader
//! sees the old schema or the new one. Why no row is lost or brought back with other
//! processes writing:
//! - a Project rewrites no row: it only changes which column is `vector`. A delete committed
//!   at any time stays deleted; an erased row cannot come back;
//! - Lance makes a nullability-tightening Project conflict with every value-writing commit
//!   (append, update, merge) in either order. One that committed after V makes the switch
//!   fail (retryable): the switch checks only what landed since and commits again from the
//!   latest version (a row without `vector_next` or a delete among it hands back to a pass,
//!   which embeds what appeared, and the switch is tried again). One staged before the
//!   switch and committing after it is refused, and its writer shapes its batch again from
//!   the new schema (`store::writer`), so a remember in flight lands in the new `vector`;
//! - the table config then records the new model (a second step; until it happens the field
//!   metadata is what counts, and every open completes it).
//!
//! **Recall keeps serving.** A process whose configured model is not the one in `vector`
//! recalls keyword-only, under the same prefilter, and says so (`"degraded": "reembedding"`).
//! Every such process polls the schema every `storage.read_consistency_ms`; when `vector` holds
//! its model it goes back to the configured search (its resident copy reloads, because a
//! Project is a change it cannot explain) and re-reads whether a vector index exists (the old
//! one went with the old column; the lease holder builds a new one when the table is large).
//!
//! **Progress** is `reembed` in `/v1/status` (done/total, rows/s, ETA) and the CLI's bar; the
//! operator page does not show it yet.
//!
//! **Not covered yet.**
//! - A process still configured with the *old* model keeps writing old vectors into `vector`
//!   during the re-embed (they are re-embedded, another pass) and, after the switch, its
//!   writes are refused as a model mismatch. Every instance must carry the new model.
//! - Staging a batch is a merge that rewrites the matched rows (Lance refuses the in-place
//!   column patch on a table with an unenforced primary key), joined without the id index.
//!   It conflicts with an erase's rewrite (the run gives way for [`pass`]'s `ERASE_ROOM`
//!   after any delete). It does not conflict with appends: it is committed without the
//!   inserted-keys filter Lance attaches to merges on the primary key (it inserts nothing;
//!   see `store::reembed::stage_vectors`), so remembers from other processes every ~10 ms
//!   neither stop the passes nor, with the switch's quick retries, the switch
//!   (`remembers_racing_the_switch_all_land_with_the_new_model` in tests/reembed.rs).

mod pass;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use super::backfill::Pacing;
use super::{ForegroundLatency, MigrateError, MigrationOutcome};
use crate::config::DbLocation;
use crate::config::{BackfillPacing, Config};
use crate::embed::Embedder;
use crate::embed::ModelInfo;
use crate::store::reembed::{vector_columns, VectorColumns};
use crate::store::{LanceSearch, Store, StoreError, WriterSettings};

/// Rows still waiting for their new vector.
pub const PENDING: &str = "vector_next IS NULL";

/// Whether opening a table failed only because it holds another model's vectors: what
/// `migration.reembed: "auto"` turns into a re-embed.
pub(crate) fn is_model_change(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::ModelMismatch { .. } | StoreError::DimensionMismatch { .. }
    )
}

/// Start a re-embed of the table in `db` to `model`, before the store is opened (opening
/// refuses a table recorded with another model until then). Idempotent.
pub(crate) async fn prepare_at(
    db: &DbLocation,
    table_name: &str,
    model: &ModelInfo,
    read_consistency: Duration,
) -> Result<(), StoreError> {
    let (conn, _) = Store::connect(db, read_consistency).await?;
    let table = conn.open_table(table_name).execute().await?;
    crate::store::reembed::prepare(&table, model).await
}

/// [`crate::migrate::open_store_with`], except that with `auto` a table holding another
/// model's vectors is first prepared for a re-embed to `model` (otherwise the mismatch error,
/// which says how to re-embed, stands).
pub(crate) async fn open_store(
    db: &DbLocation,
    table_name: &str,
    model: &ModelInfo,
    settings: WriterSettings,
    read_consistency: Duration,
    auto: bool,
) -> Result<(Store, MigrationOutcome), StoreError> {
    let opened =
        super::open_store_with(db, table_name, model, settings.clone(), read_consistency).await;
    match opened {
        Err(e) if auto && is_model_change(&e) => {
            tracing::warn!(
                reason = %e,
                "migration.reembed = auto: every memory is re-embedded with the configured model \
                 in the background; recall is keyword-only until then"
            );
            prepare_at(db, table_name, model, read_consistency).await?;
            super::open_store_with(db, table_name, model, settings, read_consistency).await
        }
        other => other,
    }
}

/// How the re-embed runs.
#[derive(Debug, Clone)]
pub struct ReembedSettings {
    /// Rows embedded and committed per batch.
    pub batch_size: usize,
    pub pacing: Pacing,
    /// How often a process that does not run it looks whether the switch happened.
    pub follow_every: Duration,
}

impl ReembedSettings {
    /// From `migration.*`, `backfill.pacing` (shared with the backfill) and the read
    /// consistency (how soon another process's switch can be seen at all).
    pub(crate) fn from_config(
        config: &Config,
        latency: &Arc<ForegroundLatency>,
    ) -> ReembedSettings {
        ReembedSettings {
            batch_size: config.migration.reembed_batch_size.max(1),
            pacing: match config.backfill.pacing {
                BackfillPacing::Fixed => Pacing::Fixed(config.backfill.pause()),
                BackfillPacing::Adaptive => Pacing::Adaptive(latency.clone()),
            },
            follow_every: config
                .storage
                .read_consistency()
                .max(Duration::from_millis(100)),
        }
    }
}

/// `reembed` in `/v1/status`, and the CLI's progress.
#[derive(Debug, Clone, Serialize)]
pub struct ReembedProgress {
    /// `none` (the table holds the configured model's vectors), `pending` (under way, run by
    /// the lease holder, not this process), `running` (here), `done` (switched since start).
    pub state: &'static str,
    /// The model the table's `vector` held when this process started.
    pub from_model: Option<String>,
    /// The configured model.
    pub to_model: String,
    pub dimension: usize,
    /// Rows that have their new vector.
    pub done: u64,
    pub total: u64,
    pub remaining: u64,
    /// Rows this process embedded (a resumed run does not embed what an earlier one staged).
    pub embedded: u64,
    /// Rows embedded per second by this process's run.
    pub rows_per_sec: f64,
    pub eta_secs: Option<u64>,
    pub last_error: Option<String>,
}

/// Owns the re-embed of one service: whether recall may use vectors, the background task
/// that runs it (as lease holder) or follows it (otherwise), and its progress.
pub struct ReembedHandle {
    store: Store,
    embedder: Arc<dyn Embedder>,
    model: ModelInfo,
    settings: ReembedSettings,
    /// `vector` holds the configured model's vectors: recall may search them.
    current: AtomicBool,
    progress: Mutex<ReembedProgress>,
    cancel: watch::Sender<bool>,
    task: crate::task::TaskSlot,
    /// One run at a time in this process (the CLI's and the background's).
    one_run: tokio::sync::Mutex<()>,
}

impl ReembedHandle {
    /// Read what the table's vectors are (no scan).
    pub(crate) async fn open(
        store: Store,
        embedder: Arc<dyn Embedder>,
        settings: ReembedSettings,
    ) -> Result<ReembedHandle, MigrateError> {
        let model = embedder.model_info();
        let cols = vector_columns(store.table()).await?;
        let current = holds(&cols, &model);
        let (cancel, _) = watch::channel(false);
        let progress = ReembedProgress {
            state: if cols.reembedding_to(&model) {
                "pending"
            } else {
                "none"
            },
            from_model: cols.current.clone(),
            to_model: model.id.clone(),
            dimension: model.dimension,
            done: 0,
            total: 0,
            remaining: 0,
            embedded: 0,
            rows_per_sec: 0.0,
            eta_secs: None,
            last_error: None,
        };
        Ok(ReembedHandle {
            store,
            embedder,
            model,
            settings,
            current: AtomicBool::new(current),
            progress: Mutex::new(progress),
            cancel,
            task: Default::default(),
            one_run: Default::default(),
        })
    }

    /// Whether recall may search vectors: `vector` holds the configured model's.
    pub fn vectors_current(&self) -> bool {
        self.current.load(Ordering::Acquire)
    }

    pub fn progress(&self) -> ReembedProgress {
        self.progress
            .lock()
            .map(|p| p.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn update(&self, f: impl FnOnce(&mut ReembedProgress)) {
        let mut p = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut p);
    }

    /// The progress, with counts read from the table when another process runs it.
    pub(crate) async fn status(&self) -> ReembedProgress {
        if self.progress().state == "pending" {
            if let Ok((total, remaining)) = self.counts().await {
                self.update(|p| {
                    p.total = total;
                    p.remaining = remaining;
                    p.done = total.saturating_sub(remaining);
                });
            }
        }
        self.progress()
    }

    async fn counts(&self) -> Result<(u64, u64), StoreError> {
        let total = self.store.count(None).await? as u64;
        let remaining = self.store.count(Some(PENDING.into())).await? as u64;
        Ok((total, remaining))
    }

    /// Run it (as lease holder) or follow it (otherwise) in the background, until the
    /// table's vectors are the configured model's. No-op when they are already.
    pub(crate) fn start(self: &Arc<Self>, search: Arc<LanceSearch>) {
        if self.vectors_current() {
            return;
        }
        let this = self.clone();
        self.task
            .spawn_if_idle(async move { this.follow(search).await });
    }

    /// Stop at the next batch boundary and wait: staged batches are kept; one embedded but
    /// not yet staged is embedded again by the next run.
    pub(crate) async fn stop(&self) {
        let _ = self.cancel.send(true);
        self.task.join().await;
    }

    async fn follow(self: Arc<Self>, search: Arc<LanceSearch>) {
        let mut cancel = self.cancel.subscribe();
        loop {
            if *cancel.borrow() || self.store.writer().is_stopped() {
                return;
            }
            match self.step().await {
                Ok(true) => {
                    if let Err(e) = search.refresh_indexed().await {
                        tracing::warn!(error = %e, "could not re-read the vector index state");
                    }
                    return;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %e, "re-embed stopped with an error; it resumes from the table");
                    self.update(|p| p.last_error = Some(e.to_string()));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.follow_every) => {}
                _ = cancel.changed() => return,
            }
        }
    }

    /// One look: true once `vector` holds the configured model's vectors. The lease holder
    /// runs the re-embed meanwhile.
    async fn step(&self) -> Result<bool, MigrateError> {
        let cols = vector_columns(self.store.table()).await?;
        if holds(&cols, &self.model) {
            self.switched(None);
            return Ok(true);
        }
        if !cols.reembedding_to(&self.model) || !self.store.is_maintainer() {
            return Ok(false);
        }
        self.run(|_| {}).await?;
        Ok(self.vectors_current())
    }

    /// Mark the vectors current (the switch happened, here or elsewhere).
    fn switched(&self, started: Option<Instant>) {
        if self.current.swap(true, Ordering::AcqRel) {
            return;
        }
        self.update(|p| {
            p.state = "done";
            p.done = p.total.max(p.done);
            p.remaining = 0;
            p.eta_secs = Some(0);
        });
        tracing::info!(
            to_model = %self.model.id,
            ran_here = started.is_some(),
            secs = started.map_or(0, |s| s.elapsed().as_secs()),
            "recall uses the new model's vectors"
        );
    }
}

/// Whether `vector` holds `model`'s vectors (a re-embed from it to another may be under way).
fn holds(cols: &VectorColumns, model: &ModelInfo) -> bool {
    cols.current.as_deref() == Some(model.id.as_str()) && cols.dimension == model.dimension
}
