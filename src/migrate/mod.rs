//! Versioned migrations of the `memories` table and the background backfill that gives legacy
//! rows (written before scopes existed) the `public` scope.

pub mod backfill;
pub mod checkpoint;
pub mod files;
pub mod runner;

pub use backfill::{BackfillHandle, BackfillProgress, BackfillSettings, MigrationGate};
pub use checkpoint::{BackfillState, Checkpoint, Damaged};
pub use runner::{open_or_create, MigrationOutcome, SchemaStatus};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migration definition: {0}")]
    Definition(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: String, message: String },
}

impl From<lancedb::Error> for MigrateError {
    fn from(e: lancedb::Error) -> Self {
        MigrateError::Store(StoreError::Lance(e))
    }
}
