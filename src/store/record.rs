//! One row of the `memories` table, and its conversion to and from Arrow.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use lancedb::arrow::arrow_array::{
    builder::{ListBuilder, StringBuilder},
    new_null_array, Array, ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int32Array,
    ListArray, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use lancedb::arrow::arrow_cast::cast;
use lancedb::arrow::arrow_schema::{DataType, SchemaRef};

use super::schema::*;
use super::StoreError;

/// A stored memory. `memory_scope` and `scope_source` are `None` only on legacy rows.
///
/// Serde gives every column its column name, so `scopemem export` / `import` (JSON lines)
/// carry a column added here without further changes; nullable columns default to `None`
/// when a line from an older export lacks them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemoryRecord {
    pub id: String,
    pub content: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub memory_type: String,
    pub strength: i32,
    pub is_active: bool,
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// `None` only for damaged legacy rows. RFC 3339 with microseconds in JSON.
    #[serde(default, with = "rfc3339_micros")]
    pub created_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub memory_scope: Option<String>,
    #[serde(default)]
    pub scope_source: Option<String>,
    /// When the memory stops being recalled and becomes the sweeper's to erase; `None` never.
    #[serde(default, with = "rfc3339_micros")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The last time a recall returned it (refresh-on-recall and decay start from here).
    #[serde(default, with = "rfc3339_micros")]
    pub last_recalled_at: Option<DateTime<Utc>>,
    /// Who said it: the sender's platform id (the key) and the name they had then; `None` for
    /// a memory nobody in particular said (a remember or reflection naming no speaker).
    #[serde(default)]
    pub speaker_id: Option<String>,
    #[serde(default)]
    pub speaker_name: Option<String>,
    /// The working-memory messages a consolidated memory came from (they may have expired).
    #[serde(default)]
    pub source_ids: Vec<String>,
    /// The conversations whose words the text holds besides `conversation_id` (a pass's UPDATE,
    /// a restatement heard in another chat of the scope, a merge): a forget of any of them
    /// erases the row. Empty: only the writer's words. Never shown to a caller.
    #[serde(default)]
    pub source_conversations: Vec<String>,
    /// The members it is about, by sender id: its speaker for a first-person statement, and
    /// the members its text names (design 5.13). Empty: nobody by id.
    #[serde(default)]
    pub about_ids: Vec<String>,
}

#[cfg(test)]
impl MemoryRecord {
    /// A row with only text (what the keyword code reads), for unit tests.
    pub(crate) fn with_text(content: &str, tags: &[&str]) -> MemoryRecord {
        MemoryRecord {
            id: "x".into(),
            content: content.into(),
            reasoning: None,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            memory_type: "knowledge".into(),
            strength: 10,
            is_active: true,
            conversation_id: None,
            created_at: None,
            memory_scope: None,
            scope_source: None,
            expires_at: None,
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        }
    }
}

/// Timestamps as RFC 3339 text with microseconds (the column's precision, so a round trip
/// through JSON is exact). Written by hand: chrono's `serde` feature would rebuild the arrow
/// tree that depends on chrono.
pub mod rfc3339_micros {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        t: &Option<DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Micros, true)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(text) => DateTime::parse_from_rfc3339(&text)
                .map(|t| Some(t.with_timezone(&Utc)))
                .map_err(|e| serde::de::Error::custom(format!("{text:?} is not RFC 3339: {e}"))),
        }
    }
}

/// Build one Arrow batch (one Lance fragment when appended) from records and their vectors,
/// shaped for the table's own schema: columns are matched by name and cast where a legacy table
/// stores a different type (e.g. `created_at` as text); extra nullable columns get NULLs.
pub fn to_batch(
    schema: &SchemaRef,
    rows: &[(MemoryRecord, Vec<f32>)],
) -> Result<RecordBatch, StoreError> {
    to_batch_for(schema, rows, None)
}

/// [`to_batch`] for vectors of `model`. While a re-embed to that model is under way they go
/// into `vector_next` (and `vector`, nullable then, stays NULL; see `store::reembed`);
/// otherwise into `vector`, which refuses them when it names another model.
pub(crate) fn to_batch_for(
    schema: &SchemaRef,
    rows: &[(MemoryRecord, Vec<f32>)],
    model: Option<&str>,
) -> Result<RecordBatch, StoreError> {
    let (target, dimension) = vector_target(schema, model)?;
    let ours = our_columns(rows, target, dimension)?;
    shape_for(schema, &ours, rows.len())
}

