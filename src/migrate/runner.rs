//! Applies pending migrations when a table is opened and records the version in the table's
//! config. Idempotent: a column that already exists is not added again.

use lancedb::table::NewColumnTransform;
use lancedb::{Connection, Table};
use serde::Serialize;

use super::files::{self, schema_of, Op};
use super::MigrateError;
use crate::store::schema::{
    COL_ABOUT_IDS, COL_EXPIRES_AT, COL_LAST_RECALLED_AT, COL_MEMORY_SCOPE, COL_SCOPE_SOURCE,
    COL_SOURCE_CONVERSATIONS, COL_SOURCE_IDS, COL_SPEAKER_ID, META_SCHEMA_VERSION,
};

/// What opening the table did.
#[derive(Debug, Clone, Serialize)]
pub struct MigrationOutcome {
    /// Version found on open (0: the table did not exist).
    pub from: u32,
    pub to: u32,
    pub created: bool,
    /// A migration declared that rows written before it need the scope backfill.
    pub backfill_needed: bool,
}

/// Add the columns the table lacks. Several processes may open a legacy table at once: when
/// another one's schema change wins the commit, re-read the latest schema and try again, so
/// every process ends up on the migrated table instead of failing to start.
async fn add_missing_columns(
    table: &Table,
    columns: &[files::Column],
    dimension: usize,
) -> Result<(), MigrateError> {
    let mut attempt = 0;
    loop {
        table.checkout_latest().await?;
        let schema = table.schema().await?;
        let missing: Vec<_> = columns
            .iter()
            .filter(|c| schema.field_with_name(&c.name).is_err())
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let added = table
            .add_columns()
            .transform(NewColumnTransform::AllNulls(schema_of(
                &missing, dimension,
            )?))
            .execute()
            .await;
        match added {
            Ok(_) => return Ok(()),
            Err(e) if attempt < crate::store::RACE_ATTEMPTS => {
                attempt += 1;
                tracing::debug!(error = %e, attempt, "adding columns raced another process; re-checking");
                tokio::time::sleep(crate::store::race_pause(attempt)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// `scopemem migrate status`.
#[derive(Debug, Clone, Serialize)]
pub struct SchemaStatus {
    pub version: u32,
    pub latest: u32,
    pub pending: Vec<String>,
}

fn native(table: &Table) -> Result<&lancedb::table::NativeTable, MigrateError> {
    table
        .as_native()
        .ok_or_else(|| MigrateError::Definition("only local tables are supported".into()))
}

/// The recorded schema version; a table without one is inferred from its columns (a table
/// from another program without `memory_scope` is v1).
pub(crate) async fn current_version(table: &Table) -> Result<u32, MigrateError> {
    let config = native(table)?.manifest().await?.config;
    if let Some(v) = config.get(META_SCHEMA_VERSION).and_then(|v| v.parse().ok()) {
        return Ok(v);
    }
    // Unrecorded: v2 only if both scope columns exist. A table from another program with just
    // one of them is v1; the add-columns step adds what is missing.
    let schema = table.schema().await?;
    let has = |c: &str| schema.field_with_name(c).is_ok();
    Ok(
        match (
            has(COL_MEMORY_SCOPE) && has(COL_SCOPE_SOURCE),
            has(COL_EXPIRES_AT) && has(COL_LAST_RECALLED_AT),
            has(COL_SPEAKER_ID) && has(COL_SOURCE_IDS),
            has(COL_SOURCE_CONVERSATIONS) && has(COL_ABOUT_IDS),
            has(COL_SOURCE_CONVERSATIONS),
        ) {
            (true, true, true, true, _) => 6,
            (true, true, true, false, true) => 5,
            (true, true, true, false, false) => 4,
            (true, true, false, _, _) => 3,
            (true, false, _, _, _) => 2,
            (false, _, _, _, _) => 1,
        },
    )
}

pub async fn status(table: &Table) -> Result<SchemaStatus, MigrateError> {
    let all = files::all()?;
    let version = current_version(table).await?;
    Ok(SchemaStatus {
        version,
        latest: all.last().map(|m| m.version).unwrap_or(0),
        pending: all
            .iter()
            .filter(|m| m.version > version)
            .map(|m| format!("{:04}: {}", m.version, m.description))
            .collect(),
    })
}

/// Record `version` in the table's config; a concurrent process recording it too is fine.
async fn record_version(table: &Table, version: u32) -> Result<(), MigrateError> {
    let entries = [(META_SCHEMA_VERSION.to_string(), version.to_string())];
    crate::store::update_config_settled(table, &entries, |config| {
        let recorded = config
            .get(META_SCHEMA_VERSION)
            .and_then(|v| v.parse::<u32>().ok());
        Ok(recorded.is_some_and(|v| v >= version))
    })
    .await?;
    Ok(())
}

/// Durably mark the backfill pending, unless a checkpoint (this process's earlier start, or
/// another process) already exists.
async fn declare_backfill(path: &super::checkpoint::CheckpointFile) -> Result<(), MigrateError> {
    if path.load().await?.is_none() {
        let fresh = super::checkpoint::Checkpoint::new();
        path.save(&fresh).await?;
        tracing::info!(migration_start = %fresh.migration_start, "legacy rows found; backfill pending");
    }
    Ok(())
}

/// Open `name` (creating it through the migrations if missing, `first_open`: any number of
/// processes may start at once on an empty directory) and bring it to the latest version. Never rewrites data: new columns are added as all-NULL, which Lance records in
/// metadata only. A migration that declares a backfill writes its checkpoint (`checkpoint`)
/// before it adds a column, so another process that finds the new columns also finds the
/// backfill pending and keeps legacy rows visible.
pub async fn open_or_create(
    conn: &Connection,
    name: &str,
    dimension: usize,
    checkpoint: &super::checkpoint::CheckpointFile,
) -> Result<(Table, MigrationOutcome), MigrateError> {
    let all = files::all()?;
    let create = all
        .first()
        .and_then(|m| {
            m.ops.iter().find_map(|op| match op {
                Op::CreateTable { columns } => Some(columns.clone()),
                _ => None,
            })
        })
        .ok_or_else(|| MigrateError::Definition("0001 must create the table".into()))?;
    let (table, created) =
        super::first_open::create_or_open(conn, name, schema_of(&create, dimension)?).await?;
    let from = match created {
        true => {
            record_version(&table, 1).await?;
            tracing::info!(table = name, "created table at schema v1");
            1
        }
        false => current_version(&table).await?,
    };
    let exists = !created;
    let has_rows = exists && table.count_rows(None).await? > 0;
    let mut backfill_needed = false;
    let mut to = from;
    for m in all.iter().filter(|m| m.version > from) {
        // Before any column appears: a process that sees the new columns (or infers the
        // version from them) must also find the backfill pending.
        let declares = m
            .ops
            .iter()
            .any(|op| matches!(op, Op::BackfillScope { .. }));
        if declares && has_rows {
            backfill_needed = true;
            declare_backfill(checkpoint).await?;
        }
        for op in &m.ops {
            match op {
                Op::CreateTable { .. } => {}
                Op::AddColumns { columns } => {
                    add_missing_columns(&table, columns, dimension).await?
                }
                Op::BackfillScope { .. } => {}
            }
        }
        record_version(&table, m.version).await?;
        to = m.version;
        tracing::info!(table = name, version = m.version, description = %m.description, "migration applied");
    }
    if !has_rows {
        super::first_open::set_primary_key(&table).await?;
    }
    Ok((
        table,
        MigrationOutcome {
            from: if exists { from } else { 0 },
            to,
            created: !exists,
            backfill_needed,
        },
    ))
}
