//! Recall candidates from the vector search, the keyword (BM25) search, or both fused by
//! weighted reciprocal rank.
//!
//! Fusion: `fused(m) = Σ w_list / (FUSION_K + rank)` over the lists that hold `m` (ranks from
//! 1), reported as a relevance in (0, 1] by dividing by `1 / (FUSION_K + 1)`: first in both
//! lists scores 1.0, first in only the vector list `w_vector`. Ranks, not raw scores, are fused
//! because cosine similarity and BM25 live on unrelated scales. The weights come from the
//! embedding model's calibration for the query's script ([`ScriptFit::vector_weight`]): a
//! model that ranks Chinese near chance (all-MiniLM) lets the keyword order lead, a good one
//! (multilingual-e5) leads itself, and the other list settles near-ties. Plain RRF (equal
//! weights, k = 60) ranked below its own better list with both models on the quality bench:
//! its flat head let a look-alike that one list liked outvote the other list's clear first.
//!
//! Exact terms (a code, a number, a title: `memory::exact_terms`): in the keyword list the
//! memories that hold every exact term of the question verbatim go first, and when one does,
//! the keyword list leads the fusion for that question.
//!
//! Each list has its own floor (the similarity cut for vectors; for keywords, a term of the
//! question in the row, see `store::shared_terms`, and [`KEYWORD_MIN_SHARE`] of the best BM25
//! score) and neither drops what the other found: a memory only the
//! keywords find keeps its place (dropping those is mem0 #5742). Both searches run under the
//! same filter: the admitted scopes scanned in the resident copy, or the predicate as a
//! prefilter inside LanceDB (full-text search that ignores the scope is Graphiti #810).
//!
//! The vector search scores rows of the query's other script on the query's scale
//! ([`CandidateQuery::rescale`], from the calibration): a Chinese question's English answer
//! would otherwise sit behind every Chinese memory of the chat (see `embed::script`).
//!
//! A follow-up in a chat asks with its context too ([`CandidateQuery::context`],
//! `memory::turns`): the vector search with the message's and the context's vectors combined,
//! the keyword search with the context's words. [`Found::keyword_named`] tells the relevance
//! gate that the message's own words are all in a visible memory (it names that memory).
//!
//! When the embedding provider fails (a remote server down, slow or refusing its key), a
//! vector or hybrid recall answers from the keyword list alone, under the same filter, and
//! says so ([`Found::degraded`]) instead of failing: a chat keeps its memories while the
//! provider is away.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::SearchKind;
use crate::embed::calibration::{ScriptFit, MIN_LIST_WEIGHT};
use crate::embed::{Embedder, QueryCache, ScriptRescale};
use crate::store::shared_terms::QueryTerms;
use crate::store::{
    Hit, KeywordMatching, KeywordRequest, MemoryRecord, NearestVisible, RowFilter, SearchRequest,
};

use super::brevity;
use crate::memory::turns::{combine, MESSAGE_WEIGHT};
use crate::memory::MemoryError;

/// The rank constant of fusion. Small, so that rank differences near the head count: with the
/// usual 60, first and second place differ by 1.6% and any agreement outvotes a clear first
/// place. With 1 and weights of 0.8 and 0.2, the stronger list's first place stays first
/// (0.8 / 2 > 0.8 / 3 + 0.2 / 2), and the weaker list reorders the rest of its head.
pub const FUSION_K: f32 = 1.0;

/// The keyword list keeps hits scoring at least this share of the query's best BM25 score.
/// BM25 matches any shared word, so without a floor a memory sharing one common word (one
/// character of a Chinese name) would take a rank and, fused, outvote the exact match; the
/// vector list has its similarity threshold for the same reason.
pub const KEYWORD_MIN_SHARE: f32 = 0.5;

/// A memory that may be recalled, with its relevance: similarity for a vector-only recall,
/// the share of the best BM25 score for a keyword-only one, normalised fusion for hybrid. Ranking may still weigh strength on top (see `ranking`).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub record: MemoryRecord,
    pub relevance: f32,
    /// Its vector, unit length, when the vector search found it.
    pub vector: Option<Vec<f32>>,
}

