//! How close two memories' vectors must be for this model to call them the same fact in other
//! words, measured once when the model is loaded.
//!
//! Why measured: where "the same thing said twice" sits differs by model. e5 puts unrelated
//! texts around 0.8, MiniLM puts unrelated English near 0.1, so no fixed number can work. And
//! the danger is one-sided: merging "妈妈对青霉素过敏" with "妈妈对阿莫西林过敏" hides a fact,
//! while keeping a paraphrase twice only costs a slot. So the bound sits just above the closest
//! *different* facts this model scores: minimal pairs that change one word (a drug, a day, a
//! city, an animal, a person). Paraphrase pairs are measured too, to report how many of them
//! the bound still catches (`/v1/status` shows both); they never lower it.

use super::calibration::cosine;
use super::{EmbedError, Embedder, TextRole};

/// Pairs that state different facts in almost the same words.
const DIFFERENT: [(&str, &str); 10] = [
    ("妈妈对青霉素过敏", "妈妈对阿莫西林过敏"),
    ("会议改到周三下午三点", "会议改到周四下午三点"),
    ("小王喜欢猫", "小王喜欢狗"),
    ("哥哥在深圳工作", "哥哥在上海工作"),
    ("爷爷今年八十岁", "奶奶今年八十岁"),
    (
        "Mom is allergic to penicillin",
        "Mom is allergic to amoxicillin",
    ),
    (
        "The meeting moved to Wednesday",
        "The meeting moved to Thursday",
    ),
    ("Tom likes cats", "Tom likes dogs"),
    (
        "My brother works in Shenzhen",
        "My brother works in Shanghai",
    ),
    ("Grandpa is turning eighty", "Grandma is turning eighty"),
];

/// Pairs that state one fact in other words.
const SAME: [(&str, &str); 6] = [
    ("妈妈对青霉素过敏", "妈妈青霉素过敏"),
    ("哥哥在深圳工作", "哥哥在深圳上班"),
    ("小王喜欢猫", "小王很喜欢猫"),
    (
        "Mom is allergic to penicillin",
        "Mom has a penicillin allergy",
    ),
    ("Tom likes cats", "Tom really likes cats"),
    (
        "My brother works in Shenzhen",
        "My brother has a job in Shenzhen",
    ),
];

/// Above the closest different facts by this much.
const MARGIN: f32 = 0.005;

/// The model's bound for "the same fact in other words", and what it was measured from.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct DuplicateBound {
    /// Two memories whose vectors are at least this similar are one fact said twice.
    pub similarity: f32,
    /// The closest two different facts of the probe scored.
    pub closest_different: f32,
    /// Share of the probe's paraphrase pairs at or above the bound.
    pub paraphrases_caught: f32,
}

impl DuplicateBound {
    /// Measure `embedder` on the probe pairs (one embedding call).
    pub async fn measure(embedder: &dyn Embedder) -> Result<DuplicateBound, EmbedError> {
        let texts: Vec<String> = DIFFERENT
            .iter()
            .chain(SAME.iter())
            .flat_map(|(a, b)| [a.to_string(), b.to_string()])
            .collect();
        let vectors = embedder.embed(TextRole::Passage, texts.clone()).await?;
        if vectors.len() != texts.len() {
            return Err(EmbedError::Model(
                "duplicate probe: the embedder returned the wrong number of vectors".into(),
            ));
        }
        let sims: Vec<f32> = vectors
            .chunks_exact(2)
            .map(|pair| cosine(&pair[0], &pair[1]))
            .collect();
        let (different, same) = sims.split_at(DIFFERENT.len());
        Ok(DuplicateBound::from_similarities(different, same))
    }

    fn from_similarities(different: &[f32], same: &[f32]) -> DuplicateBound {
        let closest_different = different.iter().copied().fold(f32::MIN, f32::max);
        let similarity = (closest_different + MARGIN).min(0.999);
        let caught = same.iter().filter(|s| **s >= similarity).count();
        DuplicateBound {
            similarity,
            closest_different,
            paraphrases_caught: caught as f32 / same.len().max(1) as f32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_sits_above_every_different_pair_whatever_the_paraphrases_score() {
        let b = DuplicateBound::from_similarities(&[0.91, 0.95, 0.93], &[0.97, 0.94, 0.99]);
        assert!((b.similarity - 0.955).abs() < 1e-6);
        assert!((b.paraphrases_caught - 2.0 / 3.0).abs() < 1e-6);
        // A model whose different facts score as high as its paraphrases merges nearly nothing.
        let b = DuplicateBound::from_similarities(&[0.999], &[0.98]);
        assert_eq!(b.similarity, 0.999);
        assert_eq!(b.paraphrases_caught, 0.0);
    }
}
