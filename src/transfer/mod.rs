//! Export and import of memories as JSON lines (`scopemem export` / `scopemem import`).
//!
//! - [`format`]: the header line and the memory lines.
//! - [`export`]: streams rows out, batch by batch.
//! - [`validate`]: checks and redacts one imported line.
//! - [`import`]: reads a file back, keeping ids and scopes, reusing vectors when it can.
//!
//! Both run beside a live `serve` on the same directory: they open the table like any other
//! process (read consistency, commit-conflict retries in the writer) and never take the
//! maintenance lease, so they start no compaction, pruning, index build or backfill.

pub(crate) mod export;
pub(crate) mod format;
pub(crate) mod import;
pub(crate) mod validate;

use std::sync::atomic::Ordering;

pub use export::{export, ExportOptions, ExportReport};
pub use format::{ExportFilter, Header, FORMAT_VERSION};
pub use import::{ImportOptions, ImportReport, Importer, Progress, Rejection};

use crate::config::{Config, DurabilityMode};
use crate::embed::EmbedError;
use crate::embed::ModelInfo;
use crate::scope::ScopeError;
use crate::store::durability::Durability;
use crate::store::{Store, StoreError, WriterSettings};

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("line {line}: {message}")]
    Header { line: u64, message: String },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("{path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Scope(#[from] ScopeError),
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    #[error("the embedding model returned fewer vectors than texts (batch ending at line {line})")]
    Embedding { line: u64 },
    #[error("there is no table '{table}' under {db_dir}; nothing to export")]
    NoTable { table: String, db_dir: String },
}

impl From<lancedb::Error> for TransferError {
    fn from(e: lancedb::Error) -> Self {
        TransferError::Store(StoreError::Lance(e))
    }
}

/// Open the configured table for an export or import through `migrate::open_store_with` (the
/// one way to open a table; it also applies pending migrations). `create` allows an import into
/// a directory with no table yet; an export of a missing table is an error rather than an
/// empty table created as a side effect. The store never does maintenance: that belongs to the
/// lease holder (a running `serve`, which also compacts what this process appended).
pub async fn open(
    config: &Config,
    model: &ModelInfo,
    create: bool,
) -> Result<Store, TransferError> {
    let storage = &config.storage;
    if !create {
        let (conn, _) = Store::connect(&storage.db_dir, storage.read_consistency()).await?;
        let names = conn.table_names().execute().await?;
        if !names.iter().any(|n| n == &storage.table_name) {
            return Err(TransferError::NoTable {
                table: storage.table_name.clone(),
                db_dir: storage.db_dir.to_string(),
            });
        }
    }
    let settings = WriterSettings {
        max_batch_rows: storage.write_batch_max.max(1),
        durability: match storage.durability {
            DurabilityMode::Process => Durability::Process,
            DurabilityMode::Power => Durability::Power,
        },
        ..WriterSettings::default()
    };
    let (store, _) = crate::migrate::open_store_with(
        &storage.db_dir,
        &storage.table_name,
        model,
        settings,
        storage.read_consistency(),
    )
    .await?;
    store.maintainer().store(false, Ordering::Release);
    Ok(store)
}
