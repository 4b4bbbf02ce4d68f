//! The background backfill: legacy rows with no scope get `public` (`scope_source =
//! 'backfill'`), in paced batches through the single writer, with a durable checkpoint.
//!
//! Only rows with a NULL (or blank) scope and `created_at` before the recorded migration start
//! are touched, so the backfill never races new writes (which always carry a scope). Each
//! batch's update re-checks the NULL condition, so resuming after a crash or running twice
//! changes nothing that is already done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, ListArray, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use serde::Serialize;
use tokio::sync::watch;

use super::checkpoint::{BackfillState, Checkpoint, CheckpointFile, Damaged};
use super::MigrateError;
use crate::config::MigrationMode;
use crate::scope::{ScopeName, ScopeSource, PUBLIC_SCOPE};
use crate::store::record::created_at_micros;
use crate::store::schema::{COL_CREATED_AT, COL_ID, COL_MEMORY_SCOPE, COL_SCOPE_SOURCE, COL_TAGS};
use crate::store::sql_literal;

/// What the backfill writes into `scope_source` (and what revert-backfill looks for).
const BACKFILL_SOURCE: &str = ScopeSource::Backfill.as_str();
use super::pacing::{ForegroundLatency, Pacer};
use crate::store::Store;

/// Rows the backfill is for: no scope yet (a blank string counts as none).
pub const CANDIDATES: &str = crate::store::filter::UNSCOPED;

/// Whether recall also shows NULL-scope rows (`OR memory_scope IS NULL`). Shared by recall,
/// which reads it per request, and the backfill, which turns it off when it finishes.
#[derive(Debug, Clone, Default)]
pub struct MigrationGate(Arc<AtomicBool>);

impl MigrationGate {
    pub(crate) fn new(on: bool) -> Self {
        MigrationGate(Arc::new(AtomicBool::new(on)))
    }
    pub(crate) fn is_on(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
    pub(crate) fn set(&self, on: bool) {
        self.0.store(on, Ordering::Release)
    }
}

#[derive(Debug, Clone)]
pub struct BackfillSettings {
    pub batch_size: usize,
    pub pacing: Pacing,
    pub mode: MigrationMode,
    pub checkpoint: CheckpointFile,
    /// How often a process whose gate is on reads the checkpoint, to close the gate when
    /// another process finishes the backfill (`storage.read_consistency_ms`, at least 100 ms).
    pub follow_every: Duration,
}

/// How the backfill paces its batches (see [`super::pacing`]).
#[derive(Debug, Clone)]
pub enum Pacing {
    /// The same pause after every batch.
    Fixed(Duration),
    /// Pause only while the foreground latency the service records rises.
    Adaptive(Arc<ForegroundLatency>),
}

/// Progress for `/v1/status`, `scopemem migrate status` and the progress bar.
#[derive(Debug, Clone, Serialize)]
pub struct BackfillProgress {
    /// `none` (nothing to backfill), `pending`, `running` or `done`.
    pub state: &'static str,
    pub scanned: u64,
    pub filled: u64,
    pub skipped: u64,
    /// Estimate: candidate rows at the start of this pass minus those scanned since.
    pub remaining: u64,
    pub rows_per_sec: f64,
    pub damaged: Damaged,
    pub migration_start: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

impl BackfillProgress {
    fn from_checkpoint(c: Option<&Checkpoint>) -> Self {
        BackfillProgress {
            state: match c.map(|c| c.state) {
                None => "none",
                Some(BackfillState::Pending) => "pending",
                Some(BackfillState::Running) => "running",
                Some(BackfillState::Done) => "done",
            },
            scanned: c.map_or(0, |c| c.scanned),
            filled: c.map_or(0, |c| c.filled),
            skipped: c.map_or(0, |c| c.skipped),
            remaining: 0,
            rows_per_sec: 0.0,
            damaged: c.map(|c| c.damaged.clone()).unwrap_or_default(),
            migration_start: c.map(|c| c.migration_start),
            finished_at: c.and_then(|c| c.finished_at),
            last_error: None,
        }
    }
}

/// Owns the backfill task: start it once the service is serving, stop it between batches.
pub struct BackfillHandle {
    store: Store,
    settings: BackfillSettings,
    gate: MigrationGate,
    progress: Arc<Mutex<BackfillProgress>>,
    cancel: watch::Sender<bool>,
    task: crate::task::TaskSlot,
    /// Set when a run starts.
    pacer: Mutex<Option<Pacer>>,
}

impl BackfillHandle {
    /// Read (or, when a migration just declared legacy rows, durably create) the checkpoint and
    /// decide whether recall starts in migration mode. Does no table scan: start-up cost does
    /// not depend on table size.
    pub(crate) async fn prepare(
        store: Store,
        settings: BackfillSettings,
        backfill_needed: bool,
    ) -> Result<BackfillHandle, MigrateError> {
        let mut cp = settings.checkpoint.load().await?;
        if cp.is_none() && backfill_needed {
            let fresh = Checkpoint::new();
            settings.checkpoint.save(&fresh).await?;
            tracing::info!(migration_start = %fresh.migration_start, "legacy rows found; backfill pending");
            cp = Some(fresh);
        }
        let unfinished = cp.as_ref().is_some_and(|c| c.state != BackfillState::Done);
        let gate = MigrationGate::new(match settings.mode {
            MigrationMode::On => true,
            MigrationMode::Off => false,
            MigrationMode::Auto => unfinished,
        });
        let (cancel, _) = watch::channel(false);
        Ok(BackfillHandle {
            store,
            settings,
            gate,
            progress: Arc::new(Mutex::new(BackfillProgress::from_checkpoint(cp.as_ref()))),
            cancel,
            task: crate::task::TaskSlot::default(),
            pacer: Mutex::new(None),
        })
    }

