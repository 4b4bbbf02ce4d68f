//! The feedback journal: an append-only JSON-lines file, fsynced before a job is acknowledged,
//! so nothing accepted is lost on a crash. A job is `accepted`, then `planned` (the exact,
//! absolute changes it will make), then `done`; replaying a planned job re-applies the same
//! absolute plan, so effects happen once however often the service restarts.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::feedback::{FeedbackJob, FeedbackPlan};

#[derive(Debug, thiserror::Error)]
#[error("feedback journal {path}: {message}")]
pub struct JournalError {
    pub path: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Record {
    Accepted { job: FeedbackJob },
    Planned { job_id: String, plan: FeedbackPlan },
    Done { job_id: String },
}

/// Jobs found unfinished at start-up, in acceptance order.
#[derive(Debug, Default)]
pub struct Pending {
    pub jobs: Vec<(FeedbackJob, Option<FeedbackPlan>)>,
    /// Lines that could not be parsed (a torn last write after a crash): counted, skipped.
    pub corrupt_lines: usize,
}

pub struct Journal {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

fn err(path: &Path, e: impl ToString) -> JournalError {
    JournalError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

impl Journal {
    /// Open the journal, returning it and the jobs that were accepted but not finished.
    /// Finished jobs are dropped from the file (rewritten atomically) so it never grows forever.
    pub fn open(path: &Path) -> Result<(Journal, Pending), JournalError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| err(path, e))?;
        }
        let mut pending = Pending::default();
        let mut jobs: BTreeMap<usize, (FeedbackJob, Option<FeedbackPlan>)> = BTreeMap::new();
        let mut order: BTreeMap<String, usize> = BTreeMap::new();
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
                        Ok(Record::Accepted { job }) => {
                            order.insert(job.job_id.clone(), n);
                            jobs.insert(n, (job, None));
                        }
                        Ok(Record::Planned { job_id, plan }) => {
                            if let Some(slot) = order.get(&job_id).and_then(|i| jobs.get_mut(i)) {
                                slot.1 = Some(plan);
                            }
                        }
                        Ok(Record::Done { job_id }) => {
                            if let Some(i) = order.remove(&job_id) {
                                jobs.remove(&i);
                            }
                        }
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
        pending.jobs = jobs.into_values().collect();
        // Rewrite with only what is unfinished.
        let tmp = path.with_extension("journal.tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(|e| err(&tmp, e))?;
            for (job, plan) in &pending.jobs {
                write_line(&mut f, &Record::Accepted { job: job.clone() })
                    .map_err(|e| err(&tmp, e))?;
                if let Some(plan) = plan {
                    let rec = Record::Planned {
                        job_id: job.job_id.clone(),
                        plan: plan.clone(),
                    };
                    write_line(&mut f, &rec).map_err(|e| err(&tmp, e))?;
                }
            }
            f.sync_all().map_err(|e| err(&tmp, e))?;
        }
        std::fs::rename(&tmp, path).map_err(|e| err(path, e))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| err(path, e))?;
        Ok((
            Journal {
                path: path.to_path_buf(),
                file: Mutex::new(file),
            },
            pending,
        ))
    }

    /// Append and fsync: when this returns Ok the record survives a crash.
    pub fn append(&self, record: &Record) -> Result<(), JournalError> {
        let mut f = self
            .file
            .lock()
            .map_err(|_| err(&self.path, "journal lock poisoned"))?;
        write_line(&mut f, record).map_err(|e| err(&self.path, e))?;
        f.sync_data().map_err(|e| err(&self.path, e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the journal can be written (for health checks).
    pub fn healthy(&self) -> bool {
        self.file
            .lock()
            .map(|f| f.metadata().is_ok())
            .unwrap_or(false)
    }
}

fn write_line(f: &mut std::fs::File, record: &Record) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)
}
