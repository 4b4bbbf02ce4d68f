//! The feedback (reflection) write path (DESIGN.md section 6): where most memories are born.
//!
//! `accept` validates, derives the scope once from the conversation id (the same
//! [`derive_scope`] as every other write), pre-assigns ids, journals the job durably and queues
//! it. The worker turns a job into an absolute [`FeedbackPlan`] (journaled), applies it
//! idempotently, and marks it done. Ids the conversation cannot see are refused and logged.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Notify};

use super::journal::{PendingJob, Record};
use super::journal_files::InstanceJournal;
use super::redact::redact;
use super::service::derive_scope;
use super::MemoryError;
use crate::embed::Embedder;
use crate::migrate::MigrationGate;
use crate::scope::{sql_literal, ConversationId, ScopeResolver};
use crate::store::{MemoryRecord, Store};

const MAX_IDS: usize = 100;
const MAX_NEW: usize = 50;
const MAX_GROUPS: usize = 20;
const MAX_GROUP_LEN: usize = 20;
const REINFORCE: i32 = 3;
const PASSIVE_STRENGTH: i32 = 10;

/// `POST /v1/feedback`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub useful_memory_ids: Vec<String>,
    #[serde(default)]
    pub new_memories: Vec<NewMemory>,
    #[serde(default)]
    pub merge_groups: Vec<Vec<String>>,
}

pub use super::new_memory::NewMemory;

/// A new memory with its id assigned at acceptance (so a replay inserts it at most once).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewMemoryJob {
    pub id: String,
    pub content: String,
    pub reasoning: Option<String>,
    pub tags: Vec<String>,
    pub memory_type: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergeGroupJob {
    pub new_id: String,
    pub ids: Vec<String>,
}

/// An accepted job as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeedbackJob {
    pub job_id: String,
    pub conversation_id: String,
    pub scope: String,
    pub scope_source: String,
    pub accepted_at: DateTime<Utc>,
    pub useful_memory_ids: Vec<String>,
    pub new_memories: Vec<NewMemoryJob>,
    pub merge_groups: Vec<MergeGroupJob>,
}

/// A merge, fully decided: the merged memory and the rows it replaces.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergePlan {
    pub new_id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub memory_type: String,
    pub strength: i32,
    pub is_active: bool,
    pub memory_scope: String,
    pub scope_source: String,
    pub delete_ids: Vec<String>,
}

/// Absolute changes: replaying a plan gives the same result as applying it once.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FeedbackPlan {
    /// (id, new strength).
    pub reinforce: Vec<(String, i32)>,
    /// The strength each reinforced row had when the plan was made: a replay only writes where
    /// it is unchanged, so an old plan never overwrites what a newer job did. (Empty in plans
    /// journaled by older versions, which apply unconditionally.)
    #[serde(default)]
    pub expected_strength: std::collections::BTreeMap<String, i32>,
    pub new_memories: Vec<NewMemoryJob>,
    pub merges: Vec<MergePlan>,
    /// (id or group, why) for everything refused.
    pub refused: Vec<(String, String)>,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Applied.
    Done,
    /// Dead-lettered after `feedback.max_attempts` failed attempts; never applied later.
    Failed,
    /// Dropped unapplied because an erase removed what it would touch.
    Dropped,
}

/// What a finished job did, for `GET /v1/feedback/{job_id}` (kept a day, across restarts).
/// Holds ids and counts, never memory text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobOutcome {
    pub job_id: String,
    pub state: JobState,
    pub reinforced: usize,
    pub created: Vec<String>,
    pub merged: Vec<String>,
    pub refused: Vec<(String, String)>,
    pub error: Option<String>,
    /// Attempts it took (failed ones included).
    pub attempts: u32,
    pub finished_at: DateTime<Utc>,
}

impl JobOutcome {
    fn unapplied(job_id: String, state: JobState, error: String, attempts: u32) -> JobOutcome {
        JobOutcome {
            job_id,
            state,
            reinforced: 0,
            created: vec![],
            merged: vec![],
            refused: vec![],
            error: Some(error),
            attempts,
            finished_at: Utc::now(),
        }
    }
}

