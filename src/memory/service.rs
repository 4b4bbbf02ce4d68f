//! MemoryService: every read and write of memories. The scope of a new memory is derived in
//! exactly one place, `derive_scope`, from the conversation id (and persona) alone. The remember
//! path (and its folding of repeated facts) is in `service/remember.rs`; how the service is
//! wired and kept maintained in `service/wiring.rs`; the erase path in `service/erase.rs`; the
//! expiry sweeper in `service/sweeper.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;

mod consolidation;
mod erase;
mod host_consolidation;
mod remember;
mod restated;
pub mod sweeper;
mod update;
mod wiring;
mod working;

pub use consolidation::PassOutcome;
pub use host_consolidation::HostPassOutcome;
pub use working::MessageOutcome;

use super::chained::{self, ChainedLimits};
use super::distinct::{self, Ranked};
use super::hybrid::{CandidateQuery, Searchers};
use super::model::*;
use super::read_filter::recall_filter;
use super::redact::redact;
use super::MemoryError;
use crate::config::{
    Config, MigrationMode, RecallConfig, ScopeFilterMode, SearchKind, SimilarityCut,
};
use crate::embed::calibration::{calibrate, Calibration, ModelFit};
use crate::embed::Embedder;
use crate::migrate::backfill::{BackfillHandle, BackfillProgress, BackfillSettings};
use crate::migrate::checkpoint;
use crate::scope::{ConversationId, MapSummary, ScopeResolver};
use crate::store::beside::Beside;
use crate::store::lease::{self, Lease};
use crate::store::maintenance::pruning::VersionLimits;
use crate::store::{LanceSearch, RowFilter, ScopeSet, Selection, Store, Tier, WriterSettings};

pub(crate) const MAX_QUERY_CHARS: usize = 2000;
pub(crate) const DEFAULT_STRENGTH: i64 = 50;
const MAX_FORGET_IDS: usize = 100;
/// Candidates searched beyond the limit and the merged ones, when facts said twice gave up
/// slots (`memory::distinct`).
const DISTINCT_SPARE: usize = 3;
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

/// What a recall's ranking stage kept, and how many hits it merged into a better one (one
/// fact said twice).
struct Selected {
    memories: Vec<ScoredMemory>,
    merged: usize,
}

/// What a recall's search stage found, and how it ran.
/// What a recall asks with: the request and its checked query.
struct Asked<'a> {
    req: &'a RecallRequest,
    query: &'a str,
}

struct Searched {
    search: SearchKind,
    found: super::hybrid::Found,
    degraded: Option<&'static str>,
    gated: Option<&'static str>,
    time_window: Option<TimeWindow>,
}

/// How much a question that names a memory's speaker ("张三喜欢什么") lifts that memory.
const SPEAKER_BOOST: f32 = 1.25;

/// [`SPEAKER_BOOST`] when `query` holds the name (two characters or more) the record's speaker
/// had when it was written, else 1.
fn speaker_boost(query: &str, record: &crate::store::MemoryRecord) -> f32 {
    match record.speaker_name.as_deref() {
        Some(name) if name.chars().count() >= 2 && query.contains(name) => SPEAKER_BOOST,
        _ => 1.0,
    }
}

/// The query without surrounding blanks: not empty and at most [`MAX_QUERY_CHARS`] long.
fn checked_query(query: &str) -> Result<&str, MemoryError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(invalid("query", "query must not be empty"));
    }
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(invalid(
            "query",
            format!("query is longer than {MAX_QUERY_CHARS} characters"),
        ));
    }
    Ok(query)
}

/// The request's limit, or the mode's default; within 1..=`recall.max_limit`.
fn recall_limit(cfg: &RecallConfig, req: &RecallRequest) -> Result<usize, MemoryError> {
    let max = cfg.max_limit.max(1);
    let default = match req.mode {
        RecallMode::Comprehensive => cfg.default_limit,
        RecallMode::Chained => cfg.final_limit,
    };
    let limit = req.limit.unwrap_or(default as i64);
    if limit < 1 || limit > max as i64 {
        return Err(invalid(
            "limit",
            format!("limit must be between 1 and {max}"),
        ));
    }
    Ok(limit as usize)
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
    pub working_memory: working::WorkingStatus,
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
    /// The rows it may read (`rows.to_sql()` for LanceDB).
    pub rows: RowFilter,
    pub memory_scope: String,
    pub migration_mode: bool,
}

