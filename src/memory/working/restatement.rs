//! The second threshold rule of consolidation (design 5.13): a fact one member states and a
//! second member states again is a long-term memory, with no LLM involved. "周六下午三点老地方"
//! from 张三, then "周六下午三点，老地方" from 李四: the group agreed on it.
//!
//! A stored message is compared with the last [`PER_SCOPE`] messages of its scope this process
//! stored that could state a fact ([`RecentStatements`], kept in memory with their vectors and
//! folded text): no table query, so the check never takes the embedder's CPU under a burst (a nearest-neighbour search
//! per message, falling back to LanceDB while the resident copy caught up with the writer, cut
//! the drain rate by a fifth). Agreement is said close together; a restatement further back,
//! or stored by another process, is left to the recall threshold rule and the LLM pass.
//!
//! Two messages state one fact when their texts fold to the same (`memory::fact`), or when
//! their vectors are at least the model's measured duplicate bound apart and they name the
//! same numbers (`memory::distinct`), the test recall uses to drop a fact said twice. The
//! bound sits above the closest *different* facts the model scores, so "3点" and "4点", or
//! 青霉素 and 阿莫西林, never count as agreement. What does not count:
//! - the same member saying it again (that is repetition, not agreement);
//! - a message that could state no fact (`working::statement`): the bot's, short chatter
//!   ("好的好的", "+1") and questions.

use std::collections::{HashMap, HashSet, VecDeque};

use super::statement::could_state_a_fact;
use super::StoredMessage;
use crate::embed::duplicates::DuplicateBound;
use crate::memory::fact;
use crate::memory::recall::distinct::same_fact_in_other_words;
use crate::store::MemoryRecord;

/// Whether `message` could state a fact another member agrees with.
pub(crate) fn worth_checking(message: &MemoryRecord) -> bool {
    could_state_a_fact(
        &message.content,
        &message.tags,
        message.speaker_id.as_deref(),
    )
}

/// Whether `earlier` (a stored message with its vector) is the fact `message` states, said by
/// another member. `bound`: the model's duplicate bound, `None` until it is measured (then
/// only texts that fold to the same count).
#[cfg(test)]
pub(crate) fn restates(
    (message, vector): (&MemoryRecord, &[f32]),
    (earlier, earlier_vector): (&MemoryRecord, &[f32]),
    bound: Option<&DuplicateBound>,
) -> bool {
    worth_checking(message)
        && worth_checking(earlier)
        && earlier.memory_scope == message.memory_scope
        && agrees(
            (message, vector, &fact::fold(&message.content)),
            (earlier, earlier_vector, &fact::fold(&earlier.content)),
            bound,
        )
}

/// Whether two statements worth checking, of one scope, with their folded texts, are one
/// fact said by two members.
fn agrees(
    (message, vector, folded): (&MemoryRecord, &[f32], &str),
    (earlier, earlier_vector, earlier_folded): (&MemoryRecord, &[f32], &str),
    bound: Option<&DuplicateBound>,
) -> bool {
    earlier.id != message.id
        && earlier.speaker_id != message.speaker_id
        && (earlier_folded == folded
            || bound.is_some_and(|bound| {
                same_fact_in_other_words(
                    (&message.content, vector),
                    (&earlier.content, earlier_vector),
                    bound,
                )
            }))
}

/// Recent statements kept per scope (about 200 KB of vectors with e5).
pub const PER_SCOPE: usize = 128;
/// Scopes kept at most; past it the scope heard from least recently is dropped.
pub const MAX_SCOPES: usize = 64;

/// A statement in the window, with its folded text (folded once, compared many times).
struct Statement {
    message: StoredMessage,
    folded: String,
}

/// The last [`PER_SCOPE`] stored messages of each scope that could state a fact, oldest first,
/// for the [`MAX_SCOPES`] scopes heard from last.
#[derive(Default)]
pub struct RecentStatements {
    scopes: HashMap<String, VecDeque<Statement>>,
}

impl RecentStatements {
    /// The earliest statement of `message`'s scope that `message` states again (another
    /// member, the same fact: see [`restates`]); then `message` joins the window when it could
    /// state a fact.
    pub(crate) fn restated_by(
        &mut self,
        message: &StoredMessage,
        bound: Option<&DuplicateBound>,
    ) -> Option<MemoryRecord> {
        let record = &message.record;
        let scope = record.memory_scope.clone()?;
        if !worth_checking(record) {
            return None;
        }
        let folded = fact::fold(&record.content);
        let earliest = self.scopes.get(&scope).and_then(|window| {
            window
                .iter()
                .filter(|e| {
                    agrees(
                        (record, &message.vector, &folded),
                        (&e.message.record, &e.message.vector, &e.folded),
                        bound,
                    )
                })
                .min_by_key(|e| e.message.record.created_at)
                .map(|e| e.message.record.clone())
        });
        if !self.scopes.contains_key(&scope) && self.scopes.len() >= MAX_SCOPES {
            self.drop_least_recent_scope();
        }
        let window = self.scopes.entry(scope).or_default();
        if window.len() >= PER_SCOPE {
            window.pop_front();
        }
        window.push_back(Statement {
            message: message.clone(),
            folded,
        });
        earliest
    }

