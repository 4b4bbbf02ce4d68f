//! The lease on a local directory: an exclusive OS lock on `<table>.maintenance.lock`. The
//! kernel releases it the moment its holder dies, however it dies, so the next process that
//! tries takes over at once (no expiry to wait out). The holder records who it is in
//! `<table>.maintenance.json` for the admin commands; the record alone proves nothing, the
//! lock does.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::Utc;

use super::LeaseHolder;

/// This process's side of the lease: held or not, and the lock while held.
pub struct LocalLease {
    lock_path: PathBuf,
    record_path: PathBuf,
    instance: String,
    held: Arc<AtomicBool>,
    file: Mutex<Option<File>>,
}

impl LocalLease {
    /// The lease of `table` in `dir` for this process (`instance`); `held` is set while it is
    /// held.
    pub(crate) fn new(
        dir: &Path,
        table: &str,
        instance: &str,
        held: Arc<AtomicBool>,
    ) -> LocalLease {
        held.store(false, Ordering::Release);
        LocalLease {
            lock_path: dir.join(format!("{table}.maintenance.lock")),
            record_path: dir.join(format!("{table}.maintenance.json")),
            instance: instance.to_owned(),
            held,
            file: Mutex::default(),
        }
    }

    /// Whether this process holds the lease (and so does the maintenance).
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Take the lease if nobody holds it. Returns whether this process holds it now.
    pub(crate) fn try_acquire(&self) -> std::io::Result<bool> {
        if self.is_held() {
            return Ok(true);
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let holder = LeaseHolder::me(&self.instance, Utc::now(), None);
        let tmp = self.record_path.with_extension("json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec(&holder).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(&tmp, &self.record_path)?;
        if let Ok(mut slot) = self.file.lock() {
            *slot = Some(file);
        }
        self.held.store(true, Ordering::Release);
        tracing::info!(instance = %self.instance, "took the maintenance lease");
        Ok(true)
    }

    /// Give the lease up (clean shutdown): unlock, so the next process takes it at once.
    pub(crate) fn release(&self) {
        if let Ok(mut slot) = self.file.lock() {
            *slot = None;
        }
        self.held.store(false, Ordering::Release);
    }
}

/// Who holds the lease of `table` in `dir` now, if anyone (for `migrate status` and friends).
/// A record whose lock is free is stale: its holder is gone.
pub(crate) fn current_holder(dir: &Path, table: &str) -> Option<LeaseHolder> {
    let lock = OpenOptions::new()
        .write(true)
        .open(dir.join(format!("{table}.maintenance.lock")))
        .ok()?;
    match lock.try_lock() {
        Ok(()) => return None, // free: nobody holds it (our probe lock drops with `lock`)
        Err(TryLockError::WouldBlock) => {}
        Err(TryLockError::Error(_)) => return None,
    }
    let text = std::fs::read(dir.join(format!("{table}.maintenance.json"))).ok()?;
    serde_json::from_slice(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_next_takes_over() {
        let dir = tempfile::tempdir().unwrap();
        let a = LocalLease::new(dir.path(), "t", "a", Arc::default());
        let b = LocalLease::new(dir.path(), "t", "b", Arc::default());
        assert_eq!(current_holder(dir.path(), "t"), None);
        assert!(a.try_acquire().unwrap());
        assert!(!b.try_acquire().unwrap(), "held by a");
        assert_eq!(current_holder(dir.path(), "t").unwrap().instance, "a");
        drop(a); // its process dies: the OS releases the lock
        assert_eq!(
            current_holder(dir.path(), "t"),
            None,
            "a stale record is not a holder"
        );
        assert!(b.try_acquire().unwrap());
        assert!(b.is_held());
        assert_eq!(current_holder(dir.path(), "t").unwrap().instance, "b");
    }
}
