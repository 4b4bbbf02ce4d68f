//! Every index of the table, built and kept current here: the scalar indexes recall's prefilter
//! and the backfill use, the full-text indexes of keyword recall, and the vector index, which is
//! built once the table outgrows flat search and then refreshed or retrained.
//!
//! Retraining: Lance's incremental refresh files new rows into the IVF partitions trained on
//! the rows the index was built from; once the table has grown well past those, the centroids
//! no longer describe the data and the partitions grow uneven. So the vector index is retrained
//! (new centroids, one merged index) when the table has grown by [`RETRAIN_GROWTH`] since its
//! last training, and refreshed incrementally otherwise.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use lancedb::index::scalar::{BTreeIndexBuilder, BitmapIndexBuilder};
use lancedb::index::vector::IvfHnswSqIndexBuilder;
use lancedb::index::{Index, IndexType};
use lancedb::table::OptimizeOptions;
use lancedb::{DistanceType, Table};

use super::index_tiers::{is_tiered, optimize_retrying};
use crate::store::commit::{WriterCounters, WriterSettings};
use crate::store::fulltext::{fulltext_params, has_fulltext, FULLTEXT_COLUMNS};
use crate::store::schema::{
    COL_EXPIRES_AT, COL_ID, COL_MEMORY_SCOPE, COL_VECTOR, COL_VECTOR_NEXT, META_FULLTEXT_PARAMS,
};
use crate::store::search::{has_vector_index, LanceSearch};
use crate::store::StoreError;

/// Growth since the last training that makes the next refresh a retrain.
pub const RETRAIN_GROWTH: f64 = 0.5;

/// Whether a vector index trained on `trained` rows should be retrained at `rows` rows.
pub(crate) fn retrain_due(trained: usize, rows: usize) -> bool {
    trained > 0 && rows as f64 >= trained as f64 * (1.0 + RETRAIN_GROWTH)
}

/// Retrain the vector index if due, then fold unindexed rows into every index. `trained`
/// holds the rows the vector index was last trained on (0: not known yet; a process learns
/// it from the index's indexed rows at its first refresh, which counts rows added by earlier
/// refreshes too, so after a restart a retrain comes later rather than sooner).
pub(crate) async fn refresh_indexes(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    trained: &AtomicUsize,
) -> Result<(), StoreError> {
    let indices = table.list_indices().await?;
    if indices.is_empty() {
        return Ok(());
    }
    let vector = indices
        .iter()
        .find(|i| i.columns.iter().any(|c| c == COL_VECTOR))
        .map(|i| i.name.clone());
    if let Some(name) = vector {
        if let Some(stats) = table.index_stats(&name).await? {
            let rows = stats.num_indexed_rows + stats.num_unindexed_rows;
            if trained.load(Ordering::Relaxed) == 0 {
                trained.store(stats.num_indexed_rows, Ordering::Relaxed);
            }
            let last = trained.load(Ordering::Relaxed);
            if retrain_due(last, rows) {
                let started = Instant::now();
                let options = OptimizeOptions::retrain().index_names(vec![name]);
                let result = optimize_retrying(table, settings, counters, options).await;
                match result {
                    Ok(()) => {
                        trained.store(rows, Ordering::Relaxed);
                        counters.retrains.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            rows,
                            trained_on = last,
                            ms = started.elapsed().as_millis() as u64,
                            "vector index retrained"
                        );
                    }
                    // The incremental refresh below still folds the new rows in.
                    Err(e) => tracing::warn!(error = %e, "vector index retrain failed"),
                }
            }
        }
    }
    // The full-text and vector indexes are refreshed in tiers of segments (see `index_tiers`).
    let (tiered, others): (Vec<_>, Vec<_>) = indices.into_iter().partition(is_tiered);
    if !others.is_empty() {
        let names = others.into_iter().map(|i| i.name).collect();
        let options = OptimizeOptions::default().index_names(names);
        optimize_retrying(table, settings, counters, options).await?;
    }
    super::index_tiers::refresh_tiered(table, settings, counters, tiered).await
}

