//! The `memories` table schema (docs/design.md section 3) and its version bookkeeping.

use std::sync::Arc;

use lancedb::arrow::arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// Schema version written by this build; v1 is the legacy table without scope columns, v2 added
/// the scope columns, v3 the life-cycle columns, v4 the speaker and provenance columns, v5 the
/// conversations whose words a memory holds, v6 the members it is about.
pub const SCHEMA_VERSION: u32 = 6;

/// Table-config keys (Lance manifest config) where we record what the table holds, so a
/// restart with another embedding model fails loudly instead of mixing vector spaces.
pub const META_SCHEMA_VERSION: &str = "scopemem.schema_version";
pub const META_MODEL_ID: &str = "scopemem.embedding_model";
pub const META_DIMENSION: &str = "scopemem.embedding_dim";
/// Table config: the model a re-embed is under way to (informational; the schema decides).
pub const META_REEMBED_TARGET: &str = "scopemem.reembed_target";
/// Table config: the parameters (Lance's JSON) the full-text indexes were built with. An index
/// built with others is rebuilt, since the query is analyzed with the index's own parameters.
pub const META_FULLTEXT_PARAMS: &str = "scopemem.fulltext_params";
/// Field metadata on a vector column: the model that made its vectors. It travels with the
/// column through the re-embed's switch, so the schema alone says which model `vector` holds.
pub const FIELD_MODEL: &str = "scopemem.embedding_model";

pub const COL_ID: &str = "id";
pub const COL_CONTENT: &str = "content";
pub const COL_REASONING: &str = "reasoning";
pub const COL_TAGS: &str = "tags";
pub const COL_MEMORY_TYPE: &str = "memory_type";
pub const COL_STRENGTH: &str = "strength";
pub const COL_IS_ACTIVE: &str = "is_active";
pub const COL_CONVERSATION_ID: &str = "conversation_id";
pub const COL_CREATED_AT: &str = "created_at";
pub const COL_VECTOR: &str = "vector";
/// The new model's vectors while a re-embed is under way (see `store::reembed`).
pub const COL_VECTOR_NEXT: &str = "vector_next";
pub const COL_MEMORY_SCOPE: &str = "memory_scope";
pub const COL_SCOPE_SOURCE: &str = "scope_source";
pub const COL_EXPIRES_AT: &str = "expires_at";
pub const COL_LAST_RECALLED_AT: &str = "last_recalled_at";
/// Who said it: the platform's sender id (the key: a rename keeps a person's memories
/// together) and the name they had when it was written.
pub const COL_SPEAKER_ID: &str = "speaker_id";
pub const COL_SPEAKER_NAME: &str = "speaker_name";
/// The working-memory messages a consolidated memory came from (design 5.13).
pub const COL_SOURCE_IDS: &str = "source_ids";
/// The conversations whose words a memory's text was made from, beside the one that wrote it
/// (`conversation_id`): a pass's UPDATE, a restatement heard in two chats of a scope, a merge.
/// A forget of any of them erases the memory (design 5.13, section 9).
pub const COL_SOURCE_CONVERSATIONS: &str = "source_conversations";
/// The members a memory is about, by sender id (design 5.13): its speaker for a first-person
/// statement, and the members its text names. What a person's browse lists and their forget
/// erases.
pub const COL_ABOUT_IDS: &str = "about_ids";

/// The `memory_type` of a working-memory message (design 5.13): a row of the same table, so
/// scope, expiry, erasure and export hold for it as for any memory, but never a type a caller
/// may give a memory.
pub const MESSAGE_TYPE: &str = "message";
/// The tag a working-memory message of the bot's own is stored with (its replies are data of
/// the chat, never a member's word).
pub const BOT_TAG: &str = "bot";
/// The tag of a short working-memory message embedded with the question it answers
/// (`memory::working::replies`): its text alone states nothing.
pub const REPLY_TAG: &str = "reply";