/// The vector column `model`'s vectors go into, and its dimension; an error when `vector`
/// names another model or the table has no float32 vector column.
fn vector_target(
    schema: &SchemaRef,
    model: Option<&str>,
) -> Result<(&'static str, usize), StoreError> {
    let named = |column: &str| {
        schema
            .field_with_name(column)
            .ok()
            .and_then(|f| f.metadata().get(FIELD_MODEL).cloned())
    };
    let target = match model {
        Some(m) if named(COL_VECTOR_NEXT).as_deref() == Some(m) => COL_VECTOR_NEXT,
        _ => COL_VECTOR,
    };
    if let (Some(m), Some(holds)) = (model, named(COL_VECTOR)) {
        if target == COL_VECTOR && holds != m {
            return Err(StoreError::ModelMismatch {
                table: holds,
                model: m.to_string(),
            });
        }
    }
    let dimension = schema
        .field_with_name(target)
        .ok()
        .and_then(super::schema::field_dimension)
        .ok_or_else(|| StoreError::Schema("table has no float32 vector column".into()))?;
    Ok((target, dimension))
}

/// Every column scopemem writes, by name, as built from the records (vectors into `target`);
/// an error when a vector is not `dimension` long.
fn our_columns(
    rows: &[(MemoryRecord, Vec<f32>)],
    target: &'static str,
    dimension: usize,
) -> Result<Vec<(&'static str, ArrayRef)>, StoreError> {
    let mut tags = ListBuilder::new(StringBuilder::new());
    let mut sources = ListBuilder::new(StringBuilder::new());
    let mut conversations = ListBuilder::new(StringBuilder::new());
    let mut about = ListBuilder::new(StringBuilder::new());
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
        for id in &r.source_ids {
            sources.values().append_value(id);
        }
        sources.append(!r.source_ids.is_empty());
        for c in &r.source_conversations {
            conversations.values().append_value(c);
        }
        conversations.append(!r.source_conversations.is_empty());
        for id in &r.about_ids {
            about.values().append_value(id);
        }
        about.append(!r.about_ids.is_empty());
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
    Ok(vec![
        (COL_ID, strings(|r| Some(&r.id))),
        (COL_CONTENT, strings(|r| Some(&r.content))),
        (COL_REASONING, strings(|r| r.reasoning.as_deref())),
        (COL_TAGS, Arc::new(tags.finish())),
        (COL_MEMORY_TYPE, strings(|r| Some(&r.memory_type))),
        (
            COL_STRENGTH,
            Arc::new(Int32Array::from_iter_values(
                rows.iter().map(|(r, _)| r.strength),
            )),
        ),
        (
            COL_IS_ACTIVE,
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|(r, _)| Some(r.is_active)),
            )),
        ),
        (
            COL_CONVERSATION_ID,
            strings(|r| r.conversation_id.as_deref()),
        ),
        (
            COL_CREATED_AT,
            Arc::new(TimestampMicrosecondArray::from(created).with_timezone("UTC")),
        ),
        (target, Arc::new(vectors)),
        (COL_MEMORY_SCOPE, strings(|r| r.memory_scope.as_deref())),
        (COL_SCOPE_SOURCE, strings(|r| r.scope_source.as_deref())),
        (COL_EXPIRES_AT, timestamps(rows, |r| r.expires_at)),
        (
            COL_LAST_RECALLED_AT,
            timestamps(rows, |r| r.last_recalled_at),
        ),
        (COL_SPEAKER_ID, strings(|r| r.speaker_id.as_deref())),
        (COL_SPEAKER_NAME, strings(|r| r.speaker_name.as_deref())),
        (COL_SOURCE_IDS, Arc::new(sources.finish())),
        (COL_SOURCE_CONVERSATIONS, Arc::new(conversations.finish())),
        (COL_ABOUT_IDS, Arc::new(about.finish())),
    ])
}

/// The batch in the table's own schema: `ours` matched by name and cast where the table
/// stores another type, NULLs in the other nullable columns; an error on a required one.
fn shape_for(
    schema: &SchemaRef,
    ours: &[(&str, ArrayRef)],
    num_rows: usize,
) -> Result<RecordBatch, StoreError> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = match ours.iter().find(|(name, _)| name == field.name()) {
            Some((_, array)) if array.data_type() == field.data_type() => array.clone(),
            Some((_, array)) => cast(array, field.data_type())?,
            None if field.is_nullable() => new_null_array(field.data_type(), num_rows),
            None => {
                return Err(StoreError::Schema(format!(
                    "the table has a required column '{}' that scopemem does not write",
                    field.name()
                )))
            }
        };
        columns.push(column);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// A nullable UTC timestamp column from one optional field of each record.