/// Rebuild the `memory_scope` bitmap from scratch (see [`crate::store::Store::rebuild_scope_index`]).
pub(crate) async fn rebuild_scope_index(table: &Table) -> Result<(), StoreError> {
    table
        .create_index(
            &[COL_MEMORY_SCOPE],
            Index::Bitmap(BitmapIndexBuilder::default()),
        )
        .replace(true)
        .execute()
        .await?;
    Ok(())
}

/// The bitmap index on `memory_scope` serves the recall prefilter (`=`, `IN`, `IS NULL`), the
/// BTree on `expires_at` its expiry part; the BTree on `id` serves lookups by id and the
/// backfill's column-patching merge.
pub(crate) async fn ensure_scalar_indexes(table: &Table) -> Result<(), StoreError> {
    let indices = table.list_indices().await?;
    if !indices
        .iter()
        .any(|i| i.columns.iter().any(|c| c == COL_ID))
    {
        table
            .create_index(&[COL_ID], Index::BTree(BTreeIndexBuilder::default()))
            .execute()
            .await?;
        tracing::info!(column = COL_ID, "created btree index");
    }
    let has_scope = indices.iter().any(|i| {
        i.columns.iter().any(|c| c == COL_MEMORY_SCOPE) && i.index_type == IndexType::Bitmap
    });
    let schema = table.schema().await?;
    if !has_scope && schema.field_with_name(COL_MEMORY_SCOPE).is_ok() {
        table
            .create_index(
                &[COL_MEMORY_SCOPE],
                Index::Bitmap(BitmapIndexBuilder::default()),
            )
            .execute()
            .await?;
        tracing::info!(column = COL_MEMORY_SCOPE, "created bitmap index");
    }
    // Recall's prefilter also says `expires_at IS NULL OR expires_at > now`: served by an index
    // instead of a column scan per query.
    let has_expiry = indices
        .iter()
        .any(|i| i.columns.iter().any(|c| c == COL_EXPIRES_AT));
    if !has_expiry && schema.field_with_name(COL_EXPIRES_AT).is_ok() {
        table
            .create_index(
                &[COL_EXPIRES_AT],
                Index::BTree(BTreeIndexBuilder::default()),
            )
            .execute()
            .await?;
        tracing::info!(column = COL_EXPIRES_AT, "created btree index");
    }
    ensure_fulltext_indexes(table).await
}

/// Create the full-text index of each column that lacks one, and rebuild both when the table
/// records other analyzer parameters than [`fulltext_params`] (or none: built before they
/// were recorded). Rows appended later are searched without the index (Lance tokenizes them
/// at query time) until maintenance folds them in. The old index serves until the new one
/// commits; appends commit beside the build.
pub async fn ensure_fulltext_indexes(table: &Table) -> Result<(), StoreError> {
    let indices = table.list_indices().await?;
    let schema = table.schema().await?;
    let wanted = fulltext_fingerprint()?;
    let recorded = recorded_fulltext_params(table).await?;
    let stale = recorded.as_deref() != Some(wanted.as_str());
    let mut built = false;
    for column in FULLTEXT_COLUMNS {
        if schema.field_with_name(column).is_err() {
            continue;
        }
        let exists = has_fulltext(&indices, column);
        if exists && !stale {
            continue;
        }
        let started = Instant::now();
        if exists {
            tracing::info!(
                column,
                "full-text index built with other parameters; rebuilding"
            );
        }
        table
            .create_index(&[column], Index::FTS(fulltext_params()))
            .replace(true)
            .execute()
            .await?;
        built = true;
        tracing::info!(
            column,
            secs = started.elapsed().as_secs_f64(),
            "built full-text index"
        );
    }
    if stale && built {
        let entries = [(META_FULLTEXT_PARAMS.to_string(), wanted.clone())];
        crate::store::update_config_settled(table, &entries, |config| {
            Ok(config.get(META_FULLTEXT_PARAMS) == Some(&wanted))
        })
        .await?;
    }
    Ok(())
}

/// [`fulltext_params`] as Lance serializes them: what the table's config records.
fn fulltext_fingerprint() -> Result<String, StoreError> {
    fulltext_params()
        .to_training_json()
        .map(|v| v.to_string())
        .map_err(|e| StoreError::Schema(format!("full-text parameters: {e}")))
}