/// Every column except the vector: what recall reads back (vectors are never shipped out).
pub const RECORD_COLUMNS: [&str; 18] = [
    COL_ID,
    COL_CONTENT,
    COL_REASONING,
    COL_TAGS,
    COL_MEMORY_TYPE,
    COL_STRENGTH,
    COL_IS_ACTIVE,
    COL_CONVERSATION_ID,
    COL_CREATED_AT,
    COL_MEMORY_SCOPE,
    COL_SCOPE_SOURCE,
    COL_EXPIRES_AT,
    COL_LAST_RECALLED_AT,
    COL_SPEAKER_ID,
    COL_SPEAKER_NAME,
    COL_SOURCE_IDS,
    COL_SOURCE_CONVERSATIONS,
    COL_ABOUT_IDS,
];

/// The list item field lancedb uses for tags and vectors.
pub(crate) fn item_field(data_type: DataType) -> Arc<Field> {
    Arc::new(Field::new("item", data_type, true))
}

pub(crate) fn vector_type(dimension: usize) -> DataType {
    DataType::FixedSizeList(item_field(DataType::Float32), dimension as i32)
}

pub(crate) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The current (v6) schema for a model of `dimension`.
pub fn memories_schema(dimension: usize) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(COL_ID, DataType::Utf8, false),
        Field::new(COL_CONTENT, DataType::Utf8, false),
        Field::new(COL_REASONING, DataType::Utf8, true),
        Field::new(COL_TAGS, DataType::List(item_field(DataType::Utf8)), true),
        Field::new(COL_MEMORY_TYPE, DataType::Utf8, false),
        Field::new(COL_STRENGTH, DataType::Int32, false),
        Field::new(COL_IS_ACTIVE, DataType::Boolean, false),
        Field::new(COL_CONVERSATION_ID, DataType::Utf8, true),
        Field::new(COL_CREATED_AT, timestamp_type(), false),
        Field::new(COL_VECTOR, vector_type(dimension), false),
        Field::new(COL_MEMORY_SCOPE, DataType::Utf8, true),
        Field::new(COL_SCOPE_SOURCE, DataType::Utf8, true),
        Field::new(COL_EXPIRES_AT, timestamp_type(), true),
        Field::new(COL_LAST_RECALLED_AT, timestamp_type(), true),
        Field::new(COL_SPEAKER_ID, DataType::Utf8, true),
        Field::new(COL_SPEAKER_NAME, DataType::Utf8, true),
        Field::new(
            COL_SOURCE_IDS,
            DataType::List(item_field(DataType::Utf8)),
            true,
        ),
        Field::new(
            COL_SOURCE_CONVERSATIONS,
            DataType::List(item_field(DataType::Utf8)),
            true,
        ),
        Field::new(
            COL_ABOUT_IDS,
            DataType::List(item_field(DataType::Utf8)),
            true,
        ),
    ]))
}

/// The vector dimension of a table schema, if it has a well-formed vector column.
#[cfg(test)]
pub(crate) fn vector_dimension(schema: &Schema) -> Option<usize> {
    match schema.field_with_name(COL_VECTOR).ok()?.data_type() {
        DataType::FixedSizeList(item, n) if item.data_type() == &DataType::Float32 => {
            usize::try_from(*n).ok()
        }
        _ => None,
    }
}

/// The dimension of a `FixedSizeList<Float32>` field.
pub(crate) fn field_dimension(field: &Field) -> Option<usize> {
    match field.data_type() {
        DataType::FixedSizeList(item, n) if item.data_type() == &DataType::Float32 => {
            usize::try_from(*n).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_has_nullable_scope_columns_and_fixed_vector() {
        let schema = memories_schema(384);
        assert!(schema
            .field_with_name(COL_MEMORY_SCOPE)
            .unwrap()
            .is_nullable());
        assert!(schema
            .field_with_name(COL_SCOPE_SOURCE)
            .unwrap()
            .is_nullable());
        assert!(!schema.field_with_name(COL_ID).unwrap().is_nullable());
        assert_eq!(vector_dimension(&schema), Some(384));
        assert_eq!(schema.fields().len(), RECORD_COLUMNS.len() + 1);
    }
}