fn timestamps(
    rows: &[(MemoryRecord, Vec<f32>)],
    field: fn(&MemoryRecord) -> Option<DateTime<Utc>>,
) -> ArrayRef {
    let values = rows
        .iter()
        .map(|(r, _)| field(r).map(|t| t.timestamp_micros()));
    Arc::new(TimestampMicrosecondArray::from_iter(values).with_timezone("UTC"))
}

/// `created_at` as microseconds, whatever type the table stores it as (timestamps of any unit,
/// or text such as RFC 3339). Unparseable values come back as NULL.
pub(crate) fn created_at_micros(batch: &RecordBatch) -> Option<TimestampMicrosecondArray> {
    timestamp_col(batch, COL_CREATED_AT)
}

/// A text column as `Utf8`, whatever string type the table stores it as (`LargeUtf8`,
/// `Utf8View`, dictionary-encoded text): LanceDB's SQL reads all of them, so every reader here
/// must too. A copy of the buffers only when the type differs (a downcast otherwise).
fn string_col(batch: &RecordBatch, name: &str) -> Option<StringArray> {
    let col = batch.column_by_name(name)?;
    if let Some(s) = col.as_any().downcast_ref::<StringArray>() {
        return Some(s.clone());
    }
    cast(col, &DataType::Utf8)
        .ok()?
        .as_any()
        .downcast_ref::<StringArray>()
        .cloned()
}

fn opt_str(col: Option<&StringArray>, i: usize) -> Option<String> {
    col.filter(|c| c.is_valid(i))
        .map(|c| c.value(i).to_string())
}

/// A list-of-text column (`tags`, `source_ids`) as `List<Utf8>`, whatever list and string
/// types the table stores.
fn string_list_col(batch: &RecordBatch, name: &str) -> Option<ListArray> {
    let col = batch.column_by_name(name)?;
    if let Some(l) = col.as_any().downcast_ref::<ListArray>() {
        if l.values().as_any().is::<StringArray>() {
            return Some(l.clone());
        }
    }
    cast(col, &DataType::List(item_field(DataType::Utf8)))
        .ok()?
        .as_any()
        .downcast_ref::<ListArray>()
        .cloned()
}

/// Record columns of `schema` that [`from_batch`] cannot read as their values: a column of a
/// type that does not cast to the one scopemem writes would read as all NULL (a scope NULL, an
/// expiry of "never"). Whoever filters rows itself, as the resident copy does, must refuse such
/// a table rather than fail open.
pub(crate) fn unreadable_columns(schema: &lancedb::arrow::arrow_schema::Schema) -> Vec<String> {
    let ours = memories_schema(1);
    RECORD_COLUMNS
        .iter()
        .filter_map(|name| {
            let have = schema.field_with_name(name).ok()?;
            let want = ours.field_with_name(name).ok()?;
            let readable = have.data_type() == want.data_type()
                || lancedb::arrow::arrow_cast::can_cast_types(have.data_type(), want.data_type());
            (!readable).then(|| format!("{name} ({})", have.data_type()))
        })
        .collect()
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
    let (id, content, reasoning) = (id.as_ref(), content.as_ref(), reasoning.as_ref());
    let (memory_type, conversation) = (memory_type.as_ref(), conversation.as_ref());
    let (scope, source) = (scope.as_ref(), source.as_ref());
    let tags = string_list_col(batch, COL_TAGS);
    let tags = tags.as_ref();
    let sources = string_list_col(batch, COL_SOURCE_IDS);
    let sources = sources.as_ref();
    let conversations = string_list_col(batch, COL_SOURCE_CONVERSATIONS);
    let conversations = conversations.as_ref();
    let about = string_list_col(batch, COL_ABOUT_IDS);
    let about = about.as_ref();
    let speaker_id = string_col(batch, COL_SPEAKER_ID);
    let speaker_name = string_col(batch, COL_SPEAKER_NAME);
    let (speaker_id, speaker_name) = (speaker_id.as_ref(), speaker_name.as_ref());
    let strength = batch
        .column_by_name(COL_STRENGTH)
        .and_then(|c| c.as_any().downcast_ref::<Int32Array>());
    let active = batch
        .column_by_name(COL_IS_ACTIVE)
        .and_then(|c| c.as_any().downcast_ref::<BooleanArray>());
    let created = created_at_micros(batch);
    let created = created.as_ref();
    let expires = timestamp_col(batch, COL_EXPIRES_AT);
    let recalled = timestamp_col(batch, COL_LAST_RECALLED_AT);
    let (expires, recalled) = (expires.as_ref(), recalled.as_ref());
    (0..batch.num_rows())
        .map(|i| MemoryRecord {
            id: opt_str(id, i).unwrap_or_default(),
            content: opt_str(content, i).unwrap_or_default(),
            reasoning: opt_str(reasoning, i),
            tags: list_value(tags, i),
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
            expires_at: opt_time(expires, i),
            last_recalled_at: opt_time(recalled, i),
            speaker_id: opt_str(speaker_id, i),
            speaker_name: opt_str(speaker_name, i),
            source_ids: list_value(sources, i),
            source_conversations: list_value(conversations, i),
            about_ids: list_value(about, i),
        })
        .collect()
}

