//! Full-text (BM25) search over `content` and `tags`, under the same prefilter as the vector
//! search: names, room numbers and order codes are where embeddings alone miss.
//!
//! The tokenizer is Lance's `icu` word segmenter. Its dictionary segmentation splits Chinese,
//! which has no spaces, into words, and other scripts at word boundaries; the dictionary is
//! compiled into the binary (icu_segmenter's data, from crates.io), so nothing is downloaded or
//! loaded at run time. Lower-casing, ASCII folding, English stemming and stop-word removal keep
//! `ZX-99812` / `zx 99812` and `named` / `name` together and drop the words every memory has.

use std::sync::atomic::{AtomicBool, Ordering};

use futures::TryStreamExt;
use lancedb::index::scalar::{FtsIndexBuilder, FullTextSearchQuery};
use lancedb::index::{IndexConfig, IndexType};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::Table;

use super::record::{from_batch, scores, MemoryRecord};
use super::schema::{COL_CONTENT, COL_TAGS, RECORD_COLUMNS};
use super::StoreError;

/// The columns with a full-text index; a query matches any of them.
pub const FULLTEXT_COLUMNS: [&str; 2] = [COL_CONTENT, COL_TAGS];

/// The index parameters. Changing them changes what a query matches: an index built with other
/// parameters is rebuilt by `maintenance::indexes::ensure_fulltext_indexes` only when missing, so keep them stable.
pub fn fulltext_params() -> FtsIndexBuilder {
    FtsIndexBuilder::default()
        .base_tokenizer("icu".to_string())
        .lower_case(true)
        .ascii_folding(true)
        .stem(true)
        .remove_stop_words(true)
        // Positions serve phrase queries, which recall does not run; they double the index.
        .with_position(false)
}

pub(crate) fn has_fulltext(indices: &[IndexConfig], column: &str) -> bool {
    indices
        .iter()
        .any(|i| i.index_type == IndexType::FTS && i.columns.iter().any(|c| c == column))
}

async fn has_fulltext_indexes(table: &Table) -> Result<bool, StoreError> {
    let indices = table.list_indices().await?;
    Ok(FULLTEXT_COLUMNS
        .iter()
        .all(|column| has_fulltext(&indices, column)))
}

/// One keyword search: the text as the user wrote it, which rows it may return, and how many.
#[derive(Debug, Clone)]
pub struct KeywordRequest {
    pub text: String,
    pub rows: super::filter::RowFilter,
    pub k: usize,
}

/// The keyword search a recall uses: LanceDB's full-text index, or the resident copy in front
/// of it (the seam beside [`super::NearestVisible`]).
pub trait KeywordMatching: Send + Sync {
    fn matching<'a>(
        &'a self,
        req: &'a KeywordRequest,
    ) -> futures::future::BoxFuture<'a, Result<Vec<KeywordHit>, StoreError>>;
}

impl KeywordMatching for FulltextSearch {
    fn matching<'a>(
        &'a self,
        req: &'a KeywordRequest,
    ) -> futures::future::BoxFuture<'a, Result<Vec<KeywordHit>, StoreError>> {
        Box::pin(FulltextSearch::matching(self, req))
    }
}

/// A row with its BM25 score (higher is better; only comparable within one query).
#[derive(Debug, Clone)]
pub struct KeywordHit {
    pub record: MemoryRecord,
    pub score: f32,
}

/// BM25 search on the table's full-text indexes.
pub struct FulltextSearch {
    table: Table,
    /// Set once both indexes exist. A table opened before they were built (a legacy table, in
    /// the background after start-up) answers keyword searches with nothing until then.
    ready: AtomicBool,
}

impl FulltextSearch {
    pub fn new(table: Table) -> Self {
        FulltextSearch {
            table,
            ready: AtomicBool::new(false),
        }
    }

    /// The `k` best BM25 matches the predicate admits, best first. The predicate is a
    /// prefilter (lancedb's default): rows of other scopes never take a place in the top `k`.
    pub async fn matching(&self, req: &KeywordRequest) -> Result<Vec<KeywordHit>, StoreError> {
        if !self.ready.load(Ordering::Acquire) {
            if !has_fulltext_indexes(&self.table).await? {
                tracing::debug!("full-text indexes not built yet; keyword search finds nothing");
                return Ok(Vec::new());
            }
            self.ready.store(true, Ordering::Release);
        }
        super::commit::read_retrying(&self.table, || self.search_once(req)).await
    }

    async fn search_once(&self, req: &KeywordRequest) -> Result<Vec<KeywordHit>, StoreError> {
        let columns: Vec<String> = FULLTEXT_COLUMNS.iter().map(|c| c.to_string()).collect();
        let fts = FullTextSearchQuery::new(req.text.clone()).with_columns(&columns)?;
        let mut query = self
            .table
            .query()
            .full_text_search(fts)
            .select(Select::columns(&RECORD_COLUMNS))
            .limit(req.k.max(1));
        if let Some(p) = req.rows.to_sql() {
            query = query.only_if(p);
        }
        let batches: Vec<_> = query.execute().await?.try_collect().await?;
        let mut hits = Vec::with_capacity(req.k);
        for batch in &batches {
            for (record, score) in from_batch(batch).into_iter().zip(scores(batch)) {
                hits.push(KeywordHit {
                    record,
                    score: score.unwrap_or(0.0),
                });
            }
        }
        // Ties (look-alike rows) by id, i.e. by age (ids are UUIDv7), as the resident copy does.
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.record.id.cmp(&b.record.id))
        });
        hits.truncate(req.k);
        Ok(hits)
    }
}
