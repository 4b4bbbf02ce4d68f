//! Brevity: in the recent messages' vector list for a prompt, a short line weighs less.
//!
//! Raw chat is mostly short lines, and an embedding model puts a short line that shares one
//! salient word with a question close to it: "乐乐我到你们小区北门了" stood above "我新家在滨江花园
//! 7栋2单元1502，从北门进去右转第二栋就是，以后东西寄这里" for "乐乐搬家以后住哪儿，东西寄到
//! 哪里？", and "group order is way cheaper, wait for that" above the line that gave the order's
//! cutoff. The line that states a fact is nearly always the longer one. Shown first twice, the
//! short line also became a long-term memory by the recall rule (design 5.13).
//!
//! So a line shorter than a sentence that states something ([`SENTENCE_UNITS`]) loses
//! [`BREVITY_WEIGHT`] × ln(its length / that) of its similarity: a prior on length, as
//! document retrieval uses one, on the vector list only (BM25 weighs length its own way) and
//! for a prompt only (a search by hand ranks by similarity alone). The gate weighs the
//! similarity as measured. A reply embedded with the question it answers loses it too: its
//! similarity stands far above the chat around it, and on the short-reply set every reply
//! stayed shown.
//!
//! Measured on the group-chat set with the prompt path (`make bench-group-chat`, facts found of
//! 45 and chatter made memories): without it 34 and 4; with a weight from 0.03 to 0.1 and a
//! sentence of 30 to 60 units, 36 and 1 at every point; the short-reply set as injected 28 of
//! 30 with and without it (release). The figures are in docs/benchmarks.md.

/// How much of a line's similarity one unit of ln(length / [`SENTENCE_UNITS`]) costs.
pub const BREVITY_WEIGHT: f32 = 0.05;

/// The length, in [`units`], from which a line costs nothing.
pub const SENTENCE_UNITS: f32 = 40.0;

/// A line's length in units: a CJK character is one, and so is a word of any other script.
pub(crate) fn units(text: &str) -> usize {
    let cjk = text.chars().filter(|c| is_cjk(*c)).count();
    let words = text
        .split(|c: char| is_cjk(c) || !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .count();
    cjk + words
}

/// What a line of `text` loses of its similarity: 0 from [`SENTENCE_UNITS`] on, more the
/// shorter it is.
pub(crate) fn cost(text: &str) -> f32 {
    let units = units(text).max(1) as f32;
    -BREVITY_WEIGHT * (units / SENTENCE_UNITS).ln().min(0.0)
}

/// Han, kana and hangul: scripts that write a word in a character or two, without spaces.
fn is_cjk(c: char) -> bool {
    matches!(u32::from(c),
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cjk_character_and_a_word_are_one_unit_each() {
        assert_eq!(units("乐乐我到你们小区北门了"), 11);
        assert_eq!(units("group order is way cheaper, wait for that"), 8);
        assert_eq!(units("Mia's"), 2);
        assert_eq!(units("周六3号馆 court 5"), 7);
        assert_eq!(units("👍"), 0);
    }

    #[test]
    fn a_short_line_costs_more_and_a_sentence_nothing() {
        let short = cost("乐乐我到你们小区北门了");
        let fact = cost("我新家在滨江花园7栋2单元1502，从北门进去右转第二栋就是，以后东西寄这里");
        assert!(short > fact, "{short} {fact}");
        assert!((short - 0.05 * (40.0f32 / 11.0).ln()).abs() < 1e-6);
        assert_eq!(cost(&"字".repeat(40)), 0.0);
        assert_eq!(cost(&"字".repeat(80)), 0.0, "a long line gains nothing");
        assert_eq!(cost("👍"), cost("好"), "no unit costs as much as one");
    }
}