/// Row `i` of a list-of-text column; empty for NULL.
fn list_value(col: Option<&ListArray>, i: usize) -> Vec<String> {
    col.filter(|t| t.is_valid(i))
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
        .unwrap_or_default()
}

/// A timestamp column as UTC microseconds, whatever unit the table stores (absent on tables
/// read before migration 0003 ran). A millisecond `expires_at` read by a bare downcast was
/// "never expires".
fn timestamp_col(batch: &RecordBatch, name: &str) -> Option<TimestampMicrosecondArray> {
    let col = batch.column_by_name(name)?;
    let target = timestamp_type();
    let casted = if col.data_type() == &target {
        col.clone()
    } else {
        cast(col, &target).ok()?
    };
    casted
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .cloned()
}

fn opt_time(col: Option<&TimestampMicrosecondArray>, i: usize) -> Option<DateTime<Utc>> {
    col.filter(|c| c.is_valid(i))
        .and_then(|c| Utc.timestamp_micros(c.value(i)).single())
}

/// The `_distance` column lancedb adds to vector-search results.
pub(crate) fn distances(batch: &RecordBatch) -> Vec<Option<f32>> {
    float_column(batch, "_distance")
}

/// The BM25 score Lance adds to full-text search results (`_score`), per row.
pub(crate) fn scores(batch: &RecordBatch) -> Vec<Option<f32>> {
    float_column(batch, "_score")
}

