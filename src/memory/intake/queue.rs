//! The queue: accepted jobs journaled durably, queued for the worker, paused by erases; and
//! what finished jobs did.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use super::batch;
use super::journal::{PendingJob, Record};
use super::journal_files::InstanceJournal;
use super::shared::Shared;
use super::worker::{run_job, Run};
use super::*;
use crate::memory::erase_lock::{EraseHeld, EraseLock};
use crate::memory::feedback::{FeedbackRequest, Writes};
use crate::scope::ScopeResolver;

/// The queue + worker. `accept` is safe to call before the worker starts: jobs wait durably.
pub struct FeedbackQueue {
    shared: Arc<Shared>,
    scopes: Arc<ScopeResolver>,
    tx: mpsc::Sender<Job>,
    rx: Mutex<Option<mpsc::Receiver<Job>>>,
    replay: Mutex<Vec<PendingJob>>,
    capacity: usize,
    message_capacity: usize,
    /// TTLs that give accepted new memories their expiry.
    retention: crate::memory::retention::Retention,
    stop: Arc<Notify>,
    task: crate::task::TaskSlot,
}

impl FeedbackQueue {
    /// Claim this process's journal in `dir` (adopting dead instances' unfinished jobs, which
    /// the worker replays first) and open the queue: jobs write through `writes` and are
    /// scoped by `scopes`' map.
    pub(crate) fn open(
        dir: &std::path::Path,
        table: &str,
        settings: QueueSettings,
        writes: Writes,
        scopes: Arc<ScopeResolver>,
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
        // One channel, so messages and feedback are applied in the order they came; each kind
        // is held to its own capacity in `accept` / `accept_message`.
        let message_capacity = settings.message_capacity.max(1);
        let (tx, rx) = mpsc::channel(settings.capacity.max(1) + message_capacity);
        let replayed_messages = crate::memory::working::PendingMessages::default();
        for p in &pending.jobs {
            if let Job::Message(told) = &p.job {
                replayed_messages.add(&told.job_id, told.record());
            }
        }
        Ok(FeedbackQueue {
            shared: Arc::new(Shared {
                writes,
                files,
                apply: Default::default(),
                dropped: Mutex::new(Default::default()),
                outcomes: Mutex::new(VecDeque::new()),
                written: Mutex::new(VecDeque::new()),
                retry: settings.retry,
                retries: Default::default(),
                batches: Default::default(),
                finished: Notify::new(),
                depth: std::sync::atomic::AtomicUsize::new(pending.jobs.len()),
                pending: Arc::new(replayed_messages),
                stored: crate::memory::working::stored_messages(),
            }),
            scopes,
            tx,
            rx: Mutex::new(Some(rx)),
            replay: Mutex::new(pending.jobs),
            capacity: settings.capacity.max(1),
            message_capacity,
            retention: settings.retention,
            stop: Arc::new(Notify::new()),
            task: crate::task::TaskSlot::default(),
        })
    }