pub struct MemoryService {
    /// Whether this process does the table's background maintenance (one process at a time).
    lease: Lease,
    store: Store,
    search: Arc<LanceSearch>,
    /// The vector search recalls use: resident in memory, LanceDB when it cannot answer.
    vectors: Arc<crate::store::resident::ResidentSearch>,
    /// Finds and reinforces the stored copy of a repeated fact (shared with feedback).
    repetitions: super::repetition::Repetitions,
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
    feedback: super::feedback::FeedbackQueue,
    /// Erase notices beside the table: this process's erases reach the others through them.
    erase_notices: super::erase_notices::EraseNotices,
    /// When another process on this machine last erased (`memory::erase_generation`).
    erase_generation: super::erase_generation::EraseGeneration,
    /// Records what recalls returned, when decay ranking or refresh-on-recall needs it.
    touches: std::sync::OnceLock<super::touch::RecallTouches>,
    /// Recalls answered by keyword alone because the query could not be embedded.
    degraded_recalls: AtomicU64,
    /// What the embedder's similarities mean (ranking accuracy and noise per script, where
    /// chat sits, the duplicate bound), for recall and `/v1/status`; unset until the model
    /// could be measured.
    calibration: Arc<std::sync::OnceLock<ModelFit>>,
    /// How often recalls returned each recent message (the consolidation threshold rule).
    recurrences: super::working::Recurrences,
    /// Messages a recall returned a second time, for the task that consolidates them.
    returned_again: super::working::ReturnedAgain,
    /// The LLM consolidation pass (`consolidation.*`).
    consolidator: super::consolidation::Consolidator,
    /// Whether the table holds any message, so recalls skip the second tier until it does.
    messages_present: working::MessagesPresent,
    /// Facts consolidated because a second member stated them again (`service::restated`).
    restated: AtomicU64,
    /// The recent statements a stored message is compared with (`working::restatement`).
    recent_statements: std::sync::Mutex<crate::memory::working::restatement::RecentStatements>,
}

impl MemoryService {
    /// The embedder's calibration, once measured.
    pub fn calibration(&self) -> Option<Calibration> {
        self.calibration.get().map(|m| m.calibration)
    }

    /// Whether recalls are written back (`last_recalled_at`, refreshed expiry): only when decay
    /// ranking or refresh-on-recall uses them, since each is a row update.
    fn records_recalls(&self) -> bool {
        self.ranking().weighs_strength() || self.settings.retention.refresh_on_recall
    }

    /// Whether the injection event holds memories back for messages that ask for none
    /// (`recall.relevance_gate`); explicit recalls never are.
    pub fn injection_gate(&self) -> bool {
        self.settings.recall.relevance_gate
    }

    fn ranking(&self) -> super::ranking::Ranking {
        super::ranking::Ranking::from_config(&self.settings.recall)
    }

    /// Whether this process holds the maintenance lease.
    pub fn is_maintainer(&self) -> bool {
        self.lease.is_held()
    }

    /// Who holds the maintenance lease now, if anyone.
    pub async fn lease_holder(&self) -> Option<lease::LeaseHolder> {
        lease::current_holder(self.store.beside(), self.store.table().name()).await
    }

