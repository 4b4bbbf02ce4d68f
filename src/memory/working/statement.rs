//! Which chat messages could state a fact, the one test both threshold rules of consolidation
//! apply before a message may become a long-term memory with no LLM involved (design 5.13):
//! the recall rule (`working::recurrence`, a message returned a second time) and the
//! restatement rule (`working::restatement`, a second member says it again).
//!
//! What never states a fact:
//! - the bot's own messages: its replies echo what it was told, or what it made up;
//! - a message with nobody in particular as its speaker;
//! - short chatter: under [`MIN_CHARS`] characters once folded (`memory::fact`), or fewer than
//!   [`MIN_DISTINCT_CHARS`] different characters ("好的好的", "哈哈哈哈哈哈", "+1");
//! - a question: the last word character is `?`/`？`, or the sentence-final particle 吗 or 么
//!   ("周末有人打球吗？", "妈妈能吃花生吗", "你在干什么"). A recall returns questions twice
//!   as readily as answers, since they share the answer's words, and two members asking the
//!   same thing agree on nothing.
//!
//! Everything else is left to the rules' own evidence. Chatter that is long and phrased as a
//! statement ("楼下新开了一家奶茶店") still passes: telling it from a fact needs more than the
//! text's shape. The LLM pass (`memory::consolidation`) reads every message either way.

use super::BOT_TAG;
use crate::memory::fact;

/// Characters a message needs (folded: no punctuation or spaces) to be a fact at all.
pub const MIN_CHARS: usize = 6;
/// Different characters a message needs, so a repeated laugh or "好的好的好的" never is one.
pub const MIN_DISTINCT_CHARS: usize = 4;

/// Whether a message with this text, these tags and this speaker could state a fact.
pub fn could_state_a_fact(content: &str, tags: &[String], speaker_id: Option<&str>) -> bool {
    if tags.iter().any(|t| t == BOT_TAG) || speaker_id.is_none() {
        return false;
    }
    long_and_varied(&fact::fold(content)) && !is_a_question(content)
}

/// At least [`MIN_CHARS`] characters, [`MIN_DISTINCT_CHARS`] of them different.
fn long_and_varied(folded: &str) -> bool {
    let mut chars: Vec<char> = folded.chars().collect();
    let len = chars.len();
    chars.sort_unstable();
    chars.dedup();
    len >= MIN_CHARS && chars.len() >= MIN_DISTINCT_CHARS
}

/// Whether `content` ends as a question: its last letter, digit or question mark (spaces,
/// other punctuation and emoji after it skipped) is `?`, `？`, 吗 or 么.
fn is_a_question(content: &str) -> bool {
    content
        .chars()
        .rev()
        .find(|&c| c == '?' || c == '？' || c.is_alphanumeric())
        .is_some_and(|c| matches!(c, '?' | '？' | '吗' | '么'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(text: &str) -> bool {
        could_state_a_fact(text, &[], Some("u1"))
    }

    #[test]
    fn a_member_stating_something_long_enough_could_state_a_fact() {
        for fact in [
            "妈妈对花生过敏，别点沙爹",
            "周六下午三点老地方聚餐",
            "The dentist moved Tom's appointment to Friday at 4pm.",
            "下周三交报告 😂",
            // 什么 inside a statement is no question.
            "他什么都不吃，只喝粥",
        ] {
            assert!(member(fact), "{fact}");
        }
    }

    #[test]
    fn the_bot_nobody_chatter_and_questions_never_do() {
        let fact = "妈妈对花生过敏，别点沙爹";
        assert!(!could_state_a_fact(fact, &[BOT_TAG.into()], Some("bot")));
        assert!(!could_state_a_fact(fact, &[], None));
        for chatter in ["好的好的好的", "哈哈哈哈哈哈哈", "+1", "收到！", "今天好热"]
        {
            assert!(!member(chatter), "{chatter}");
        }
        for question in [
            "周末有人打球吗？",
            "妈妈能吃花生吗",
            "有人知道快递几点到吗 🙏",
            "你们周末在干什么",
            "Is the dentist on Friday?",
            "周六几点聚餐？ ",
            "真的假的?!",
        ] {
            assert!(!member(question), "{question}");
        }
    }
}