    /// Jobs accepted but not yet finished.
    pub fn depth(&self) -> usize {
        self.shared.depth.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn journal_healthy(&self) -> bool {
        self.shared.files.journal.healthy()
    }

    /// Validate, derive the scope, journal durably, queue. Returns the job id, or `None` for an
    /// incognito conversation, whose feedback (even reinforcement) is never stored.
    pub fn accept(&self, req: FeedbackRequest) -> Result<Option<String>, AcceptError> {
        let Some(job) = crate::memory::feedback::validate(req, &self.scopes, &self.retention)?
        else {
            return Ok(None);
        };
        // Reserve a queue slot first: never journal what cannot be queued.
        let feedback_waiting = self.depth().saturating_sub(self.shared.pending.len());
        if feedback_waiting >= self.capacity {
            return Err(AcceptError::QueueFull(self.capacity));
        }
        let permit = match self.tx.try_reserve() {
            Ok(p) => p,
            Err(_) => return Err(AcceptError::QueueFull(self.capacity)),
        };
        let (new, useful, merges) = (
            job.new_memories.len(),
            job.useful_memory_ids.len(),
            job.merge_groups.len(),
        );
        let job = Job::Reflection(job);
        self.journal_accepted(&job)?;
        let job_id = job.job_id().to_string();
        tracing::info!(
            conversation_id = %job.conversation_id(),
            memory_scope = %job.scope(),
            job_id = %job_id,
            new,
            useful,
            merges,
            "feedback accepted"
        );
        permit.send(job);
        Ok(Some(job_id))
    }

    /// Journal a working-memory message durably and queue it for embedding; it is searchable
    /// by keyword ([`FeedbackQueue::pending`]) from now on. Returns its row id.
    pub(crate) fn accept_message(
        &self,
        accepted: crate::memory::working::MessageAccepted,
    ) -> Result<String, AcceptError> {
        let waiting = self.shared.pending.len();
        if waiting >= self.message_capacity {
            return Err(AcceptError::MessagesFull(waiting));
        }
        let told = MessageTold::of(accepted);
        let record = told.record();
        let permit = match self.tx.try_reserve() {
            Ok(p) => p,
            Err(_) => return Err(AcceptError::MessagesFull(waiting)),
        };
        let job = Job::Message(told);
        self.journal_accepted(&job)?;
        let id = record.id.clone();
        self.shared.pending.add(job.job_id(), record);
        tracing::debug!(
            conversation_id = %job.conversation_id(),
            memory_scope = %job.scope(),
            id = %id,
            "message accepted"
        );
        permit.send(job);
        Ok(id)
    }

    /// Journal `job` durably (before it is acknowledged) and count it as waiting.
    fn journal_accepted(&self, job: &Job) -> Result<(), AcceptError> {
        self.shared
            .files
            .journal
            .append(&Record::Accepted { job: job.clone() })
            .map_err(|e| AcceptError::Journal(e.to_string()))?;
        self.shared
            .depth
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Messages accepted and not yet written.
    pub(crate) fn pending(&self) -> &crate::memory::working::PendingMessages {
        &self.shared.pending
    }

    /// Messages as the worker stores them, with their vectors (`working::stored`).
    pub(crate) fn stored_messages(&self) -> &crate::memory::working::StoredMessages {
        &self.shared.stored
    }

    /// Start the worker: replays unfinished journaled jobs first, then serves the queue.
    pub(crate) fn start(&self) {
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
                    // Queued jobs before the stop signal: shutdown drains the queue.
                    biased;
                    job = rx.recv() => match job {
                        Some(job) => {
                            if serve(&shared, job, &mut rx, &stop).await == Run::Stopped {
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

    /// The lock the worker holds while it applies a job: an erase holds it while it deletes
    /// rows and drops pending jobs, a rule while it writes a fact made of messages.
    pub(crate) fn erase_lock(&self) -> &EraseLock {
        &self.shared.apply
    }

    /// Drop the unfinished jobs that `select` picks (while paused): they are removed from the
    /// journal, which is rewritten without them and without finished jobs, and the worker will
    /// skip them. Returns how many were dropped.
    pub(crate) fn drop_pending(
        &self,
        _held: &EraseHeld<'_>,
        select: impl Fn(&Job, Option<&FeedbackPlan>) -> bool,
    ) -> Result<usize, MemoryError> {
        let ids = self
            .shared
            .files
            .journal
            .compact(select)
            .map_err(|e| MemoryError::Internal(e.to_string()))?;
        // A dropped message is never returned again, even before the worker skips its job.
        self.shared.pending.remove(ids.iter().map(String::as_str));
        if let Ok(mut dropped) = self.shared.dropped.lock() {
            dropped.extend(ids.iter().cloned());
        }
        Ok(ids.len())
    }

    /// Apply the jobs already queued, then stop: the worker serves the queue before it looks
    /// at the stop signal, so a clean shutdown leaves nothing unapplied in the local journal.
    /// Only a job waiting out a retry backoff stops at once; it stays journaled for the next
    /// start on this `state_dir`.
    pub(crate) async fn shutdown(&self) {
        self.stop.notify_one();
        self.task.join().await;
        self.shared.files.release_if_drained();
    }

    /// Rows written by jobs accepted before `erase_began` and finished after
    /// `erase_began - margin`: what an erase that began then, in another process, may have
    /// missed.
    pub(crate) fn written_across(
        &self,
        erase_began: chrono::DateTime<chrono::Utc>,
        margin: chrono::TimeDelta,
    ) -> Vec<String> {
        let Ok(w) = self.shared.written.lock() else {
            return Vec::new();
        };
        w.iter()
            .filter(|r| r.accepted_at <= erase_began && r.finished_at >= erase_began - margin)
            .flat_map(|r| r.ids.iter().cloned())
            .collect()
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

    /// Batches of jobs applied whole (one commit for all their strength changes) since start.
    pub fn batches(&self) -> u64 {
        self.shared
            .batches
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

/// Apply `first` and the jobs queued behind it in batches (up to [`batch::MAX_JOBS`] jobs
/// and [`batch::MAX_NEW`] texts each), in order: a batch that ends early
/// (`batch::conflicts`) leaves its remaining jobs to the next.
async fn serve(shared: &Shared, first: Job, rx: &mut mpsc::Receiver<Job>, stop: &Notify) -> Run {
    let mut texts = first.texts();
    let mut jobs = vec![first];
    while jobs.len() < batch::MAX_JOBS && texts < batch::MAX_NEW {
        match rx.try_recv() {
            Ok(job) => {
                texts += job.texts();
                jobs.push(job);
            }
            Err(_) => break,
        }
    }
    while !jobs.is_empty() {
        let (run, rest) = batch::run_batch(shared, jobs, stop).await;
        if run == Run::Stopped {
            return Run::Stopped;
        }
        jobs = rest;
    }
    Run::Next
}