/// Queue size and retry policy (the `feedback` config section).
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    /// Jobs that may wait before new feedback is answered 503.
    pub capacity: usize,
    pub retry: RetryPolicy,
}

/// How failed jobs are retried: in place (later jobs wait, so none overtakes it), with a
/// backoff doubling from `base` up to `cap`, and dead-lettered after `max_attempts`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl RetryPolicy {
    /// The pause before the attempt after `failed` failures.
    pub fn backoff(&self, failed: u32) -> Duration {
        let factor = 1u32 << failed.saturating_sub(1).min(16);
        self.base.saturating_mul(factor).min(self.cap)
    }
}

/// Why feedback could not be accepted.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error(transparent)]
    Invalid(#[from] MemoryError),
    #[error("the feedback queue is full ({0} jobs waiting); retry later")]
    QueueFull(usize),
    #[error("{0}")]
    Journal(String),
}

struct Shared {
    store: Store,
    embedder: Arc<dyn Embedder>,
    gate: MigrationGate,
    /// This process's journal (and the lock that marks it alive).
    files: InstanceJournal,
    /// Held by the worker while it applies a job, and by an erase for its whole duration, so an
    /// erase never races a job that would write back what it erases.
    apply: tokio::sync::Mutex<()>,
    /// Jobs an erase dropped from the journal; the worker skips them when they come up.
    dropped: Mutex<std::collections::HashSet<String>>,
    outcomes: Mutex<VecDeque<JobOutcome>>,
    retry: RetryPolicy,
    /// Failed attempts that were retried, for metrics.
    retries: std::sync::atomic::AtomicU64,
    finished: Notify,
    depth: std::sync::atomic::AtomicUsize,
}

/// The queue + worker. `accept` is safe to call before the worker starts: jobs wait durably.
pub struct FeedbackQueue {
    shared: Arc<Shared>,
    scopes: Arc<ScopeResolver>,
    tx: mpsc::Sender<FeedbackJob>,
    rx: Mutex<Option<mpsc::Receiver<FeedbackJob>>>,
    replay: Mutex<Vec<PendingJob>>,
    capacity: usize,
    stop: Arc<Notify>,
    task: crate::task::TaskSlot,
}

fn invalid(field: &'static str, message: impl Into<String>) -> MemoryError {
    MemoryError::InvalidInput {
        field,
        message: message.into(),
    }
}

impl FeedbackQueue {
    /// Claim this process's journal in `dir` (adopting dead instances' unfinished jobs, which
    /// the worker replays first) and open the queue.
    pub fn open(
        dir: &std::path::Path,
        table: &str,
        settings: QueueSettings,
        store: Store,
        embedder: Arc<dyn Embedder>,
        scopes: Arc<ScopeResolver>,
        gate: MigrationGate,
    ) -> Result<FeedbackQueue, MemoryError> {
        let mut files =
            InstanceJournal::claim(dir, table).map_err(|e| MemoryError::Internal(e.to_string()))?;
        let pending = std::mem::take(&mut files.pending);
        tracing::info!(
            instance = %files.instance,
            adopted_journals = files.adopted_files,
            jobs = pending.jobs.len(),
            corrupt_lines = pending.corrupt_lines,
            "feedback journal claimed; adopted unfinished jobs are replayed first"
        );
        let (tx, rx) = mpsc::channel(settings.capacity.max(1));
        Ok(FeedbackQueue {
            shared: Arc::new(Shared {
                store,
                embedder,
                gate,
                files,
                apply: tokio::sync::Mutex::new(()),
                dropped: Mutex::new(Default::default()),
                outcomes: Mutex::new(VecDeque::new()),
                retry: settings.retry,
                retries: Default::default(),
                finished: Notify::new(),
                depth: std::sync::atomic::AtomicUsize::new(pending.jobs.len()),
            }),
            scopes,
            tx,
            rx: Mutex::new(Some(rx)),
            replay: Mutex::new(pending.jobs),
            capacity: settings.capacity.max(1),
            stop: Arc::new(Notify::new()),
            task: crate::task::TaskSlot::default(),
        })
    }

