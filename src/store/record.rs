//! One row of the `memories` table, and its conversion to and from Arrow.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use lancedb::arrow::arrow_array::{
    builder::{ListBuilder, StringBuilder},
    Array, ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int32Array, ListArray,
    RecordBatch, StringArray, TimestampMicrosecondArray,
};
use lancedb::arrow::arrow_schema::{DataType, SchemaRef};

use super::schema::*;
use super::StoreError;

/// A stored memory. `memory_scope` and `scope_source` are `None` only on legacy rows.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRecord {
    pub id: String,
    pub content: String,
    pub reasoning: Option<String>,
    pub tags: Vec<String>,
    pub memory_type: String,
    pub strength: i32,
    pub is_active: bool,
    pub conversation_id: Option<String>,
    /// `None` only for damaged legacy rows.
    pub created_at: Option<DateTime<Utc>>,
    pub memory_scope: Option<String>,
    pub scope_source: Option<String>,
}

/// Build one Arrow batch (one Lance fragment when appended) from records and their vectors.
pub fn to_batch(
    schema: &SchemaRef,
    rows: &[(MemoryRecord, Vec<f32>)],
) -> Result<RecordBatch, StoreError> {
    let dimension = vector_dimension(schema)
        .ok_or_else(|| StoreError::Schema("table has no float32 vector column".into()))?;
    let mut tags = ListBuilder::new(StringBuilder::new());
    let mut flat = Vec::with_capacity(rows.len() * dimension);
    let mut created = Vec::with_capacity(rows.len());
    for (r, v) in rows {
        if v.len() != dimension {
            return Err(StoreError::DimensionMismatch {
                table: dimension,
                model: v.len(),
            });
        }
        flat.extend_from_slice(v);
        for t in &r.tags {
            tags.values().append_value(t);
        }
        tags.append(true);
        created.push(r.created_at.unwrap_or_else(Utc::now).timestamp_micros());
    }
    let vectors = FixedSizeListArray::try_new(
        item_field(DataType::Float32),
        dimension as i32,
        Arc::new(Float32Array::from(flat)),
        None,
    )?;
    let strings = |f: fn(&MemoryRecord) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from_iter(rows.iter().map(|(r, _)| f(r))))
    };
    let columns: Vec<ArrayRef> = vec![
        strings(|r| Some(&r.id)),
        strings(|r| Some(&r.content)),
        strings(|r| r.reasoning.as_deref()),
        Arc::new(tags.finish()),
        strings(|r| Some(&r.memory_type)),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|(r, _)| r.strength),
        )),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|(r, _)| Some(r.is_active)),
        )),
        strings(|r| r.conversation_id.as_deref()),
        Arc::new(TimestampMicrosecondArray::from(created).with_timezone("UTC")),
        Arc::new(vectors),
        strings(|r| r.memory_scope.as_deref()),
        strings(|r| r.scope_source.as_deref()),
    ];
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn string_col<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    batch.column_by_name(name)?.as_any().downcast_ref()
}

fn opt_str(col: Option<&StringArray>, i: usize) -> Option<String> {
    col.filter(|c| c.is_valid(i))
        .map(|c| c.value(i).to_string())
}

/// Read records back from a query batch. Tolerant of legacy data: missing columns and NULLs in
/// not-null-by-contract columns read as defaults rather than failing the whole recall.
pub fn from_batch(batch: &RecordBatch) -> Vec<MemoryRecord> {
    let id = string_col(batch, COL_ID);
    let content = string_col(batch, COL_CONTENT);
    let reasoning = string_col(batch, COL_REASONING);
    let memory_type = string_col(batch, COL_MEMORY_TYPE);
    let conversation = string_col(batch, COL_CONVERSATION_ID);
    let scope = string_col(batch, COL_MEMORY_SCOPE);
    let source = string_col(batch, COL_SCOPE_SOURCE);
    let tags = batch
        .column_by_name(COL_TAGS)
        .and_then(|c| c.as_any().downcast_ref::<ListArray>());
    let strength = batch
        .column_by_name(COL_STRENGTH)
        .and_then(|c| c.as_any().downcast_ref::<Int32Array>());
    let active = batch
        .column_by_name(COL_IS_ACTIVE)
        .and_then(|c| c.as_any().downcast_ref::<BooleanArray>());
    let created = batch
        .column_by_name(COL_CREATED_AT)
        .and_then(|c| c.as_any().downcast_ref::<TimestampMicrosecondArray>());
    (0..batch.num_rows())
        .map(|i| MemoryRecord {
            id: opt_str(id, i).unwrap_or_default(),
            content: opt_str(content, i).unwrap_or_default(),
            reasoning: opt_str(reasoning, i),
            tags: tags
                .filter(|t| t.is_valid(i))
                .map(|t| {
                    let v = t.value(i);
                    v.as_any()
                        .downcast_ref::<StringArray>()
                        .map(|s| {
                            (0..s.len())
                                .filter(|j| s.is_valid(*j))
                                .map(|j| s.value(j).to_string())
                                .collect()
                        })
                        .unwrap_or_default()
                })
                .unwrap_or_default(),
            memory_type: opt_str(memory_type, i).unwrap_or_else(|| "knowledge".into()),
            strength: strength
                .filter(|s| s.is_valid(i))
                .map(|s| s.value(i))
                .unwrap_or(1),
            is_active: active
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i))
                .unwrap_or(false),
            conversation_id: opt_str(conversation, i),
            created_at: created
                .filter(|c| c.is_valid(i))
                .and_then(|c| Utc.timestamp_micros(c.value(i)).single()),
            memory_scope: opt_str(scope, i),
            scope_source: opt_str(source, i),
        })
        .collect()
}

/// The `_distance` column lancedb adds to vector-search results.
pub fn distances(batch: &RecordBatch) -> Vec<Option<f32>> {
    let col = batch
        .column_by_name("_distance")
        .and_then(|c| c.as_any().downcast_ref::<Float32Array>());
    (0..batch.num_rows())
        .map(|i| col.filter(|c| c.is_valid(i)).map(|c| c.value(i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, scope: Option<&str>) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: format!("content {id}"),
            reasoning: None,
            tags: vec!["a".into(), "b".into()],
            memory_type: "event".into(),
            strength: 42,
            is_active: true,
            conversation_id: Some("default:GroupMessage:1".into()),
            created_at: Utc.timestamp_micros(1_700_000_000_123_456).single(),
            memory_scope: scope.map(String::from),
            scope_source: scope.map(|_| "conversation".into()),
        }
    }

    #[test]
    fn round_trips_through_arrow() {
        let schema = memories_schema(3);
        let rows = vec![
            (record("1", Some("家人")), vec![0.1, 0.2, 0.3]),
            (record("2", None), vec![0.0, 1.0, 0.0]),
        ];
        let batch = to_batch(&schema, &rows).unwrap();
        let back = from_batch(&batch);
        assert_eq!(back, vec![rows[0].0.clone(), rows[1].0.clone()]);
    }

    #[test]
    fn wrong_vector_length_is_a_dimension_error() {
        let schema = memories_schema(3);
        let err = to_batch(&schema, &[(record("1", None), vec![0.1])]).unwrap_err();
        assert!(matches!(
            err,
            StoreError::DimensionMismatch { table: 3, model: 1 }
        ));
    }
}