/// What to search for: the (redacted) query text, the rows it may return, the pool size, the
/// vector list's similarity floor and the model's fit for the query's script.
pub struct CandidateQuery<'a> {
    pub text: &'a str,
    /// The recent turns and the message (redacted, `memory::turns::context`, the last
    /// `TURNS_MATCHED`): the keyword search asks with it. `None` for a query alone.
    pub context: Option<&'a str>,
    /// The same with fewer turns (`TURNS_EMBEDDED`): embedded, it is the context's share of
    /// the query vector. `None` for a query alone.
    pub embedded_context: Option<&'a str>,
    /// Which rows both searches may return.
    pub rows: RowFilter,
    pub k: usize,
    pub threshold: f32,
    pub kind: SearchKind,
    /// How the embedding model ranks this query's script: the fusion weights.
    pub fit: ScriptFit,
    /// How the vector search puts the query's other script on its scale.
    pub rescale: Option<ScriptRescale>,
    /// Leave out the rows that say again what `text` says (`recall::echo`): for the working
    /// memory's raw chat, which holds the asking message and its twins.
    pub without_echoes: bool,
    /// Also measure how close the message alone comes to a row (`VectorEvidence::message_best`):
    /// the relevance gate's evidence for a message that asks nothing, which its context must
    /// not lift. A second nearest-neighbour search, no second embedding.
    pub message_evidence: bool,
    /// Weigh a short row's similarity down in the vector list (`recall::brevity`): for the
    /// working memory's raw chat, searched for a prompt.
    pub brevity: bool,
    /// A text the recall's next search asks with, embedded in this one's model call into the
    /// query cache: one call, not a second that waits behind whatever the model runs then.
    pub embed_ahead: Option<&'a str>,
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
    /// What the vector search saw, when it ran: for the relevance gate.
    pub vector: Option<VectorEvidence>,
    /// Whether a keyword hit holds every term of the question: the question names a visible
    /// memory in its own words, which the relevance gate never holds back.
    pub keyword_named: bool,
}

/// The query's vector and its best visible memory's similarity (below the threshold too).
#[derive(Debug, Clone)]
pub struct VectorEvidence {
    /// What the search asked with: the message's vector, or with a context the two combined.
    pub query: Arc<Vec<f32>>,
    /// The message's own vector: how close it is to content-free chat is the message's, not
    /// its context's ("收到" after six turns about a dinner is still an acknowledgement).
    pub message: Arc<Vec<f32>>,
    pub best_similarity: Option<f32>,
    /// The best similarity of the message's own vector, when the search asked with a context
    /// and was told to weigh the message alone too ([`CandidateQuery::message_evidence`]);
    /// else `best_similarity`.
    pub message_best: Option<f32>,
}

/// The keyword list, and whether one of its memories holds every term of the question.
struct KeywordList {
    candidates: Vec<Candidate>,
    named: bool,
}

