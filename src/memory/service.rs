//! MemoryService: every read and write of memories. The scope of a new memory is derived in
//! exactly one place, `derive_scope`, from the conversation id (and persona) alone. The remember
//! path (and its folding of repeated facts) is in `service/remember.rs`; the recall in
//! `service/recall.rs`; how the service is
//! wired and kept maintained in `service/wiring.rs`; the erase path in `service/erase.rs`; the
//! expiry sweeper in `service/sweeper.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;

mod consolidation;
mod erase;
use erase::EraseJobs;
mod host_consolidation;
mod people;
mod prefetch;
mod recall;
mod remember;
pub mod sweeper;
mod update;
mod wiring;
mod working;

use recall::Asked;

pub use consolidation::PassOutcome;
pub use host_consolidation::HostPassOutcome;

use super::door;
use super::model::*;
use super::recall::read_filter::{memories_filter, messages_filter};
use super::MemoryError;
use crate::config::{Config, MigrationMode, RecallConfig, ScopeFilterMode};
use crate::embed::calibration::{calibrate_once, Calibration, ModelFit};
use crate::embed::Embedder;
use crate::migrate::backfill::{BackfillHandle, BackfillProgress, BackfillSettings};
use crate::migrate::checkpoint;
use crate::scope::{ConversationId, MapSummary, ScopeResolver, ScopeSource};
use crate::store::beside::Beside;
use crate::store::lease::{self, Lease};
use crate::store::maintenance::pruning::VersionLimits;
use crate::store::{LanceSearch, RowFilter, Selection, Store, WriterSettings};

pub(crate) const MAX_QUERY_CHARS: usize = 2000;
pub(crate) use super::new_memory::DEFAULT_STRENGTH;
const MAX_FORGET_IDS: usize = 100;
/// Memories per browse page when the request names no limit (capped by `recall.max_limit`).
const BROWSE_DEFAULT_LIMIT: usize = 20;

/// Validate a conversation id per rule 5, logging the refusal (not the id's content).
fn conversation(raw: &str) -> Result<ConversationId, MemoryError> {
    ConversationId::parse(raw).map_err(|e| {
        tracing::error!(
            code = "invalid_conversation_id",
            bytes = raw.len(),
            error = %e,
            "request refused: invalid conversation id; nothing read or written"
        );
        MemoryError::Scope(e)
    })
}

/// How often the index-check loop looks whether the service has stopped.
const INDEX_CHECK_STEP: Duration = Duration::from_millis(500);

fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
    MemoryError::InvalidInput {
        field,
        message: message.into(),
    }
}

