//! Folding new rows into the full-text and vector indexes in tiers of segments, instead of
//! rewriting an index whole or piling up one segment per refresh.
//!
//! Lance's default refresh does one of two things, both bad under a burst of writes:
//! - a full-text index is merged into its newest segment, usually its only one, so every
//!   refresh (every second or two) decoded and re-encoded every posting list of the table: at
//!   70k rows a quarter of the service's CPU (the maintenance thread's posting-list builds in
//!   `perf`);
//! - a vector index gets a new delta segment per refresh, and Lance compacts only fragments
//!   covered by the same segments, so each refresh pinned its fragments apart: at 100k rows the
//!   table held 431 fragments, each pass found the fragment limit reached again and passes ran
//!   back to back.
//!
//! Here each refresh writes the new rows as a segment of their own and merges the newest
//! segments into it only while they are no more than twice the rows gathered, like a binary
//! counter: segments shrink from the oldest to the newest, there are a logarithmic number of
//! them, each row is rewritten a logarithmic number of times, and once segments merge their
//! fragments can be compacted together again. Lance searches every segment of an index (BM25
//! with corpus-wide statistics), so results do not depend on how the rows are split.

use std::collections::HashMap;

use lance::index::DatasetIndexExt;
use lancedb::index::{IndexConfig, IndexType};
use lancedb::table::{OptimizeAction, OptimizeOptions};
use lancedb::Table;

use crate::store::commit::{retry, WriterCounters, WriterSettings};
use crate::store::schema::COL_VECTOR;
use crate::store::StoreError;

/// How many of the newest segments (rows each, oldest first) to merge with `unindexed` new
/// rows: walking from the newest, a segment joins while the rows gathered so far are at least
/// half of it. 0 writes the new rows as a segment of their own.
pub(crate) fn segments_to_merge(segments: &[u64], unindexed: u64) -> usize {
    let mut gathered = unindexed;
    let mut merged = 0;
    for &rows in segments.iter().rev() {
        if gathered.saturating_mul(2) < rows {
            break;
        }
        gathered += rows;
        merged += 1;
    }
    merged
}

/// Whether an index is refreshed in tiers: the full-text indexes and the vector index (the
/// scalar indexes are small and merged into one segment by Lance's default refresh).
pub(crate) fn is_tiered(index: &IndexConfig) -> bool {
    index.index_type == IndexType::FTS || index.columns.iter().any(|c| c == COL_VECTOR)
}

/// One tiered index as its segments cover the table now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieredIndex {
    pub name: String,
    /// Rows each segment covers, oldest first (Lance's segment order, the order its merge
    /// takes the newest from).
    pub segments: Vec<u64>,
    /// Rows no segment covers yet.
    pub unindexed: u64,
}

/// The segments of every tiered index of `table`. Rows are counted by fragment (physical
/// rows, deleted ones included): the sizes only steer the merges. Lance never compacts
/// fragments of different segments together, so each fragment belongs to one segment at most.
/// The maintenance pass lists the indices itself ([`segments_of`]); the tests look here.
#[cfg(test)]
pub(crate) async fn tiered_indexes(table: &Table) -> Result<Vec<TieredIndex>, StoreError> {
    segments_of(table, table.list_indices().await?).await
}

/// The segments of the tiered indexes among `indices`, already listed.
async fn segments_of(
    table: &Table,
    indices: Vec<IndexConfig>,
) -> Result<Vec<TieredIndex>, StoreError> {
    let names: Vec<String> = indices
        .into_iter()
        .filter(is_tiered)
        .map(|i| i.name)
        .collect();
    let Some(wrapper) = table.dataset() else {
        return Ok(Vec::new());
    };
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let dataset = wrapper.get().await?.clone();
    let rows: HashMap<u32, u64> = dataset
        .manifest
        .fragments
        .iter()
        .map(|f| (f.id as u32, f.physical_rows.unwrap_or(0) as u64))
        .collect();
    let indices = dataset.load_indices().await?;
    let rows_of =
        |ids: &mut dyn Iterator<Item = u32>| -> u64 { ids.filter_map(|id| rows.get(&id)).sum() };
    Ok(names
        .into_iter()
        .map(|name| {
            let bitmaps: Vec<_> = indices
                .iter()
                .filter(|i| i.name == name)
                .filter_map(|i| i.fragment_bitmap.as_ref())
                .collect();
            let segments = bitmaps.iter().map(|b| rows_of(&mut b.iter())).collect();
            let unindexed = rows_of(
                &mut rows
                    .keys()
                    .copied()
                    .filter(|id| !bitmaps.iter().any(|b| b.contains(*id))),
            );
            TieredIndex {
                name,
                segments,
                unindexed,
            }
        })
        .collect())
}