/// The vector list and what it saw.
struct VectorList {
    candidates: Vec<Candidate>,
    evidence: VectorEvidence,
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
    pub(crate) async fn candidates(&self, q: &CandidateQuery<'_>) -> Result<Found, MemoryError> {
        let found = match q.kind {
            SearchKind::Vector => self.by_vector(q).await.map(|v| Found {
                candidates: v.candidates,
                vector: Some(v.evidence),
                ..Found::default()
            }),
            SearchKind::Keyword => return self.keyword_only(q).await,
            SearchKind::Hybrid => match futures::try_join!(self.by_vector(q), self.by_keyword(q)) {
                Ok((vector, keyword)) => {
                    let named = keyword.named;
                    let (w, keyword) = exact_terms_first(q, keyword.candidates);
                    Ok(Found {
                        candidates: fuse(&[(w, vector.candidates), (1.0 - w, keyword)]),
                        degraded: None,
                        vector: Some(vector.evidence),
                        keyword_named: named,
                    })
                }
                Err(e) => Err(e),
            },
        };
        match found {
            Ok(found) => Ok(found),
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
        let keyword = self.by_keyword(q).await?;
        Ok(Found {
            candidates: keyword.candidates,
            keyword_named: keyword.named,
            ..Found::default()
        })
    }

    /// The query's vector (the text's, or with a context the two combined, [`MESSAGE_WEIGHT`])
    /// and the message's own, embedded in one call with [`CandidateQuery::embed_ahead`].
    async fn query_vector(
        &self,
        q: &CandidateQuery<'_>,
    ) -> Result<(Arc<Vec<f32>>, Arc<Vec<f32>>), MemoryError> {
        let texts: Vec<String> = [Some(q.text), q.embedded_context, q.embed_ahead]
            .into_iter()
            .flatten()
            .map(str::to_string)
            .collect();
        let vectors = self.queries.embed_all(self.embedder, &texts).await?;
        let (message, context) = match (vectors.as_slice(), q.embedded_context) {
            ([message, ..], None) => return Ok((message.clone(), message.clone())),
            ([message, context, ..], Some(_)) => (message, context),
            _ => {
                return Err(MemoryError::Embed(crate::embed::EmbedError::Model(
                    format!("{} vectors for {} texts", vectors.len(), texts.len()),
                )))
            }
        };
        let parts = [
            (message.as_slice(), MESSAGE_WEIGHT),
            (context.as_slice(), 1.0 - MESSAGE_WEIGHT),
        ];
        let message = message.clone();
        // No direction to search in (opposite vectors): the message alone.
        let query = combine(&parts).map_or_else(|| message.clone(), Arc::new);
        Ok((query, message))
    }

    /// Nearest neighbours at or above the threshold, relevance = similarity.
    async fn by_vector(&self, q: &CandidateQuery<'_>) -> Result<VectorList, MemoryError> {
        let (vector, message) = self.query_vector(q).await?;
        let hits = self.nearest_to(q, &vector).await?;
        let (hits, best_similarity) = beyond_echoes(q, hits);
        let message_best = match (q.embedded_context, q.message_evidence) {
            (Some(_), true) => beyond_echoes(q, self.nearest_to(q, &message).await?).1,
            _ => best_similarity,
        };
        let mut candidates: Vec<Candidate> = hits
            .into_iter()
            .filter(|h| h.similarity() >= q.threshold)
            .map(|h| Candidate {
                relevance: match q.brevity {
                    true => h.similarity() - brevity::cost(&h.record.content),
                    false => h.similarity(),
                },
                record: h.record,
                vector: h.vector,
            })
            .collect();
        if q.brevity {
            candidates.sort_by(|a, b| b.relevance.total_cmp(&a.relevance));
        }
        Ok(VectorList {
            candidates,
            evidence: VectorEvidence {
                query: vector,
                message,
                best_similarity,
                message_best,
            },
        })
    }

    /// The `q.k` rows nearest to `vector` among those `q` may return.
    async fn nearest_to(
        &self,
        q: &CandidateQuery<'_>,
        vector: &[f32],
    ) -> Result<Vec<Hit>, MemoryError> {
        let req = SearchRequest {
            vector: vector.to_vec(),
            rows: q.rows.clone(),
            k: q.k,
            rescale: q.rescale,
        };
        Ok(self.vectors.nearest(&req).await?)
    }

    /// BM25 hits that hold a term of the question ([`QueryTerms`]: more than a shared
    /// letter), at or above [`KEYWORD_MIN_SHARE`] of the best; relevance = share of the best.
    async fn by_keyword(&self, q: &CandidateQuery<'_>) -> Result<KeywordList, MemoryError> {
        let asked = q.context.unwrap_or(q.text);
        let mut terms = QueryTerms::of(asked);
        let hits: Vec<_> = self
            .keywords
            .matching(&KeywordRequest {
                text: asked.to_string(),
                rows: q.rows.clone(),
                k: q.k,
            })
            .await?
            .into_iter()
            .filter(|h| terms.found_in(&h.record))
            .collect();
        let hits = without_echoes(q, hits, |h| &h.record.content);
        let best = hits.first().map_or(0.0, |h| h.score);
        let candidates: Vec<Candidate> = hits
            .into_iter()
            .take_while(|h| h.score >= best * KEYWORD_MIN_SHARE && h.score > 0.0)
            .map(|h| Candidate {
                relevance: h.score / best,
                record: h.record,
                vector: None,
            })
            .collect();
        // Named by the message itself (a context's every word is in no one memory); without a
        // context the message's terms are the ones already built.
        let mut own;
        let message = match q.context {
            None => &mut terms,
            Some(_) => {
                own = QueryTerms::of(q.text);
                &mut own
            }
        };
        let named = candidates.iter().any(|c| message.all_found_in(&c.record));
        Ok(KeywordList { candidates, named })
    }
}

/// Nearest-neighbour hits without the echoes of the query, and the best similarity among them:
/// `None` when there were no hits at all (nothing to weigh), -1 (the lowest there is) when
/// every hit was an echo (nothing answers).
fn beyond_echoes(q: &CandidateQuery<'_>, hits: Vec<Hit>) -> (Vec<Hit>, Option<f32>) {
    let searched_any = !hits.is_empty();
    let hits = without_echoes(q, hits, |h| &h.record.content);
    let best = hits
        .iter()
        .map(|h| h.similarity())
        .reduce(f32::max)
        .or(searched_any.then_some(-1.0));
    (hits, best)
}

/// `hits` without the rows that repeat the query, when it asks for that
/// ([`CandidateQuery::without_echoes`]).
fn without_echoes<H>(q: &CandidateQuery<'_>, hits: Vec<H>, text: impl Fn(&H) -> &str) -> Vec<H> {
    if !q.without_echoes {
        return hits;
    }
    let asking = super::echo::Asking::new(q.text);
    hits.into_iter()
        .filter(|h| !asking.echoed_by(text(h)))
        .collect()
}

/// The keyword list with the memories that hold every exact term of the question first
/// (`memory::exact_terms`), and the vector list's share of the fusion: the calibrated weight of
/// the query's script, or [`MIN_LIST_WEIGHT`] when the keyword list's first memory holds the
/// question's exact terms (the keyword list then leads).
fn exact_terms_first(q: &CandidateQuery<'_>, keyword: Vec<Candidate>) -> (f32, Vec<Candidate>) {
    let text = |c: &Candidate| format!("{} {}", c.record.content, c.record.tags.join(" "));
    let terms = super::exact_terms::of(q.text);
    let keyword = super::exact_terms::promote(&terms, keyword, text);
    let calibrated = q.fit.vector_weight();
    match keyword.first() {
        Some(first) if super::exact_terms::all_in(&terms, &text(first)) => {
            (calibrated.min(MIN_LIST_WEIGHT), keyword)
        }
        _ => (calibrated, keyword),
    }
}

/// Weighted reciprocal-rank fusion of ranked lists (best first), each with its weight;
/// relevance is normalised so that first place in every list scores the weights' sum. Ties
/// keep the order of first appearance, earlier lists first.
pub fn fuse(lists: &[(f32, Vec<Candidate>)]) -> Vec<Candidate> {
    let best = 1.0 / (FUSION_K + 1.0);
    let mut order: Vec<MemoryRecord> = Vec::new();
    let mut sums: HashMap<String, f32> = HashMap::new();
    let mut vectors: HashMap<String, Vec<f32>> = HashMap::new();
    for (weight, list) in lists {
        for (i, c) in list.iter().enumerate() {
            let share = weight / (FUSION_K + (i + 1) as f32);
            match sums.get_mut(&c.record.id) {
                Some(sum) => *sum += share,
                None => {
                    sums.insert(c.record.id.clone(), share);
                    order.push(c.record.clone());
                }
            }
            if let Some(v) = &c.vector {
                vectors
                    .entry(c.record.id.clone())
                    .or_insert_with(|| v.clone());
            }
        }
    }
    let mut fused: Vec<Candidate> = order
        .into_iter()
        .map(|record| Candidate {
            relevance: sums.get(&record.id).copied().unwrap_or(0.0) / best,
            vector: vectors.remove(&record.id),
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
            speaker_id: None,
            speaker_name: None,
            source_ids: vec![],
            about_ids: vec![],
            source_conversations: vec![],
        }
    }

    fn list(ids: &[&str]) -> Vec<Candidate> {
        ids.iter()
            .map(|id| Candidate {
                record: r(id),
                relevance: 1.0,
                vector: None,
            })
            .collect()
    }

    fn ids(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.record.id.as_str()).collect()
    }

