//! What a message answers (issue 60): the question before it, embedded with it.
//!
//! In a chat an answer often means little on its own: "订好了，在老地方" answers "周日的家庭聚餐
//! 订在哪里了？", "我带吧，我家还有两筒亚狮龙7号" answers "这周谁带球？". Embedded alone, a later
//! "家庭聚餐订在哪了？" finds the question, never the answer. So a message that follows a question
//! is embedded as a **contextual passage**: what others said just before it (within
//! [`reply_window`](LastSaid::new)), then the message itself. The row keeps the message's own
//! text: it is what recall shows and what the keyword search matches; only its vector carries
//! the turn it answers, and the row is tagged [`REPLY_TAG`](crate::store::schema::REPLY_TAG).
//!
//! Only after a question. Measured on the group-chat set (facts found of 45, chatter made
//! memories): each message alone 31 and 16; every message with the message before it 29; every
//! short one with the lines before it 27 and 20 ("收到，那我也停那边" and "sounds good" took the
//! places of the facts they acknowledged); a message after a question, whatever its length, 33
//! and 13. A short reply so embedded (`statement::is_short`: 16 characters of CJK text, or 8
//! words otherwise) is never a memory by a rule without an LLM: its words alone say nothing
//! (`statement::could_state_a_fact`).
//!
//! Or when it says it goes on from them: a message that opens with 那就, 那我, 那你, 那咱 or
//! "and" ([`CONTINUING`]) is embedded with the lines said just before it, its own speaker's
//! too, question or not: "那我明天六点整到妈楼下接她" closes "老弟，妈明天是我去接还是你去接" /
//! "你去吧，你那边过去顺路", and "and I'll teach Spirit Island that day" goes on from the
//! December plan two acknowledgements earlier. Alone, neither was found by its question ("寿宴
//! 那天谁去接外婆？": 妈 to the one who says it is 外婆 to the one who asks). On the group-chat
//! set, facts found 40 -> 41 of 45: those two found, one lost ("那就订好利来八寸的黑森林", now
//! embedded beside the mango talk before it); chatter memories, small talk and the short-reply
//! set unchanged.
//!
//! What was said before: the [`ANSWERED_MESSAGES`] latest messages of others that ask or say
//! something (`statement::says_something`: not "+1", "👍" or "[图片]"; a question as short as
//! "几点？" counts) among the conversation's last [`KEPT_PER_CONVERSATION`], one of them a
//! question. Two, because in a group a line from a
//! third member often lands between a question and its answer; on the short-reply set the
//! message just before alone missed each of those. They are known at acceptance, per
//! conversation, in the order of `sent_at` (a message that arrives late gets no predecessor
//! newer than itself), and journaled with the message, so a replay after a crash embeds the
//! same passage. Bounded: the last messages of at most [`CONVERSATIONS_KEPT`] conversations,
//! each cut to its last [`ANSWERED_CHARS`] characters. Nothing here is kept beyond what the
//! journal already holds (the texts are redacted at acceptance), and any erase, here or told by
//! another process, empties it ([`LastSaid::forget_all`]): a forgotten question must not ride
//! into the next reply's passage.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

use super::statement::{is_a_question, says_something};

/// Characters of a predecessor kept for the passage (its end).
pub const ANSWERED_CHARS: usize = 200;
/// Messages before one that go into its passage, at most.
pub const ANSWERED_MESSAGES: usize = 2;
/// A conversation's last messages kept to find them.
pub const KEPT_PER_CONVERSATION: usize = 4;
/// Conversations whose last message is kept; the oldest goes first.
pub const CONVERSATIONS_KEPT: usize = 4096;

/// The passage a message is embedded as: what it answers, if anything, then its own text.
pub fn passage(answers: Option<&str>, content: &str) -> String {
    match answers {
        Some(before) if !before.is_empty() => format!("{before}\n{content}"),
        _ => content.to_string(),
    }
}

#[derive(Debug, Clone)]
struct Said {
    speaker_id: String,
    /// Redacted, cut to [`ANSWERED_CHARS`].
    text: String,
    sent_at: DateTime<Utc>,
}

/// The last messages of each conversation, to give the next short one its predecessors.
pub struct LastSaid {
    window: Duration,
    /// Oldest first.
    last: Mutex<HashMap<String, VecDeque<Said>>>,
}

