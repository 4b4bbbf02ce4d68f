//! Applies pending migrations when a table is opened and records the version in the table's
//! config. Idempotent: a column that already exists is not added again.

use lancedb::table::NewColumnTransform;
use lancedb::{Connection, Table};
use serde::Serialize;

use super::files::{self, schema_of, Op};
use super::MigrateError;
use crate::store::schema::{COL_ID, COL_MEMORY_SCOPE, COL_SCOPE_SOURCE, META_SCHEMA_VERSION};

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
pub async fn current_version(table: &Table) -> Result<u32, MigrateError> {
    let config = native(table)?.manifest().await?.config;
    if let Some(v) = config.get(META_SCHEMA_VERSION).and_then(|v| v.parse().ok()) {
        return Ok(v);
    }
    // Unrecorded: v2 only if both scope columns exist. A table from another program with just
    // one of them is v1; the add-columns step adds what is missing.
    let schema = table.schema().await?;
    let has = |c: &str| schema.field_with_name(c).is_ok();
    Ok(if has(COL_MEMORY_SCOPE) && has(COL_SCOPE_SOURCE) {
        2
    } else {
        1
    })
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

async fn record_version(table: &Table, version: u32) -> Result<(), MigrateError> {
    native(table)?
        .update_config([(META_SCHEMA_VERSION.to_string(), version.to_string())])
        .await?;
    Ok(())
}

/// Open `name` (creating it through the migrations if missing) and bring it to the latest
/// version. Never rewrites data: new columns are added as all-NULL, which Lance records in
/// metadata only.
pub async fn open_or_create(
    conn: &Connection,
    name: &str,
    dimension: usize,
) -> Result<(Table, MigrationOutcome), MigrateError> {
    let all = files::all()?;
    let names = conn.table_names().execute().await?;
    let exists = names.iter().any(|n| n == name);
    let (table, from) = if exists {
        let table = conn.open_table(name).execute().await?;
        let v = current_version(&table).await?;
        (table, v)
    } else {
        let create = all
            .first()
            .and_then(|m| {
                m.ops.iter().find_map(|op| match op {
                    Op::CreateTable { columns } => Some(columns.clone()),
                    _ => None,
                })
            })
            .ok_or_else(|| MigrateError::Definition("0001 must create the table".into()))?;
        let table = conn
            .create_empty_table(name, schema_of(&create, dimension)?)
            .execute()
            .await?;
        table.set_unenforced_primary_key([COL_ID]).await?;
        record_version(&table, 1).await?;
        tracing::info!(table = name, "created table at schema v1");
        (table, 1)
    };
    let has_rows = exists && table.count_rows(None).await? > 0;
    let mut backfill_needed = false;
    let mut to = from;
    for m in all.iter().filter(|m| m.version > from) {
        for op in &m.ops {
            match op {
                Op::CreateTable { .. } => {}
                Op::AddColumns { columns } => {
                    let schema = table.schema().await?;
                    let missing: Vec<_> = columns
                        .iter()
                        .filter(|c| schema.field_with_name(&c.name).is_err())
                        .cloned()
                        .collect();
                    if !missing.is_empty() {
                        table
                            .add_columns()
                            .transform(NewColumnTransform::AllNulls(schema_of(
                                &missing, dimension,
                            )?))
                            .execute()
                            .await?;
                    }
                }
                Op::BackfillScope { .. } => backfill_needed |= has_rows,
            }
        }
        record_version(&table, m.version).await?;
        to = m.version;
        tracing::info!(table = name, version = m.version, description = %m.description, "migration applied");
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