    #[test]
    fn first_in_both_lists_scores_one_and_wins() {
        let fused = fuse(&[(0.5, list(&["a", "b"])), (0.5, list(&["a", "c"]))]);
        assert_eq!(ids(&fused), ["a", "b", "c"]);
        assert!((fused[0].relevance - 1.0).abs() < 1e-6);
        let second = 0.5 * (FUSION_K + 1.0) / (FUSION_K + 2.0);
        assert!((fused[1].relevance - second).abs() < 1e-6);
    }

    #[test]
    fn keyword_only_candidates_survive() {
        let fused = fuse(&[(0.8, list(&[])), (0.2, list(&["only-keywords"]))]);
        assert_eq!(ids(&fused), ["only-keywords"]);
        assert!((fused[0].relevance - 0.2).abs() < 1e-6);
    }

    #[test]
    fn the_stronger_list_leads_and_the_weaker_settles_its_near_ties() {
        // A model that ranks well (weight 0.8): its first stays first although the keywords
        // prefer its second.
        let vector = list(&["right", "look-alike", "x", "y"]);
        let keyword = list(&["look-alike", "y"]);
        let fused = fuse(&[(0.8, vector.clone()), (0.2, keyword)]);
        assert_eq!(ids(&fused)[..2], ["right", "look-alike"]);
        // Agreement lifts a candidate over a neighbour: y (4th in vectors, 2nd in keywords)
        // passes x (3rd in vectors only).
        let pos = |id: &str| ids(&fused).iter().position(|i| *i == id);
        assert!(pos("y") < pos("x"), "{:?}", ids(&fused));
        // A model near chance (weight 0.2): the keyword order leads.
        let fused = fuse(&[(0.2, vector), (0.8, list(&["look-alike", "y"]))]);
        assert_eq!(ids(&fused)[..2], ["look-alike", "y"]);
    }

    #[test]
    fn one_list_keeps_its_order() {
        let fused = fuse(&[(1.0, list(&["a", "b", "c"]))]);
        assert_eq!(ids(&fused), ["a", "b", "c"]);
        assert!((fused[0].relevance - 1.0).abs() < 1e-6);
    }
}