    /// Drop the statements whose rows were erased (a forget, the expiry sweep, another
    /// process's erase notice): an erased message is never compared again, and its text leaves
    /// this process's memory with its row. Returns how many were dropped.
    pub(crate) fn forget(&mut self, erased: &HashSet<&str>) -> usize {
        let mut dropped = 0;
        self.scopes.retain(|_, window| {
            let before = window.len();
            window.retain(|s| !erased.contains(s.message.record.id.as_str()));
            dropped += before - window.len();
            !window.is_empty()
        });
        dropped
    }

    fn drop_least_recent_scope(&mut self) {
        let stalest = self
            .scopes
            .iter()
            .min_by_key(|(_, w)| w.back().and_then(|s| s.message.record.created_at))
            .map(|(scope, _)| scope.clone());
        if let Some(scope) = stalest {
            self.scopes.remove(&scope);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::duplicates::ScriptBound;
    use crate::memory::working::BOT_TAG;

    fn said(id: &str, speaker: &str, text: &str) -> MemoryRecord {
        MemoryRecord {
            id: id.into(),
            memory_type: super::super::MESSAGE_TYPE.into(),
            conversation_id: Some("default:GroupMessage:1".into()),
            memory_scope: Some("家人".into()),
            speaker_id: Some(speaker.into()),
            ..MemoryRecord::with_text(text, &[])
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
    fn the_window_finds_the_earliest_statement_and_forgets_the_oldest_past_its_size() {
        let at = chrono::Utc::now();
        let stored = |id: &str, speaker: &str, text: &str, secs: i64| StoredMessage {
            record: MemoryRecord {
                created_at: Some(at + chrono::Duration::seconds(secs)),
                ..said(id, speaker, text)
            },
            vector: V.to_vec(),
        };
        let dinner = "周六下午三点老地方聚餐";
        let mut recent = RecentStatements::default();
        let b = Some(bound());
        assert!(recent
            .restated_by(&stored("a", "u1", dinner, 0), b.as_ref())
            .is_none());
        let found = recent.restated_by(&stored("b", "u3", dinner, 1), b.as_ref());
        assert_eq!(found.map(|r| r.id), Some("a".to_string()));
        let found = recent.restated_by(&stored("c", "u2", dinner, 2), b.as_ref());
        assert_eq!(found.map(|r| r.id), Some("a".to_string()), "the earliest");
        for i in 0..PER_SCOPE {
            let other = format!("别的事情编号{i}号");
            recent.restated_by(&stored(&format!("x{i}"), "u9", &other, 3), None);
        }
        assert!(
            recent
                .restated_by(&stored("d", "u4", dinner, 4), b.as_ref())
                .is_none(),
            "the statements left the window"
        );
        // The scope heard from least recently goes first.
        let mut recent = RecentStatements::default();
        let in_scope = |id: &str, speaker: &str, scope: usize, secs: i64| {
            let mut m = stored(id, speaker, dinner, secs);
            m.record.memory_scope = Some(format!("s{scope}"));
            m
        };
        for scope in 0..=MAX_SCOPES {
            recent.restated_by(
                &in_scope(&format!("m{scope}"), "u1", scope, scope as i64),
                None,
            );
        }
        assert!(recent
            .restated_by(&in_scope("late0", "u2", 0, 100), None)
            .is_none());
        let last = in_scope("late", "u2", MAX_SCOPES, 101);
        assert!(recent.restated_by(&last, None).is_some());
    }

    #[test]
    fn an_erased_statement_leaves_the_window_and_is_never_restated() {
        let stored = |id: &str, speaker: &str| StoredMessage {
            record: said(id, speaker, "周六下午三点老地方聚餐"),
            vector: V.to_vec(),
        };
        let mut recent = RecentStatements::default();
        assert!(recent.restated_by(&stored("a", "u1"), None).is_none());
        assert_eq!(recent.forget(&HashSet::from(["a", "unknown"])), 1);
        assert!(recent.scopes.is_empty(), "an emptied scope is dropped");
        assert!(recent.restated_by(&stored("b", "u2"), None).is_none());
        let found = recent.restated_by(&stored("c", "u3"), None);
        assert_eq!(found.map(|r| r.id), Some("b".to_string()));
    }

    #[test]
    fn the_same_member_the_bot_chatter_questions_other_numbers_and_other_scopes_do_not() {
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
        for chatter in [
            "好的好的好的",
            "哈哈哈哈哈哈哈",
            "+1",
            "收到！",
            "周六下午几点聚餐？",
        ] {
            let x = said("x1", "u1", chatter);
            let y = said("y1", "u2", chatter);
            assert!(!restates((&y, &V), (&x, &V), Some(&bound())), "{chatter}");
        }
        let mut elsewhere = said("m5", "u2", "周六下午三点老地方聚餐");
        elsewhere.memory_scope = Some("public".into());
        assert!(!restates((&elsewhere, &V), (&a, &V), Some(&bound())));
    }
}