    /// The feedback queue (journaled; its worker runs after `start_background`).
    pub fn feedback(&self) -> &super::feedback::FeedbackQueue {
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

    /// Recall what this conversation may see: its scope plus `public` (plus legacy NULL rows
    /// while migration mode is on), filtered inside LanceDB before ranking.
    pub async fn recall(&self, req: RecallRequest) -> Result<RecallResponse, MemoryError> {
        let started = Instant::now();
        let conversation = conversation(&req.conversation_id)?;
        let query = checked_query(&req.query)?;
        let limit = recall_limit(&self.settings.recall, &req)?;
        super::turns::check(&req.history).map_err(|e| invalid("history", e.to_string()))?;
        self.caught_up_with_erasures().await?;
        // A recall of a cached query over the resident copy finishes without waiting on
        // anything, so a caller recalling in a loop never gave its worker back: tasks woken on
        // that worker (an erase's) waited up to two minutes. Yield once the task's budget is spent.
        tokio::task::consume_budget().await;

        let all_tiers = self.visibility(&conversation, req.persona.as_deref());
        // Long-term memories here; the working memory's messages are their own tier below.
        let visible = Visibility {
            rows: all_tiers.rows.clone().in_tier(Tier::Memories),
            ..all_tiers.clone()
        };
        let asked = Asked { req: &req, query };
        let mut searched = self.search_visible(&asked, limit, 0, &visible).await?;
        let mut ranked = self.rank_and_select(&req, limit, searched.search, searched.found);
        // A fact said twice gave up a slot: search once more, deeper, for the next one. (The
        // first search keeps its usual depth, so fusion ranks as it always did.)
        if ranked.merged > 0
            && ranked.memories.len() < limit
            && req.mode == RecallMode::Comprehensive
        {
            let extra = ranked.merged + DISTINCT_SPARE;
            searched = self.search_visible(&asked, limit, extra, &visible).await?;
            ranked = self.rank_and_select(&req, limit, searched.search, searched.found);
        }
        if searched.degraded == Some("embedding_unavailable") {
            self.degraded_recalls.fetch_add(1, Ordering::Relaxed);
        }
        let (memories, merged_duplicates) = (ranked.memories, ranked.merged);
        if let Some(touches) = self.touches.get() {
            touches.record(memories.iter().map(|m| m.memory.id.clone()).collect());
        }
        // Each tier answers to the gate on its own evidence: a question whose only answer was
        // said in the chat gets that message though no long-term memory answers it.
        let recent_messages = self.recent_messages(&asked, &all_tiers).await?;
        self.latency.record(started.elapsed());
        tracing::info!(
            conversation_id = conversation.as_str(),
            memory_scope = visible.memory_scope.as_str(),
            migration_mode = visible.migration_mode,
            search = searched.search.as_str(),
            degraded = searched.degraded,
            gated = searched.gated,
            rows = memories.len(),
            recent_messages = recent_messages.len(),
            ms = started.elapsed().as_millis() as u64,
            "recalled"
        );
        Ok(RecallResponse {
            memory_scope: visible.memory_scope,
            migration_mode: visible.migration_mode,
            memories,
            degraded: searched.degraded,
            gated: searched.gated,
            time_window: searched.time_window,
            merged_duplicates,
            recent_messages,
        })
    }

    /// The search stage of a recall: the candidates the visible rows offer for `query` (none
    /// when the relevance gate closes), with the search that ran and why it was degraded.
    async fn search_visible(
        &self,
        asked: &Asked<'_>,
        limit: usize,
        extra: usize,
        visible: &Visibility,
    ) -> Result<Searched, MemoryError> {
        let (req, query) = (asked.req, asked.query);
        let cfg = &self.settings.recall;
        let k = match req.mode {
            // Strength can lift a candidate past closer ones: rank a wider pool.
            RecallMode::Comprehensive if self.ranking().weighs_strength() => limit * 4,
            // Deeper (`extra`) after a fact said twice gave up a slot.
            RecallMode::Comprehensive => limit + extra,
            RecallMode::Chained => cfg.pool_size.max(1).max(limit),
        };
        // Keyword-only while the table's vectors are another model's (a re-embed is under way).
        let degraded = (!self.reembed.vectors_current()).then_some("reembedding");
        let search = match degraded {
            Some(_) => SearchKind::Keyword,
            None => req.search.unwrap_or(cfg.search),
        };
        let searchers = Searchers {
            embedder: self.embedder.as_ref(),
            queries: &self.queries,
            vectors: self.vectors.as_ref(),
            keywords: self.vectors.as_ref(),
        };
        let zone = self.zone(req.timezone.as_deref())?;
        let time = match req.time_words {
            Some(false) => None,
            _ => super::time_words::find(query, Utc::now().with_timezone(&zone)),
        };
        // Time words name a window of the prefilter and are left out of the searched text.
        let text = time.as_ref().map_or(query, |t| t.rest.as_str());
        let calibration = self.calibration();
        let measured = calibration.as_ref().unwrap_or(&Calibration::UNMEASURED);
        let fit = *measured.for_query(text);
        let threshold = match (cfg.similarity_cut, calibration) {
            (SimilarityCut::Calibrated, Some(_)) => fit.similarity_cut(),
            _ => cfg.similarity_threshold,
        };
        let redacted = redact(text);
        // The earlier turns and the message, for a follow-up (`memory::turns`).
        let context = super::turns::context(&req.history, text)
            .map_err(|e| invalid("history", e.to_string()))?
            .map(|c| redact(&c));
        let search_in = |rows: RowFilter| CandidateQuery {
            text: &redacted,
            context: context.as_deref(),
            rows,
            k,
            threshold,
            kind: search,
            fit,
            rescale: measured.rescale_for(text),
        };
        let mut time_window = None;
        let mut found = match &time {
            None => {
                searchers
                    .candidates(&search_in(visible.rows.clone()))
                    .await?
            }
            Some(t) => {
                let mut rows = visible.rows.clone();
                rows.created = Some(t.window);
                let within = searchers.candidates(&search_in(rows.clone())).await?;
                // Empty when nothing visible was created then; candidates that the similarity
                // cut left out of a window that holds memories are no reason to answer from
                // other days.
                let empty =
                    within.candidates.is_empty() && self.store.count(rows.to_sql()).await? == 0;
                time_window = Some(TimeWindow {
                    words: t.words.clone(),
                    from: t.window.from.to_rfc3339(),
                    until: t.window.until.to_rfc3339(),
                    timezone: zone.name().to_string(),
                    empty,
                });
                within
            }
        };
        if time_window.as_ref().is_some_and(|w| w.empty) {
            found = searchers
                .candidates(&search_in(visible.rows.clone()))
                .await?;
        }
        let degraded = degraded.or(found.degraded);
        let in_window = time_window.as_ref().is_some_and(|w| !w.empty);
        // The gate is for injection into every prompt; an explicit recall is never held back,
        // and a message that names a visible memory's own words asks for it.
        let gated = if req.relevance_gate.unwrap_or(false) {
            let named = found.keyword_named;
            self.gate(text, &fit, found.vector.as_ref(), in_window, named)
        } else {
            None
        };
        let found = match gated {
            Some(_) => super::hybrid::Found::default(),
            None => found,
        };
        Ok(Searched {
            search,
            found,
            degraded,
            gated,
            time_window,
        })
    }

    /// The ranking stage of a recall: candidates scored by relevance (and strength), then the
    /// best `limit`, or the chained selection's spread over entities and memory types.
    fn rank_and_select(
        &self,
        req: &RecallRequest,
        limit: usize,
        search: SearchKind,
        found: super::hybrid::Found,
    ) -> Selected {
        let cfg = &self.settings.recall;
        let ranking = self.ranking();
        let now = Utc::now();
        let mut ranked: Vec<Ranked> = found
            .candidates
            .into_iter()
            .map(|c| Ranked {
                hit: ScoredMemory {
                    score: ranking.score(c.relevance, &c.record, now)
                        * speaker_boost(&req.query, &c.record),
                    memory: c.record.into(),
                },
                vector: c.vector,
            })
            .collect();
        // A vector-only list is already in order.
        if ranking.weighs_strength() || search != SearchKind::Vector {
            ranked.sort_by(|a, b| b.hit.score.total_cmp(&a.hit.score));
        }
        let keep = match req.mode {
            RecallMode::Comprehensive => limit,
            RecallMode::Chained => usize::MAX,
        };
        let (scored, merged) = match self.calibration.get() {
            Some(fit) => distinct::keep_distinct(ranked, &fit.duplicates, keep),
            None => (ranked.into_iter().take(keep).map(|r| r.hit).collect(), 0),
        };
        let memories = match req.mode {
            RecallMode::Comprehensive => scored,
            RecallMode::Chained => chained::select(
                scored,
                &req.entities,
                ChainedLimits {
                    per_entity: cfg.per_entity,
                    per_type_limit: cfg.per_type_limit,
                    final_limit: limit,
                },
            ),
        };
        Selected { memories, merged }
    }

    /// The relevance gate (`memory::relevance`): `Some` when the message asks for no memory.
    /// Open when the vector search did not run or the model is not measured yet: nothing to
    /// weigh the message with. `named`: a visible memory holds every word of the message, which
    /// then passes unless it reads as chat.
    fn gate(
        &self,
        query: &str,
        fit: &crate::embed::calibration::ScriptFit,
        vector: Option<&super::hybrid::VectorEvidence>,
        in_window: bool,
        named: bool,
    ) -> Option<&'static str> {
        let measured = self.calibration.get()?;
        let vector = vector?;
        let best = vector.best_similarity?;
        let relevance = super::relevance::Relevance::measure(
            fit,
            &measured.small_talk,
            crate::embed::Script::of(query),
            best,
            &vector.query,
        );
        tracing::debug!(
            memory_z = relevance.memory_z,
            chat_z = relevance.chat_z,
            named,
            "relevance gate"
        );
        let asks = match in_window {
            true => relevance.asks_about_a_time(),
            false => relevance.asks_for_memory(),
        };
        let names_a_memory = named && relevance.names_a_memory();
        (!asks && !names_a_memory).then_some("no_relevant_memory")
    }