/// Settings the service needs from config.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub recall: RecallConfig,
    pub scope_filter: ScopeFilterMode,
    pub migration_mode: MigrationMode,
    /// How long and how many old table versions are kept.
    pub keep_versions: VersionLimits,
    /// TTLs per memory type and the sweeper's interval.
    pub retention: super::retention::Retention,
    /// How often the maintainer checks whether the vector index is due, whatever wrote the
    /// rows (remember checks at once; feedback, imports and other processes do not).
    pub index_check: std::time::Duration,
    /// How often other processes' erase notices are read (`storage.read_consistency_ms`, at
    /// least 100 ms).
    pub follow_erasures: std::time::Duration,
    /// The working memory (`working_memory.*`).
    pub working: super::working::WorkingSettings,
}

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub rows: usize,
    pub rows_by_scope: std::collections::BTreeMap<String, usize>,
    pub null_scope_rows: usize,
    pub fragments: usize,
    /// Table versions on disk; older ones are pruned after `storage.keep_versions_minutes`.
    pub table_versions: usize,
    /// Bytes of every file under a local `storage.db_dir` (0 in a bucket).
    pub disk_bytes: u64,
    /// Where the table lives: its directory or `s3://` prefix.
    pub location: String,
    pub vector_index: bool,
    /// The in-memory vector search: rows held, and searches it answered or left to LanceDB.
    pub resident_search: crate::store::resident::ResidentStats,
    /// Every index with the rows it covers (new rows are searched unindexed until refreshed).
    pub indexes: Vec<crate::store::IndexState>,
    pub embedding_model: String,
    /// How the model ranks and where its noise sits, per script; `null` until measured.
    pub embedding_calibration: Option<Calibration>,
    /// How close two memories must be to count as one fact said twice in a recall
    /// (`embed::duplicates`); `null` until measured.
    pub duplicate_bound: Option<crate::embed::duplicates::DuplicateBound>,
    pub scope_filter: ScopeFilterMode,
    pub migration: MigrationStatus,
    /// The re-embed to the configured model (`state: none` when the vectors are its already).
    pub reembed: crate::migrate::reembed::ReembedProgress,
    /// Whether this process runs the maintenance, and who holds the lease.
    pub maintenance: MaintenanceStatus,
    pub feedback_queue_depth: usize,
    /// The working memory: messages waiting for their vectors (keyword-searchable meanwhile)
    /// and how long the oldest has waited.
    pub working_memory: super::working::WorkingStatus,
    /// The LLM consolidation passes: whether one is configured, and what they did.
    pub consolidation: crate::memory::consolidation::ConsolidationStatus,
    /// Whether this process's feedback journal takes writes (false: feedback is refused).
    pub feedback_journal_ok: bool,
    /// Dead-lettered feedback jobs of the last day (ids, reasons, attempts; no memory text).
    pub feedback_dead_letters: Vec<super::feedback::JobOutcome>,
    pub scope_map: MapSummary,
}

/// Who does the table's background maintenance (backfill, compaction, pruning, indexes).
#[derive(Debug, Clone, Serialize)]
pub struct MaintenanceStatus {
    /// This process holds the maintenance lease.
    pub this_process: bool,
    /// The holder, if any process holds it.
    pub holder: Option<lease::LeaseHolder>,
}

/// Migration part of `/v1/status`: the backfill's progress plus whether recall currently
/// includes NULL-scope rows (`active`).
#[derive(Debug, Clone, Serialize)]
pub struct MigrationStatus {
    pub migration_mode: MigrationMode,
    pub active: bool,
    #[serde(flatten)]
    pub backfill: BackfillProgress,
}

/// What one conversation may read (see [`MemoryService::visible_to`]).
#[derive(Debug, Clone)]
pub struct Visibility {
    /// The long-term memories it may read (`rows.to_sql()` for LanceDB): its scope, `public`
    /// and its own chat's scope. A search of the message tier puts [`Self::messages`] here.
    pub rows: RowFilter,
    /// The working memory's messages it may read: its own chat scope only (design rule 11).
    pub messages: RowFilter,
    pub memory_scope: String,
    pub migration_mode: bool,
}

impl Visibility {
    /// Both tiers as one predicate (an export of what the conversation may read, an update).
    pub(crate) fn to_sql(&self) -> Option<String> {
        match (self.rows.to_sql(), self.messages.to_sql()) {
            (Some(memories), Some(messages)) => Some(format!("({memories}) OR ({messages})")),
            _ => None,
        }
    }

    /// The person `query` names, by the speaker names heard in the scopes this visibility reads
    /// in either tier (`memory::speakers`): computed once per recall, for both tiers.
    pub(crate) fn named(
        &self,
        speakers: &super::speakers::SpeakerNames,
        query: &str,
    ) -> super::speakers::Person {
        speakers.named_in(self.read_scopes().as_deref(), query)
    }

    /// The names the speaker `id` went by in the scopes this visibility reads.
    pub(crate) fn names_of(
        &self,
        speakers: &super::speakers::SpeakerNames,
        id: &str,
    ) -> Vec<String> {
        speakers.names_of(self.read_scopes().as_deref(), id)
    }