    /// Close the gate once the checkpoint says the backfill is done, whichever process ran it.
    /// Only the process that runs the backfill closes its own gate at the end; every other
    /// process would otherwise keep `OR memory_scope IS NULL` until it restarts, and the NULL
    /// rows the backfill leaves (no `created_at`, NULL-scope imports) would stay visible to
    /// every conversation. Reads the checkpoint every `follow_every` while the gate is on (in
    /// `auto` mode only: `on`/`off` are the operator's), and stops once it has closed.
    pub(crate) async fn follow_checkpoint(handle: std::sync::Weak<BackfillHandle>) {
        loop {
            let Some(this) = handle.upgrade() else { return };
            if this.settings.mode != MigrationMode::Auto || !this.gate.is_on() {
                return;
            }
            match this.settings.checkpoint.load().await {
                // The backfill committed its updates before it wrote "done": read them before
                // the gate closes, or this process's view (up to read_consistency_ms old) still
                // holds the rows as NULL and, the gate closed, shows none of them.
                Ok(Some(cp)) if cp.state == BackfillState::Done => match this.store.refresh().await
                {
                    Ok(()) => {
                        this.gate.set(false);
                        this.publish(&cp, 0, Instant::now(), cp.filled);
                        tracing::info!(
                            "the backfill is done (checkpoint); recall no longer shows NULL-scope rows"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "could not read the backfilled table; the migration gate stays on")
                    }
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the backfill checkpoint; the migration gate stays on")
                }
            }
            let every = this.settings.follow_every;
            drop(this);
            tokio::time::sleep(every).await;
        }
    }

    /// `scopemem migrate run`: the indexes the backfill's scan filters by, then the backfill
    /// to completion in the foreground.
    pub(crate) async fn run_foreground(
        &self,
        on_progress: impl Fn(&BackfillProgress),
    ) -> Result<BackfillProgress, MigrateError> {
        self.store.ensure_indexes().await?;
        self.run(on_progress).await
    }

    /// `scopemem migrate revert-backfill` on this handle's table and checkpoint ([`revert`]).
    pub(crate) async fn revert(&self) -> Result<u64, MigrateError> {
        revert(&self.store, &self.settings.checkpoint).await
    }

