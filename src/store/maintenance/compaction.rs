//! Compaction: merging the small fragments that appends leave behind, then folding new rows
//! into the indexes. Only the small tail is merged (see [`maintain`]), so a growing table does
//! not have its big fragments rewritten again and again during a burst of writes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use lancedb::table::{CompactionOptions, OptimizeAction};
use lancedb::Table;

use super::MaintenanceReport;
use crate::store::commit::{make_durable, retry, WriterCounters, WriterSettings};
use crate::store::StoreError;

/// Compact small fragments, then fold unindexed rows into the existing indexes (retraining the
/// vector index when the table has outgrown it).
///
/// Lance merges every adjacent fragment smaller than `target_rows_per_fragment`. With the
/// default (1M rows) each compaction would rewrite the whole growing table; a target of
/// rows/16 (at least 1024) leaves the big fragments alone and merges only the small tail, so
/// each row is rewritten a logarithmic number of times as the table grows.
pub(super) async fn maintain(
    table: &Table,
    settings: &WriterSettings,
    counters: &WriterCounters,
    full: bool,
    trained: &AtomicUsize,
) -> Result<MaintenanceReport, StoreError> {
    let native = table
        .as_native()
        .ok_or_else(|| StoreError::Schema("only local tables are supported".into()))?;
    let before = native.count_fragments().await?;
    if before >= 2 {
        let rows = table.count_rows(None).await?;
        let target = if full {
            CompactionOptions::default().target_rows_per_fragment
        } else {
            tail_target(rows)
        };
        let started = Instant::now();
        let wall = std::time::SystemTime::now();
        retry(table, settings, counters, || async {
            table
                .optimize(OptimizeAction::Compact {
                    options: CompactionOptions {
                        target_rows_per_fragment: target,
                        // One core for compaction, the rest for requests.
                        num_threads: Some(1),
                        ..CompactionOptions::default()
                    },
                    remap_options: None,
                })
                .await?;
            Ok(())
        })
        .await?;
        counters.compactions.fetch_add(1, Ordering::Relaxed);
        make_durable(settings, counters, wall).await?;
        tracing::info!(
            fragments_before = before,
            target_rows = target,
            ms = started.elapsed().as_millis() as u64,
            "compacted"
        );
    }
    super::indexes::refresh_indexes(table, settings, counters, trained).await?;
    let after = native.count_fragments().await?;
    Ok(MaintenanceReport {
        fragments_before: before,
        fragments_after: after,
    })
}

/// Compaction target that merges only the small tail of a table of `rows` rows: rows/16, at
/// least 1024 (see [`maintain`]).
pub(super) fn tail_target(rows: usize) -> usize {
    (rows / 16).clamp(1024, 1024 * 1024)
}

/// Whether enough fragments piled up (from any process) to be worth a compaction.
pub(super) async fn others_piled_up(table: &Table, settings: &WriterSettings) -> bool {
    let fragments = match table.as_native() {
        Some(native) => native.count_fragments().await.unwrap_or(0),
        None => 0,
    };
    fragments >= (settings.compact_min_fragments / 8).max(2)
}