    /// Jobs accepted but not yet finished.
    pub fn depth(&self) -> usize {
        self.shared.depth.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn journal_healthy(&self) -> bool {
        self.shared.files.journal.healthy()
    }

    /// Validate, derive the scope, journal durably, queue. Returns the job id.
    pub fn accept(&self, req: FeedbackRequest) -> Result<String, AcceptError> {
        let conversation = ConversationId::parse(&req.conversation_id).map_err(|e| {
            tracing::error!(code = "invalid_conversation_id", error = %e, "feedback refused; nothing journaled");
            MemoryError::Scope(e)
        })?;
        if req.useful_memory_ids.len() > MAX_IDS {
            return Err(invalid("useful_memory_ids", format!("at most {MAX_IDS} ids")).into());
        }
        if req.new_memories.len() > MAX_NEW {
            return Err(invalid("new_memories", format!("at most {MAX_NEW} new memories")).into());
        }
        if req.merge_groups.len() > MAX_GROUPS {
            return Err(invalid("merge_groups", format!("at most {MAX_GROUPS} groups")).into());
        }
        let mut new_memories = Vec::with_capacity(req.new_memories.len());
        for (i, m) in req.new_memories.into_iter().enumerate() {
            let m = m.parse().map_err(|e| match e {
                MemoryError::InvalidInput { field, message } => invalid(
                    "new_memories",
                    format!("new_memories[{i}].{field}: {message}"),
                ),
                other => other,
            })?;
            new_memories.push(NewMemoryJob {
                id: uuid::Uuid::now_v7().to_string(),
                content: m.content,
                reasoning: m.reasoning,
                tags: m.tags,
                memory_type: m.memory_type,
            });
        }
        let mut merge_groups = Vec::with_capacity(req.merge_groups.len());
        for g in req.merge_groups {
            let ids: BTreeSet<String> = g
                .into_iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if ids.len() < 2 || ids.len() > MAX_GROUP_LEN {
                return Err(invalid(
                    "merge_groups",
                    format!("each group needs 2 to {MAX_GROUP_LEN} distinct ids"),
                )
                .into());
            }
            merge_groups.push(MergeGroupJob {
                new_id: uuid::Uuid::now_v7().to_string(),
                ids: ids.into_iter().collect(),
            });
        }
        let map = self.scopes.snapshot();
        let scope = derive_scope(&map, &conversation, req.persona.as_deref());
        let job = FeedbackJob {
            job_id: uuid::Uuid::now_v7().to_string(),
            conversation_id: conversation.as_str().to_string(),
            scope: scope.scope.as_str().to_string(),
            scope_source: scope.source.as_str().to_string(),
            accepted_at: Utc::now(),
            useful_memory_ids: req
                .useful_memory_ids
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            new_memories,
            merge_groups,
        };
        // Reserve a queue slot first: never journal what cannot be queued.
        let permit = match self.tx.try_reserve() {
            Ok(p) => p,
            Err(_) => return Err(AcceptError::QueueFull(self.capacity)),
        };
        self.shared
            .files
            .journal
            .append(&Record::Accepted { job: job.clone() })
            .map_err(|e| AcceptError::Journal(e.to_string()))?;
        self.shared
            .depth
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let job_id = job.job_id.clone();
        tracing::info!(
            conversation_id = %job.conversation_id,
            memory_scope = %job.scope,
            job_id = %job_id,
            new = job.new_memories.len(),
            useful = job.useful_memory_ids.len(),
            merges = job.merge_groups.len(),
            "feedback accepted"
        );
        permit.send(job);
        Ok(job_id)
    }

    /// Start the worker: replays unfinished journaled jobs first, then serves the queue.
    pub fn start(&self) {
        if self.task.is_set() {
            return;
        }
        let Some(mut rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            return;
        };
        let replay = self
            .replay
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        let shared = self.shared.clone();
        let stop = self.stop.clone();
        self.task.spawn_if_idle(async move {
            for pending in replay {
                if run_job(&shared, pending, &stop).await == Run::Stopped {
                    return;
                }
            }
            loop {
                tokio::select! {
                    biased;
                    job = rx.recv() => match job {
                        Some(job) => {
                            let pending = PendingJob { job, plan: None, attempts: 0 };
                            if run_job(&shared, pending, &stop).await == Run::Stopped {
                                break;
                            }
                        }
                        None => break,
                    },
                    _ = stop.notified() => break,
                }
            }
        });
    }

    /// Wait for the job in flight, then hold the worker off until the guard is dropped. An
    /// erase holds it while it deletes rows and drops pending jobs.
    pub async fn pause(&self) -> FeedbackPause<'_> {
        FeedbackPause(self.shared.apply.lock().await)
    }

