//! The relevance gate: does a message ask for memory at all?
//!
//! A host that injects recall into every prompt should inject nothing for 早上好呀, 收到, +1 or
//! lol, and nothing for a question whose answer the scope does not hold (the nearest unrelated
//! memory invites the LLM to bring up a private fact out of nowhere). Similarity alone cannot
//! decide: multilingual-e5 scores small talk against a group's memories as high as many real
//! questions against their answers. Two measurements on the model's own scale can:
//!
//! - `memory_z`: how many spreads the best visible memory stands above the model's unrelated
//!   pairs for the query's script (`embed::calibration`);
//! - `chat_z`: how many spreads the message sits above real questions in closeness to
//!   content-free chat (`embed::small_talk`).
//!
//! A message asks for memory when `memory_z - chat_z` reaches [`GATE_MARGIN`]: a question
//! with an answer stands well above the noise and is no closer to chat than questions are;
//! small talk is close to chat, and an unanswerable question finds only noise. Both numbers
//! are relative to the loaded model, so the same margin serves MiniLM and e5 and both scripts.
//! Figures (small talk held back, questions lost) are in docs/benchmarks.md.

use crate::embed::calibration::ScriptFit;
use crate::embed::small_talk::SmallTalk;
use crate::embed::Script;

/// The least `memory_z - chat_z` of a message that asks for memory. Measured with
/// multilingual-e5 on the quality bench's vector list (302 questions, 48 small-talk lines):
/// 1.5 let 8 small-talk lines through and lost no question's hit@5, 2.0 let 4 through and lost
/// 2 (0.007 of hit@5), 2.5 let 3 through and lost 8. The curve is in docs/benchmarks.md.
pub const GATE_MARGIN: f32 = 2.0;

/// The least margin of a message whose time words name a window that holds memories. Inside
/// a window the best memory is the best of a few, and what is left of the question once the
/// time words go ("晚上和谁打电话了") often reads like chat. Measured with multilingual-e5 on
/// `make bench-time` (77 time questions, 20 chat lines that name a time): 1.25 put 0.83 of
/// the questions' answers first, 0.75 0.90, 0.5 0.94 and 0.0 0.96; 1 chat line recalled at
/// 0.5 and above (one that passes [`GATE_MARGIN`] too), 2 at 0.0.
pub const WINDOW_GATE_MARGIN: f32 = 0.5;

/// The most `chat_z` of a message that names a visible memory in its own words (every term of
/// it is in the memory: "family" for "family: keep me", "兰花"). Such a message asks for that
/// memory whatever its `memory_z`, unless it reads as chat: a short line such as 收到 or 有点困
/// is in some memory too among thousands. Measured with multilingual-e5: content words sit at
/// 兰花 -0.7, 咖啡 0.7, 奶奶 0.8, 机场 1.5, family 3.3; chat that a memory held every word of at
/// 有点困 4.1, 谢谢老板 5.5, 早上好 6.7, 收到 7.6, 嗯嗯 8.1. On the quality bench (80 small-talk
/// lines among 3,184 memories) 7 lines recall something with this bound, 6 without the rule and
/// 10 with the rule unbounded; no question's hit@1 or hit@5 changed.
pub const NAMED_MAX_CHAT_Z: f32 = 3.5;

/// The most `chat_z` of a message the working memory's recent messages answer. Raw chat holds
/// every greeting and reaction, so small talk always finds its twin there ("早上好" finds
/// "早上好呀各位", "今天好冷啊" the member who said it first) and the margin alone lets it
/// through. Real questions sit at 0 ± 1 by construction (`embed::small_talk`); content-free
/// chat at 4 to 8. Measured on the group-chat bench: see docs/benchmarks.md. A message too
/// long to be small talk is held to [`NAMED_MAX_CHAT_Z`] instead (`asks_for_messages`): on that
/// bench the one fact this bound held back was an 11-word question at 2.5 ("game night" sits
/// near "good evening"), and its small talk is all short.
pub const MESSAGES_MAX_CHAT_Z: f32 = 2.0;

/// One message's two measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Relevance {
    pub memory_z: f32,
    pub chat_z: f32,
}

impl Relevance {
    /// Measure a query: `best_similarity` is its best visible memory's (on the query's scale),
    /// `query` its unit-length vector.
    pub(crate) fn measure(
        fit: &ScriptFit,
        small_talk: &SmallTalk,
        script: Script,
        best_similarity: f32,
        query: &[f32],
    ) -> Relevance {
        let memory_z = if fit.noise_spread > 0.0 {
            (best_similarity - fit.noise_floor) / fit.noise_spread
        } else {
            f32::INFINITY
        };
        Relevance {
            memory_z,
            chat_z: small_talk.chat_z(query, script),
        }
    }

    pub(crate) fn margin(&self) -> f32 {
        self.memory_z - self.chat_z
    }

    pub(crate) fn asks_for_memory(&self) -> bool {
        self.margin() >= GATE_MARGIN
    }

    /// For the working memory's tier: asks for memory, and does not read as chat
    /// ([`MESSAGES_MAX_CHAT_Z`], or [`NAMED_MAX_CHAT_Z`] for a `long` message: one too long to
    /// be small talk, whose words may still sit near a chat line).
    pub(crate) fn asks_for_messages(&self, long: bool) -> bool {
        let bound = if long {
            NAMED_MAX_CHAT_Z
        } else {
            MESSAGES_MAX_CHAT_Z
        };
        self.asks_for_memory() && self.chat_z <= bound
    }

