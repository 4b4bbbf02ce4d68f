//! Recall candidates from the vector search, the keyword (BM25) search, or both fused by
//! reciprocal rank (RRF).
//!
//! Fusion: `rrf(m) = Σ 1 / (RRF_K + rank)` over the lists that hold `m` (ranks from 1). It is
//! reported as a relevance in (0, 1] by dividing by the best possible sum, first in every list
//! that ran: first in both lists scores 1.0, first in only one 0.5. Ranks, not raw scores, are
//! fused because cosine similarity and BM25 live on unrelated scales. Each list has its own
//! floor (the similarity threshold for vectors, [`KEYWORD_MIN_SHARE`] of the best BM25 score
//! for keywords) and neither drops what the other found: a memory only the keywords find keeps
//! its place (dropping those is mem0 #5742). Both searches run under the same filter: the
//! admitted scopes scanned in the resident copy, or the predicate as a prefilter inside LanceDB
//! (full-text search that ignores the scope is Graphiti #810).
//!
//! When the embedding provider fails (a remote server down, slow or refusing its key), a
//! vector or hybrid recall answers from the keyword list alone, under the same filter, and
//! says so ([`Found::degraded`]) instead of failing: a chat keeps its memories while the
//! provider is away.

use std::collections::HashMap;

use crate::config::SearchKind;
use crate::embed::{Embedder, QueryCache};
use crate::store::{
    KeywordMatching, KeywordRequest, MemoryRecord, NearestVisible, RowFilter, SearchRequest,
};

use super::MemoryError;

/// The usual RRF constant: damps the head so one list's first place does not decide alone.
pub const RRF_K: f32 = 60.0;

/// The keyword list keeps hits scoring at least this share of the query's best BM25 score.
/// BM25 matches any shared word, so without a floor a memory sharing one common word (one
/// character of a Chinese name) would take a rank and, fused, outvote the exact match; the
/// vector list has its similarity threshold for the same reason.
pub const KEYWORD_MIN_SHARE: f32 = 0.5;

/// A memory that may be recalled, with its relevance: similarity for a vector-only recall,
/// normalised RRF otherwise. Ranking may still weigh strength on top (see `ranking`).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub record: MemoryRecord,
    pub relevance: f32,
}

/// What to search for: the (redacted) query text, the scope predicate, the pool size and the
/// vector list's similarity threshold.
pub struct CandidateQuery<'a> {
    pub text: &'a str,
    pub predicate: Option<String>,
    /// The same filter in column terms (the resident search runs no SQL).
    pub rows: Option<RowFilter>,
    pub k: usize,
    pub threshold: f32,
    pub kind: SearchKind,
}

/// Why a recall answered with less than it was asked for.
pub const DEGRADED_EMBEDDING: &str = "embedding_unavailable";

/// Candidates, best first, and whether a search had to be left out.
#[derive(Debug, Default)]
pub struct Found {
    pub candidates: Vec<Candidate>,
    /// `Some(DEGRADED_EMBEDDING)` when the query could not be embedded and only the keyword
    /// list ran.
    pub degraded: Option<&'static str>,
}

/// The searchers a recall can use.
pub struct Searchers<'a> {
    pub embedder: &'a dyn Embedder,
    /// Recent query embeddings (a repeated query skips the model).
    pub queries: &'a QueryCache,
    pub vectors: &'a dyn NearestVisible,
    pub keywords: &'a dyn KeywordMatching,
}

