//! A question's query vectors, embedded when its message arrives rather than when the bot
//! asks (issue 60, item 1).
//!
//! A recall with the conversation's turns embeds the message and a short context (the last two
//! turns and the message, `memory::turns`): about 25 ms of both cores beside the message's own
//! 15, at every bot turn. Both depend on what was said before the question is asked: the
//! plugins send each message to `/v1/events/message` as it arrives, in AstrBot's first stage,
//! and only later, once the host has built its prompt, ask for the recall. A message marked
//! `to_bot` (an @, a wake word, a private chat) is the question of a recall soon to come, so its
//! texts are embedded then, into the query cache, and the recall finds them there, or waits for
//! what is left of that run (`embed::query_cache`) instead of embedding them again.
//!
//! The message is the recall's query; the turns are the host's history, which the service has
//! seen too, in one of two shapes, and this learns which from the recalls themselves:
//! - **a dialogue** (AstrBot's `req.contexts`, an LLM history kept by a NoneBot bot): the turns
//!   are the bot's earlier exchanges, so the last two are the previous recall's question and the
//!   bot's reply to it;
//! - **the chat's lines** (a host that sends the group's recent messages): the last two lines
//!   said in the conversation before the message, the bot's among them.
//!
//! Each message to the bot records what each shape predicts; the recall that follows tells which
//! one its history matched, and the next message to the bot is embedded with that one. An
//! injection after a message to the bot whose turns were not foreseen (the first in a chat, a
//! host that edits its turns) is searched with the message's vector alone (the keyword leg
//! still reads the turns), so the bot waits no longer than for the question alone (issue 78):
//! its turns cost the model about 40 ms more on 2 cores, at the one moment the bot waits. A
//! host that sends no messages gave nothing to foresee with: its turns are embedded as asked. Nothing here is the source of an answer, only of a cache entry whose text
//! the recall must produce exactly; what is kept per conversation is the two lines' ends, as
//! redacted as the recall's texts, and every erase clears it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::memory::redact::redact;
use crate::memory::turns::{recent_lines, Turn, TurnBound, TurnRole, TURNS_EMBEDDED};

/// Conversations whose last lines are kept; the least recently used goes first.
pub(crate) const CONVERSATIONS_KEPT: usize = 4096;

/// Where a host's history comes from (the module header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Dialogue,
    ChatLines,
    /// Both predicted the last history (a private chat, where the bot's exchanges are the
    /// chat's lines): the dialogue's turns when known, else the lines.
    Either,
}

/// A message to the bot whose recall's texts are to be embedded ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prefetch {
    pub(crate) conversation: String,
    /// The message as the host sent it.
    pub(crate) message: String,
    /// The turns the recall's history is expected to end with, oldest first (each a line's
    /// end, redacted); empty when no shape is known yet, and then the message alone is embedded.
    pub(crate) turns: Vec<String>,
}

impl Prefetch {
    /// The turns as a history, for `turns::Embedded` to build the recall's very texts from.
    pub(crate) fn history(&self) -> Vec<Turn> {
        self.turns
            .iter()
            .map(|content| Turn {
                role: TurnRole::User,
                content: content.clone(),
                name: None,
            })
            .collect()
    }
}

/// What a message to the bot predicted, for its recall to confirm.
#[derive(Debug, Clone)]
struct Expected {
    chat: Vec<String>,
    dialogue: Option<Vec<String>>,
    /// The turns embedded ahead.
    turns: Vec<String>,
    /// When the message came.
    at: Instant,
}

/// One conversation's recent lines.
#[derive(Debug, Default)]
struct Seen {
    /// The last lines said, members' and the bot's (each a line's end, redacted), oldest first.
    lines: VecDeque<String>,
    /// The last recall's message as its host keeps it in the history.
    asked: Option<String>,
    /// The bot's reply after that recall.
    replied: Option<String>,
    expected: Option<Expected>,
    shape: Option<Shape>,
    used: u64,
}

#[derive(Default)]
struct Conversations {
    map: HashMap<String, Seen>,
    clock: u64,
    /// The shape the last recall confirmed, in any conversation: one host sends every one.
    shape: Option<Shape>,
}

impl Conversations {
    fn entry(&mut self, conversation: &str) -> &mut Seen {
        self.clock += 1;
        if !self.map.contains_key(conversation) && self.map.len() >= CONVERSATIONS_KEPT {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.map.remove(&oldest);
            }
        }
        let seen = self.map.entry(conversation.to_string()).or_default();
        seen.used = self.clock;
        seen
    }
}

