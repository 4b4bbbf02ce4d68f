//! Refreshing the indexes after writes, and retraining the vector index when the table has
//! outgrown it. Lance's incremental refresh files new rows into the IVF partitions trained on
//! the rows the index was built from; once the table has grown well past those, the centroids
//! no longer describe the data and the partitions grow uneven. So the vector index is retrained
//! (new centroids, one merged index) when the table has grown by [`RETRAIN_GROWTH`] since its
//! last training, and refreshed incrementally otherwise.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use lancedb::table::{OptimizeAction, OptimizeOptions};
use lancedb::Table;

use super::commit::{retry, WriterCounters, WriterSettings};
use super::schema::COL_VECTOR;
use super::StoreError;

/// Growth since the last training that makes the next refresh a retrain.
pub const RETRAIN_GROWTH: f64 = 0.5;

/// Whether a vector index trained on `trained` rows should be retrained at `rows` rows.
pub fn retrain_due(trained: usize, rows: usize) -> bool {
    trained > 0 && rows as f64 >= trained as f64 * (1.0 + RETRAIN_GROWTH)
}

/// Retrain the vector index if due, then fold unindexed rows into every index. `trained`
/// holds the rows the vector index was last trained on (0: not known yet; a process learns
/// it from the index's indexed rows at its first refresh, which counts rows added by earlier
/// refreshes too, so after a restart a retrain comes later rather than sooner).
pub(super) async fn refresh_indexes(
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
                let result = retry(table, settings, counters, || async {
                    table
                        .optimize(OptimizeAction::Index(options.clone()))
                        .await?;
                    Ok(())
                })
                .await;
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
    retry(table, settings, counters, || async {
        table
            .optimize(OptimizeAction::Index(OptimizeOptions::default()))
            .await?;
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrains_once_the_table_grew_by_half() {
        assert!(!retrain_due(0, 1_000_000), "unknown training size");
        assert!(!retrain_due(100_000, 149_999));
        assert!(retrain_due(100_000, 150_000));
    }
}