impl LastSaid {
    /// `reply_window`: how long after a message a short reply is taken to answer it; zero turns
    /// contextual passages off.
    pub(crate) fn new(reply_window: Duration) -> LastSaid {
        LastSaid {
            window: reply_window,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// What the message `content` (redacted) of `speaker_id`, sent at `sent_at`, answers: the
    /// latest messages others said at most the window before it that ask or say something,
    /// oldest first, one per line, when one of them is a question; for a message that goes on
    /// from them ([`continues`]), the latest that ask or say something, its speaker's own
    /// included. Then this message joins the conversation's last.
    pub(crate) fn follow(
        &self,
        conversation: &str,
        speaker_id: &str,
        content: &str,
        sent_at: DateTime<Utc>,
    ) -> Option<String> {
        if self.window <= Duration::zero() {
            return None;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let continues = continues(content);
        let answers = match last.get(conversation) {
            Some(before) => {
                let mut picked: Vec<&str> = before
                    .iter()
                    .rev()
                    .filter(|p| p.sent_at <= sent_at && sent_at - p.sent_at <= self.window)
                    .filter(|p| continues || p.speaker_id != speaker_id)
                    .filter(|p| is_a_question(&p.text) || says_something(&p.text))
                    .take(ANSWERED_MESSAGES)
                    .map(|p| p.text.as_str())
                    .collect();
                picked.reverse();
                let asked = picked.iter().any(|p| is_a_question(p));
                Some(picked.join("\n")).filter(|p| (asked || continues) && !p.is_empty())
            }
            None => None,
        };
        if last.len() >= CONVERSATIONS_KEPT && !last.contains_key(conversation) {
            let oldest = last
                .iter()
                .min_by_key(|(_, s)| s.back().map(|s| s.sent_at))
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                last.remove(&oldest);
            }
        }
        let kept = last.entry(conversation.to_string()).or_default();
        let text = tail(content, ANSWERED_CHARS);
        if kept
            .iter()
            .any(|p| p.sent_at == sent_at && p.speaker_id == speaker_id && p.text == text)
        {
            return answers; // the same message sent again (a host's retry): kept once
        }
        let at = kept.partition_point(|p| p.sent_at <= sent_at);
        kept.insert(
            at,
            Said {
                speaker_id: speaker_id.to_string(),
                text: text.to_string(),
                sent_at,
            },
        );
        if kept.len() > KEPT_PER_CONVERSATION {
            kept.pop_front();
        }
        answers
    }

    /// Forget every conversation's last messages: after an erase, the next reply is embedded
    /// with nothing rather than with what was erased.
    pub(crate) fn forget_all(&self) {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Words a message opens with when it goes on from what was just said ("那我明天六点到妈楼下接
/// 她", "and I'll teach Spirit Island that day").
const CONTINUING: [&str; 6] = ["那就", "那我", "那你", "那咱", "and ", "And "];

/// Whether `content` opens as a continuation of the lines before it.
fn continues(content: &str) -> bool {
    let text = content.trim_start();
    CONTINUING.iter().any(|w| text.starts_with(w))
}

/// The last `chars` characters of `text`.
fn tail(text: &str, chars: usize) -> &str {
    match text.char_indices().rev().nth(chars.saturating_sub(1)) {
        Some((i, _)) if chars > 0 => &text[i..],
        _ if chars == 0 => "",
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + Duration::minutes(min)
    }

    #[test]
    fn a_line_that_goes_on_from_the_ones_before_it_is_embedded_with_them() {
        let last = LastSaid::new(Duration::minutes(5));
        let q = "老弟，妈明天是我去接还是你去接";
        let a = "你去吧，你那边过去顺路";
        last.follow("c", "dad", q, at(0));
        last.follow("c", "uncle", a, at(1));
        // It goes on from its own question and the answer to it.
        let on = "那我明天六点整到妈楼下接她，乐乐你跟我一起";
        let both = format!("{q}\n{a}");
        assert_eq!(
            last.follow("c", "dad", on, at(2)).as_deref(),
            Some(both.as_str())
        );
        // From a statement too, past the acknowledgements.
        let plan = "ok so December plan: Saturday Dec 12 at my place, 3pm";
        last.follow("d", "mia", plan, at(0));
        last.follow("d", "sofia", "+1", at(1));
        last.follow("d", "tom", "👌", at(1));
        let teach = "and I'll teach Spirit Island that day";
        assert_eq!(last.follow("d", "ken", teach, at(2)).as_deref(), Some(plan));
        // A statement that does not go on from them is embedded alone.
        assert_eq!(
            last.follow(
                "d",
                "priya",
                "I'm in Singapore for work Dec 5 to Dec 19",
                at(3)
            ),
            None
        );
        // Nothing before it within the window: alone.
        assert_eq!(
            last.follow("e", "ken", "and the snacks are on me", at(0)),
            None
        );
    }

    #[test]
    fn a_short_reply_gets_the_message_before_it_from_someone_else_within_the_window() {
        let last = LastSaid::new(Duration::minutes(5));
        let q = "周日的家庭聚餐订在哪里了？";
        assert_eq!(last.follow("c", "mei", q, at(0)), None, "nothing before it");
        assert_eq!(
            last.follow("c", "ming", "订好了，在老地方", at(1))
                .as_deref(),
            Some(q)
        );
        // Its own question answers nothing, nor does a statement.
        assert_eq!(last.follow("c", "mei", "对了对了", at(2)), None);
        // A long answer is embedded with its question too.
        last.follow("d", "mei", "这周谁带球？", at(3));
        let long = "我带吧，我家还有两筒亚狮龙7号，周六都带上";
        assert_eq!(
            last.follow("d", "ming", long, at(3)).as_deref(),
            Some("这周谁带球？")
        );
        // Past the window, or in another conversation: nothing.
        assert_eq!(last.follow("c", "ming", "好的", at(9)), None);
        assert_eq!(last.follow("other", "mei", "好的", at(9)), None);
    }

    #[test]
    fn a_line_between_the_question_and_its_answer_leaves_the_question_in_the_passage() {
        let last = LastSaid::new(Duration::minutes(5));
        last.follow("c", "mei", "房东说什么时候来修热水器？", at(0));
        last.follow("c", "li", "今天好冷啊，大家多穿点", at(1));
        last.follow("c", "wang", "+1", at(1));
        assert_eq!(
            last.follow("c", "ming", "周四下午", at(2)).as_deref(),
            Some("房东说什么时候来修热水器？\n今天好冷啊，大家多穿点"),
            "\"+1\" says nothing; two lines at most"
        );
    }

    #[test]
    fn a_late_message_gets_no_newer_predecessor_and_takes_its_place_in_time() {
        let last = LastSaid::new(Duration::minutes(5));
        last.follow("c", "mei", "车子的保险谁去续？", at(10));
        assert_eq!(
            last.follow("c", "ming", "明天下雨吗", at(4)),
            None,
            "sent before it"
        );
        assert_eq!(
            last.follow("c", "ming", "我来弄", at(11)).as_deref(),
            Some("车子的保险谁去续？"),
            "the late line is older, and its own speaker's"
        );
    }

    #[test]
    fn a_message_sent_again_is_kept_once() {
        let last = LastSaid::new(Duration::minutes(5));
        last.follow("c", "li", "周六几点集合？", at(0));
        last.follow("c", "mei", "周日聚餐在哪？", at(1));
        last.follow("c", "mei", "周日聚餐在哪？", at(1));
        assert_eq!(
            last.follow("c", "ming", "老地方", at(2)).as_deref(),
            Some("周六几点集合？\n周日聚餐在哪？"),
            "a resent line takes no second slot"
        );
    }

    #[test]
    fn after_an_erase_the_next_reply_answers_nothing() {
        let last = LastSaid::new(Duration::minutes(5));
        last.follow("c", "mei", "周日的家庭聚餐订在哪里了？", at(0));
        last.forget_all();
        assert_eq!(last.follow("c", "ming", "订好了，在老地方", at(1)), None);
    }

    #[test]
    fn a_zero_window_is_off_and_the_kept_conversations_are_bounded() {
        let off = LastSaid::new(Duration::zero());
        off.follow("c", "mei", "周日聚餐在哪？", at(0));
        assert_eq!(off.follow("c", "ming", "老地方", at(1)), None);
        let last = LastSaid::new(Duration::minutes(5));
        for i in 0..(CONVERSATIONS_KEPT as i64 + 10) {
            last.follow(&format!("c{i}"), "mei", "hello there", at(i));
        }
        for i in 0..10 {
            last.follow("c0", "mei", "hello there", at(i));
        }
        let kept = last.last.lock().unwrap();
        assert_eq!(kept.len(), CONVERSATIONS_KEPT, "bounded");
        assert!(kept.values().all(|k| k.len() <= KEPT_PER_CONVERSATION));
        assert_eq!(
            passage(Some("周日聚餐在哪？"), "老地方"),
            "周日聚餐在哪？\n老地方"
        );
        assert_eq!(passage(None, "老地方"), "老地方");
    }
}
