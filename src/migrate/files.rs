//! The declarative migrations in `migrations/`, embedded in the binary so a deployed service
//! never depends on the source tree.

use std::sync::Arc;

use lancedb::arrow::arrow_schema::{DataType, Field, Schema};
use serde::Deserialize;

use super::MigrateError;
use crate::store::schema::{item_field, timestamp_type, vector_type};

const FILES: [(&str, &str); 6] = [
    (
        "0001_memories.json",
        include_str!("../../migrations/0001_memories.json"),
    ),
    (
        "0002_memory_scope.json",
        include_str!("../../migrations/0002_memory_scope.json"),
    ),
    (
        "0003_life_cycle.json",
        include_str!("../../migrations/0003_life_cycle.json"),
    ),
    (
        "0004_speakers.json",
        include_str!("../../migrations/0004_speakers.json"),
    ),
    (
        "0005_source_conversations.json",
        include_str!("../../migrations/0005_source_conversations.json"),
    ),
    (
        "0006_about.json",
        include_str!("../../migrations/0006_about.json"),
    ),
];

#[derive(Debug, Clone, Deserialize)]
pub struct Migration {
    pub version: u32,
    pub description: String,
    pub ops: Vec<Op>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Create the table (only when it does not exist yet).
    CreateTable { columns: Vec<Column> },
    /// Add nullable columns as all-NULL: a metadata-only change in Lance.
    AddColumns { columns: Vec<Column> },
    /// Rows present before this migration are legacy rows: start the background backfill.
    /// The file's `value` and `scope_source` keys are read by people only: the backfill
    /// derives each row's scope from its conversation id and writes `scope_source` `backfill`
    /// (`migrate/backfill.rs`).
    BackfillScope {},
}

#[derive(Debug, Clone, Deserialize)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub nullable: bool,
}

impl Column {
    pub(crate) fn field(&self, dimension: usize) -> Result<Field, MigrateError> {
        let data_type = match self.kind.as_str() {
            "utf8" => DataType::Utf8,
            "int32" => DataType::Int32,
            "bool" => DataType::Boolean,
            "timestamp_us_utc" => timestamp_type(),
            "list<utf8>" => DataType::List(item_field(DataType::Utf8)),
            "vector" => vector_type(dimension),
            other => {
                return Err(MigrateError::Definition(format!(
                    "column '{}' has unknown type '{other}'",
                    self.name
                )))
            }
        };
        Ok(Field::new(&self.name, data_type, self.nullable))
    }
}

pub(crate) fn schema_of(columns: &[Column], dimension: usize) -> Result<Arc<Schema>, MigrateError> {
    let fields = columns
        .iter()
        .map(|c| c.field(dimension))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// All migrations, in version order, validated (versions 1..=n without gaps).
pub(crate) fn all() -> Result<Vec<Migration>, MigrateError> {
    let mut out = Vec::with_capacity(FILES.len());
    for (name, text) in FILES {
        let m: Migration = serde_json::from_str(text)
            .map_err(|e| MigrateError::Definition(format!("{name}: {e}")))?;
        out.push(m);
    }
    out.sort_by_key(|m| m.version);
    for (i, m) in out.iter().enumerate() {
        if m.version as usize != i + 1 {
            return Err(MigrateError::Definition(format!(
                "migration versions must be 1..={} without gaps; found {}",
                out.len(),
                m.version
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{memories_schema, SCHEMA_VERSION};

    /// Applying every migration's columns in order must give exactly the schema the store
    /// writes, and the newest version must be the one the store records.
    #[test]
    fn migrations_compose_to_the_current_schema() {
        let all = all().unwrap();
        assert_eq!(all.last().unwrap().version, SCHEMA_VERSION);
        let mut columns = Vec::new();
        for m in &all {
            for op in &m.ops {
                match op {
                    Op::CreateTable { columns: c } | Op::AddColumns { columns: c } => {
                        columns.extend(c.iter().cloned())
                    }
                    Op::BackfillScope { .. } => {}
                }
            }
        }
        let composed = schema_of(&columns, 384).unwrap();
        assert_eq!(composed, memories_schema(384));
    }
}
