//! The store against a real LanceDB directory, with synthetic vectors (no model needed):
//! prefilter completeness, group commit, compaction, model/dimension checks.

use chrono::Utc;
use scopemem::store::{
    LanceSearch, MemoryRecord, ModelInfo, NearestVisible, SearchRequest, Store, StoreError,
    WriterSettings,
};

const DIM: usize = 8;

fn model() -> ModelInfo {
    ModelInfo {
        id: "test-model".into(),
        dimension: DIM,
    }
}

fn vector(seed: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM)
        .map(|i| (((seed * 31 + i * 17) % 97) as f32) - 48.0)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn row(i: usize, scope: &str) -> (MemoryRecord, Vec<f32>) {
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
        },
        vector(i),
    )
}

async fn open(dir: &std::path::Path) -> Store {
    scopemem::migrate::open_store(dir, "memories", &model(), WriterSettings::default())
        .await
        .unwrap()
        .0
}

#[tokio::test]
async fn prefilter_returns_k_rows_of_a_rare_scope() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    // 500 rows of a common scope, 12 of a rare one: a post-filter over the top k would
    // return almost none of the rare rows.
    let mut rows: Vec<_> = (0..500).map(|i| row(i, "common")).collect();
    rows.extend((500..512).map(|i| row(i, "rare")));
    store.append(rows).await.unwrap();
    let search = LanceSearch::new(store.table().clone(), usize::MAX, 0)
        .await
        .unwrap();
    let hits = search
        .nearest(&SearchRequest {
            vector: vector(3),
            predicate: Some("memory_scope = 'rare'".into()),
            rows: None,
            k: 10,
        })
        .await
        .unwrap();
    assert_eq!(hits.len(), 10);
    assert!(hits
        .iter()
        .all(|h| h.record.memory_scope.as_deref() == Some("rare")));
    assert!(
        hits.windows(2).all(|w| w[0].distance <= w[1].distance),
        "sorted by distance"
    );
    // The plan uses the scope bitmap index inside the scan, not a filter after it.
    let plan = store
        .table()
        .query()
        .nearest_to(vector(3).as_slice())
        .unwrap()
        .only_if("memory_scope = 'rare'")
        .explain_plan(true)
        .await
        .unwrap();
    assert!(!plan.contains("postfilter"), "{plan}");
}

use lancedb::query::{ExecutableQuery, QueryBase};

#[tokio::test]
async fn concurrent_appends_are_group_committed_and_compaction_folds_fragments() {
    let dir = tempfile::tempdir().unwrap();
    let settings = WriterSettings {
        compact_min_fragments: usize::MAX,
        ..WriterSettings::default()
    };
    let (store, _) = scopemem::migrate::open_store(dir.path(), "memories", &model(), settings)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            s.append(vec![row(i, "public")]).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(store.count(None).await.unwrap(), 200);
    let commits = store
        .writer()
        .counters()
        .commits
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        commits < 200,
        "200 concurrent appends must share commits, got {commits}"
    );
    let before = store.stats().await.unwrap().fragments;
    assert_eq!(before as u64, commits);
    let report = store.writer().maintain().await.unwrap();
    assert!(
        report.fragments_after < report.fragments_before || before < 2,
        "{report:?}"
    );
    assert_eq!(
        store.count(None).await.unwrap(),
        200,
        "compaction loses nothing"
    );
}

