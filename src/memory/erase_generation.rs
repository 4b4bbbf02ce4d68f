//! The erase generation: how a process on the same machine knows, before it answers a read,
//! that another process erased something since its last read.
//!
//! Why: an erase deletes the rows for everyone at once, but each process reads through its own
//! view of the table (a version checked for newer ones at most every
//! `storage.read_consistency_ms`) and its own resident copy (`store::resident`). So process A
//! went on serving a memory for up to 500 ms after process B's forget of it returned 200
//! (issue 50: 3 of 20 rounds). An erase notice (`erase_notices`) carries the what; this
//! carries the when, at the cost of one 8-byte read per read request: a counter in
//! `<table>.erase-generation` beside a local table. An erase bumps it after its delete
//! committed and before it answers; a read that finds it changed refreshes the table (and so
//! the resident copy) and applies the notices before it searches. In a bucket there is no such
//! file: there the guarantee stays "within `storage.read_consistency_ms`" (docs/privacy.md).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::beside::Beside;

/// The counter file of one local table, and the generation this process has caught up with.
pub struct EraseGeneration {
    file: Option<File>,
    seen: AtomicU64,
    /// One read catches up at a time; the others wait for it.
    pub(crate) catching_up: tokio::sync::Mutex<()>,
}

impl EraseGeneration {
    /// The counter of `table` beside it; none in a bucket, or when the file cannot be opened
    /// (logged: reads then fall back to `storage.read_consistency_ms`).
    pub(crate) fn open(beside: &Beside, table: &str) -> EraseGeneration {
        let file = match beside {
            Beside::Dir(dir) => open_counter(&dir.join(format!("{table}.erase-generation"))),
            Beside::Bucket { .. } => None,
        };
        let seen = file.as_ref().map(read_counter).unwrap_or(0);
        EraseGeneration {
            file,
            seen: AtomicU64::new(seen),
            catching_up: tokio::sync::Mutex::new(()),
        }
    }

    /// The generation on disk when it differs from the one this process caught up with.
    pub(crate) fn unseen(&self) -> Option<u64> {
        let now = read_counter(self.file.as_ref()?);
        (now != self.seen.load(Ordering::Acquire)).then_some(now)
    }

    /// This process has caught up with generation `g` (read before catching up).
    pub(crate) fn mark_seen(&self, g: u64) {
        self.seen.store(g, Ordering::Release);
    }

    /// Tell the other processes an erase committed. Under the file's lock, so two erases at
    /// once both count; no fsync: the processes share the page cache, and after a crash every
    /// process starts from the table as it is.
    pub(crate) async fn bump(&self) -> std::io::Result<()> {
        let Some(file) = self.file.as_ref() else {
            return Ok(());
        };
        let file = file.try_clone()?;
        let before = self.seen.load(Ordering::Acquire);
        let after = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
            file.lock()?;
            let next = read_counter(&file).wrapping_add(1);
            let written = file.write_all_at(&next.to_le_bytes(), 0);
            file.unlock()?;
            written.map(|()| next)
        })
        .await
        .map_err(std::io::Error::other)??;
        // Our own erase: nothing to catch up with, unless another process's came between.
        if after == before.wrapping_add(1) {
            let _ = self
                .seen
                .compare_exchange(before, after, Ordering::AcqRel, Ordering::Acquire);
        }
        Ok(())
    }
}

fn open_counter(path: &Path) -> Option<File> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(error = %e, "cannot open the erase generation file; other processes' erases reach this one within storage.read_consistency_ms");
            None
        }
    }
}

/// The counter (0 for an empty or short file).
fn read_counter(file: &File) -> u64 {
    let mut bytes = [0u8; 8];
    match file.read_exact_at(&mut bytes, 0) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_erase_in_one_process_is_unseen_in_the_other_until_it_catches_up() {
        let dir = tempfile::tempdir().unwrap();
        let beside = Beside::Dir(dir.path().to_path_buf());
        let (a, b) = (
            EraseGeneration::open(&beside, "memories"),
            EraseGeneration::open(&beside, "memories"),
        );
        assert_eq!((a.unseen(), b.unseen()), (None, None));
        b.bump().await.unwrap();
        assert_eq!(b.unseen(), None, "its own erase");
        let g = a.unseen().expect("another process erased");
        a.mark_seen(g);
        assert_eq!(a.unseen(), None);
        a.bump().await.unwrap();
        b.bump().await.unwrap();
        assert_eq!(a.unseen(), Some(3), "b's erase came after a's");
        assert_eq!(b.unseen(), Some(3), "a's erase came between");
    }
}