    /// Where the backfill keeps its checkpoint.
    pub fn checkpoint(&self) -> &CheckpointFile {
        &self.settings.checkpoint
    }

    pub(crate) fn gate(&self) -> &MigrationGate {
        &self.gate
    }

    pub fn progress(&self) -> BackfillProgress {
        self.progress
            .lock()
            .map(|p| p.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Spawn the backfill in the background (no-op while it is running).
    pub(crate) fn start(self: &Arc<Self>) {
        let this = self.clone();
        self.task.spawn_if_idle(async move {
            if let Err(e) = this.run(|_| {}).await {
                tracing::error!(error = %e, "backfill stopped with an error; it resumes from its checkpoint on the next start");
                if let Ok(mut p) = this.progress.lock() {
                    p.last_error = Some(e.to_string());
                }
            }
        });
    }

    /// Ask the background task to stop after the current batch, and wait for it.
    pub(crate) async fn stop(&self) {
        let _ = self.cancel.send(true);
        self.task.join().await;
    }

    /// Kill the background task at once, as a crash would (tests).
    pub fn abort(&self) {
        self.task.abort();
    }

    fn publish(&self, cp: &Checkpoint, remaining: u64, started: Instant, filled_at_start: u64) {
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        if let Ok(mut p) = self.progress.lock() {
            let mut next = BackfillProgress::from_checkpoint(Some(cp));
            next.remaining = remaining;
            next.rows_per_sec = (cp.filled.saturating_sub(filled_at_start)) as f64 / secs;
            *p = next;
        }
    }

    /// Run the backfill to completion (or until stopped), calling `on_progress` after each
    /// batch. Safe to call on a finished or empty table.
    pub async fn run(
        &self,
        on_progress: impl Fn(&BackfillProgress),
    ) -> Result<BackfillProgress, MigrateError> {
        let Some(mut cp) = self.load_checkpoint().await? else {
            return Ok(self.progress());
        };
        if cp.state == BackfillState::Done {
            self.publish(&cp, 0, Instant::now(), cp.filled);
            return Ok(self.progress());
        }
        let mut run = self.plan(&mut cp).await?;
        for pass in 1..=FILL_PASSES {
            if self.fill_candidates(&mut cp, &run, &on_progress).await? {
                return Ok(self.progress());
            }
            self.settle().await?;
            let kept = self.store.count(Some(FILLED.into())).await? as u64;
            let blank = cp.filled.saturating_sub(kept);
            if blank == 0 {
                return self.finish(&mut cp, &run, &on_progress).await;
            }
            // Filled rows came back blank (fewer hold the mark than were filled): a compaction that read the fragments before a
            // batch's column patch committed its rewrite after it (`make test`, crash::
            // kill9_during_a_backfill…: 20 of 600 rows NULL after "done"). Fill them again;
            // done is recorded only once no candidate is left.
            tracing::warn!(
                rows = blank,
                pass,
                "backfilled rows are blank again after the table was compacted; filling them again"
            );
            run = self.plan(&mut cp).await?;
        }
        Err(MigrateError::Store(crate::store::StoreError::Commit(format!(
            "rows were still blank after {FILL_PASSES} backfill passes; it resumes on the next start"
        ))))
    }

    /// The checkpoint to resume from, or a new one (turning the gate on in `auto` mode); none
    /// when there is no checkpoint and no candidate row, so nothing to do.
    async fn load_checkpoint(&self) -> Result<Option<Checkpoint>, MigrateError> {
        let path = &self.settings.checkpoint;
        if let Some(c) = path.load().await? {
            return Ok(Some(c));
        }
        // A table that already had the columns can still hold NULL rows.
        if self.store.count(Some(CANDIDATES.into())).await? == 0 {
            return Ok(None);
        }
        let c = Checkpoint::new();
        path.save(&c).await?;
        if self.settings.mode == MigrationMode::Auto {
            self.gate.set(true);
        }
        Ok(Some(c))
    }

    /// Plan stage: mark the checkpoint running, recount what earlier runs filled and what is
    /// left, save and publish that, so the batch loop resumes where they stopped.
    async fn plan(&self, cp: &mut Checkpoint) -> Result<RunStart, MigrateError> {
        cp.state = BackfillState::Running;
        self.start_pacing();
        self.store.ensure_indexes().await?;

        let invalid_scopes = self.count_invalid_scopes().await?;
        // Resume: what earlier runs filled is exactly what carries the backfill mark (and
        // still its scope).
        let filled_before = self.store.count(Some(FILLED.into())).await? as u64;
        cp.filled = filled_before;
        cp.scanned = filled_before;
        cp.skipped = 0;
        cp.damaged = Damaged {
            invalid_scope: invalid_scopes,
            ..Damaged::default()
        };
        self.settings.checkpoint.save(cp).await?;
        let total = self.store.count(Some(CANDIDATES.into())).await? as u64;
        let started = Instant::now();
        self.publish(cp, total, started, filled_before);
        tracing::info!(
            candidates = total,
            already_filled = filled_before,
            migration_start = %cp.migration_start,
            "backfill running"
        );
        Ok(RunStart {
            total,
            started,
            filled_before,
        })
    }

    /// Batch loop: stream the candidate rows, screen each, and commit every `batch_size` ids
    /// (then the rest). Returns true if asked to stop.
    async fn fill_candidates(
        &self,
        cp: &mut Checkpoint,
        run: &RunStart,
        on_progress: &impl Fn(&BackfillProgress),
    ) -> Result<bool, MigrateError> {
        let table = self.store.table().clone();
        let start_micros = cp.migration_start.timestamp_micros();
        let mut seen: u64 = 0;
        let mut stream = table
            .query()
            .only_if(CANDIDATES)
            .select(Select::columns(&[
                COL_ID,
                COL_CREATED_AT,
                COL_MEMORY_SCOPE,
                COL_TAGS,
            ]))
            .execute()
            .await?;
        let mut batch_ids: Vec<String> = Vec::with_capacity(self.settings.batch_size);
        let mut cancel = self.cancel.subscribe();
        while let Some(batch) = stream.try_next().await.map_err(MigrateError::from)? {
            let columns = CandidateColumns::of(&batch);
            for i in 0..batch.num_rows() {
                cp.scanned += 1;
                seen += 1;
                let Some(id) = columns.screen(i, cp, start_micros) else {
                    continue;
                };
                batch_ids.push(id);
                if batch_ids.len() >= self.settings.batch_size {
                    let ids = std::mem::take(&mut batch_ids);
                    let remaining = run.total.saturating_sub(seen);
                    if self
                        .flush(
                            ids,
                            cp,
                            remaining,
                            run.started,
                            run.filled_before,
                            on_progress,
                            &mut cancel,
                        )
                        .await?
                    {
                        return Ok(true);
                    }
                }
            }
        }
        if batch_ids.is_empty() {
            return Ok(false);
        }
        let ids = std::mem::take(&mut batch_ids);
        self.flush(
            ids,
            cp,
            0,
            run.started,
            run.filled_before,
            on_progress,
            &mut cancel,
        )
        .await
    }

    /// Settle stage: leave the table as fast to query as before (merge fragments, rebuild
    /// the scope index).
    async fn settle(&self) -> Result<(), MigrateError> {
        let report = self.store.writer().maintain_with(true).await?;
        self.store.rebuild_scope_index().await?;
        tracing::debug!(
            fragments = report.fragments_after,
            "backfilled table compacted"
        );
        Ok(())
    }

    /// Report stage, once the table is settled and no candidate is left: checkpoint `done`,
    /// close the gate in `auto` mode, and publish and log the totals. Done is recorded only
    /// now, so a crash before it re-runs the settle on restart.
    async fn finish(
        &self,
        cp: &mut Checkpoint,
        run: &RunStart,
        on_progress: &impl Fn(&BackfillProgress),
    ) -> Result<BackfillProgress, MigrateError> {
        cp.state = BackfillState::Done;
        cp.finished_at = Some(Utc::now());
        self.settings.checkpoint.save(cp).await?;
        if self.settings.mode == MigrationMode::Auto {
            self.gate.set(false);
        }
        self.publish(cp, 0, run.started, run.filled_before);
        on_progress(&self.progress());
        tracing::info!(
            scanned = cp.scanned,
            filled = cp.filled,
            skipped = cp.skipped,
            damaged = ?cp.damaged,
            ms = run.started.elapsed().as_millis() as u64,
            "backfill done (table compacted, scope index rebuilt); migration mode off"
        );
        Ok(self.progress())
    }

    /// Commit one batch, persist the checkpoint, pause. Returns true if asked to stop.
    #[allow(clippy::too_many_arguments)]
    async fn flush(
        &self,
        ids: Vec<String>,
        cp: &mut Checkpoint,
        remaining: u64,
        started: Instant,
        filled_before: u64,
        on_progress: &impl Fn(&BackfillProgress),
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<bool, MigrateError> {
        let n = ids.len();
        let filled = self
            .store
            .writer()
            .fill_blank(
                ids,
                vec![
                    (COL_MEMORY_SCOPE.to_string(), PUBLIC_SCOPE.to_string()),
                    (COL_SCOPE_SOURCE.to_string(), BACKFILL_SOURCE.to_string()),
                ],
            )
            .await?;
        cp.filled += filled;
        cp.skipped += n as u64 - filled.min(n as u64);
        cp.updated_at = Utc::now();
        self.settings.checkpoint.save(cp).await?;
        self.publish(cp, remaining, started, filled_before);
        let progress = self.progress();
        on_progress(&progress);
        tracing::info!(
            scanned = cp.scanned,
            filled = cp.filled,
            skipped = cp.skipped,
            remaining,
            rows_per_sec = progress.rows_per_sec as u64,
            "backfill progress"
        );
        if *cancel.borrow() {
            return Ok(true);
        }
        let pause = self.next_pause();
        if pause.is_zero() {
            // Still let the requests waiting on this runtime go first.
            tokio::task::yield_now().await;
            return Ok(*cancel.borrow());
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => Ok(*cancel.borrow()),
            _ = cancel.changed() => Ok(true),
        }
    }

    /// The pacer of this run; an adaptive one takes the foreground p99 of the last minute as
    /// its baseline (what the requests cost before the backfill).
    fn start_pacing(&self) {
        let pacer = match &self.settings.pacing {
            Pacing::Fixed(pause) => Pacer::Fixed(*pause),
            Pacing::Adaptive(latency) => Pacer::adaptive(latency.p99(Duration::from_secs(60))),
        };
        if let Ok(mut p) = self.pacer.lock() {
            *p = Some(pacer);
        }
    }

    /// The pause before the next batch.
    fn next_pause(&self) -> Duration {
        let now = match &self.settings.pacing {
            Pacing::Fixed(pause) => return *pause,
            Pacing::Adaptive(latency) => latency.p99(super::pacing::WINDOW),
        };
        let Ok(mut pacer) = self.pacer.lock() else {
            return Duration::ZERO;
        };
        let pause = pacer
            .get_or_insert_with(|| Pacer::adaptive(None))
            .next_pause(now);
        if !pause.is_zero() {
            tracing::debug!(
                pause_ms = pause.as_millis() as u64,
                foreground_p99_ms = now.map_or(0, |d| d.as_millis() as u64),
                "backfill backing off"
            );
        }
        pause
    }

    /// Non-blank scopes that are not valid names: left alone, counted and logged once each.
    async fn count_invalid_scopes(&self) -> Result<u64, MigrateError> {
        let stats = self.store.stats().await?;
        let mut invalid = 0;
        for (scope, n) in &stats.rows_by_scope {
            if !scope.trim().is_empty() && ScopeName::parse(scope).is_err() {
                invalid += *n as u64;
                tracing::warn!(
                    rows = n,
                    "legacy rows carry an invalid scope string; left as is (invisible to recall)"
                );
            }
        }
        Ok(invalid)
    }
}

/// Where a run starts: the candidates counted, when, and the rows earlier runs filled.
/// Rows the backfill filled and that still hold what it wrote.
const FILLED: &str = crate::store::filter::BACKFILLED;

/// Fill passes one run makes at most: a pass after the first fills only rows that a
/// concurrent compaction turned blank again.
const FILL_PASSES: u32 = 3;

struct RunStart {
    total: u64,
    started: Instant,
    filled_before: u64,
}

/// The columns of one streamed batch of candidates that a row is screened by.
struct CandidateColumns<'a> {
    ids: Option<&'a StringArray>,
    raw_created: Option<&'a lancedb::arrow::arrow_array::ArrayRef>,
    created: Option<lancedb::arrow::arrow_array::TimestampMicrosecondArray>,
    scope: Option<&'a StringArray>,
    tags: Option<&'a ListArray>,
}

impl<'a> CandidateColumns<'a> {
    /// Look the columns up once per batch, not once per row.
    fn of(batch: &'a lancedb::arrow::arrow_array::RecordBatch) -> Self {
        CandidateColumns {
            ids: batch
                .column_by_name(COL_ID)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>()),
            raw_created: batch.column_by_name(COL_CREATED_AT),
            created: created_at_micros(batch),
            scope: batch
                .column_by_name(COL_MEMORY_SCOPE)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>()),
            tags: batch
                .column_by_name(COL_TAGS)
                .and_then(|c| c.as_any().downcast_ref::<ListArray>()),
        }
    }