    /// Every scope this visibility reads in either tier (`None`: all, the rollback switch).
    fn read_scopes(&self) -> Option<Vec<String>> {
        match (&self.rows.scopes, &self.messages.scopes) {
            (Some(rows), Some(messages)) => {
                Some(rows.names.iter().chain(&messages.names).cloned().collect())
            }
            _ => None,
        }
    }

    /// This visibility searching the message tier.
    pub(crate) fn of_messages(&self) -> Visibility {
        Visibility {
            rows: self.messages.clone(),
            ..self.clone()
        }
    }
}

pub struct MemoryService {
    /// Whether this process does the table's background maintenance (one process at a time).
    lease: Lease,
    store: Store,
    search: Arc<LanceSearch>,
    /// The vector search recalls use: resident in memory, LanceDB when it cannot answer.
    vectors: Arc<crate::store::resident::ResidentSearch>,
    /// Finds and reinforces the stored copy of a repeated fact (shared with feedback).
    repetitions: super::door::Repetitions,
    /// Facts a forget by id erased, beside the table: no rule writes them again (`door`).
    forgotten: super::door::Forgotten,
    /// What the door refused, by reason (`/metrics`).
    refusals: super::door::Refusals,
    /// Embeddings of recent recall queries.
    queries: crate::embed::QueryCache,
    embedder: Arc<dyn Embedder>,
    scopes: Arc<ScopeResolver>,
    settings: ServiceSettings,
    /// The backfill of legacy rows and the migration-mode gate it controls.
    backfill: Arc<BackfillHandle>,
    /// The re-embed to the configured model, when the table holds another model's vectors.
    reembed: Arc<crate::migrate::reembed::ReembedHandle>,
    /// How long recalls and remembers take lately: the backfill backs off while it rises.
    latency: Arc<crate::migrate::ForegroundLatency>,
    /// The journaled feedback queue and its worker.
    feedback: super::intake::FeedbackQueue,
    /// Erase notices beside the table: this process's erases reach the others through them.
    erase_notices: super::erase_notices::EraseNotices,
    /// When another process on this machine last erased (`memory::erase_generation`).
    erase_generation: super::erase_generation::EraseGeneration,
    /// Records what recalls returned, when decay ranking or refresh-on-recall needs it.
    touches: std::sync::OnceLock<super::recall::touch::RecallTouches>,
    /// Recalls answered by keyword alone because the query could not be embedded.
    degraded_recalls: AtomicU64,
    /// What the embedder's similarities mean (ranking accuracy and noise per script, where
    /// chat sits, the duplicate bound), for recall and `/v1/status`; unset until the model
    /// could be measured.
    calibration: Arc<std::sync::OnceLock<ModelFit>>,
    /// The names each speaker id went by, per scope, for a question that names a person.
    speakers: super::speakers::SpeakerNames,
    /// The working memory's rules and state (`memory::working`).
    working: super::working::WorkingMemory,
    /// Each conversation's last lines, and the history shape its host sends
    /// (`recall::prefetch`).
    foresight: super::recall::prefetch::Foresight,
    /// Messages to the bot whose recall's texts the prefetch task embeds ahead.
    prefetches: super::working::Handoff<super::recall::prefetch::Prefetch>,
    /// The LLM consolidation pass (`consolidation.*`).
    consolidator: super::consolidation::Consolidator,
}

impl MemoryService {
    /// The embedder's calibration, once measured.
    pub fn calibration(&self) -> Option<Calibration> {
        self.calibration.get().map(|m| m.calibration)
    }

    /// Whether recalls are written back (`last_recalled_at`, refreshed expiry): only when decay
    /// ranking, refresh-on-recall or the rule-made TTL uses them, since each is a row update.
    fn records_recalls(&self) -> bool {
        self.stamps_recalls() || self.settings.retention.rule_made_ttl.is_some()
    }

