//! One fact per answer: a recall never returns the same fact twice in other words.
//!
//! Why: a repeated fact is folded into one row at remember time only when its text folds to
//! the same (`memory::fact`); "哥哥在深圳工作" and "哥哥在深圳上班" stay two rows, and both would
//! take a slot of the five. Here two ranked hits are one fact when their vectors are at least
//! the model's measured duplicate bound apart (`embed::duplicates`: just above the closest
//! *different* facts the model scores) and they name the same numbers. The newer of the two
//! keeps the better slot, and the slot freed goes to the next distinct memory.

use crate::embed::duplicates::DuplicateBound;
use crate::embed::{dot, Script};
use crate::memory::model::ScoredMemory;

/// A ranked hit with its vector (unit length), when the vector search read it.
pub struct Ranked {
    pub hit: ScoredMemory,
    pub vector: Option<Vec<f32>>,
}

/// Up to `limit` hits of `ranked` (best first), none the same fact as a better one: of two,
/// the newer takes the better one's slot. Hits without a vector are never merged. Also
/// returns how many hits were merged into another.
pub(crate) fn keep_distinct(
    ranked: Vec<Ranked>,
    bound: &DuplicateBound,
    limit: usize,
) -> (Vec<ScoredMemory>, usize) {
    let mut merged = 0;
    let mut kept: Vec<Compared> = Vec::with_capacity(limit.min(ranked.len()));
    for candidate in ranked {
        if kept.len() >= limit {
            break;
        }
        let candidate = Compared::new(candidate, bound);
        match kept.iter().position(|k| k.same_fact(&candidate)) {
            Some(slot) if newer(&candidate.ranked, &kept[slot].ranked) => {
                let score = kept[slot].ranked.hit.score;
                kept[slot] = candidate;
                let hit = &mut kept[slot].ranked.hit;
                hit.score = hit.score.max(score);
                merged += 1;
            }
            Some(_) => merged += 1,
            None => kept.push(candidate),
        }
    }
    (kept.into_iter().map(|k| k.ranked.hit).collect(), merged)
}

/// A hit with its [`FactKey`], worked out once per hit rather than once per pair: a recall of
/// 100 compares up to ~5,000 pairs.
struct Compared {
    ranked: Ranked,
    key: Option<FactKey>,
}

impl Compared {
    fn new(ranked: Ranked, bound: &DuplicateBound) -> Compared {
        let key = ranked
            .vector
            .as_deref()
            .and_then(|v| FactKey::of(&ranked.hit.memory.content, v, bound));
        Compared { ranked, key }
    }

    fn same_fact(&self, other: &Compared) -> bool {
        match (
            &self.key,
            &other.key,
            &self.ranked.vector,
            &other.ranked.vector,
        ) {
            (Some(a), Some(b), Some(va), Some(vb)) => a.same_fact(va, b, vb),
            _ => false,
        }
    }
}

/// What the same-fact test needs of one text and its vector: its script, that script's bound
/// and the vector's norm. `None` for a text that is never merged (no bound for its script, or
/// a zero vector).
struct FactKey {
    script: Script,
    bound: f32,
    norm: f32,
    numbers: Vec<String>,
}

impl FactKey {
    fn of(text: &str, vector: &[f32], bound: &DuplicateBound) -> Option<FactKey> {
        let script = Script::of(text);
        let norm = dot(vector, vector).sqrt();
        Some(FactKey {
            script,
            bound: bound.of_script(script).filter(|_| norm > 0.0)?,
            norm,
            numbers: numbers(text),
        })
    }

    /// Both of one script, at least its bound apart, naming the same numbers.
    fn same_fact(&self, vector: &[f32], other: &FactKey, other_vector: &[f32]) -> bool {
        self.script == other.script
            && dot(vector, other_vector) / (self.norm * other.norm) >= self.bound
            && self.numbers == other.numbers
    }
}

/// Whether two texts with their vectors state one fact: at least the model's duplicate bound
/// for their script apart, and naming the same numbers. Also the working memory's test for a
/// fact stated again by a second member (`working::restatement`).
pub(crate) fn same_fact_in_other_words(
    (ta, va): (&str, &[f32]),
    (tb, vb): (&str, &[f32]),
    bound: &DuplicateBound,
) -> bool {
    match (FactKey::of(ta, va, bound), FactKey::of(tb, vb, bound)) {
        (Some(a), Some(b)) => a.same_fact(va, &b, vb),
        _ => false,
    }
}

/// Whether `a` was written after `b` (a row without a time is the older).
fn newer(a: &Ranked, b: &Ranked) -> bool {
    a.hit.memory.created_at > b.hit.memory.created_at
}

