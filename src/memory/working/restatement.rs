//! The second threshold rule of consolidation (design 5.13): a fact one member states and a
//! second member states again is a long-term memory, with no LLM involved. "周六下午三点老地方"
//! from 张三, then "周六下午三点，老地方" from 李四: the group agreed on it.
//!
//! Two messages state one fact when their texts fold to the same (`memory::fact`), or when
//! their vectors are at least the model's measured duplicate bound apart and they name the
//! same numbers (`memory::distinct`), the test recall uses to drop a fact said twice. The
//! bound sits above the closest *different* facts the model scores, so "3点" and "4点", or
//! 青霉素 and 阿莫西林, never count as agreement. What does not count:
//! - the same member saying it again (that is repetition, not agreement);
//! - the bot (its replies echo what it was told);
//! - short chatter: under [`MIN_CHARS`] characters once folded, or fewer than
//!   [`MIN_DISTINCT_CHARS`] different characters ("好的好的", "哈哈哈哈哈哈", "+1").

use super::BOT_TAG;
use crate::embed::duplicates::DuplicateBound;
use crate::memory::distinct::same_fact_in_other_words;
use crate::memory::fact;
use crate::store::MemoryRecord;

/// Characters a message needs (folded: no punctuation or spaces) to be a fact at all.
pub const MIN_CHARS: usize = 6;
/// Different characters a message needs, so a repeated laugh or "好的好的好的" never is one.
pub const MIN_DISTINCT_CHARS: usize = 4;

/// Whether `message` could state a fact another member agrees with (a member's, long enough).
pub fn worth_checking(message: &MemoryRecord) -> bool {
    if message.tags.iter().any(|t| t == BOT_TAG) || message.speaker_id.is_none() {
        return false;
    }
    let folded = fact::fold(&message.content);
    let mut chars: Vec<char> = folded.chars().collect();
    let len = chars.len();
    chars.sort_unstable();
    chars.dedup();
    len >= MIN_CHARS && chars.len() >= MIN_DISTINCT_CHARS
}

/// Whether `earlier` (a stored message with its vector) is the fact `message` states, said by
/// another member. `bound`: the model's duplicate bound, `None` until it is measured (then
/// only texts that fold to the same count).
pub fn restates(
    (message, vector): (&MemoryRecord, &[f32]),
    (earlier, earlier_vector): (&MemoryRecord, &[f32]),
    bound: Option<&DuplicateBound>,
) -> bool {
    if earlier.id == message.id
        || !worth_checking(message)
        || !worth_checking(earlier)
        || earlier.speaker_id == message.speaker_id
        || earlier.memory_scope != message.memory_scope
    {
        return false;
    }
    fact::same_fact(&earlier.content, &message.content)
        || bound.is_some_and(|bound| {
            same_fact_in_other_words(
                (&message.content, vector),
                (&earlier.content, earlier_vector),
                bound,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::duplicates::ScriptBound;

    fn said(id: &str, speaker: &str, text: &str) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            content: text.into(),
            reasoning: None,
            tags: vec![],
            memory_type: super::super::MESSAGE_TYPE.into(),
            strength: 1,
            is_active: false,
            conversation_id: Some("default:GroupMessage:1".into()),
            created_at: None,
            memory_scope: Some("家人".into()),
            scope_source: Some("mapped".into()),
            expires_at: None,
            last_recalled_at: None,
            speaker_id: Some(speaker.into()),
            speaker_name: None,
            source_ids: vec![],
        }
    }

    fn bound() -> DuplicateBound {
        let script = ScriptBound {
            similarity: 0.97,
            closest_different: 0.96,
            paraphrases_caught: 0.5,
        };
        DuplicateBound {
            cjk: Some(script),
            latin: Some(script),
        }
    }

    const V: [f32; 2] = [1.0, 0.0];
    const NEAR: [f32; 2] = [0.99, 0.141];
    const FAR: [f32; 2] = [0.8, 0.6];

    #[test]
    fn a_second_member_stating_the_fact_again_counts_in_the_same_or_other_words() {
        let a = said("m1", "u1", "周六下午三点老地方聚餐");
        let b = said("m2", "u2", "周六下午三点，老地方聚餐！");
        assert!(restates((&b, &FAR), (&a, &V), None), "folds to the same");
        let c = said("m3", "u2", "周六下午三点在老地方吃饭");
        assert!(restates((&c, &NEAR), (&a, &V), Some(&bound())));
        assert!(!restates((&c, &FAR), (&a, &V), Some(&bound())));
        assert!(
            !restates((&c, &NEAR), (&a, &V), None),
            "no bound measured yet"
        );
    }

    #[test]
    fn the_same_member_the_bot_chatter_other_numbers_and_other_scopes_do_not() {
        let a = said("m1", "u1", "周六下午三点老地方聚餐");
        let again = said("m2", "u1", "周六下午三点老地方聚餐");
        assert!(!restates((&again, &V), (&a, &V), Some(&bound())));
        let mut bot = said("m3", "bot", "周六下午三点老地方聚餐");
        bot.tags = vec![BOT_TAG.into()];
        assert!(!restates((&bot, &V), (&a, &V), Some(&bound())));
        assert!(!restates((&a, &V), (&bot, &V), Some(&bound())));
        // Digits are compared as such; numbers in words ("三点", "四点") are left to the
        // bound, which sits above the model's closest pairs of that kind ("周三", "周四").
        let three = said("m4", "u1", "周六下午3点老地方聚餐");
        let four = said("m5", "u2", "周六下午4点老地方聚餐");
        assert!(
            !restates((&four, &V), (&three, &V), Some(&bound())),
            "3 vs 4"
        );
        for chatter in ["好的好的好的", "哈哈哈哈哈哈哈", "+1", "收到！"] {
            let x = said("x1", "u1", chatter);
            let y = said("y1", "u2", chatter);
            assert!(!restates((&y, &V), (&x, &V), Some(&bound())), "{chatter}");
        }
        let mut elsewhere = said("m5", "u2", "周六下午三点老地方聚餐");
        elsewhere.memory_scope = Some("public".into());
        assert!(!restates((&elsewhere, &V), (&a, &V), Some(&bound())));
    }
}
