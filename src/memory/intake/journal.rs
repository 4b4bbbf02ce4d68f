//! The intake journal: an append-only JSON-lines file, fsynced before a job is acknowledged,
//! so nothing accepted is lost on a crash. A job is `accepted`, then `planned` (the exact,
//! absolute changes it will make), maybe `attempt`ed and failed a few times, then `finished`
//! (applied, dropped, or dead-lettered); replaying a planned job re-applies the same plan, so
//! effects happen once however often the service restarts. Finished outcomes stay a day.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{FeedbackPlan, Job, JobOutcome};

#[derive(Debug, thiserror::Error)]
#[error("feedback journal {path}: {message}")]
pub struct JournalError {
    pub path: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Record {
    Accepted {
        job: Job,
    },
    Planned {
        job_id: String,
        plan: FeedbackPlan,
    },
    /// The journaled plan no longer holds (it assumed a failed batch's earlier jobs applied):
    /// the job is planned again before it is applied.
    Unplanned {
        job_id: String,
    },
    /// An attempt failed; `attempts` is the count so far (absolute, so a replay is harmless).
    Attempt {
        job_id: String,
        attempts: u32,
        error: String,
    },
    /// How older versions marked a finished job (no outcome kept).
    Done {
        job_id: String,
    },
    /// The job is finished (applied, dropped by an erase, or dead-lettered). Holds ids and
    /// counts, never memory text, and is kept for [`FINISHED_RETENTION`].
    Finished {
        outcome: JobOutcome,
    },
}

/// How long finished jobs' outcomes stay answerable (`GET /v1/feedback/{job_id}`) across
/// restarts: at least a day.
pub const FINISHED_RETENTION: chrono::TimeDelta = chrono::TimeDelta::hours(25);

/// A job accepted and not finished.
#[derive(Debug, Clone)]
pub struct PendingJob {
    pub job: Job,
    pub plan: Option<FeedbackPlan>,
    /// Failed attempts so far.
    pub attempts: u32,
}

/// What a journal holds: unfinished jobs in acceptance order, and recent outcomes.
#[derive(Debug, Default)]
pub struct Pending {
    pub jobs: Vec<PendingJob>,
    pub finished: Vec<JobOutcome>,
    /// Lines that could not be parsed (a torn last write after a crash): counted, skipped.
    pub corrupt_lines: usize,
}

pub struct Journal {
    path: PathBuf,
    state: Mutex<State>,
}

/// The open file plus what it holds, so the file can be rewritten with only that at any time
/// (an erase must not leave its text in the journal).
struct State {
    file: std::fs::File,
    pending: Vec<PendingJob>,
    finished: Vec<JobOutcome>,
}

impl Pending {
    fn apply(&mut self, record: Record) {
        match record {
            Record::Accepted { job } => {
                if !self.jobs.iter().any(|p| p.job.job_id() == job.job_id()) {
                    self.jobs.push(PendingJob {
                        job,
                        plan: None,
                        attempts: 0,
                    });
                }
            }
            Record::Planned { job_id, plan } => {
                if let Some(p) = self.jobs.iter_mut().find(|p| p.job.job_id() == job_id) {
                    p.plan = Some(plan);
                }
            }
            Record::Unplanned { job_id } => {
                if let Some(p) = self.jobs.iter_mut().find(|p| p.job.job_id() == job_id) {
                    p.plan = None;
                }
            }
            Record::Attempt {
                job_id, attempts, ..
            } => {
                if let Some(p) = self.jobs.iter_mut().find(|p| p.job.job_id() == job_id) {
                    p.attempts = p.attempts.max(attempts);
                }
            }
            Record::Done { job_id } => self.jobs.retain(|p| p.job.job_id() != job_id),
            Record::Finished { outcome } => {
                // Its accepted line came first, so the job says whether its outcome is kept.
                let kept = self
                    .jobs
                    .iter()
                    .find(|p| p.job.job_id() == outcome.job_id)
                    .is_none_or(|p| p.job.keeps_outcome());
                self.jobs.retain(|p| p.job.job_id() != outcome.job_id);
                if !kept {
                    return;
                }
                self.finished.retain(|o| o.job_id != outcome.job_id);
                self.finished.push(outcome);
            }
        }
    }