/// The runs of digits a text names, in order (after NFKC, so `３点` is `3点`): "3点" and "4点",
/// or "r1 c0" and "r0 c1", are never one fact however close their vectors are.
fn numbers(text: &str) -> Vec<String> {
    use unicode_normalization::UnicodeNormalization;
    let folded: String = text.nfkc().collect();
    folded
        .split(|c: char| !c.is_ascii_digit())
        .filter(|run| !run.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::model::Memory;

    fn ranked(id: &str, text: &str, created: &str, vector: [f32; 2], score: f32) -> Ranked {
        let norm = (vector[0] * vector[0] + vector[1] * vector[1]).sqrt();
        Ranked {
            hit: ScoredMemory {
                memory: Memory {
                    id: id.into(),
                    content: text.into(),
                    reasoning: None,
                    tags: vec![],
                    memory_type: "knowledge".into(),
                    strength: 50,
                    is_active: true,
                    memory_scope: Some("public".into()),
                    scope_source: None,
                    created_at: Some(created.into()),
                    expires_at: None,
                    speaker_id: None,
                    speaker_name: None,
                    source_ids: vec![],
                    about_ids: vec![],
                },
                score,
            },
            vector: Some(vector.iter().map(|x| x / norm).collect()),
        }
    }

    fn bound(similarity: f32) -> DuplicateBound {
        let script = crate::embed::duplicates::ScriptBound {
            similarity,
            closest_different: similarity - 0.005,
            paraphrases_caught: 0.0,
        };
        DuplicateBound {
            cjk: Some(script),
            latin: Some(script),
        }
    }

    fn ids(hits: &[ScoredMemory]) -> Vec<&str> {
        hits.iter().map(|h| h.memory.id.as_str()).collect()
    }

    #[test]
    fn the_newer_of_two_near_identical_hits_keeps_the_better_slot_and_the_next_fills_in() {
        let hits = vec![
            ranked(
                "old",
                "哥哥在深圳工作",
                "2026-01-01T00:00:00Z",
                [1.0, 0.0],
                0.9,
            ),
            ranked(
                "new",
                "哥哥在深圳上班",
                "2026-06-01T00:00:00Z",
                [1.0, 0.01],
                0.85,
            ),
            ranked(
                "other",
                "哥哥喜欢打篮球",
                "2026-02-01T00:00:00Z",
                [0.6, 0.8],
                0.5,
            ),
            ranked(
                "third",
                "哥哥养了一只猫",
                "2026-02-01T00:00:00Z",
                [0.0, 1.0],
                0.4,
            ),
        ];
        let (kept, merged) = keep_distinct(hits, &bound(0.99), 2);
        assert_eq!((ids(&kept), merged), (vec!["new", "other"], 1));
        assert!(
            (kept[0].score - 0.9).abs() < 1e-6,
            "the slot keeps its score"
        );
    }

    #[test]
    fn texts_of_two_scripts_are_never_one_fact_however_close() {
        let v = [1.0, 0.0];
        let b = bound(0.98);
        assert!(same_fact_in_other_words(
            ("Tom likes tea", &v),
            ("tom likes TEA", &v),
            &b
        ));
        assert!(!same_fact_in_other_words(
            ("Tom likes tea", &v),
            ("汤姆喜欢茶", &v),
            &b
        ));
        assert!(!same_fact_in_other_words(
            ("Tom likes tea", &v),
            ("Tom likes tea", &[0.0, 0.0]),
            &b
        ));
    }

    #[test]
    fn the_same_numbers_in_another_order_are_other_numbers() {
        assert_ne!(
            numbers("note r1 c0 from mcp1"),
            numbers("note r0 c1 from mcp1")
        );
        assert_eq!(numbers("会议改到３点"), numbers("会议改到3点"));
    }

    #[test]
    fn different_numbers_or_missing_vectors_are_never_merged() {
        let hits = vec![
            ranked(
                "three",
                "会议改到3点",
                "2026-01-01T00:00:00Z",
                [1.0, 0.0],
                0.9,
            ),
            ranked(
                "four",
                "会议改到４点",
                "2026-06-01T00:00:00Z",
                [1.0, 0.0],
                0.8,
            ),
        ];
        assert_eq!(
            ids(&keep_distinct(hits, &bound(0.99), 5).0),
            ["three", "four"]
        );
        let mut a = ranked("a", "x", "2026-01-01T00:00:00Z", [1.0, 0.0], 0.9);
        a.vector = None;
        let b = ranked("b", "x", "2026-06-01T00:00:00Z", [1.0, 0.0], 0.8);
        assert_eq!(
            ids(&keep_distinct(vec![a, b], &bound(0.99), 5).0),
            ["a", "b"]
        );
    }
}