/// The analyzer parameters the table's full-text indexes were built with, if recorded.
pub(crate) async fn recorded_fulltext_params(table: &Table) -> Result<Option<String>, StoreError> {
    let native = table
        .as_native()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    Ok(native
        .manifest()
        .await?
        .config
        .get(META_FULLTEXT_PARAMS)
        .cloned())
}

/// The index must use the query's distance type: a mismatch silently falls back to flat.
pub async fn build_vector_index(table: &Table) -> Result<(), StoreError> {
    table
        .create_index(
            &[COL_VECTOR],
            Index::IvfHnswSq(IvfHnswSqIndexBuilder::default().distance_type(DistanceType::Cosine)),
        )
        .replace(true)
        .execute()
        .await?;
    Ok(())
}

/// Row-count checks for the index build are at least this far apart.
const INDEX_CHECK_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

/// The vector index's life on a search handle: built once the table outgrows flat search,
/// re-read after a re-embed's switch, or built on demand.
impl LanceSearch {
    /// Build the cosine vector index if the table has outgrown flat search. Returns at once;
    /// the build runs on its own task (Lance lets appends commit concurrently with it). The
    /// row count is read at most once a second.
    pub(crate) async fn maybe_build_index(&self) -> Result<bool, StoreError> {
        if self.is_indexed()
            || self.building.load(Ordering::Relaxed)
            || !self.maintainer.load(Ordering::Acquire)
        {
            return Ok(false);
        }
        {
            let mut last = self.last_check.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < INDEX_CHECK_SPACING) {
                return Ok(false);
            }
            *last = Some(Instant::now());
        }
        let rows = self.table.count_rows(None).await?;
        if rows < self.index_threshold_rows {
            return Ok(false);
        }
        // During a re-embed `vector` is about to go (and may hold NULLs): index after the switch.
        if self
            .table
            .schema()
            .await?
            .field_with_name(COL_VECTOR_NEXT)
            .is_ok()
        {
            return Ok(false);
        }
        if self.building.swap(true, Ordering::AcqRel) {
            return Ok(false);
        }
        let table = self.table.clone();
        let indexed = self.indexed.clone();
        let building = self.building.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            match build_vector_index(&table).await {
                Ok(()) => {
                    indexed.store(true, Ordering::Release);
                    tracing::info!(
                        rows,
                        ms = started.elapsed().as_millis() as u64,
                        "vector index built"
                    );
                }
                Err(e) => {
                    tracing::error!(error = %e, "vector index build failed; staying on flat search")
                }
            }
            // The build read every vector and trained on them: at 100k rows about 150 MB freed
            // at once, which glibc otherwise keeps resident.
            crate::store::heap::release_freed_memory();
            building.store(false, Ordering::Release);
        });
        Ok(true)
    }

    /// Read again whether a vector index exists: a re-embed's switch drops the old model's,
    /// and the maintenance then builds one on the new vectors when the table is large enough.
    pub(crate) async fn refresh_indexed(&self) -> Result<bool, StoreError> {
        let indexed = has_vector_index(&self.table).await?;
        self.indexed.store(indexed, Ordering::Release);
        Ok(indexed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{open, row};

    #[tokio::test]
    async fn the_vector_index_is_retrained_once_the_table_grew_by_half() {
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        store
            .append((0..1000).map(|i| row(i, "public")).collect())
            .await
            .unwrap();
        build_vector_index(store.table()).await.unwrap();
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

    /// A table whose full-text indexes were built with other analyzer parameters (an older build's
    /// word segmenter) gets them rebuilt with the current ones: Lance analyzes a query with its
    /// index's parameters, so an index left as it was would keep answering the old way. Once
    /// rebuilt, the table records the parameters and the next check builds nothing.
    #[tokio::test]
    async fn a_fulltext_index_built_with_other_parameters_is_rebuilt() {
        use crate::store::fulltext::FULLTEXT_COLUMNS;
        use crate::store::schema::META_FULLTEXT_PARAMS;
        use crate::store::{FulltextSearch, KeywordRequest, RowFilter};
        use lancedb::index::scalar::FtsIndexBuilder;
        use lancedb::index::{Index, IndexType};
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let table = store.table();
        let mut rows = Vec::new();
        for (i, text) in ["外婆喜欢兰花", "爸爸周末去钓鱼"].into_iter().enumerate() {
            let (mut record, vector) = row(i, "public");
            record.content = text.into();
            rows.push((record, vector));
        }
        store.append(rows).await.unwrap();
        // What an older build left: ICU word segmentation, and its parameters recorded.
        let icu = FtsIndexBuilder::default().base_tokenizer("icu".into());
        for column in FULLTEXT_COLUMNS {
            table
                .create_index(&[column], Index::FTS(icu.clone()))
                .replace(true)
                .execute()
                .await
                .unwrap();
        }
        let old = icu.to_training_json().unwrap().to_string();
        table
            .as_native()
            .unwrap()
            .update_config([(META_FULLTEXT_PARAMS.to_string(), old.clone())])
            .await
            .unwrap();
        let search = FulltextSearch::new(table.clone());
        let orchid = KeywordRequest {
            text: "兰".into(),
            rows: RowFilter::ALL,
            k: 10,
        };
        // ICU holds 兰花 as one word: one character of it matches nothing.
        assert!(search.matching(&orchid).await.unwrap().is_empty());

        ensure_fulltext_indexes(table).await.unwrap();
        let hits = search.matching(&orchid).await.unwrap();
        let found: Vec<&str> = hits.iter().map(|h| h.record.content.as_str()).collect();
        assert_eq!(found, ["外婆喜欢兰花"]);
        let recorded = recorded_fulltext_params(table).await.unwrap().unwrap();
        assert_ne!(recorded, old);
        assert!(recorded.contains("ngram"), "{recorded}");

        let uuids = || async {
            let mut u: Vec<Option<String>> = table
                .list_indices()
                .await
                .unwrap()
                .into_iter()
                .filter(|i| i.index_type == IndexType::FTS)
                .map(|i| i.index_uuid)
                .collect();
            u.sort();
            u
        };
        let built = uuids().await;
        assert_eq!(built.len(), FULLTEXT_COLUMNS.len());
        ensure_fulltext_indexes(table).await.unwrap();
        assert_eq!(uuids().await, built, "current parameters: nothing rebuilt");
        store.shutdown().await;
    }

    #[test]
    fn retrains_once_the_table_grew_by_half() {
        assert!(!retrain_due(0, 1_000_000), "unknown training size");
        assert!(!retrain_due(100_000, 149_999));
        assert!(retrain_due(100_000, 150_000));
    }

    /// A refresh of the vector index used to add a delta segment each time, and Lance compacts only
    /// fragments covered by the same segments, so every refresh left one more fragment for good
    /// (431 at 100k rows in `make bench-burst`). In tiers the segments merge and so do their
    /// fragments, and every row stays indexed.
    #[tokio::test]
    async fn refreshes_of_a_vector_index_keep_its_segments_and_the_fragments_few() {
        use crate::store::maintenance::index_tiers::tiered_indexes;
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let table = store.table().clone();
        let rows: Vec<_> = (0..3000).map(|i| row(i, "public")).collect();
        store.append(rows).await.unwrap();
        store.writer().maintain().await.unwrap();
        build_vector_index(&table).await.unwrap();
        let mut next = 3000;
        for _ in 0..12 {
            for _ in 0..10 {
                let rows: Vec<_> = (next..next + 5).map(|i| row(i, "public")).collect();
                next += 5;
                store.append(rows).await.unwrap();
            }
            store.writer().maintain().await.unwrap();
            let fragments = table.as_native().unwrap().count_fragments().await.unwrap();
            assert!(fragments <= 6, "{fragments} fragments");
            for index in tiered_indexes(&table).await.unwrap() {
                assert!(index.segments.len() <= 5, "{index:?}");
                assert_eq!(index.unindexed, 0, "{index:?}");
            }
        }
        let stats = table.index_stats("vector_idx").await.unwrap().unwrap();
        assert_eq!(
            (stats.num_indexed_rows, stats.num_unindexed_rows),
            (next, 0)
        );
        store.shutdown().await;
    }
}