/// Each conversation's last lines and the history shape the recalls confirmed.
#[derive(Default)]
pub(crate) struct Foresight {
    conversations: Mutex<Conversations>,
    /// Messages to the bot whose texts were embedded ahead, and recalls whose history was
    /// the one embedded ahead.
    prefetched: AtomicU64,
    predicted: AtomicU64,
    /// Recalls that followed a message to the bot, and how long after it they came, summed
    /// (microseconds): the time a host's own stages leave for the embedding ahead.
    followed: AtomicU64,
    lead_micros: AtomicU64,
}

/// What `/metrics` shows of the embedding ahead.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AheadCounts {
    /// Messages to the bot whose texts were embedded ahead.
    pub prefetched: u64,
    /// Recalls whose history was the one embedded ahead.
    pub predicted: u64,
    /// Recalls that followed a message to the bot, and their time after it, summed.
    pub followed: u64,
    pub lead_seconds: f64,
}

/// A line's end as a context embeds it (`bound`: the recall's, [`TurnBound::EMBEDDED`]),
/// redacted as the recall's texts are.
fn line(text: &str, bound: TurnBound<'_>) -> String {
    redact(bound.cut(text.trim()))
}

impl Foresight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Conversations> {
        // Plain values, replaced whole: a panic elsewhere leaves nothing half-written.
        self.conversations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A line said in `conversation` (`is_bot`: the bot's reply). For a member's message to the
    /// bot (`to_bot`), what to embed ahead of its recall. `bound`: how the recall cuts a turn.
    pub(crate) fn said(
        &self,
        conversation: &str,
        text: &str,
        is_bot: bool,
        to_bot: bool,
        bound: TurnBound<'_>,
    ) -> Option<Prefetch> {
        let said = line(text, bound);
        if said.is_empty() {
            return None;
        }
        let mut all = self.lock();
        let known = all.shape;
        let seen = all.entry(conversation);
        let prefetch = (to_bot && !is_bot).then(|| {
            let chat: Vec<String> = seen.lines.iter().cloned().collect();
            let dialogue = match (&seen.asked, &seen.replied) {
                (Some(q), Some(r)) => Some(vec![q.clone(), r.clone()]),
                _ => None,
            };
            let turns = match seen.shape.or(known) {
                Some(Shape::ChatLines) => chat.clone(),
                Some(Shape::Dialogue) => dialogue.clone().unwrap_or_default(),
                Some(Shape::Either) => dialogue.clone().unwrap_or_else(|| chat.clone()),
                None => Vec::new(),
            };
            seen.expected = Some(Expected {
                chat,
                dialogue,
                turns: turns.clone(),
                at: Instant::now(),
            });
            Prefetch {
                conversation: conversation.to_string(),
                message: text.trim().to_string(),
                turns,
            }
        });
        if is_bot && seen.asked.is_some() && seen.replied.is_none() {
            seen.replied = Some(said.clone());
        }
        seen.lines.push_back(said);
        while seen.lines.len() > TURNS_EMBEDDED {
            seen.lines.pop_front();
        }
        prefetch
    }

    /// A recall in `conversation` asked `query` after `history`: learn which shape predicted
    /// that history, and remember the question for the next dialogue turn. Whether it missed:
    /// a message to the bot came before it (the host tells the service its chat) and its turns
    /// are not the ones embedded ahead.
    pub(crate) fn asked(
        &self,
        conversation: &str,
        query: &str,
        history: &[Turn],
        bound: TurnBound<'_>,
    ) -> bool {
        let got: Vec<String> = recent_lines(history, TURNS_EMBEDDED, bound)
            .into_iter()
            .map(redact)
            .collect();
        let mut all = self.lock();
        let seen = all.entry(conversation);
        seen.asked = Some(line(query, bound));
        seen.replied = None;
        let Some(expected) = seen.expected.take() else {
            return false;
        };
        let lead = u64::try_from(expected.at.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.followed.fetch_add(1, Ordering::Relaxed);
        self.lead_micros.fetch_add(lead, Ordering::Relaxed);
        if got.is_empty() {
            return false;
        }
        let missed = got != expected.turns;
        if !missed {
            self.predicted.fetch_add(1, Ordering::Relaxed);
        }
        let by_lines = got == expected.chat;
        let by_dialogue = expected.dialogue.as_ref() == Some(&got);
        let shape = match (by_lines, by_dialogue) {
            (true, true) => seen.shape.or(Some(Shape::Either)),
            (true, false) => Some(Shape::ChatLines),
            (false, true) => Some(Shape::Dialogue),
            (false, false) => return missed,
        };
        seen.shape = shape;
        if by_lines != by_dialogue {
            // Only a history one shape alone predicted says what the host sends.
            all.shape = shape;
        }
        missed
    }

    /// Forget every conversation's lines (an erase: none may outlive the rows it erased).
    pub(crate) fn forget_all(&self) {
        let mut all = self.lock();
        all.map.clear();
    }

    /// A message to the bot had its texts embedded ahead.
    pub(crate) fn embedded_ahead(&self) {
        self.prefetched.fetch_add(1, Ordering::Relaxed);
    }

    /// What was embedded ahead since start, and how it served.
    pub(crate) fn counts(&self) -> AheadCounts {
        AheadCounts {
            prefetched: self.prefetched.load(Ordering::Relaxed),
            predicted: self.predicted.load(Ordering::Relaxed),
            followed: self.followed.load(Ordering::Relaxed),
            lead_seconds: self.lead_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::turns::{Embedded, EMBEDDED_TURN_CHARS};

    fn turns(lines: &[&str]) -> Vec<Turn> {
        lines
            .iter()
            .enumerate()
            .map(|(i, c)| Turn {
                role: if i % 2 == 0 {
                    TurnRole::User
                } else {
                    TurnRole::Assistant
                },
                content: c.to_string(),
                name: None,
            })
            .collect()
    }

    const C: &str = "default:GroupMessage:1";
    /// The bound of a model that cannot count tokens: the behaviour these tests state does not
    /// depend on where a line is cut.
    const CHARS: TurnBound<'static> = TurnBound::Chars(EMBEDDED_TURN_CHARS);

    #[test]
    fn a_dialogue_host_is_learned_and_its_next_turns_predicted() {
        let f = Foresight::default();
        f.said(C, "群里有人吗", false, false, CHARS);
        let first = f
            .said(C, "@小助手 周日聚餐订在哪", false, true, CHARS)
            .unwrap();
        assert!(
            first.turns.is_empty(),
            "no shape known yet: the message alone"
        );
        assert!(
            !f.asked(C, "周日聚餐订在哪", &[], CHARS),
            "no turns to miss"
        );
        f.said(C, "订在老地方，晚上六点", true, false, CHARS);
        f.said(C, "好的", false, false, CHARS);
        let second = f.said(C, "那谁去接奶奶", false, true, CHARS).unwrap();
        assert!(
            second.turns.is_empty(),
            "still unknown: the first recall had no history"
        );
        assert!(
            f.asked(
                C,
                "那谁去接奶奶",
                &turns(&["周日聚餐订在哪", "订在老地方，晚上六点"]),
                CHARS,
            ),
            "turns nobody foresaw"
        );
        f.said(C, "爸爸去接", true, false, CHARS);
        f.said(C, "收到", false, false, CHARS);
        let third = f.said(C, "奶奶几点到", false, true, CHARS).unwrap();
        assert_eq!(third.turns, ["那谁去接奶奶", "爸爸去接"]);
        assert_eq!(f.counts().predicted, 0, "not asked yet");
        assert!(!f.asked(
            C,
            "奶奶几点到",
            &turns(&["那谁去接奶奶", "爸爸去接"]),
            CHARS,
        ));
        assert_eq!(f.counts().predicted, 1);
    }

    #[test]
    fn a_host_that_sends_the_chats_lines_is_learned_too() {
        let f = Foresight::default();
        f.said(C, "车子的保险12月3号到期", false, false, CHARS);
        f.said(C, "我来弄", false, false, CHARS);
        f.said(C, "保险谁去办", false, true, CHARS);
        f.asked(
            C,
            "保险谁去办",
            &turns(&["车子的保险12月3号到期", "我来弄"]),
            CHARS,
        );
        f.said(C, "小明说他来办", true, false, CHARS);
        let next = f.said(C, "什么时候到期", false, true, CHARS).unwrap();
        assert_eq!(next.turns, ["保险谁去办", "小明说他来办"]);
        let other = "default:GroupMessage:2";
        f.said(other, "今晚吃什么", false, false, CHARS);
        let there = f.said(other, "有推荐吗", false, true, CHARS).unwrap();
        assert_eq!(
            there.turns,
            ["今晚吃什么"],
            "the host's shape holds in every chat"
        );
    }

    #[test]
    fn a_history_neither_shape_predicted_teaches_nothing() {
        let f = Foresight::default();
        f.said(C, "早", false, false, CHARS);
        f.said(C, "问个事", false, true, CHARS);
        assert!(f.asked(C, "问个事", &turns(&["[User ID: 1] 早"]), CHARS));
        // A recall no message to the bot came before: nothing was foreseen, nothing missed.
        assert!(!f.asked(C, "再问一次", &turns(&["问个事"]), CHARS));
        assert!(f
            .said(C, "还在吗", false, true, CHARS)
            .unwrap()
            .turns
            .is_empty());
        assert_eq!(f.counts().predicted, 0);
    }

    #[test]
    fn lines_are_kept_as_redacted_ends_and_an_erase_forgets_them() {
        let f = Foresight::default();
        let long = format!("{}我的手机号是13812345678", "很长的前言".repeat(20));
        f.said(C, &long, false, false, CHARS);
        f.said(C, "记一下", false, true, CHARS);
        f.asked(C, "记一下", &turns(&[&long]), CHARS);
        let next = f.said(C, "好了吗", false, true, CHARS).unwrap();
        assert_eq!(next.turns.len(), 2);
        assert!(!next.turns[0].contains("13812345678"), "{:?}", next.turns);
        assert!(next.turns[0].chars().count() <= EMBEDDED_TURN_CHARS + 16);
        f.forget_all();
        assert!(
            f.said(C, "还记得吗", false, true, CHARS)
                .unwrap()
                .turns
                .len()
                < 2
        );
    }

    #[test]
    fn the_least_recently_used_conversation_goes_first() {
        let f = Foresight::default();
        for i in 0..=CONVERSATIONS_KEPT {
            f.said(&format!("c{i}"), "hi", false, false, CHARS);
        }
        let all = f.lock();
        assert_eq!(all.map.len(), CONVERSATIONS_KEPT);
        assert!(!all.map.contains_key("c0"));
    }

    #[test]
    fn with_the_models_token_bound_the_texts_embedded_ahead_are_the_recalls() {
        let model =
            crate::embed::E5Embedder::load(&crate::embed::e5_model::resolve_files(None), 8, 1)
                .expect("make setup installs the e5 model");
        let bound = TurnBound::Tokens {
            embedder: &model,
            tokens: 32,
        };
        let f = Foresight::default();
        let question = "Can you remind me what we settled for the New Zealand trip?";
        let reply = "Of course! We settled on the Classic Loop: twelve days in a Britz Voyager \
                     from April 5th, Christchurch to Lake Tekapo, Aoraki/Mount Cook, Queenstown \
                     and Wanaka, with quiet evenings and no long drives after dinner. Would you \
                     like to look at the budget next, or book the campsites first?";
        // The first exchange teaches the host's shape (a dialogue: question and reply).
        f.said(C, "hello again", false, false, bound);
        f.said(C, question, false, true, bound);
        f.asked(C, question, &[], bound);
        f.said(C, "Hi! How can I help today?", true, false, bound);
        f.said(C, "ok", false, false, bound);
        let next = "And the budget?";
        f.said(C, next, false, true, bound);
        f.asked(
            C,
            next,
            &turns(&[question, "Hi! How can I help today?"]),
            bound,
        );
        f.said(C, reply, true, false, bound);
        let last = "What about the campsites then?";
        let ahead = f.said(C, last, false, true, bound).unwrap();
        assert_eq!(ahead.turns.len(), 2);
        assert!(
            ahead.turns[1].len() < reply.len(),
            "the long reply is cut to its end"
        );
        // The recall after it, with the host's history as AstrBot sends it: the same texts.
        let history = turns(&[next, reply]);
        let recall = Embedded::of(&history, last, bound).unwrap();
        let embedded_ahead = Embedded::of(&ahead.history(), last, bound).unwrap();
        assert_eq!(embedded_ahead, recall);
        f.asked(C, last, &history, bound);
        assert_eq!(f.counts().predicted, 1, "the history was the one foreseen");
    }
}
