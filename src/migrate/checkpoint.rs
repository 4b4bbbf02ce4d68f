//! The backfill's durable checkpoint: a JSON document beside the table, replaced atomically,
//! so a crash leaves either the old or the new state, never half.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::MigrateError;
use crate::store::beside::Beside;

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
    pub(crate) fn new() -> Checkpoint {
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

/// The checkpoint of one table: `<table>.backfill.json` beside it, in its directory or bucket
/// prefix, so whichever instance holds the maintenance lease resumes where the last one stopped.
#[derive(Clone, Debug)]
pub struct CheckpointFile {
    beside: Beside,
    name: String,
}

impl CheckpointFile {
    pub(crate) fn new(beside: Beside, table: &str) -> CheckpointFile {
        CheckpointFile {
            beside,
            name: format!("{table}.backfill.json"),
        }
    }

    /// The checkpoint of `table` in a local directory.
    pub fn in_dir(dir: &Path, table: &str) -> CheckpointFile {
        CheckpointFile::new(Beside::Dir(dir.to_path_buf()), table)
    }

    /// Where it is, for messages.
    pub(crate) fn describe(&self) -> String {
        self.beside.describe(&self.name)
    }

    fn err(&self, message: impl ToString) -> MigrateError {
        MigrateError::Checkpoint {
            path: self.describe(),
            message: message.to_string(),
        }
    }

    pub async fn load(&self) -> Result<Option<Checkpoint>, MigrateError> {
        match self.beside.read(&self.name).await {
            Ok(Some((bytes, _))) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.err(format!("unreadable ({e}); fix or delete it"))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.err(e.message)),
        }
    }

    /// Replace atomically: a crash leaves the old or the new state, never half.
    pub(crate) async fn save(&self, checkpoint: &Checkpoint) -> Result<(), MigrateError> {
        let bytes = serde_json::to_vec_pretty(checkpoint).map_err(|e| self.err(e))?;
        self.beside
            .write(&self.name, &bytes)
            .await
            .map_err(|e| self.err(e.message))
    }

    pub(crate) async fn remove(&self) -> Result<(), MigrateError> {
        self.beside
            .remove(&self.name)
            .await
            .map_err(|e| self.err(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn save_then_load_round_trips_and_missing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = CheckpointFile::in_dir(dir.path(), "memories");
        assert_eq!(p.load().await.unwrap(), None);
        let mut c = Checkpoint::new();
        c.state = BackfillState::Running;
        c.filled = 42;
        c.damaged.null_created_at = 3;
        p.save(&c).await.unwrap();
        assert_eq!(p.load().await.unwrap(), Some(c));
        std::fs::write(dir.path().join("memories.backfill.json"), b"{garbage").unwrap();
        assert!(
            p.load().await.is_err(),
            "a corrupt checkpoint is an error, not a silent restart"
        );
    }
}
