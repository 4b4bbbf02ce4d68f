//! "Find the k nearest rows this conversation may see" behind one trait, so the search
//! strategy (flat, vector index, refine) can change without touching callers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::TryStreamExt;
use lancedb::index::IndexType;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::{DistanceType, Table};

use super::filter::RowFilter;
use super::record::{distances, from_batch, MemoryRecord};
use super::schema::{COL_VECTOR, RECORD_COLUMNS};
use super::StoreError;
use crate::embed::{Script, ScriptRescale};

/// One search: the query vector, which rows it may return, how many, and how rows of the
/// query's other script are put on its scale (`None`: raw similarity for every row).
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub vector: Vec<f32>,
    pub rows: RowFilter,
    pub k: usize,
    pub rescale: Option<ScriptRescale>,
}

/// A row with its cosine distance to the query (for a row the request rescaled, 1 minus its
/// rescaled similarity).
#[derive(Debug, Clone)]
pub struct Hit {
    pub record: MemoryRecord,
    pub distance: f32,
    /// The row's vector, unit length, when the search read it (recall compares hits with it
    /// to drop one fact said twice, `memory::distinct`).
    pub vector: Option<Vec<f32>>,
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
    pub(in crate::store) table: Table,
    pub(in crate::store) index_threshold_rows: usize,
    refine_factor: u32,
    pub(in crate::store) indexed: Arc<AtomicBool>,
    pub(in crate::store) building: Arc<AtomicBool>,
    /// Index builds run only in the process holding the maintenance lease.
    pub(in crate::store) maintainer: Arc<AtomicBool>,
    /// When the row count was last checked: a check is a table query, and every remember asks.
    pub(in crate::store) last_check: std::sync::Mutex<Option<Instant>>,
}

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
    pub(crate) fn with_maintainer(mut self, maintainer: Arc<AtomicBool>) -> Self {
        self.maintainer = maintainer;
        self
    }

    /// Whether queries currently go through the vector index.
    pub fn is_indexed(&self) -> bool {
        self.indexed.load(Ordering::Relaxed)
    }
}

/// Whether the table has a vector index of any IVF kind (queries then go through it).
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

/// The record columns and the vector.
fn with_vector() -> Vec<&'static str> {
    let mut columns = RECORD_COLUMNS.to_vec();
    columns.push(super::schema::COL_VECTOR);
    columns
}

/// `v` scaled to unit length; `None` for an empty or zero vector.
fn unit(v: &[f32]) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    (norm > 0.0).then(|| v.iter().map(|x| x / norm).collect())
}

/// How many raw neighbours LanceDB returns for `k` when rows are rescaled after the search: the
/// other script's best rows sit behind many of the query's own, and only the resident scan
/// rescales every row (LanceDB answers while the snapshot loads, or beside its bounds).
fn rescaled_pool(k: usize) -> usize {
    (k * 8).max(k + 64)
}

impl LanceSearch {
    async fn search_once(&self, req: &SearchRequest) -> Result<Vec<Hit>, StoreError> {
        let limit = match req.rescale {
            Some(_) => rescaled_pool(req.k.max(1)),
            None => req.k.max(1),
        };
        let mut query = self
            .table
            .query()
            .nearest_to(req.vector.as_slice())?
            // Named: during a re-embed the table holds `vector_next` too.
            .column(super::schema::COL_VECTOR)
            .distance_type(DistanceType::Cosine)
            .select(Select::columns(&with_vector()))
            .limit(limit);
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
            let vectors = super::commit_rows::vectors(batch);
            for (i, (record, d)) in from_batch(batch)
                .into_iter()
                .zip(distances(batch))
                .enumerate()
            {
                let distance = d.unwrap_or(f32::MAX);
                let distance = match req.rescale {
                    Some(r) => 1.0 - r.apply(Script::of(&record.content), 1.0 - distance),
                    None => distance,
                };
                let vector = unit(vectors.row(i, req.vector.len()));
                hits.push(Hit {
                    record,
                    distance,
                    vector,
                });
            }
        }
        hits.sort_by(|a, b| a.distance.total_cmp(&b.distance));
        hits.truncate(req.k);
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{open, row, vector};

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
                rows: crate::store::RowFilter {
                    scopes: Some(crate::store::ScopeSet {
                        names: vec!["rare".into()],
                        null: false,
                    }),
                    alive_at: None,
                    created: None,
                    tier: None,
                },
                k: 10,
                rescale: None,
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
}
