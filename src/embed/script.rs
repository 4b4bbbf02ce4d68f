//! Which writing system a text is in, and how a search puts the other one's similarities on
//! the query's scale.
//!
//! A multilingual model still scores same-language pairs higher than cross-language ones:
//! multilingual-e5 puts an unrelated Chinese question and Chinese memory at about 0.84, and the
//! same question and an English memory that answers it at about 0.79. A raw nearest-neighbour
//! search then ranks every Chinese memory above the English answer (on the quality bench, a
//! Chinese question's English answer sat behind ~960 Chinese rows half of the time). The
//! embedder's calibration measures both scales; the search maps each row of the other script
//! onto the query script's scale ([`ScriptRescale`]) while it scores, so both scripts compete
//! on how far above their own noise they sit. Rows of the query's own script keep their
//! similarity, so thresholds and reported scores mean what they did.

/// A text's writing system, as far as the embedding models' behaviour is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Script {
    /// Chinese, Japanese or Korean letters make up a third or more of the letters.
    Cjk,
    /// No CJK letter at all (Latin text, and texts with no letters).
    #[default]
    Latin,
    /// Some CJK letters, fewer than a third: code-switched text such as
    /// 二婶说at the end of the month想去Cape Town. Models score it close to both scripts, so it
    /// is never rescaled (lifting it as English put it above Chinese answers on the bench).
    Mixed,
}

impl Script {
    /// CJK when a third or more of the text's letters (digits and punctuation aside) are CJK
    /// (a Chinese character carries about a word, so a sentence with an English product name
    /// is still Chinese), Latin when none is, Mixed between.
    pub(crate) fn of(text: &str) -> Script {
        let (mut cjk, mut letters) = (0usize, 0usize);
        for c in text.chars().filter(|c| c.is_alphabetic()) {
            letters += 1;
            if is_cjk(c) {
                cjk += 1;
            }
        }
        if cjk == 0 {
            Script::Latin
        } else if cjk * 3 >= letters {
            Script::Cjk
        } else {
            Script::Mixed
        }
    }
}

/// Han (with the supplementary ideographs), kana and hangul: scripts written without spaces
/// between words.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF
        | 0x20000..=0x2FA1F)
}

/// Rows written in `script` score `similarity * mul + add` in this search; other rows keep
/// their similarity. Built by the memory layer from the model's calibration; the store only
/// applies it, the same way in the resident scan and in LanceDB.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScriptRescale {
    pub script: Script,
    pub mul: f32,
    pub add: f32,
}

impl ScriptRescale {
    /// `similarity` of a row written in `script`, on the query's scale.
    #[inline(always)]
    pub(crate) fn apply(&self, script: Script, similarity: f32) -> f32 {
        if script == self.script {
            similarity * self.mul + self.add
        } else {
            similarity
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_cjk_from_a_third_of_its_letters_latin_with_none_mixed_between() {
        assert_eq!(Script::of("妈妈有什么药不能用？"), Script::Cjk);
        assert_eq!(Script::of("ZX-99812 订单"), Script::Cjk);
        assert_eq!(Script::of("where is the 4B会议室 room"), Script::Mixed);
        assert_eq!(
            Script::of("二婶说at the end of the month想去Cape Town，有人一起吗"),
            Script::Mixed
        );
        assert_eq!(Script::of("???"), Script::Latin);
        assert_eq!(
            Script::of("Mom's new glasses: left eye -4.25"),
            Script::Latin
        );
    }

    #[test]
    fn only_rows_of_the_named_script_move() {
        let r = ScriptRescale {
            script: Script::Latin,
            mul: 0.5,
            add: 0.4,
        };
        assert_eq!(r.apply(Script::Cjk, 0.8), 0.8);
        assert!((r.apply(Script::Latin, 0.8) - 0.8).abs() < 1e-6);
        assert!((r.apply(Script::Latin, 0.6) - 0.7).abs() < 1e-6);
    }
}