    /// The zone a request's time words are read in: its own (a plugin's), else
    /// `recall.timezone`, else the machine's.
    fn zone(&self, requested: Option<&str>) -> Result<chrono_tz::Tz, MemoryError> {
        let configured = self.settings.recall.timezone.as_str();
        match requested.map(str::trim).filter(|z| !z.is_empty()) {
            Some(z) => super::time_words::parse_zone(z).map_err(|e| invalid("timezone", e)),
            None if !configured.is_empty() => {
                super::time_words::parse_zone(configured).map_err(|e| invalid("timezone", e))
            }
            None => Ok(super::time_words::machine_zone()),
        }
    }

    /// What a conversation may read, as a predicate: its scope and `public` (plus NULL-scope
    /// rows while migration mode is on), unexpired; the recall predicate of one map snapshot.
    /// Incognito conversations read as usual (incognito only stops writes).
    pub fn visible_to(
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
        let migration = self.migration_active();
        let rows = recall_filter(&scope.scope, migration, map.filter_mode(), Utc::now());
        Visibility {
            rows,
            memory_scope: scope.scope.as_str().to_string(),
            migration_mode: migration,
        }
    }

    /// List what this conversation may see, newest first: the recall predicate of the same
    /// snapshot, without a query or a similarity threshold (the operator page's browse).
    pub async fn browse(&self, req: BrowseRequest) -> Result<BrowseResponse, MemoryError> {
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
        let tier = match req.messages {
            true => Tier::Messages,
            false => Tier::Memories,
        };
        let visible = Visibility {
            rows: visible.rows.clone().in_tier(tier),
            ..visible
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
    pub fn scope_map(&self) -> crate::scope::MapView {
        self.scopes.snapshot().view()
    }

    /// `POST /v1/forget`: erase what the conversation wrote, or the given memories that its
    /// own scope holds (public ones only from a public-scope conversation).
    pub async fn forget(&self, req: ForgetRequest) -> Result<ForgetOutcome, MemoryError> {
        let conversation = conversation(&req.conversation_id)?;
        let outcome = match req.memory_ids {
            None => {
                let c = conversation.as_str().to_owned();
                let predicate = Selection::conversation(&c).rows_sql();
                self.erase_where(predicate, Some(c), None).await?
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
        let map = self.scopes.snapshot();
        let scope = map.resolve(conversation, persona).scope;
        // What this conversation may erase, inside every query: its own scope (and NULL-scope
        // rows from a public conversation while migration mode is on). A legacy table may hold
        // an id twice; the copy in another scope is neither counted nor deleted.
        let own = ScopeSet {
            names: vec![scope.as_str().to_owned()],
            null: scope.is_public() && self.migration_active(),
        };
        let asked = Selection::ids(wanted.iter().cloned()).within(own.clone());
        let deletable = self.store.ids_where(&asked.rows_sql()).await?;
        let refused: Vec<String> = wanted
            .into_iter()
            .filter(|id| !deletable.contains(id))
            .collect();
        if deletable.is_empty() {
            return Ok(ForgetOutcome {
                refused,
                ..ForgetOutcome::default()
            });
        }
        let erasable = Selection::ids(deletable).within(own);
        let mut outcome = self.erase_where(erasable.rows_sql(), None, None).await?;
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
        let outcome = self.erase_where(predicate, None, Some(s)).await?;
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
        self.erase_where(predicate, None, None).await
    }

    /// The table's counts (rows by scope, NULL-scope rows, fragments, versions) for `/metrics`.
    pub async fn table_stats(&self) -> Result<crate::store::StoreStats, MemoryError> {
        Ok(self.store.stats().await?)
    }

    /// The writer's running totals (commits, rows appended, retries) for `/metrics`.
    pub fn writer_counters(&self) -> &crate::store::commit::WriterCounters {
        self.store.writer().counters()
    }

    pub async fn status(&self) -> Result<Status, MemoryError> {
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
    pub async fn shutdown(&self) {
        self.feedback.shutdown().await;
        self.backfill.stop().await;
        self.reembed.stop().await;
        self.store.shutdown().await;
        self.lease.release().await;
    }
}