impl Searchers<'_> {
    /// Run the searches `q.kind` asks for (both at once for hybrid) and return the candidates,
    /// best first. A query the embedder cannot embed falls back to the keyword list.
    pub async fn candidates(&self, q: &CandidateQuery<'_>) -> Result<Found, MemoryError> {
        let found = match q.kind {
            SearchKind::Vector => self.by_vector(q).await,
            SearchKind::Keyword => return self.keyword_only(q).await,
            SearchKind::Hybrid => match futures::try_join!(self.by_vector(q), self.by_keyword(q)) {
                Ok((vector, keyword)) => {
                    let vector: Vec<MemoryRecord> = vector.into_iter().map(|c| c.record).collect();
                    Ok(fuse(&[vector, keyword]))
                }
                Err(e) => Err(e),
            },
        };
        match found {
            Ok(candidates) => Ok(Found {
                candidates,
                degraded: None,
            }),
            Err(MemoryError::Embed(e)) => {
                tracing::warn!(error = %e, "query not embedded; recalling by keyword only");
                Ok(Found {
                    degraded: Some(DEGRADED_EMBEDDING),
                    ..self.keyword_only(q).await?
                })
            }
            Err(e) => Err(e),
        }
    }

    async fn keyword_only(&self, q: &CandidateQuery<'_>) -> Result<Found, MemoryError> {
        Ok(Found {
            candidates: fuse(&[self.by_keyword(q).await?]),
            degraded: None,
        })
    }

    /// Nearest neighbours at or above the threshold, relevance = similarity.
    async fn by_vector(&self, q: &CandidateQuery<'_>) -> Result<Vec<Candidate>, MemoryError> {
        let vector = self.queries.embed(self.embedder, q.text).await?;
        let hits = self
            .vectors
            .nearest(&SearchRequest {
                vector: vector.as_ref().clone(),
                predicate: q.predicate.clone(),
                rows: q.rows.clone(),
                k: q.k,
            })
            .await?;
        Ok(hits
            .into_iter()
            .filter(|h| h.similarity() >= q.threshold)
            .map(|h| Candidate {
                relevance: h.similarity(),
                record: h.record,
            })
            .collect())
    }

    async fn by_keyword(&self, q: &CandidateQuery<'_>) -> Result<Vec<MemoryRecord>, MemoryError> {
        let hits = self
            .keywords
            .matching(&KeywordRequest {
                text: q.text.to_string(),
                predicate: q.predicate.clone(),
                rows: q.rows.clone(),
                k: q.k,
            })
            .await?;
        let floor = hits.first().map_or(0.0, |h| h.score) * KEYWORD_MIN_SHARE;
        Ok(hits
            .into_iter()
            .take_while(|h| h.score >= floor)
            .map(|h| h.record)
            .collect())
    }
}

/// Reciprocal-rank fusion of ranked lists (best first), normalised to (0, 1]. Ties keep the
/// order of first appearance, earlier lists first.
pub fn fuse(lists: &[Vec<MemoryRecord>]) -> Vec<Candidate> {
    let best = lists.len().max(1) as f32 / (RRF_K + 1.0);
    let mut order: Vec<MemoryRecord> = Vec::new();
    let mut sums: HashMap<String, f32> = HashMap::new();
    for list in lists {
        for (i, record) in list.iter().enumerate() {
            let share = 1.0 / (RRF_K + (i + 1) as f32);
            match sums.get_mut(&record.id) {
                Some(sum) => *sum += share,
                None => {
                    sums.insert(record.id.clone(), share);
                    order.push(record.clone());
                }
            }
        }
    }
    let mut fused: Vec<Candidate> = order
        .into_iter()
        .map(|record| Candidate {
            relevance: sums.get(&record.id).copied().unwrap_or(0.0) / best,
            record,
        })
        .collect();
    // Stable: equal sums keep first-appearance order.
    fused.sort_by(|a, b| b.relevance.total_cmp(&a.relevance));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: &str) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: id.into(),
            reasoning: None,
            tags: vec![],
            memory_type: "knowledge".into(),
            strength: 50,
            is_active: true,
            conversation_id: None,
            created_at: None,
            memory_scope: Some("public".into()),
            scope_source: None,
            expires_at: None,
            last_recalled_at: None,
        }
    }

    fn ids(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.record.id.as_str()).collect()
    }

    #[test]
    fn first_in_both_lists_scores_one_and_wins() {
        let fused = fuse(&[vec![r("a"), r("b")], vec![r("a"), r("c")]]);
        assert_eq!(ids(&fused), ["a", "b", "c"]);
        assert!((fused[0].relevance - 1.0).abs() < 1e-6);
        assert!((fused[1].relevance - 0.5 * 61.0 / 62.0).abs() < 1e-6);
    }

    #[test]
    fn keyword_only_candidates_survive() {
        let fused = fuse(&[vec![], vec![r("only-keywords")]]);
        assert_eq!(ids(&fused), ["only-keywords"]);
        assert!((fused[0].relevance - 0.5).abs() < 1e-6);
    }

    #[test]
    fn agreement_beats_a_single_first_place() {
        // Vector puts the wrong memory first and the right one fifth; keywords find only the
        // right one: 1/61 + 1/65 > 1/61.
        let vector = vec![r("wrong"), r("x"), r("y"), r("z"), r("right")];
        let fused = fuse(&[vector, vec![r("right")]]);
        assert_eq!(fused[0].record.id, "right");
    }

    #[test]
    fn one_list_keeps_its_order() {
        let fused = fuse(&[vec![r("a"), r("b"), r("c")]]);
        assert_eq!(ids(&fused), ["a", "b", "c"]);
        assert!((fused[0].relevance - 1.0).abs() < 1e-6);
    }
}