    /// Screen row `i`: its id if the backfill fills it; otherwise none, with the skip (and any
    /// damage) counted in `cp` and logged.
    fn screen(&self, i: usize, cp: &mut Checkpoint, start_micros: i64) -> Option<String> {
        let Some(id) = self
            .ids
            .filter(|c| c.is_valid(i))
            .map(|c| c.value(i).to_string())
        else {
            cp.skipped += 1;
            tracing::warn!("legacy row without an id; left unscoped");
            return None;
        };
        if self.scope.is_some_and(|s| s.is_valid(i)) {
            cp.damaged.blank_scope += 1;
        }
        if self.tags.is_none_or(|t| !t.is_valid(i)) {
            cp.damaged.missing_tags += 1;
        }
        if self.raw_created.is_none_or(|c| !c.is_valid(i)) {
            cp.damaged.null_created_at += 1;
            cp.skipped += 1;
            tracing::warn!(id = %id, "legacy row has no created_at; left unscoped (reported)");
            return None;
        }
        let Some(ts) = self
            .created
            .as_ref()
            .filter(|c| c.is_valid(i))
            .map(|c| c.value(i))
        else {
            cp.damaged.unparseable_created_at += 1;
            cp.skipped += 1;
            tracing::warn!(id = %id, "legacy row has an unparseable created_at; left unscoped (reported)");
            return None;
        };
        if ts >= start_micros {
            // Written after the migration started without a scope: not ours to touch.
            cp.skipped += 1;
            return None;
        }
        Some(id)
    }
}

/// `scopemem migrate revert-backfill`: every row the backfill filled goes back to NULL, and the
/// checkpoint is removed, for operators downgrading to a version without scopes.
pub async fn revert(store: &Store, checkpoint: &CheckpointFile) -> Result<u64, MigrateError> {
    let n = store
        .writer()
        .update(
            format!("{COL_SCOPE_SOURCE} = {}", sql_literal(BACKFILL_SOURCE)),
            vec![
                (COL_MEMORY_SCOPE.to_string(), "NULL".to_string()),
                (COL_SCOPE_SOURCE.to_string(), "NULL".to_string()),
            ],
        )
        .await?;
    checkpoint.remove().await?;
    Ok(n)
}
