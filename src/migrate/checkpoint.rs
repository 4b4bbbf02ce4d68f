//! The backfill's durable checkpoint: a JSON file beside the table, replaced atomically
//! (write, fsync, rename), so a crash leaves either the old or the new state, never half.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::MigrateError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackfillState {
    /// Legacy rows exist; the backfill has not started yet.
    Pending,
    Running,
    Done,
}

/// Damaged legacy rows, by kind. Counted and logged, never fatal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Damaged {
    /// `created_at` is NULL: the row cannot be proven older than the migration; left NULL.
    pub null_created_at: u64,
    /// `created_at` could not be parsed as a time; left NULL.
    pub unparseable_created_at: u64,
    /// A blank scope string: treated as NULL and filled.
    pub blank_scope: u64,
    /// A non-blank scope that is not a valid scope name: left as it is (invisible to recall).
    pub invalid_scope: u64,
    /// NULL tags: harmless, filled like any other row.
    pub missing_tags: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub state: BackfillState,
    /// Recorded once, when the migration first starts: only rows created before it are
    /// backfilled, so the backfill never races new writes.
    pub migration_start: DateTime<Utc>,
    pub scanned: u64,
    pub filled: u64,
    pub skipped: u64,
    pub damaged: Damaged,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl Checkpoint {
    pub fn new() -> Checkpoint {
        let now = Utc::now();
        Checkpoint {
            state: BackfillState::Pending,
            migration_start: now,
            scanned: 0,
            filled: 0,
            skipped: 0,
            damaged: Damaged::default(),
            updated_at: now,
            finished_at: None,
        }
    }
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint::new()
    }
}

/// `<db_dir>/<table>.backfill.json`.
pub fn path_for(db_dir: &Path, table: &str) -> PathBuf {
    db_dir.join(format!("{table}.backfill.json"))
}

fn err(path: &Path, message: impl ToString) -> MigrateError {
    MigrateError::Checkpoint {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

pub fn load(path: &Path) -> Result<Option<Checkpoint>, MigrateError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| err(path, format!("unreadable ({e}); fix or delete it"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(path, e)),
    }
}

/// Write atomically (temp file, fsync, rename). The temp name is unique per process and call:
/// two processes migrating one table at once both save, and must not rename each other's file.
pub fn save(path: &Path, checkpoint: &Checkpoint) -> Result<(), MigrateError> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("json.{}.{seq}.tmp", std::process::id()));
    let bytes = serde_json::to_vec_pretty(checkpoint).map_err(|e| err(path, e))?;
    let mut f = std::fs::File::create(&tmp).map_err(|e| err(&tmp, e))?;
    f.write_all(&bytes).map_err(|e| err(&tmp, e))?;
    f.sync_all().map_err(|e| err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| err(path, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

pub fn remove(path: &Path) -> Result<(), MigrateError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_then_load_round_trips_and_missing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = path_for(dir.path(), "memories");
        assert_eq!(load(&p).unwrap(), None);
        let mut c = Checkpoint::new();
        c.state = BackfillState::Running;
        c.filled = 42;
        c.damaged.null_created_at = 3;
        save(&p, &c).unwrap();
        assert_eq!(load(&p).unwrap(), Some(c));
        std::fs::write(&p, b"{garbage").unwrap();
        assert!(
            load(&p).is_err(),
            "a corrupt checkpoint is an error, not a silent restart"
        );
    }
}
