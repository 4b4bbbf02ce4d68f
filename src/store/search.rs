//! "Find the k nearest rows this conversation may see" behind one trait, so the search
//! strategy (flat, vector index, refine) can change without touching callers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::TryStreamExt;
use lancedb::index::vector::IvfHnswSqIndexBuilder;
use lancedb::index::{Index, IndexType};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::{DistanceType, Table};

use super::filter::RowFilter;
use super::record::{distances, from_batch, MemoryRecord};
use super::schema::{COL_VECTOR, RECORD_COLUMNS};
use super::StoreError;

/// One search: the query vector, which rows it may return, and how many.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub vector: Vec<f32>,
    pub rows: RowFilter,
    pub k: usize,
}

/// A row with its cosine distance to the query.
#[derive(Debug, Clone)]
pub struct Hit {
    pub record: MemoryRecord,
    pub distance: f32,
}

impl Hit {
    /// Similarity as the design defines it: 1 - cosine distance.
    pub fn similarity(&self) -> f32 {
        1.0 - self.distance
    }
}

/// The k nearest rows that satisfy the predicate. Implementations must apply the predicate
/// before ranking (prefilter), so a selective scope still yields `k` rows when they exist.
pub trait NearestVisible: Send + Sync {
    fn nearest<'a>(&'a self, req: &'a SearchRequest)
        -> BoxFuture<'a, Result<Vec<Hit>, StoreError>>;
}

/// LanceDB search: an exact (flat) prefiltered scan while the table is small; above
/// `index_threshold_rows` a cosine IVF_HNSW_SQ index is built in the background and queries
/// use it with a refine step (exact re-ranking of `refine_factor * k` candidates). Rows added
/// after the index was built are still searched (flat) until maintenance folds them in.
pub struct LanceSearch {
    table: Table,
    index_threshold_rows: usize,
    refine_factor: u32,
    indexed: Arc<AtomicBool>,
    building: Arc<AtomicBool>,
    /// Index builds run only in the process holding the maintenance lease.
    maintainer: Arc<AtomicBool>,
    /// When the row count was last checked: a check is a table query, and every remember asks.
    last_check: std::sync::Mutex<Option<Instant>>,
}

/// Row-count checks for the index build are at least this far apart.
const INDEX_CHECK_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

impl LanceSearch {
    pub async fn new(
        table: Table,
        index_threshold_rows: usize,
        refine_factor: u32,
    ) -> Result<Self, StoreError> {
        let indexed = has_vector_index(&table).await?;
        Ok(LanceSearch {
            table,
            index_threshold_rows,
            refine_factor,
            indexed: Arc::new(AtomicBool::new(indexed)),
            building: Arc::new(AtomicBool::new(false)),
            maintainer: Arc::new(AtomicBool::new(true)),
            last_check: std::sync::Mutex::new(None),
        })
    }

    /// Build indexes only while `maintainer` is set (see [`super::Store::maintainer`]).
    pub fn with_maintainer(mut self, maintainer: Arc<AtomicBool>) -> Self {
        self.maintainer = maintainer;
        self
    }

    /// Whether queries currently go through the vector index.
    pub fn is_indexed(&self) -> bool {
        self.indexed.load(Ordering::Relaxed)
    }

    /// Build the cosine vector index if the table has outgrown flat search. Returns at once;
    /// the build runs on its own task (Lance lets appends commit concurrently with it). The
    /// row count is read at most once a second.
    pub async fn maybe_build_index(&self) -> Result<bool, StoreError> {
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
            .field_with_name(super::schema::COL_VECTOR_NEXT)
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
            building.store(false, Ordering::Release);
        });
        Ok(true)
    }

    /// Read again whether a vector index exists: a re-embed's switch drops the old model's,
    /// and the maintenance then builds one on the new vectors when the table is large enough.
    pub async fn refresh_indexed(&self) -> Result<bool, StoreError> {
        let indexed = has_vector_index(&self.table).await?;
        self.indexed.store(indexed, Ordering::Release);
        Ok(indexed)
    }

    /// Build the index now and wait for it (benches, CLI).
    pub async fn build_index_now(&self) -> Result<(), StoreError> {
        build_vector_index(&self.table).await?;
        self.indexed.store(true, Ordering::Release);
        Ok(())
    }
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

pub async fn has_vector_index(table: &Table) -> Result<bool, StoreError> {
    Ok(table.list_indices().await?.iter().any(|i| {
        i.columns.iter().any(|c| c == COL_VECTOR)
            && matches!(
                i.index_type,
                IndexType::IvfHnswSq
                    | IndexType::IvfHnswPq
                    | IndexType::IvfHnswFlat
                    | IndexType::IvfPq
                    | IndexType::IvfSq
                    | IndexType::IvfFlat
                    | IndexType::IvfRq
            )
    }))
}

impl NearestVisible for LanceSearch {
    fn nearest<'a>(
        &'a self,
        req: &'a SearchRequest,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(super::commit::read_retrying(&self.table, || {
            self.search_once(req)
        }))
    }
}

impl LanceSearch {
    async fn search_once(&self, req: &SearchRequest) -> Result<Vec<Hit>, StoreError> {
        let mut query = self
            .table
            .query()
            .nearest_to(req.vector.as_slice())?
            .distance_type(DistanceType::Cosine)
            .select(Select::columns(&RECORD_COLUMNS))
            .limit(req.k.max(1));
        if self.is_indexed() && self.refine_factor > 0 {
            query = query.refine_factor(self.refine_factor);
        }
        // Prefilter is lancedb's default for vector queries; we never call postfilter().
        if let Some(p) = req.rows.to_sql() {
            query = query.only_if(p);
        }
        let batches: Vec<_> = query.execute().await?.try_collect().await?;
        let mut hits = Vec::with_capacity(req.k);
        for batch in &batches {
            for (record, d) in from_batch(batch).into_iter().zip(distances(batch)) {
                hits.push(Hit {
                    record,
                    distance: d.unwrap_or(f32::MAX),
                });
            }
        }
        hits.sort_by(|a, b| a.distance.total_cmp(&b.distance));
        hits.truncate(req.k);
        Ok(hits)
    }
}