fn float_column(batch: &RecordBatch, name: &str) -> Vec<Option<f32>> {
    let col = batch
        .column_by_name(name)
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
            expires_at: Utc.timestamp_micros(1_800_000_000_000_000).single(),
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
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
    fn vectors_go_where_their_model_is_during_and_after_a_reembed() {
        use lancedb::arrow::arrow_schema::{Field, Schema};
        let named = |name: &str, dim: usize, nullable: bool, model: Option<&str>| {
            let f = Field::new(name, vector_type(dim), nullable);
            match model {
                Some(m) => f.with_metadata([(FIELD_MODEL.to_string(), m.to_string())].into()),
                None => f,
            }
        };
        let base: Vec<Field> = memories_schema(3)
            .fields()
            .iter()
            .filter(|f| f.name() != COL_VECTOR)
            .map(|f| f.as_ref().clone())
            .collect();
        let during = Arc::new(Schema::new(
            [
                base.clone(),
                vec![
                    named(COL_VECTOR, 3, true, None),
                    named(COL_VECTOR_NEXT, 2, true, Some("B")),
                ],
            ]
            .concat(),
        ));
        let new_rows = [(record("1", None), vec![0.6, 0.8])];
        let batch = to_batch_for(&during, &new_rows, Some("B")).unwrap();
        assert_eq!(batch[COL_VECTOR].null_count(), 1, "no old-model vector");
        assert_eq!(batch[COL_VECTOR_NEXT].null_count(), 0);
        let old_rows = [(record("2", None), vec![0.1, 0.2, 0.3])];
        let batch = to_batch_for(&during, &old_rows, Some("A")).unwrap();
        assert_eq!(batch[COL_VECTOR].null_count(), 0);
        assert_eq!(batch[COL_VECTOR_NEXT].null_count(), 1, "re-embedded later");

        let after = Arc::new(Schema::new(
            [base, vec![named(COL_VECTOR, 2, false, Some("B"))]].concat(),
        ));
        assert!(to_batch_for(&after, &new_rows, Some("B")).is_ok());
        assert!(matches!(
            to_batch_for(&after, &new_rows, Some("A")),
            Err(StoreError::ModelMismatch { .. })
        ));
    }

    /// The types LanceDB's SQL reads as text and time read the same here: a scope stored as
    /// LargeUtf8, Utf8View or a dictionary, and an expiry in milliseconds. Before, a bare
    /// downcast read them as NULL scope and "never expires".
    #[test]
    fn reads_every_string_and_timestamp_type_the_sql_reads() {
        use lancedb::arrow::arrow_schema::{Field, Schema, TimeUnit};
        let wider = |name: &str, t: DataType| Field::new(name, t, true);
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let schemas = [
            (
                DataType::LargeUtf8,
                DataType::Utf8View,
                TimeUnit::Millisecond,
            ),
            (DataType::Utf8View, dict.clone(), TimeUnit::Second),
            (dict, DataType::LargeUtf8, TimeUnit::Nanosecond),
        ];
        for (scope_type, content_type, unit) in schemas {
            let fields: Vec<Field> = memories_schema(3)
                .fields()
                .iter()
                .map(|f| match f.name().as_str() {
                    COL_MEMORY_SCOPE => wider(COL_MEMORY_SCOPE, scope_type.clone()),
                    COL_CONTENT => wider(COL_CONTENT, content_type.clone()),
                    COL_EXPIRES_AT => wider(
                        COL_EXPIRES_AT,
                        DataType::Timestamp(unit, Some("UTC".into())),
                    ),
                    _ => f.as_ref().clone(),
                })
                .collect();
            let schema = Arc::new(Schema::new(fields));
            assert!(unreadable_columns(&schema).is_empty());
            let rows = vec![(record("1", Some("家人")), vec![0.1, 0.2, 0.3])];
            let batch = to_batch(&schema, &rows).unwrap();
            assert_eq!(batch.schema(), schema, "written in the table's own types");
            let back = &from_batch(&batch)[0];
            assert_eq!(back.memory_scope.as_deref(), Some("家人"), "{scope_type}");
            assert_eq!(back.content, "content 1", "{content_type}");
            assert_eq!(
                back.expires_at.map(|t| t.timestamp()),
                rows[0].0.expires_at.map(|t| t.timestamp()),
                "{unit:?}"
            );
        }
        let binary_scope = Schema::new(vec![Field::new(
            COL_MEMORY_SCOPE,
            DataType::Struct(vec![Field::new("x", DataType::Int32, true)].into()),
            true,
        )]);
        assert_eq!(unreadable_columns(&binary_scope).len(), 1);
    }

    #[test]
    fn writes_into_a_legacy_shaped_schema() {
        use lancedb::arrow::arrow_schema::{Field, Schema};
        // Text created_at, no scope columns, an extra nullable column, another order.
        let legacy = Arc::new(Schema::new(vec![
            Field::new(COL_VECTOR, vector_type(3), false),
            Field::new(COL_ID, DataType::Utf8, false),
            Field::new(COL_CONTENT, DataType::Utf8, false),
            Field::new(COL_CREATED_AT, DataType::Utf8, true),
            Field::new("legacy_extra", DataType::Int64, true),
        ]));
        let batch = to_batch(&legacy, &[(record("1", None), vec![0.1, 0.2, 0.3])]).unwrap();
        assert_eq!(batch.num_columns(), 5);
        let back = from_batch(&batch);
        assert_eq!(back[0].id, "1");
        assert_eq!(
            back[0].created_at,
            record("1", None).created_at,
            "text timestamps parse back"
        );
        assert_eq!(back[0].memory_scope, None);
    }

    #[test]
    fn unparseable_text_timestamps_read_as_none() {
        use lancedb::arrow::arrow_schema::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![Field::new(
            COL_CREATED_AT,
            DataType::Utf8,
            true,
        )]));
        let col: ArrayRef = Arc::new(StringArray::from(vec![
            Some("2024-05-01T10:00:00Z"),
            Some("yesterday-ish"),
            None,
        ]));
        let batch = RecordBatch::try_new(schema, vec![col]).unwrap();
        let ts = created_at_micros(&batch).unwrap();
        assert!(ts.is_valid(0));
        assert!(!ts.is_valid(1));
        assert!(!ts.is_valid(2));
    }

    #[test]
    fn round_trips_through_json() {
        for r in [record("1", Some("家人")), record("2", None)] {
            let text = serde_json::to_string(&r).unwrap();
            assert!(
                text.contains("\"created_at\":\"2023-11-14T22:13:20.123456Z\""),
                "{text}"
            );
            let back: MemoryRecord = serde_json::from_str(&text).unwrap();
            assert_eq!(back, r);
        }
        let bad = r#"{"id":"1","content":"c","memory_type":"event","strength":1,"is_active":true,"created_at":"yesterday"}"#;
        assert!(serde_json::from_str::<MemoryRecord>(bad).is_err());
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
