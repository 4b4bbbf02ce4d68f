//! Versioned migrations of the `memories` table and the background backfill that gives legacy
//! rows (written before scopes existed) the `public` scope.

pub mod backfill;
pub mod checkpoint;
pub(crate) mod files;
pub mod first_open;
pub(crate) mod pacing;
pub(crate) mod reembed;
pub mod runner;
pub(crate) mod status;

pub use backfill::{BackfillHandle, BackfillProgress, BackfillSettings, MigrationGate, Pacing};
pub use checkpoint::{BackfillState, Checkpoint, Damaged};
pub use pacing::ForegroundLatency;
pub use runner::{open_or_create, MigrationOutcome, SchemaStatus};

use crate::config::DbLocation;
use crate::embed::ModelInfo;
use crate::store::{Store, StoreError, WriterSettings, DEFAULT_READ_CONSISTENCY};
use checkpoint::CheckpointFile;

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migration definition: {0}")]
    Definition(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("embedding: {0}")]
    Embed(#[from] crate::embed::EmbedError),
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: String, message: String },
}

impl From<lancedb::Error> for MigrateError {
    fn from(e: lancedb::Error) -> Self {
        MigrateError::Store(StoreError::Lance(e))
    }
}

/// Open (or create) `table_name` in `db` (a directory, or an `s3://` prefix) as a [`Store`]:
/// connect, apply the pending migrations in `migrations/`, then check the embedding model and
/// start the writer. The one way the service, the CLI, tests and benches open a table.
pub async fn open_store(
    db: impl Into<DbLocation>,
    table_name: &str,
    model: &ModelInfo,
    settings: WriterSettings,
) -> Result<(Store, MigrationOutcome), StoreError> {
    open_store_with(
        &db.into(),
        table_name,
        model,
        settings,
        DEFAULT_READ_CONSISTENCY,
    )
    .await
}

/// [`open_store`] with how stale a read may be with respect to other processes' commits.
pub(crate) async fn open_store_with(
    db: &DbLocation,
    table_name: &str,
    model: &ModelInfo,
    settings: WriterSettings,
    read_consistency: std::time::Duration,
) -> Result<(Store, MigrationOutcome), StoreError> {
    let started = std::time::Instant::now();
    let (conn, beside) = Store::connect(db, read_consistency).await?;
    let checkpoint = CheckpointFile::new(beside.clone(), table_name);
    let as_store_error = |e: MigrateError| match e {
        MigrateError::Store(s) => s,
        other => StoreError::Schema(other.to_string()),
    };
    // One opening at a time per machine: see `first_open`.
    let opening = first_open::lock_opening(db.local_dir(), table_name)
        .await
        .map_err(as_store_error)?;
    let (table, outcome) = open_or_create(&conn, table_name, model.dimension, &checkpoint)
        .await
        .map_err(as_store_error)?;
    let store = Store::attach(table, db, beside, model, settings, outcome.created).await;
    drop(opening);
    let store = store?;
    tracing::info!(
        db = %db,
        table = table_name,
        schema_from = outcome.from,
        schema_to = outcome.to,
        ms = started.elapsed().as_millis() as u64,
        "store opened"
    );
    Ok((store, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{model, row, DIM};

    /// The `memories` table in `dir` as the service opens it: created by the migrations,
    /// or opened and checked.
    pub(super) async fn open(dir: &std::path::Path) -> Store {
        open_store(dir, "memories", &model(), WriterSettings::default())
            .await
            .expect("open the store")
            .0
    }

    #[tokio::test]
    async fn reopening_with_another_dimension_or_model_fails_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        store.append(vec![row(1, "public")]).await.unwrap();
        store.shutdown().await;
        let err = open_store(
            dir.path(),
            "memories",
            &ModelInfo {
                id: "test-model".into(),
                dimension: 16,
            },
            WriterSettings::default(),
        )
        .await
        .err()
        .expect("dimension mismatch");
        assert!(
            matches!(
                err,
                StoreError::DimensionMismatch {
                    table: 8,
                    model: 16
                }
            ),
            "{err}"
        );
        let err = open_store(
            dir.path(),
            "memories",
            &ModelInfo {
                id: "other".into(),
                dimension: DIM,
            },
            WriterSettings::default(),
        )
        .await
        .err()
        .expect("model mismatch");
        assert!(matches!(err, StoreError::ModelMismatch { .. }), "{err}");
        assert!(err.to_string().contains("test-model"));
        // Same model reopens and keeps the data.
        let store = open(dir.path()).await;
        assert_eq!(store.count(None).await.unwrap(), 1);
    }
}