    /// Drop the unfinished jobs that `select` picks (while paused): they are removed from the
    /// journal, which is rewritten without them and without finished jobs, and the worker will
    /// skip them. Returns how many were dropped.
    pub fn drop_pending(
        &self,
        _paused: &FeedbackPause<'_>,
        select: impl Fn(&FeedbackJob, Option<&FeedbackPlan>) -> bool,
    ) -> Result<usize, MemoryError> {
        let ids = self
            .shared
            .files
            .journal
            .compact(select)
            .map_err(|e| MemoryError::Internal(e.to_string()))?;
        if let Ok(mut dropped) = self.shared.dropped.lock() {
            dropped.extend(ids.iter().cloned());
        }
        Ok(ids.len())
    }

    /// Stop after the job in flight (queued jobs stay in the journal for the next start).
    pub async fn shutdown(&self) {
        self.stop.notify_one();
        self.task.join().await;
        self.shared.files.release_if_drained();
    }

    /// This process's instance id (names its journal).
    pub fn instance(&self) -> &str {
        &self.shared.files.instance
    }

    /// Kill the worker at once, as a crash would (tests), and wait until it is gone.
    pub async fn abort(&self) {
        self.task.kill().await;
    }

    /// How a finished job ended (this process's recent jobs, then every outcome its journal
    /// keeps: a day, across restarts and adoption). `None`: pending or unknown.
    pub fn outcome(&self, job_id: &str) -> Option<JobOutcome> {
        let recent = self
            .shared
            .outcomes
            .lock()
            .ok()
            .and_then(|o| o.iter().find(|o| o.job_id == job_id).cloned());
        recent.or_else(|| {
            self.shared
                .files
                .journal
                .finished()
                .into_iter()
                .find(|o| o.job_id == job_id)
        })
    }

    /// Jobs dead-lettered within the last day, newest last.
    pub fn dead_letters(&self) -> Vec<JobOutcome> {
        self.shared
            .files
            .journal
            .finished()
            .into_iter()
            .filter(|o| o.state == JobState::Failed)
            .collect()
    }

    /// Failed attempts that were retried since start.
    pub fn retries(&self) -> u64 {
        self.shared
            .retries
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Wait until `job_id` has finished (or `timeout`).
    pub async fn wait_for(&self, job_id: &str, timeout: Duration) -> Option<JobOutcome> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.finished.notified();
            if let Some(o) = self.outcome(job_id) {
                return Some(o);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.outcome(job_id);
            }
        }
    }
}

/// Proof that the feedback worker is paused (see [`FeedbackQueue::pause`]).
pub struct FeedbackPause<'a>(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>);

/// Whether the worker should go on after a job.
#[derive(Debug, PartialEq, Eq)]
enum Run {
    Next,
    Stopped,
}

