//! What the store's own tests open: a real LanceDB table at the current schema in a temporary
//! directory, and synthetic rows (no model). The service opens its table through
//! `migrate::open_store`, which runs the migrations; the store sits below it, so its tests
//! make the table the migrations end in (`migrate::files` pins that the two schemas are
//! equal) and attach to it as `open_store` does.

use chrono::Utc;

use super::schema::{memories_schema, COL_ID};
use super::{MemoryRecord, Store, WriterSettings};
use crate::config::DbLocation;
use crate::embed::ModelInfo;

/// The synthetic vectors' dimension.
pub(crate) const DIM: usize = 8;

pub(crate) fn model() -> ModelInfo {
    ModelInfo {
        id: "test-model".into(),
        dimension: DIM,
    }
}

/// A unit vector that depends on `seed` only.
pub(crate) fn vector(seed: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM)
        .map(|i| (((seed * 31 + i * 17) % 97) as f32) - 48.0)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// Row `i` of `scope`: id `id-{i}`, text `memory {i}`.
pub(crate) fn row(i: usize, scope: &str) -> (MemoryRecord, Vec<f32>) {
    (
        MemoryRecord {
            id: format!("id-{i}"),
            content: format!("memory {i}"),
            reasoning: None,
            tags: vec![],
            memory_type: "knowledge".into(),
            strength: 10,
            is_active: true,
            conversation_id: Some("c".into()),
            created_at: Some(Utc::now()),
            memory_scope: Some(scope.into()),
            scope_source: Some("conversation".into()),
            expires_at: None,
            last_recalled_at: None,
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        },
        vector(i),
    )
}

/// The `memories` table in `dir` with the default writer settings, created if missing.
pub(crate) async fn open(dir: &std::path::Path) -> Store {
    open_with(dir, WriterSettings::default()).await
}

/// The `memories` table in `dir`, created if missing (with `id` as its primary key).
pub(crate) async fn open_with(dir: &std::path::Path, settings: WriterSettings) -> Store {
    let db = DbLocation::dir(dir);
    let (conn, beside) = Store::connect(&db, super::DEFAULT_READ_CONSISTENCY)
        .await
        .expect("connect");
    let (table, created) = match conn.open_table("memories").execute().await {
        Ok(table) => (table, false),
        Err(lancedb::Error::TableNotFound { .. }) => {
            let table = conn
                .create_empty_table("memories", memories_schema(DIM))
                .execute()
                .await
                .expect("create the table");
            table
                .set_unenforced_primary_key([COL_ID])
                .await
                .expect("primary key");
            (table, true)
        }
        Err(e) => panic!("open the table: {e}"),
    };
    Store::attach(table, &db, beside, &model(), settings, created)
        .await
        .expect("attach")
}
