//! Full-text (BM25) search over `content` and `tags`, under the same prefilter as the vector
//! search: names, room numbers and order codes are where embeddings alone miss.
//!
//! The analyzer is Lance's character n-gram tokenizer, 1 to 3 characters, lower-cased and
//! ASCII-folded. Chinese has no spaces; n-grams need no dictionary, so a name or term that a
//! word segmenter lacks, or cuts one way in the question and another in the memory, still
//! shares its grams. `make bench-quality` scored each analyzer with the same BM25 on its EN/ZH
//! set (hit@1 / hit@5 / MRR@5):
//!
//! | analyzer | hit@1 | hit@5 | MRR@5 |
//! |---|---|---|---|
//! | ICU word segmentation (the analyzer before this one) | 0.25 | 0.43 | 0.32 |
//! | jieba | 0.28 | 0.43 | 0.34 |
//! | n-grams 1-2 | 0.30 | 0.48 | 0.38 |
//! | n-grams 2-2 | 0.29 | 0.42 | 0.34 |
//! | n-grams 1-3 (this one; 1-4 is no better) | 0.31 | 0.48 | 0.38 |
//!
//! English stemming and stop words change nothing on n-grams, so they are off. The price is a
//! larger index: a row has about three terms per character.

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

/// The index parameters, which the resident copy's analyzer uses too. The table records them;
/// `maintenance::indexes::ensure_fulltext_indexes` rebuilds an index built with others, since
/// Lance analyzes a query with its index's parameters.
pub fn fulltext_params() -> FtsIndexBuilder {
    FtsIndexBuilder::default()
        .base_tokenizer("ngram".to_string())
        .ngram_min_length(1)
        .ngram_max_length(3)
        .lower_case(true)
        .ascii_folding(true)
        .stem(false)
        .remove_stop_words(false)
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