    /// Whether every recall is written back with its time (`last_recalled_at`): decay ranking or
    /// refresh-on-recall reads it. Otherwise only a rule-made memory's recall is
    /// (`recall::touch`).
    fn stamps_recalls(&self) -> bool {
        self.ranking().weighs_strength() || self.settings.retention.refresh_on_recall
    }

    /// Whether the injection event holds memories back for messages that ask for none
    /// (`recall.relevance_gate`); explicit recalls never are.
    pub(crate) fn injection_gate(&self) -> bool {
        self.settings.recall.relevance_gate
    }

    /// Whether this process holds the maintenance lease.
    pub fn is_maintainer(&self) -> bool {
        self.lease.is_held()
    }

    /// Who holds the maintenance lease now, if anyone.
    pub(crate) async fn lease_holder(&self) -> Option<lease::LeaseHolder> {
        lease::current_holder(self.store.beside(), self.store.table().name()).await
    }

    /// The feedback queue (journaled; its worker runs after `start_background`).
    pub fn feedback(&self) -> &super::intake::FeedbackQueue {
        &self.feedback
    }

    pub fn backfill(&self) -> &Arc<BackfillHandle> {
        &self.backfill
    }

    pub fn reembed(&self) -> &Arc<crate::migrate::reembed::ReembedHandle> {
        &self.reembed
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn search(&self) -> &Arc<LanceSearch> {
        &self.search
    }

    /// What recall queries cost the model since start (`embed::query_cache`).
    pub fn query_cost(&self) -> crate::embed::QueryCost {
        self.queries.cost()
    }

    /// Messages to the bot embedded ahead of their recalls, and how that served them
    /// (`recall::prefetch`).
    pub fn embedded_ahead(&self) -> super::recall::AheadCounts {
        self.foresight.counts()
    }

    /// What the write door refused since start, by reason (`memory::door`).
    pub fn writes_refused(&self) -> Vec<(&'static str, u64)> {
        self.refusals.counts()
    }

    /// Recalls answered by keyword alone because the embedding provider failed.
    pub fn degraded_recalls(&self) -> u64 {
        self.degraded_recalls.load(Ordering::Relaxed)
    }

    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    pub fn scopes(&self) -> &Arc<ScopeResolver> {
        &self.scopes
    }

    /// Whether recall currently also shows legacy rows with a NULL scope.
    pub fn migration_active(&self) -> bool {
        self.backfill.gate().is_on()
    }

    /// What a conversation may read, as a predicate: its scope and `public` (plus NULL-scope
    /// rows while migration mode is on), unexpired; the recall predicate of one map snapshot.
    /// Incognito conversations read as usual (incognito only stops writes).
    pub(crate) fn visible_to(
        &self,
        conversation_id: &str,
        persona: Option<&str>,
    ) -> Result<Visibility, MemoryError> {
        Ok(self.visibility(&conversation(conversation_id)?, persona))
    }

    /// [`Self::visible_to`] for a parsed conversation id. One map snapshot serves both the
    /// resolving and the filtering; expired rows are excluded even before the sweeper runs.
    fn visibility(&self, conversation: &ConversationId, persona: Option<&str>) -> Visibility {
        let map = self.scopes.snapshot();
        let scope = map.resolve(conversation, persona);
        let chat = map.resolve_chat(conversation).scope;
        let migration = self.migration_active();
        let (mode, now) = (map.filter_mode(), Utc::now());
        let own_chat = (scope.source != ScopeSource::Persona).then_some(&chat);
        Visibility {
            rows: memories_filter(&scope.scope, own_chat, migration, mode, now),
            messages: messages_filter(&chat, mode, now),
            memory_scope: scope.scope.as_str().to_string(),
            migration_mode: migration,
        }
    }

    /// List what this conversation may see, newest first: the recall predicate of the same
    /// snapshot, without a query or a similarity threshold (the operator page's browse).
    pub(crate) async fn browse(&self, req: BrowseRequest) -> Result<BrowseResponse, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        self.caught_up_with_erasures().await?;
        let offset = req.offset.unwrap_or(0);
        if offset < 0 {
            return Err(invalid("offset", "offset must not be negative"));
        }
        let max = self.settings.recall.max_limit.max(1);
        let limit = req.limit.unwrap_or(BROWSE_DEFAULT_LIMIT.min(max) as i64);
        if limit < 1 || limit > max as i64 {
            return Err(invalid(
                "limit",
                format!("limit must be between 1 and {max}"),
            ));
        }
        let (offset, limit) = (offset as usize, limit as usize);
        let visible = self.visibility(&conversation, req.persona.as_deref());
        let visible = match req.messages {
            true => visible.of_messages(),
            false => visible,
        };
        let page = self
            .store
            .page_newest(visible.rows.to_sql().as_deref(), offset, limit)
            .await?;
        tracing::debug!(
            conversation_id = conversation.as_str(),
            memory_scope = visible.memory_scope.as_str(),
            total = page.total,
            rows = page.rows.len(),
            "browsed"
        );
        Ok(BrowseResponse {
            memory_scope: visible.memory_scope,
            migration_mode: visible.migration_mode,
            total: page.total,
            offset,
            limit,
            memories: page.rows.into_iter().map(Memory::from).collect(),
        })
    }