#[tokio::test]
async fn reopening_with_another_dimension_or_model_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    store.append(vec![row(1, "public")]).await.unwrap();
    store.shutdown().await;
    let err = scopemem::migrate::open_store(
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
    let err = scopemem::migrate::open_store(
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

#[tokio::test]
async fn the_scope_column_has_a_bitmap_index_and_id_is_the_primary_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    store.append(vec![row(1, "public")]).await.unwrap();
    let indices = store.table().list_indices().await.unwrap();
    assert!(indices
        .iter()
        .any(|i| i.columns == vec!["memory_scope".to_string()]
            && i.index_type == lancedb::index::IndexType::Bitmap));
    let schema = store.table().schema().await.unwrap();
    assert!(schema
        .field_with_name("memory_scope")
        .unwrap()
        .is_nullable());
}

#[tokio::test]
async fn sequential_single_appends_stay_under_the_fragment_cap() {
    let dir = tempfile::tempdir().unwrap();
    let settings = WriterSettings {
        compact_min_fragments: 16,
        ..WriterSettings::default()
    };
    let (store, _) = scopemem::migrate::open_store(dir.path(), "memories", &model(), settings)
        .await
        .unwrap();
    let mut most = 0;
    for i in 0..100 {
        store.append(vec![row(i, "public")]).await.unwrap();
        // Reaching the cap starts a compaction beside the writer; appends do not wait for it,
        // so a few more fragments can land while it runs, but never a pile.
        let fragments = store.stats().await.unwrap().fragments;
        most = most.max(fragments);
        assert!(
            fragments <= 32,
            "after {} appends: {fragments} fragments",
            i + 1
        );
    }
    println!("most fragments seen: {most}");
    assert_eq!(store.count(None).await.unwrap(), 100);
    let compactions = store
        .writer()
        .counters()
        .compactions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(compactions >= 6, "{compactions}");
    let stats = store.stats().await.unwrap();
    assert_eq!(
        stats.rows_by_scope.get("public"),
        Some(&100),
        "nothing lost or duplicated"
    );
    // Compaction must not leave the scope prefilter unindexed.
    store.writer().maintain().await.unwrap();
    let idx = store
        .table()
        .index_stats("memory_scope_idx")
        .await
        .unwrap()
        .expect("scope index");
    assert_eq!(idx.num_unindexed_rows, 0, "{idx:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_inserts_of_the_same_ids_from_two_connections_leave_one_row_each() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).await); // create the table (with its primary key)
    let (a, b) = (open(dir.path()).await, open(dir.path()).await);
    let rows: Vec<_> = (0..40).map(|i| row(i, "public")).collect();
    let (ra, rb) = tokio::join!(
        a.writer().insert_missing(rows.clone()),
        b.writer().insert_missing(rows.clone())
    );
    let inserted = ra.unwrap() + rb.unwrap();
    assert_eq!(inserted, 40, "each id inserted by exactly one of the two");
    // Again, after both committed: nothing to insert.
    assert_eq!(a.writer().insert_missing(rows.clone()).await.unwrap(), 0);
    let c = open(dir.path()).await;
    let ids = c.ids_where("id IS NOT NULL").await.unwrap();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (40, 40));
}

#[tokio::test]
async fn the_vector_index_is_retrained_once_the_table_grew_by_half() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path()).await;
    store
        .append((0..1000).map(|i| row(i, "public")).collect())
        .await
        .unwrap();
    scopemem::store::search::build_vector_index(store.table())
        .await
        .unwrap();
    let counters = store.writer().counters();
    // Growth under half: refreshed incrementally.
    store
        .append((1000..1400).map(|i| row(i, "public")).collect())
        .await
        .unwrap();
    store.writer().maintain().await.unwrap();
    assert_eq!(counters.retrains.load(Ordering::Relaxed), 0);
    // Half again on the 1000 rows it was trained on: retrained, and every row indexed.
    store
        .append((1400..1600).map(|i| row(i, "public")).collect())
        .await
        .unwrap();
    store.writer().maintain().await.unwrap();
    assert_eq!(counters.retrains.load(Ordering::Relaxed), 1);
    let states = store.index_states().await.unwrap();
    let vector = states
        .iter()
        .find(|s| s.columns.iter().any(|c| c == "vector"))
        .expect("vector index");
    assert_eq!(vector.indexed_rows, Some(1600), "{vector:?}");
    assert_eq!(vector.unindexed_rows, Some(0), "{vector:?}");
    // The next refresh is incremental again.
    store
        .append((1600..1700).map(|i| row(i, "public")).collect())
        .await
        .unwrap();
    store.writer().maintain().await.unwrap();
    assert_eq!(counters.retrains.load(Ordering::Relaxed), 1);
}