/// Apply one job, retrying in place with backoff; dead-letter it after the last attempt.
async fn run_job(shared: &Shared, mut pending: PendingJob, stop: &Notify) -> Run {
    let job_id = pending.job.job_id.clone();
    loop {
        let applying = shared.apply.lock().await;
        let was_dropped = shared
            .dropped
            .lock()
            .map(|mut d| d.remove(&job_id))
            .unwrap_or(false);
        if was_dropped {
            let why = "dropped: the memories it would touch were erased first".to_string();
            let outcome = JobOutcome::unapplied(job_id, JobState::Dropped, why, pending.attempts);
            finish(shared, outcome);
            return Run::Next;
        }
        let error = match attempt(shared, &mut pending).await {
            Ok(outcome) => {
                for (what, why) in &outcome.refused {
                    tracing::warn!(job_id = %job_id, conversation_id = %pending.job.conversation_id, target = %what, reason = %why, "feedback refused a memory it cannot touch");
                }
                finish(shared, outcome);
                return Run::Next;
            }
            Err(e) => e.to_string(),
        };
        pending.attempts += 1;
        let attempts = pending.attempts;
        let recorded = shared.files.journal.append(&Record::Attempt {
            job_id: job_id.clone(),
            attempts,
            error: error.clone(),
        });
        if let Err(e) = recorded {
            tracing::error!(job_id = %job_id, error = %e, "could not journal a failed attempt");
        }
        if attempts >= shared.retry.max_attempts {
            tracing::error!(job_id = %job_id, attempts, error = %error, "feedback job dead-lettered; it will never be applied");
            finish(
                shared,
                JobOutcome::unapplied(job_id, JobState::Failed, error, attempts),
            );
            return Run::Next;
        }
        shared
            .retries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pause = shared.retry.backoff(attempts);
        tracing::warn!(job_id = %job_id, attempts, retry_in_ms = pause.as_millis() as u64, error = %error, "feedback job failed; retrying");
        // Let an erase run during the pause; later jobs still wait behind this one.
        drop(applying);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.notified() => return Run::Stopped,
        }
    }
}

/// One attempt: plan (journaled once), apply, and journal the outcome.
async fn attempt(shared: &Shared, pending: &mut PendingJob) -> Result<JobOutcome, MemoryError> {
    let job = &pending.job;
    let plan = match &pending.plan {
        Some(p) => p.clone(),
        None => {
            let p = make_plan(shared, job).await?;
            shared
                .files
                .journal
                .append(&Record::Planned {
                    job_id: job.job_id.clone(),
                    plan: p.clone(),
                })
                .map_err(|e| MemoryError::Internal(e.to_string()))?;
            pending.plan = Some(p.clone());
            p
        }
    };
    let mut outcome = apply(shared, job, &plan).await?;
    outcome.attempts = pending.attempts + 1;
    shared
        .files
        .journal
        .append(&Record::Finished {
            outcome: outcome.clone(),
        })
        .map_err(|e| MemoryError::Internal(e.to_string()))?;
    Ok(outcome)
}

/// Count the job as finished and publish its outcome (journaled, so it survives a restart).
fn finish(shared: &Shared, outcome: JobOutcome) {
    if outcome.state != JobState::Done {
        let record = Record::Finished {
            outcome: outcome.clone(),
        };
        if let Err(e) = shared.files.journal.append(&record) {
            tracing::error!(job_id = %outcome.job_id, error = %e, "could not journal a finished job");
        }
    }
    shared
        .depth
        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut o) = shared.outcomes.lock() {
        if o.len() >= 1000 {
            o.pop_front();
        }
        o.push_back(outcome);
    }
    shared.finished.notify_waiters();
}

/// Visible to the job's conversation: its own scope, public, and NULL while in migration mode.
fn visible(job: &FeedbackJob, r: &MemoryRecord, null_visible: bool) -> bool {
    match r.memory_scope.as_deref() {
        Some(s) => s == job.scope || s == "public",
        None => null_visible,
    }
}