    /// Forget outcomes older than [`FINISHED_RETENTION`].
    fn expire(&mut self) {
        let cutoff = chrono::Utc::now() - FINISHED_RETENTION;
        self.finished.retain(|o| o.finished_at >= cutoff);
    }
}

fn err(path: &Path, e: impl ToString) -> JournalError {
    JournalError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl Journal {
    /// Open the journal, returning it and what it holds. The file is rewritten atomically with
    /// only unfinished jobs and recent outcomes, so it never grows forever.
    #[cfg(test)]
    pub(crate) fn open(path: &Path) -> Result<(Journal, Pending), JournalError> {
        let pending = Journal::read(path)?;
        let journal = Journal::create(path, &pending)?;
        Ok((journal, pending))
    }

    /// What a journal file holds (empty if it is missing). Unreadable lines (a torn last write
    /// after a crash) are counted, logged and skipped; the rewrite that follows drops them.
    pub fn read(path: &Path) -> Result<Pending, JournalError> {
        let mut pending = Pending::default();
        match std::fs::File::open(path) {
            Ok(f) => {
                for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
                    let Ok(line) = line else {
                        pending.corrupt_lines += 1;
                        continue;
                    };
                    if line.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<Record>(&line) {
                        Ok(record) => pending.apply(record),
                        Err(e) => {
                            pending.corrupt_lines += 1;
                            tracing::warn!(line = n + 1, error = %e, "skipping an unreadable feedback journal line");
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(path, e)),
        }
        pending.expire();
        Ok(pending)
    }

    /// Write a journal holding exactly `content` (atomically replacing any file at `path`).
    pub fn create(path: &Path, content: &Pending) -> Result<Journal, JournalError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| err(path, e))?;
        }
        let file = rewrite(path, &content.jobs, &content.finished)?;
        Ok(Journal {
            path: path.to_path_buf(),
            state: Mutex::new(State {
                file,
                pending: content.jobs.clone(),
                finished: content.finished.clone(),
            }),
        })
    }

    /// Jobs accepted and not finished.
    pub(crate) fn pending_count(&self) -> usize {
        self.state.lock().map(|s| s.pending.len()).unwrap_or(0)
    }

    /// Outcomes of jobs finished within [`FINISHED_RETENTION`] that this journal holds.
    pub(crate) fn finished(&self) -> Vec<JobOutcome> {
        self.state
            .lock()
            .map(|s| s.finished.clone())
            .unwrap_or_default()
    }

    /// Append and fsync: when this returns Ok the record survives a crash.
    pub(crate) fn append(&self, record: &Record) -> Result<(), JournalError> {
        self.append_all(std::slice::from_ref(record))
    }

    /// Append several records with one fsync (a batch of jobs): all of them survive a crash
    /// once this returns Ok.
    pub(crate) fn append_all(&self, records: &[Record]) -> Result<(), JournalError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut state = self.lock()?;
        let len = state.file.metadata().map_err(|e| err(&self.path, e))?.len();
        let written = records
            .iter()
            .try_for_each(|r| write_line(&mut state.file, r))
            .and_then(|()| state.file.sync_data());
        if let Err(e) = written {
            // A partial line (disk full, I/O error) would glue the next record onto it: cut it
            // off so the file still ends with a complete record.
            if let Err(cut) = state.file.set_len(len) {
                tracing::error!(error = %cut, "could not truncate a partial feedback journal line");
            }
            return Err(err(&self.path, e));
        }
        let mut content = Pending {
            jobs: std::mem::take(&mut state.pending),
            finished: std::mem::take(&mut state.finished),
            corrupt_lines: 0,
        };
        for record in records {
            content.apply(record.clone());
        }
        state.pending = content.jobs;
        state.finished = content.finished;
        Ok(())
    }

    /// Rewrite the file with only the unfinished jobs that `drop` does not select, so neither
    /// finished jobs nor dropped ones leave their text behind. Returns the dropped job ids.
    pub(crate) fn compact(
        &self,
        drop: impl Fn(&Job, Option<&FeedbackPlan>) -> bool,
    ) -> Result<Vec<String>, JournalError> {
        let mut state = self.lock()?;
        let cutoff = chrono::Utc::now() - FINISHED_RETENTION;
        state.finished.retain(|o| o.finished_at >= cutoff);
        let (dropped, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.pending)
            .into_iter()
            .partition(|p| drop(&p.job, p.plan.as_ref()));
        match rewrite(&self.path, &kept, &state.finished) {
            Ok(file) => {
                state.file = file;
                state.pending = kept;
                Ok(dropped
                    .into_iter()
                    .map(|p| p.job.job_id().to_string())
                    .collect())
            }
            Err(e) => {
                // The old file is still in place and complete: keep serving from it.
                state.pending = kept.into_iter().chain(dropped).collect();
                Err(e)
            }
        }
    }

