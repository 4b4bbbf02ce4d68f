//! How close two memories' vectors must be for this model to call them the same fact in other
//! words, measured once when the model is loaded, per script.
//!
//! Why measured: where "the same thing said twice" sits differs by model. e5 puts unrelated
//! texts around 0.8, MiniLM puts unrelated English near 0.1, so no fixed number can work. And
//! the danger is one-sided: merging "妈妈对青霉素过敏" with "妈妈对阿莫西林过敏" hides a fact,
//! while keeping a paraphrase twice only costs a slot. So:
//! - the bound sits just above the closest *different* facts this model scores: minimal pairs
//!   that change one word (a drug, a day, a city, an animal, a person), and never below
//!   [`FLOOR`];
//! - a script the model ranks poorly (its calibrated accuracy below [`MIN_ACCURACY`]: MiniLM on
//!   Chinese) gets no bound at all: such a model cannot tell 古筝 from 古琴, so nothing in that
//!   script is ever merged;
//! - two texts of different scripts are never merged.
//!
//! Paraphrase pairs are measured too, to report how many the bound still catches (`/v1/status`
//! shows it); they never lower the bound.

use super::{cosine, EmbedError, Embedder, Script, TextRole};

/// Pairs that state different facts in almost the same words: (Chinese, English).
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
/// The bound is never lower: ten minimal pairs cannot show every way two facts can sit close
/// (MiniLM put "tagged memory one_quote" and "… two_quotes" above its probe's closest pair).
pub const FLOOR: f32 = 0.97;
/// Least ranking accuracy (of the calibration probe) at which a script is merged at all.
pub const MIN_ACCURACY: f32 = 0.75;

/// The model's bounds for "the same fact in other words", per script.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct DuplicateBound {
    /// Chinese (and other CJK) memories; `None`: never merged (the model ranks them poorly).
    pub cjk: Option<ScriptBound>,
    /// Latin-script memories; `None`: never merged.
    pub latin: Option<ScriptBound>,
}

/// One script's bound and what it was measured from.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ScriptBound {
    /// Two memories whose vectors are at least this similar are one fact said twice.
    pub similarity: f32,
    /// The closest two different facts of the probe scored.
    pub closest_different: f32,
    /// Share of the probe's paraphrase pairs at or above the bound.
    pub paraphrases_caught: f32,
}

impl DuplicateBound {
    /// Measure `embedder` on the probe pairs (one embedding call), given how well it ranks
    /// each script (the calibration's accuracies, Chinese and English).
    pub(crate) async fn measure(
        embedder: &dyn Embedder,
        cjk_accuracy: f32,
        latin_accuracy: f32,
    ) -> Result<DuplicateBound, EmbedError> {
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
        let pairs: Vec<(Script, f32)> = DIFFERENT
            .iter()
            .chain(SAME.iter())
            .zip(vectors.chunks_exact(2))
            .map(|((a, _), v)| (Script::of(a), cosine(&v[0], &v[1])))
            .collect();
        let (different, same) = pairs.split_at(DIFFERENT.len());
        let of = |script: Script, accuracy: f32| {
            let sims = |list: &[(Script, f32)]| -> Vec<f32> {
                list.iter()
                    .filter(|(s, _)| *s == script)
                    .map(|(_, sim)| *sim)
                    .collect()
            };
            (accuracy >= MIN_ACCURACY)
                .then(|| ScriptBound::from_similarities(&sims(different), &sims(same)))
        };
        Ok(DuplicateBound {
            cjk: of(Script::Cjk, cjk_accuracy),
            latin: of(Script::Latin, latin_accuracy),
        })
    }

    /// The bound for two texts both of `script`, `None` when such texts are never merged
    /// (mixed text, or a script the model ranks poorly). Texts of two scripts are never merged
    /// (`recall::distinct`).
    pub(crate) fn of_script(&self, script: Script) -> Option<f32> {
        match script {
            Script::Cjk => self.cjk.map(|s| s.similarity),
            Script::Latin => self.latin.map(|s| s.similarity),
            Script::Mixed => None,
        }
    }
}

impl ScriptBound {
    fn from_similarities(different: &[f32], same: &[f32]) -> ScriptBound {
        let closest_different = different.iter().copied().fold(f32::MIN, f32::max);
        let similarity = (closest_different + MARGIN).clamp(FLOOR, 0.999);
        let caught = same.iter().filter(|s| **s >= similarity).count();
        ScriptBound {
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
        let b = ScriptBound::from_similarities(&[0.91, 0.975, 0.93], &[0.97, 0.94, 0.99]);
        assert!((b.similarity - 0.98).abs() < 1e-6);
        assert!((b.paraphrases_caught - 1.0 / 3.0).abs() < 1e-6);
        // Never below the floor, however far apart the probe's different facts sit.
        let b = ScriptBound::from_similarities(&[0.5], &[0.99]);
        assert_eq!(b.similarity, FLOOR);
        // A model whose different facts score as high as its paraphrases merges nearly nothing.
        let b = ScriptBound::from_similarities(&[0.999], &[0.98]);
        assert_eq!(b.similarity, 0.999);
        assert_eq!(b.paraphrases_caught, 0.0);
    }

    #[test]
    fn texts_of_two_scripts_or_an_unranked_script_are_never_merged() {
        let bound = ScriptBound::from_similarities(&[0.975], &[0.99]);
        let b = DuplicateBound {
            cjk: None,
            latin: Some(bound),
        };
        assert_eq!(b.of_script(Script::of("Tom likes tea")), Some(0.98));
        assert_eq!(b.of_script(Script::of("奶奶在学古筝")), None);
        assert_eq!(
            b.of_script(Script::of("二婶说at the end of the month想去Cape Town")),
            None
        );
    }
}