async fn make_plan(shared: &Shared, job: &FeedbackJob) -> Result<FeedbackPlan, MemoryError> {
    let null_visible = shared.gate.is_on();
    let mut wanted: BTreeSet<String> = job.useful_memory_ids.iter().cloned().collect();
    for g in &job.merge_groups {
        wanted.extend(g.ids.iter().cloned());
    }
    let rows = shared
        .store
        .get_by_ids(&wanted.into_iter().collect::<Vec<_>>())
        .await?;
    let by_id: HashMap<&str, &MemoryRecord> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut plan = FeedbackPlan {
        new_memories: job.new_memories.clone(),
        ..FeedbackPlan::default()
    };
    let mut merged_away: BTreeSet<&str> = BTreeSet::new();

    for g in &job.merge_groups {
        let label = format!("merge[{}]", g.ids.join(","));
        let members: Vec<&MemoryRecord> = g
            .ids
            .iter()
            .filter_map(|id| by_id.get(id.as_str()).copied())
            .collect();
        if members.len() != g.ids.len() || members.iter().any(|r| !visible(job, r, null_visible)) {
            plan.refused.push((
                label,
                "a memory in the group does not exist or is not visible to this conversation"
                    .into(),
            ));
            continue;
        }
        let private: BTreeSet<&str> = members
            .iter()
            .filter_map(|r| r.memory_scope.as_deref())
            .filter(|s| *s != "public")
            .collect();
        if private.len() > 1 {
            plan.refused.push((
                label,
                "memories from two different non-public scopes are never merged".into(),
            ));
            continue;
        }
        // public + private gives private; all public (or legacy NULL) gives public.
        let (scope, source) = match private.iter().next() {
            Some(s) => {
                let src = members
                    .iter()
                    .find(|r| r.memory_scope.as_deref() == Some(*s))
                    .and_then(|r| r.scope_source.clone());
                (
                    s.to_string(),
                    src.unwrap_or_else(|| job.scope_source.clone()),
                )
            }
            None => (
                "public".to_string(),
                members
                    .iter()
                    .find(|r| r.memory_scope.is_some())
                    .and_then(|r| r.scope_source.clone())
                    .unwrap_or_else(|| "unmapped".into()),
            ),
        };
        let mut contents: Vec<&str> = Vec::new();
        for r in &members {
            if !contents.contains(&r.content.as_str()) {
                contents.push(&r.content);
            }
        }
        // Legacy rows (written before redaction, or by another program) may hold personal
        // data in clear: a merge is a new write, so it is redacted like one.
        let mut tags: Vec<String> = Vec::new();
        for r in &members {
            for t in r.tags.iter().map(|t| redact(t)) {
                if !tags.contains(&t) && tags.len() < 32 {
                    tags.push(t);
                }
            }
        }
        let strongest = members.iter().max_by_key(|r| r.strength).copied();
        plan.merges.push(MergePlan {
            new_id: g.new_id.clone(),
            content: redact(&contents.join("; ")),
            tags,
            memory_type: strongest
                .map(|r| r.memory_type.clone())
                .unwrap_or_else(|| "knowledge".into()),
            strength: members
                .iter()
                .map(|r| r.strength)
                .max()
                .unwrap_or(PASSIVE_STRENGTH)
                .clamp(1, 100),
            is_active: members.iter().any(|r| r.is_active),
            memory_scope: scope,
            scope_source: source,
            delete_ids: g.ids.clone(),
        });
        merged_away.extend(g.ids.iter().map(String::as_str));
    }
    for id in &job.useful_memory_ids {
        match by_id.get(id.as_str()) {
            Some(r) if visible(job, r, null_visible) => {
                if !merged_away.contains(id.as_str()) {
                    plan.reinforce
                        .push((id.clone(), (r.strength + REINFORCE).min(100)));
                    plan.expected_strength.insert(id.clone(), r.strength);
                }
            }
            _ => plan.refused.push((
                id.clone(),
                "does not exist or is not visible to this conversation".into(),
            )),
        }
    }
    Ok(plan)
}

