//! What `scopemem migrate status` reports, read without applying anything or loading the
//! model: the schema version and pending migrations, rows without a scope, the backfill's
//! checkpoint and who holds the maintenance lease. The operator's CLI asks this module, not the
//! store: opening the table read-only, counting and reading the state beside it are migration
//! concerns.

use std::time::Duration;

use super::backfill::CANDIDATES;
use super::checkpoint::{Checkpoint, CheckpointFile};
use super::runner::{self, SchemaStatus};
use super::MigrateError;
use crate::config::DbLocation;
pub use crate::store::lease::LeaseHolder;

use crate::store::lease;
use crate::store::schema::COL_MEMORY_SCOPE;
use crate::store::Store;

/// The state of one table's migrations.
#[derive(Debug, Clone)]
pub struct TableStatus {
    pub schema: SchemaStatus,
    pub rows: usize,
    /// Rows the backfill has yet to give a scope (all of them before the scope column exists).
    pub unscoped_rows: usize,
    pub backfill: Option<Checkpoint>,
    pub maintenance_lease: Option<LeaseHolder>,
}

/// Read the status of `table` in `db`; `None` when the table does not exist.
pub(crate) async fn read(
    db: &DbLocation,
    table: &str,
    read_consistency: Duration,
) -> Result<Option<TableStatus>, MigrateError> {
    let (conn, beside) = Store::connect(db, read_consistency).await?;
    if !conn
        .table_names()
        .execute()
        .await?
        .iter()
        .any(|n| n == table)
    {
        return Ok(None);
    }
    let handle = conn.open_table(table).execute().await?;
    let schema = runner::status(&handle).await?;
    let has_scope = handle
        .schema()
        .await?
        .field_with_name(COL_MEMORY_SCOPE)
        .is_ok();
    let rows = handle.count_rows(None).await?;
    let unscoped_rows = if has_scope {
        handle.count_rows(Some(CANDIDATES.to_string())).await?
    } else {
        rows
    };
    let backfill = CheckpointFile::new(beside.clone(), table).load().await?;
    Ok(Some(TableStatus {
        schema,
        rows,
        unscoped_rows,
        backfill,
        maintenance_lease: lease::current_holder(&beside, table).await,
    }))
}

/// Who holds the maintenance lease of `table` now (a running service, which does the
/// migrations and a re-embed itself), read from the state beside the table without opening it.
pub(crate) async fn lease_holder(
    db: &DbLocation,
    table: &str,
    read_consistency: Duration,
) -> Result<Option<LeaseHolder>, MigrateError> {
    let (_, beside) = Store::connect(db, read_consistency).await?;
    Ok(lease::current_holder(&beside, table).await)
}