    /// The scope map this process applies right now (entries, ignored entries, policies).
    pub(crate) fn scope_map(&self) -> crate::scope::MapView {
        self.scopes.snapshot().view()
    }

    /// `POST /v1/forget`: erase what the conversation wrote, or the given memories that its
    /// own scope holds (public ones only from a public-scope conversation).
    pub(crate) async fn forget(&self, req: ForgetRequest) -> Result<ForgetOutcome, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        let outcome = match req.memory_ids {
            None => {
                let c = conversation.as_str().to_owned();
                let predicate = Selection::words_of(&c).rows_sql();
                self.erase_where(predicate, EraseJobs::of_conversation(c))
                    .await?
            }
            Some(ids) => {
                self.forget_ids(&conversation, req.persona.as_deref(), ids)
                    .await?
            }
        };
        tracing::info!(
            conversation_id = conversation.as_str(),
            rows = outcome.deleted,
            refused = outcome.refused.len(),
            pending_feedback_dropped = outcome.pending_feedback_dropped,
            "forgot memories"
        );
        Ok(outcome)
    }

    async fn forget_ids(
        &self,
        conversation: &ConversationId,
        persona: Option<&str>,
        ids: Vec<String>,
    ) -> Result<ForgetOutcome, MemoryError> {
        if ids.is_empty() || ids.len() > MAX_FORGET_IDS {
            return Err(invalid(
                "memory_ids",
                format!("give 1 to {MAX_FORGET_IDS} memory ids"),
            ));
        }
        let mut wanted: Vec<String> = Vec::with_capacity(ids.len());
        for id in ids {
            if !wanted.contains(&id) {
                wanted.push(id);
            }
        }
        // What this conversation may erase, inside every query: what it may change (its own
        // scope and its chat's, and NULL-scope rows from a public conversation while migration
        // mode is on; `door::writable`). A legacy table may hold an id twice; the copy in
        // another scope is neither counted nor deleted.
        let own = door::writable(
            door::Writer::Correction,
            &self.scopes.snapshot(),
            conversation,
            persona,
            self.migration_active(),
        );
        let asked = Selection::ids(wanted.iter().cloned()).within(own.clone());
        let deletable = self.store.ids_where(&asked.rows_sql()).await?;
        // A message still waiting for its vector is not in the table yet: its job is dropped
        // instead, so it is never written (`working::pending`).
        let waiting = self.feedback.pending().ids_within(&own, &wanted);
        let refused: Vec<String> = wanted
            .into_iter()
            .filter(|id| !deletable.contains(id) && !waiting.contains(id))
            .collect();
        if deletable.is_empty() && waiting.is_empty() {
            return Ok(ForgetOutcome {
                refused,
                ..ForgetOutcome::default()
            });
        }
        // The waiting ones too: a job in flight when the erase pauses the worker writes its row
        // before the erase reads the table.
        let erasable =
            Selection::ids(deletable.into_iter().chain(waiting.iter().cloned())).within(own);
        let mut jobs = EraseJobs::of_messages(waiting);
        jobs.forgets_facts = true;
        let mut outcome = self.erase_where(erasable.rows_sql(), jobs).await?;
        outcome.refused = refused;
        Ok(outcome)
    }

    /// Erase a whole scope (operator command `scopemem forget --scope`).
    pub async fn forget_scope(
        &self,
        scope: &crate::scope::ScopeName,
    ) -> Result<ForgetOutcome, MemoryError> {
        let s = scope.as_str().to_owned();
        let predicate = Selection::scope(&s).rows_sql();
        let outcome = self.erase_where(predicate, EraseJobs::of_scope(s)).await?;
        tracing::info!(
            memory_scope = scope.as_str(),
            rows = outcome.deleted,
            pending_feedback_dropped = outcome.pending_feedback_dropped,
            "forgot a scope"
        );
        Ok(outcome)
    }

    /// Erase expired rows (the sweeper's pass), through the one erase path.
    pub(super) async fn erase_expired(
        &self,
        predicate: String,
    ) -> Result<ForgetOutcome, MemoryError> {
        self.erase_where(predicate, EraseJobs::default()).await
    }

    /// The table's counts (rows by scope, NULL-scope rows, fragments, versions) for `/metrics`.
    pub(crate) async fn table_stats(&self) -> Result<crate::store::StoreStats, MemoryError> {
        Ok(self.store.stats().await?)
    }

    /// The writer's running totals (commits, rows appended, retries) for `/metrics`.
    pub(crate) fn writer_counters(&self) -> &crate::store::commit::WriterCounters {
        self.store.writer().counters()
    }

    pub(crate) async fn status(&self) -> Result<Status, MemoryError> {
        let stats = self.store.stats().await?;
        // Progress before the gate: a backfill closes the gate and then publishes "done", so
        // read in this order "done" always comes with the gate closed.
        let backfill = self.backfill.progress();
        let active = self.migration_active();
        Ok(Status {
            rows: stats.rows,
            null_scope_rows: stats.null_scope_rows,
            fragments: stats.fragments,
            table_versions: stats.versions,
            disk_bytes: stats.disk_bytes,
            location: self.store.location().uri(),
            vector_index: self.search.is_indexed(),
            resident_search: self.store.resident().stats(),
            indexes: self.store.index_states().await?,
            embedding_model: self.embedder.model_id().to_string(),
            embedding_calibration: self.calibration(),
            duplicate_bound: self.calibration.get().map(|m| m.duplicates),
            scope_filter: self.scopes.snapshot().filter_mode(),
            migration: MigrationStatus {
                migration_mode: self.settings.migration_mode,
                active,
                backfill,
            },
            reembed: self.reembed.status().await,
            rows_by_scope: stats.rows_by_scope,
            maintenance: MaintenanceStatus {
                this_process: self.lease.is_held(),
                holder: self.lease_holder().await,
            },
            feedback_queue_depth: self.feedback.depth(),
            working_memory: self.working_status(),
            consolidation: self.consolidation_status(),
            feedback_journal_ok: self.feedback.journal_healthy(),
            feedback_dead_letters: self.feedback.dead_letters(),
            scope_map: self.scopes.snapshot().summary(),
        })
    }

    /// Finish the feedback job in flight (the rest stay journaled), stop the backfill between
    /// batches (its checkpoint is saved), commit queued writes and stop the writer.
    pub(crate) async fn shutdown(&self) {
        self.feedback.shutdown().await;
        self.backfill.stop().await;
        self.reembed.stop().await;
        self.store.shutdown().await;
        self.lease.release().await;
    }
}