async fn apply(
    shared: &Shared,
    job: &FeedbackJob,
    plan: &FeedbackPlan,
) -> Result<JobOutcome, MemoryError> {
    let mut refused = plan.refused.clone();
    // Insert-if-missing, by the ids assigned at acceptance: a replay never duplicates.
    let mut ids: Vec<String> = plan.new_memories.iter().map(|m| m.id.clone()).collect();
    for m in &plan.merges {
        ids.push(m.new_id.clone());
        ids.extend(m.delete_ids.iter().cloned());
    }
    let existing: BTreeSet<String> = shared
        .store
        .get_by_ids(&ids)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut records: Vec<MemoryRecord> = plan
        .new_memories
        .iter()
        .filter(|m| !existing.contains(&m.id))
        .map(|m| new_memory_record(job, m))
        .collect();
    let mut merges: Vec<&MergePlan> = Vec::new();
    for m in &plan.merges {
        if existing.contains(&m.new_id) {
            merges.push(m); // applied before a crash: only the deletes may be left
        } else if m.delete_ids.iter().all(|id| existing.contains(id)) {
            records.push(merged_record(job, m));
            merges.push(m);
        } else {
            // A newer job merged or deleted a member since this plan was made: writing the
            // merged text now would bring back what that job removed.
            refused.push((
                format!("merge[{}]", m.delete_ids.join(",")),
                "superseded: a memory in the group changed since the job was planned".into(),
            ));
        }
    }
    // Embed before writing anything: the step most likely to fail leaves no partial effect.
    let vectors = if records.is_empty() {
        Vec::new()
    } else {
        shared
            .embedder
            .embed(records.iter().map(|r| r.content.clone()).collect())
            .await?
    };
    let reinforced = reinforce(shared, plan).await?;
    if !records.is_empty() {
        shared
            .store
            .append(records.into_iter().zip(vectors).collect())
            .await?;
    }
    for m in &merges {
        let list: Vec<String> = m.delete_ids.iter().map(|id| sql_literal(id)).collect();
        shared
            .store
            .writer()
            .delete(format!("id IN ({})", list.join(", ")))
            .await?;
    }
    Ok(JobOutcome {
        job_id: job.job_id.clone(),
        state: JobState::Done,
        reinforced,
        created: plan.new_memories.iter().map(|m| m.id.clone()).collect(),
        merged: merges.iter().map(|m| m.new_id.clone()).collect(),
        refused,
        error: None,
        attempts: 1,
        finished_at: Utc::now(),
    })
}

/// Set the planned strengths, only where a row still has the strength the plan saw (or
/// already has the new one): an old plan replayed late never overwrites a newer job's work.
async fn reinforce(shared: &Shared, plan: &FeedbackPlan) -> Result<usize, MemoryError> {
    let mut groups: std::collections::BTreeMap<(Option<i32>, i32), Vec<String>> =
        Default::default();
    for (id, new) in &plan.reinforce {
        let expected = plan.expected_strength.get(id).copied();
        groups
            .entry((expected, *new))
            .or_default()
            .push(sql_literal(id));
    }
    let mut changed = 0;
    for ((expected, new), ids) in groups {
        let mut predicate = format!("id IN ({})", ids.join(", "));
        if let Some(old) = expected {
            predicate.push_str(&format!(" AND strength = {old}"));
        }
        changed += shared
            .store
            .writer()
            .update(predicate, vec![("strength".into(), new.to_string())])
            .await? as usize;
    }
    Ok(changed)
}

fn new_memory_record(job: &FeedbackJob, m: &NewMemoryJob) -> MemoryRecord {
    MemoryRecord {
        id: m.id.clone(),
        content: m.content.clone(),
        reasoning: m.reasoning.clone(),
        tags: m.tags.clone(),
        memory_type: m.memory_type.clone(),
        strength: PASSIVE_STRENGTH,
        is_active: false,
        conversation_id: Some(job.conversation_id.clone()),
        created_at: Some(Utc::now()),
        memory_scope: Some(job.scope.clone()),
        scope_source: Some(job.scope_source.clone()),
    }
}

fn merged_record(job: &FeedbackJob, m: &MergePlan) -> MemoryRecord {
    MemoryRecord {
        id: m.new_id.clone(),
        content: m.content.clone(),
        reasoning: Some(format!("merged from {} memories", m.delete_ids.len())),
        tags: m.tags.clone(),
        memory_type: m.memory_type.clone(),
        strength: m.strength,
        is_active: m.is_active,
        conversation_id: Some(job.conversation_id.clone()),
        created_at: Some(Utc::now()),
        memory_scope: Some(m.memory_scope.clone()),
        scope_source: Some(m.scope_source.clone()),
    }
}