/// Fold the unindexed rows into each tiered index among `indices` (the table's, as listed at
/// the start of the refresh) as [`segments_to_merge`] says.
pub(super) async fn refresh_tiered(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    indices: Vec<IndexConfig>,
) -> Result<(), StoreError> {
    for index in segments_of(table, indices).await? {
        let merge = segments_to_merge(&index.segments, index.unindexed);
        if index.unindexed == 0 && merge <= 1 {
            continue;
        }
        let options = OptimizeOptions::merge(merge).index_names(vec![index.name.clone()]);
        optimize_retrying(table, settings, counters, options).await?;
        tracing::debug!(
            index = %index.name,
            segments = index.segments.len(),
            merged = merge,
            new_rows = index.unindexed,
            "index refreshed in tiers"
        );
    }
    Ok(())
}

/// One index optimisation, retried on commit conflicts.
pub(super) async fn optimize_retrying(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    options: OptimizeOptions,
) -> Result<(), StoreError> {
    retry(table, settings, counters, || async {
        table
            .optimize(OptimizeAction::Index(options.clone()))
            .await?;
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{open, row};
    use crate::store::MemoryRecord;

    /// A refresh writes new rows into a full-text segment of their own instead of rewriting the
    /// whole index: the big first segment stays as it was through small refreshes, the segments
    /// stay few, and a keyword search still finds rows of every segment and rows not indexed yet.
    #[tokio::test]
    async fn fulltext_refreshes_leave_the_big_segment_alone_and_find_every_row() {
        use crate::store::{FulltextSearch, KeywordRequest, RowFilter};
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let table = store.table();
        let batch = |from: usize, n: usize| -> Vec<(MemoryRecord, Vec<f32>)> {
            (from..from + n)
                .map(|i| {
                    let (mut record, vector) = row(i, "public");
                    record.content = format!("note q{i:04}z");
                    (record, vector)
                })
                .collect()
        };
        store.append(batch(0, 400)).await.unwrap();
        store.writer().maintain().await.unwrap();
        let first = tiered_indexes(table).await.unwrap();
        assert!(!first.is_empty());
        for index in &first {
            assert_eq!(
                (index.segments.as_slice(), index.unindexed),
                (&[400][..], 0)
            );
        }
        let mut next = 400;
        for _ in 0..10 {
            store.append(batch(next, 20)).await.unwrap();
            next += 20;
            store.writer().maintain().await.unwrap();
            for index in tiered_indexes(table).await.unwrap() {
                assert_eq!(index.segments[0], 400, "{index:?}");
                assert_eq!(index.unindexed, 0, "{index:?}");
                assert!(index.segments.len() <= 5, "{index:?}");
                assert_eq!(index.segments.iter().sum::<u64>(), next as u64);
            }
        }
        // Five rows no refresh has seen.
        store.append(batch(next, 5)).await.unwrap();
        let search = FulltextSearch::new(table.clone());
        for i in [7, 399, 455, 599, next + 2] {
            let hits = search
                .matching(&KeywordRequest {
                    text: format!("q{i:04}z"),
                    rows: RowFilter::ALL,
                    k: 1,
                })
                .await
                .unwrap();
            let found: Vec<&str> = hits.iter().map(|h| h.record.id.as_str()).collect();
            assert_eq!(found, [format!("id-{i}")], "row {i}");
        }
        store.shutdown().await;
    }

    #[test]
    fn new_rows_become_a_segment_until_they_match_the_newest() {
        assert_eq!(segments_to_merge(&[], 300), 0);
        assert_eq!(segments_to_merge(&[50_000], 300), 0);
        // Half of the newest or more: merged, and the gathered rows walk on.
        assert_eq!(segments_to_merge(&[50_000, 300], 300), 1);
        assert_eq!(segments_to_merge(&[50_000, 900, 300], 300), 2);
        assert_eq!(segments_to_merge(&[1_000, 900, 300], 300), 3);
        assert_eq!(segments_to_merge(&[50_000, 900], 300), 0);
        assert_eq!(segments_to_merge(&[50_000, 900], 0), 0);
    }

    #[test]
    fn a_burst_keeps_few_segments_and_rewrites_each_row_a_few_times() {
        // 100k rows arriving 300 at a time, one refresh each, as in a burst.
        let mut segments: Vec<u64> = Vec::new();
        let mut rewritten = 0u64;
        let mut most = 0;
        for _ in 0..334 {
            let merge = segments_to_merge(&segments, 300);
            let kept = segments.len() - merge;
            let merged: u64 = segments.drain(kept..).sum::<u64>() + 300;
            rewritten += merged;
            segments.push(merged);
            most = most.max(segments.len());
            assert!(segments.windows(2).all(|w| w[0] > w[1] * 2), "{segments:?}");
        }
        let rows = 334 * 300;
        assert!(most <= 10, "{most} segments");
        // A merge into one segment each time would rewrite ~rows²/600 = 16.7M rows.
        assert!(
            rewritten < rows * 12,
            "{rewritten} rows rewritten for {rows}"
        );
    }
}
