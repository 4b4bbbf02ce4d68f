//! An echo: a line of the chat that says again what the asking message says.
//!
//! The plugins send every message to the working memory as it arrives, the one that asks the
//! bot included, and raw chat holds the twins of every line of small talk ("今天好冷啊，大家多穿点
//! 衣服" said that morning by three members, "早上好，腿好酸啊"). Such a line is as close to the
//! asking message as a text can be, so it stood first in the recent messages' search and the
//! relevance gate read it as an answer: the working memory's tier answered every message whose
//! twin had been said, and only its chat bound held small talk back. An echo answers nothing,
//! so the recent messages' search leaves echoes out before anything weighs its candidates.
//!
//! The test is on the words, not the vectors: the two share most of their character bigrams
//! (folded as the facts are; Dice's coefficient at least [`ECHO_SHARE`]), so a line that only
//! holds the message's words among its own is no echo ("妈妈对花生过敏，别点沙爹" answers "妈妈
//! 是不是对花生过敏？", 0.53). On the group-chat set no fact's question shares more than 0.58 of
//! its own bigrams with its answer. Only for a prompt: a search by hand looks for a message by
//! its own words.

use super::mentions::without_mentions;
use crate::memory::fact::fold;

/// The least Dice coefficient of the two texts' character bigrams (twice the shared, over
/// both counts) of a line that repeats the asking message.
pub const ECHO_SHARE: f32 = 0.8;

/// What a line is compared with: the asking message's folded text and its bigrams, worked out
/// once per recall.
pub(crate) struct Asking {
    chars: usize,
    first: Option<char>,
    bigrams: Vec<(char, char)>,
}

impl Asking {
    pub(crate) fn new(message: &str) -> Asking {
        let folded = folded(message);
        Asking {
            chars: folded.len(),
            first: folded.first().copied(),
            bigrams: bigrams(&folded),
        }
    }

    /// Whether `line` says again what the asking message says.
    pub(crate) fn echoed_by(&self, line: &str) -> bool {
        let line = folded(line);
        if self.chars <= 1 || line.len() <= 1 {
            // Nothing to compare but one character: only the same text repeats it.
            return self.chars == 1 && line.len() == 1 && self.first == line.first().copied();
        }
        let theirs = bigrams(&line);
        let shared = self.bigrams.iter().filter(|b| theirs.contains(b)).count();
        2.0 * shared as f32 >= ECHO_SHARE * (self.bigrams.len() + theirs.len()) as f32
    }
}

/// The folded characters of a line, lower case, without the names it addresses.
fn folded(text: &str) -> Vec<char> {
    fold(without_mentions(text))
        .to_lowercase()
        .chars()
        .collect()
}

fn bigrams(chars: &[char]) -> Vec<(char, char)> {
    let mut out: Vec<(char, char)> = chars.windows(2).map(|w| (w[0], w[1])).collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_asking_message_and_its_twins_are_echoes() {
        let asking = Asking::new("今天好冷啊，大家多穿点衣服");
        assert!(asking.echoed_by("今天好冷啊，大家多穿点衣服"));
        assert!(asking.echoed_by("早上好，今天好冷啊，大家多穿点衣服"));
        assert!(asking.echoed_by("今天也好冷啊，大家多穿点衣服"));
        assert!(!asking.echoed_by("今天降温了，我给外婆送了件羽绒服"));
        let asking = Asking::new("场地费现在多少钱一个人");
        assert!(
            asking.echoed_by("@小助手 场地费现在多少钱一个人"),
            "addressed"
        );
        assert!(Asking::new("how's everyone doing?").echoed_by("How's everyone doing"));
    }

    #[test]
    fn an_answer_is_no_echo_of_its_question() {
        for (question, answer) in [
            (
                "这周末在哪个馆打，订的哪几块场地？",
                "这周六活动照常：下午两点到四点，体育中心三号馆，五号六号场",
            ),
            ("乐乐的新地址是什么", "乐乐的新地址是滨江花园7栋2单元1502"),
            (
                "what's the cutoff for joining the group order?",
                "I'm placing the group order on Dec 3, so tell me by the 2nd if you want a copy",
            ),
            ("密码", "wifi密码是1234"),
            ("妈妈是不是对花生过敏？", "妈妈对花生过敏，别点沙爹"),
            ("妈妈花生过敏", "妈妈对花生过敏，别点沙爹"),
            ("腿好酸啊", "早上好，腿好酸啊"),
        ] {
            assert!(!Asking::new(question).echoed_by(answer), "{answer}");
        }
    }

    #[test]
    fn nothing_to_compare_is_no_echo_and_one_character_only_echoes_itself() {
        assert!(!Asking::new("？？").echoed_by("？？"));
        assert!(!Asking::new("").echoed_by("早上好"));
        assert!(Asking::new("好！").echoed_by("好"));
        assert!(!Asking::new("好").echoed_by("好的"));
    }
}
