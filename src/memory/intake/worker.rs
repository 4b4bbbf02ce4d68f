//! The worker: applies jobs in acceptance order, retrying a failing job in place with backoff
//! and dead-lettering it after the last attempt.

use tokio::sync::Notify;

use super::journal::{PendingJob, Record};
use super::shared::Shared;
use super::*;
use crate::memory::feedback::{apply, make_plan};

/// Whether the worker should go on after a job.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Run {
    Next,
    Stopped,
}

/// Apply one job, retrying in place with backoff; dead-letter it after the last attempt.
pub(super) async fn run_job(shared: &Shared, mut pending: PendingJob, stop: &Notify) -> Run {
    let job_id = pending.job.job_id().to_string();
    loop {
        let applying = shared.apply.hold().await;
        let was_dropped = shared
            .dropped
            .lock()
            .map(|mut d| d.remove(&job_id))
            .unwrap_or(false);
        if was_dropped {
            let why = "dropped: the memories it would touch were erased first".to_string();
            let outcome = JobOutcome::unapplied(job_id, JobState::Dropped, why, pending.attempts);
            finish(shared, &pending.job, outcome);
            return Run::Next;
        }
        let error = match attempt(shared, &mut pending).await {
            Ok(outcome) => {
                for (what, why) in &outcome.refused {
                    tracing::warn!(job_id = %job_id, conversation_id = %pending.job.conversation_id(), target = %what, reason = %why, "feedback refused a memory it cannot touch");
                }
                shared.record_written(&pending.job, &outcome);
                finish(shared, &pending.job, outcome);
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
                &pending.job,
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

/// One attempt: plan (journaled once) and apply a reflection, or store a message; journal the
/// outcome.
async fn attempt(shared: &Shared, pending: &mut PendingJob) -> Result<JobOutcome, MemoryError> {
    let mut outcome = match &pending.job {
        Job::Message(told) => super::message::apply(shared, told).await?,
        Job::Reflection(job) => {
            let plan = match &pending.plan {
                Some(p) => p.clone(),
                None => {
                    let p = make_plan(&shared.writes, job).await?;
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
            apply(&shared.writes, job, &plan).await?
        }
    };
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
pub(super) fn finish(shared: &Shared, job: &Job, outcome: JobOutcome) {
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
    if !job.keeps_outcome() {
        shared.pending.remove([outcome.job_id.as_str()]);
        shared.finished.notify_waiters();
        return;
    }
    if let Ok(mut o) = shared.outcomes.lock() {
        if o.len() >= 1000 {
            o.pop_front();
        }
        o.push_back(outcome);
    }
    shared.finished.notify_waiters();
}
