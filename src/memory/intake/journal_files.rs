//! Which feedback journal belongs to which process.
//!
//! Several scopemem processes may share one `state_dir` (a `serve`, an `mcp` per MCP client, admin
//! commands). Each keeps its own journal, `<table>.feedback.<instance>.journal`, and holds an
//! exclusive OS lock on `<table>.feedback.<instance>.lock` for as long as it lives. The kernel
//! drops that lock when the process dies, however it dies (kill -9 included), so a lock that can
//! be taken is an orphan: a starting process adopts the unfinished jobs of every orphaned journal
//! (and of the single journal older versions wrote) into its own, then deletes the orphan. The
//! lock is held throughout, so each job is adopted by exactly one process.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::journal::{sync_dir, Journal, JournalError, Pending};

/// This process's journal and the lock that marks it alive.
pub struct InstanceJournal {
    /// Unique per process start.
    pub instance: String,
    /// The journal, already holding the adopted jobs.
    pub journal: Journal,
    /// Unfinished jobs to replay: adopted from dead instances, in acceptance order.
    pub pending: Pending,
    /// Journals adopted (for the log).
    pub adopted_files: usize,
    lock_path: PathBuf,
    /// Held until drop; the OS releases it if the process dies.
    _lock: File,
}

impl InstanceJournal {
    /// Claim a journal for a new instance in `dir` and adopt every orphan.
    pub(crate) fn claim(dir: &Path, table: &str) -> Result<InstanceJournal, JournalError> {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        let instance = uuid::Uuid::now_v7().simple().to_string();
        let lock_path = dir.join(format!("{table}.feedback.{instance}.lock"));
        // Locked under a name no other process looks at, then renamed into place: a process
        // starting beside this one never sees the lock file unlocked and adopts it as an
        // orphan (it did, four starts at once: "lock acquisition failed ... would block").
        let claiming = dir.join(format!("{table}.feedback.{instance}.claiming"));
        let mut lock = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&claiming)
            .map_err(|e| err(&claiming, e))?;
        lock.try_lock().map_err(|e| err(&claiming, e))?;
        std::io::Write::write_all(&mut lock, std::process::id().to_string().as_bytes())
            .map_err(|e| err(&claiming, e))?;
        std::fs::rename(&claiming, &lock_path).map_err(|e| err(&lock_path, e))?;

        let mut orphans = Vec::new();
        let legacy = dir.join(format!("{table}.feedback.journal"));
        if legacy.exists() {
            orphans.push(Orphan {
                journal: legacy,
                lock: None,
            });
        }
        for (journal, lock_file) in instance_files(dir, table)? {
            if lock_file == lock_path {
                continue;
            }
            if let Some(held) = take_if_orphaned(&lock_file)? {
                orphans.push(Orphan {
                    journal,
                    lock: Some((lock_file, held)),
                });
            }
        }

        let mut merged = Pending::default();
        for o in &orphans {
            merge(&mut merged, Journal::read(&o.journal)?);
        }
        let path = dir.join(format!("{table}.feedback.{instance}.journal"));
        // Our journal holds the adopted jobs durably before any orphan is deleted.
        let journal = Journal::create(&path, &merged)?;
        for o in &orphans {
            remove(&o.journal)?;
            if let Some((lock_file, _)) = &o.lock {
                remove(lock_file)?;
            }
        }
        if !orphans.is_empty() {
            sync_dir(dir).map_err(|e| err(dir, e))?;
        }
        Ok(InstanceJournal {
            instance,
            journal,
            pending: merged,
            adopted_files: orphans.len(),
            lock_path,
            _lock: lock,
        })
    }

    /// On a clean shutdown with nothing to apply and no job outcome to keep, remove this
    /// instance's files; otherwise leave them for the next process to adopt (which merges the
    /// outcomes, so job status survives restarts).
    pub(crate) fn release_if_drained(&self) {
        if self.journal.pending_count() > 0 || !self.journal.finished().is_empty() {
            return;
        }
        let _ = std::fs::remove_file(self.journal.path());
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// Fold one adopted journal into `into`. A crash mid-adoption can leave a job in two
/// journals: it is kept once (with its plan and the higher attempt count), and not at all if
/// either journal says it finished.
fn merge(into: &mut Pending, from: Pending) {
    into.corrupt_lines += from.corrupt_lines;
    for o in from.finished {
        if !into.finished.iter().any(|f| f.job_id == o.job_id) {
            into.finished.push(o);
        }
    }
    for p in from.jobs {
        match into
            .jobs
            .iter_mut()
            .find(|q| q.job.job_id() == p.job.job_id())
        {
            Some(q) => {
                if q.plan.is_none() {
                    q.plan = p.plan;
                }
                q.attempts = q.attempts.max(p.attempts);
            }
            None => into.jobs.push(p),
        }
    }
    let finished = &into.finished;
    into.jobs
        .retain(|p| !finished.iter().any(|f| f.job_id == p.job.job_id()));
    into.jobs.sort_by_key(|p| p.job.accepted_at());
}

struct Orphan {
    journal: PathBuf,
    /// The dead instance's lock file and our handle holding its lock (None: legacy journal).
    lock: Option<(PathBuf, File)>,
}

/// `(journal, lock)` paths of every instance in `dir`, found through their lock files.
fn instance_files(dir: &Path, table: &str) -> Result<Vec<(PathBuf, PathBuf)>, JournalError> {
    let prefix = format!("{table}.feedback.");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| err(dir, e))?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".lock"))
        {
            out.push((dir.join(format!("{prefix}{id}.journal")), dir.join(name)));
        }
    }
    Ok(out)
}

/// Take the lock of another instance's lock file if its process is gone. `None` when it is
/// alive, or when another process adopted it first (the file we locked was already unlinked).
fn take_if_orphaned(lock_file: &Path) -> Result<Option<File>, JournalError> {
    let file = match OpenOptions::new().read(true).write(true).open(lock_file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(lock_file, e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(err(lock_file, e)),
    }
    if !same_file(&file, lock_file) {
        return Ok(None);
    }
    Ok(Some(file))
}

#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &File, path: &Path) -> bool {
    path.exists()
}

fn remove(path: &Path) -> Result<(), JournalError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(path, e)),
    }
}

fn err(path: &Path, e: impl ToString) -> JournalError {
    JournalError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}