    /// For a message whose every word is in a visible memory: it asks for that memory unless
    /// it reads as chat ([`NAMED_MAX_CHAT_Z`]).
    pub(crate) fn names_a_memory(&self) -> bool {
        self.chat_z <= NAMED_MAX_CHAT_Z
    }

    /// For a message whose every word is in a recent message: it asks for that message
    /// unless it reads as chat by the working memory's bound ([`MESSAGES_MAX_CHAT_Z`]): raw
    /// chat holds every remark's words in a longer line ("腿好酸啊" in "早上好，腿好酸啊").
    pub(crate) fn names_a_message(&self) -> bool {
        self.chat_z <= MESSAGES_MAX_CHAT_Z
    }

    /// For a question about a person the service knows by id (the asker of a first-person
    /// question, a member it names), in the working memory's tier: the best line is the best
    /// of that person's few, as inside a time window ([`WINDOW_GATE_MARGIN`]), unless it reads
    /// as chat ([`NAMED_MAX_CHAT_Z`]). On `make bench-people`'s family group, "我现在在哪上班？"
    /// measured a `memory_z` of 6.26 and a `chat_z` of 2.19, over the working memory's 2.0, and
    /// was held back; first-person small talk ("我好累啊", "我饿了") sits at a `chat_z` of 7.5.
    /// Figures in docs/benchmarks.md (`make bench-people`).
    pub(crate) fn asks_about_a_person(&self) -> bool {
        self.margin() >= WINDOW_GATE_MARGIN && self.chat_z <= NAMED_MAX_CHAT_Z
    }

    /// For a message whose time words name a window that holds memories (`memory_z` measured
    /// within it): the words already say it asks about that time.
    pub(crate) fn asks_about_a_time(&self) -> bool {
        self.margin() >= WINDOW_GATE_MARGIN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_about_a_known_person_asks_with_a_smaller_margin_but_never_as_chat() {
        // "我现在在哪上班？" from its asker, and "我好累啊", as e5 measured them on
        // `make bench-people`'s family group.
        let about_self = Relevance {
            memory_z: 6.26,
            chat_z: 2.19,
        };
        assert!(!about_self.asks_for_messages(false) && about_self.asks_about_a_person());
        let tired = Relevance {
            memory_z: 2.64,
            chat_z: 7.68,
        };
        assert!(!tired.asks_about_a_person());
    }

    #[test]
    fn a_long_question_near_a_chat_line_still_asks_for_messages() {
        // "when and where is the next game night, and how do I get in?" against
        // "how's everyone doing?", as multilingual-e5 measures them on the group-chat bench.
        let long_question = Relevance {
            memory_z: 5.70,
            chat_z: 2.47,
        };
        let small_talk = Relevance {
            memory_z: 5.50,
            chat_z: 2.65,
        };
        assert!(long_question.asks_for_messages(true));
        assert!(
            !long_question.asks_for_messages(false),
            "short, it reads as chat"
        );
        assert!(!small_talk.asks_for_messages(false));
        assert!(!Relevance {
            memory_z: 9.0,
            chat_z: 4.0
        }
        .asks_for_messages(true));
    }

    #[test]
    fn a_message_naming_a_memory_asks_for_it_unless_it_reads_as_chat() {
        let word = |chat_z| Relevance {
            memory_z: 0.0,
            chat_z,
        };
        assert!(
            !word(3.3).asks_for_memory(),
            "the margin alone holds it back"
        );
        assert!(word(3.3).names_a_memory(), "family");
        assert!(word(-0.7).names_a_memory(), "兰花");
        assert!(!word(4.1).names_a_memory(), "有点困");
        assert!(!word(7.6).names_a_memory(), "收到");
    }

    #[test]
    fn recent_messages_are_for_messages_that_do_not_read_as_chat() {
        let question = Relevance {
            memory_z: 6.0,
            chat_z: 0.8,
        };
        assert!(question.asks_for_messages(false));
        let greeting_with_its_twin = Relevance {
            memory_z: 9.0,
            chat_z: 4.5,
        };
        assert!(greeting_with_its_twin.asks_for_memory());
        assert!(!greeting_with_its_twin.asks_for_messages(false));
        assert!(
            !greeting_with_its_twin.asks_for_messages(true),
            "even a long one"
        );
    }

    #[test]
    fn the_margin_weighs_the_answer_against_chat() {
        let answered = Relevance {
            memory_z: 4.0,
            chat_z: 0.5,
        };
        assert!(answered.asks_for_memory());
        let chat = Relevance {
            memory_z: 4.0,
            chat_z: 3.0,
        };
        assert!(!chat.asks_for_memory());
        let noise = Relevance {
            memory_z: 0.5,
            chat_z: 0.0,
        };
        assert!(!noise.asks_for_memory());
        assert!(noise.asks_about_a_time(), "0.5 within a window");
        let chatty_question = Relevance {
            memory_z: 3.0,
            chat_z: 2.4,
        };
        assert!(!chatty_question.asks_for_memory());
        assert!(chatty_question.asks_about_a_time());
        let chat_naming_a_time = Relevance {
            memory_z: 2.0,
            chat_z: 3.9,
        };
        assert!(!chat_naming_a_time.asks_about_a_time());
    }
}