    /// Compact when the file has grown past `bytes`: finished jobs (a chat's messages above
    /// all) would otherwise keep their text here until the next erase.
    pub(crate) fn compact_when_over(&self, bytes: u64) -> Result<(), JournalError> {
        let len = {
            let state = self.lock()?;
            state.file.metadata().map_err(|e| err(&self.path, e))?.len()
        };
        if len > bytes {
            self.compact(|_, _| false)?;
        }
        Ok(())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the journal can be written (for health checks).
    pub(crate) fn healthy(&self) -> bool {
        self.state
            .lock()
            .map(|s| s.file.metadata().is_ok())
            .unwrap_or(false)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, JournalError> {
        self.state
            .lock()
            .map_err(|_| err(&self.path, "journal lock poisoned"))
    }
}

/// Atomically replace the file with `jobs` (temp file, fsync, rename, fsync of the directory)
/// and return an append handle to the new file.
fn rewrite(
    path: &Path,
    jobs: &[PendingJob],
    finished: &[JobOutcome],
) -> Result<std::fs::File, JournalError> {
    let tmp = path.with_extension("journal.tmp");
    {
        let mut f = std::fs::File::create(&tmp).map_err(|e| err(&tmp, e))?;
        let mut records: Vec<Record> = finished
            .iter()
            .map(|o| Record::Finished { outcome: o.clone() })
            .collect();
        for p in jobs {
            records.push(Record::Accepted { job: p.job.clone() });
            if let Some(plan) = &p.plan {
                records.push(Record::Planned {
                    job_id: p.job.job_id().to_string(),
                    plan: plan.clone(),
                });
            }
            if p.attempts > 0 {
                records.push(Record::Attempt {
                    job_id: p.job.job_id().to_string(),
                    attempts: p.attempts,
                    error: String::new(),
                });
            }
        }
        for record in &records {
            write_line(&mut f, record).map_err(|e| err(&tmp, e))?;
        }
        f.sync_all().map_err(|e| err(&tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| err(path, e))?;
    if let Some(dir) = path.parent() {
        // The rename is durable only once the directory entry is.
        sync_dir(dir).map_err(|e| err(path, e))?;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| err(path, e))
}

fn write_line(f: &mut std::fs::File, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)
}

/// Make a file's creation or removal in `dir` durable (the directory entry itself).
pub(super) fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, conversation: &str, content: &str) -> Job {
        Job::Reflection(crate::memory::feedback::FeedbackJob {
            job_id: id.into(),
            conversation_id: crate::scope::ConversationId::parse(conversation).unwrap(),
            scope: crate::scope::ScopeName::parse("public").unwrap(),
            scope_source: crate::scope::ScopeSource::Unmapped,
            accepted_at: chrono::Utc::now(),
            useful_memory_ids: vec![],
            new_memories: vec![crate::memory::feedback::NewMemoryJob {
                id: format!("m-{id}"),
                content: content.into(),
                reasoning: None,
                tags: vec![],
                memory_type: "knowledge".into(),
                expires_at: None,
            }],
            merge_groups: vec![],
        })
    }

    #[test]
    fn a_batch_written_together_replays_and_an_unplanned_job_is_planned_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        let (j, _) = Journal::open(&path).unwrap();
        j.append_all(&[
            Record::Accepted {
                job: job("1", "a", "x"),
            },
            Record::Accepted {
                job: job("2", "a", "y"),
            },
            Record::Planned {
                job_id: "1".into(),
                plan: FeedbackPlan::default(),
            },
            Record::Planned {
                job_id: "2".into(),
                plan: FeedbackPlan::default(),
            },
        ])
        .unwrap();
        j.append_all(&[
            Record::Unplanned { job_id: "2".into() },
            Record::Attempt {
                job_id: "2".into(),
                attempts: 1,
                error: "batch failed".into(),
            },
        ])
        .unwrap();
        drop(j);
        let (_, pending) = Journal::open(&path).unwrap();
        let state: Vec<(&str, bool, u32)> = pending
            .jobs
            .iter()
            .map(|p| (p.job.job_id(), p.plan.is_some(), p.attempts))
            .collect();
        assert_eq!(state, [("1", true, 0), ("2", false, 1)]);
    }

    #[test]
    fn compact_drops_selected_and_finished_jobs_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        let (j, pending) = Journal::open(&path).unwrap();
        assert!(pending.jobs.is_empty());
        j.append(&Record::Accepted {
            job: job("1", "a", "secret-alpha"),
        })
        .unwrap();
        j.append(&Record::Accepted {
            job: job("2", "b", "keep-beta"),
        })
        .unwrap();
        j.append(&Record::Accepted {
            job: job("3", "b", "done-gamma"),
        })
        .unwrap();
        j.append(&Record::Done { job_id: "3".into() }).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("secret-alpha") && text.contains("done-gamma"));

        let dropped = j.compact(|job, _| job.conversation_id() == "a").unwrap();
        assert_eq!(dropped, vec!["1".to_string()]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("secret-alpha"), "{text}");
        assert!(!text.contains("done-gamma"), "finished jobs go too: {text}");
        assert!(text.contains("keep-beta"));

        // Appends after a compaction go to the new file, and a reopen sees exactly them.
        j.append(&Record::Accepted {
            job: job("4", "c", "later-delta"),
        })
        .unwrap();
        drop(j);
        let (_, pending) = Journal::open(&path).unwrap();
        let ids: Vec<&str> = pending.jobs.iter().map(|p| p.job.job_id()).collect();
        assert_eq!(ids, ["2", "4"]);
    }
}
