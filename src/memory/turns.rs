//! The conversation so far as part of a recall query (issue 48).
//!
//! A host that asks with the last message alone loses every follow-up: "那她后来怎么样了"
//! carries nothing to search with, and the memory the chat is about sits in the turns before
//! it. The whole dialogue as one query blurs the point instead. So the injection event (and
//! `/v1/recall`) take the recent turns beside the current message, and a recall searches with
//! two texts: the message itself, and the **context**, the recent turns and the message joined
//! as plain lines (no speaker names: they are the same in every turn and pull toward any memory
//! that names that person).
//!
//! - The vector search asks with one vector, the sum of the message's unit query vector
//!   ([`MESSAGE_WEIGHT`], 0.3) and a short context's (the last [`TURNS_EMBEDDED`] turns and
//!   the message, 0.7), renormalised. Its cosine with a memory is the weighted mean of the two
//!   cosines over one constant, so it ranks as a weighted fusion of two searches would, with
//!   one search: the similarity cut, the relevance gate, the resident copy and the LanceDB
//!   fallback are unchanged.
//! - The keyword search asks with a longer context, the last [`TURNS_MATCHED`] turns and the
//!   message: a rare word said several turns ago ("白内障") names the memory as well as one
//!   said now, and matching costs no model call.
//!
//! Measured on MADial-Bench with the e5 model alone (MRR@10, docs/benchmarks.md): the last
//! message 0.595, the whole dialogue as one text 0.613, the message and an 8-turn context
//! fused evenly 0.657; one vector per turn with decaying weights 0.599, max-similarity over
//! turns 0.550. The context's embedding is the cost of a recall with history (the engine takes
//! about 1 ms a token on 2 cores), so it holds 2 turns, not 8: cross-validated on MADial
//! (5 folds, the message's weight picked on 4), the 2-turn context scores 0.662 (0.3 picked
//! in every fold) against 0.651 for 8 turns, with half the characters to embed; through the
//! service, hybrid, 0.666 against 0.669 (R@1 0.314 against 0.304).
//!
//! Bounded: each turn cut to its last [`TURN_CHARS`] characters for the keyword search and
//! [`EMBEDDED_TURN_CHARS`] for the vector (the end of a long reply is what the next message
//! answers), and a context to its last [`CONTEXT_CHARS`]; a request may send at most
//! [`MAX_TURNS`] turns. The embedded turns' bound is the cost's: a recall after a bot reply of
//! 162 characters took 118 ms (release, 2 cores; 57 ms with the bound) against 44 ms after a
//! 27-character one (`make bench-history-latency`); MADial's turns are at most 60 characters,
//! so its figures hold. The short context is embedded in the same batch as the
//! message. Both contexts are redacted before they are embedded or matched, like any query.

use serde::{Deserialize, Serialize};

use crate::memory::redact::redact;

/// Turns a request may send (more is a caller's error).
pub const MAX_TURNS: usize = 50;
/// The most recent turns of the context the keyword search asks with, beside the message.
pub const TURNS_MATCHED: usize = 8;
/// The most recent turns of the context that is embedded, beside the message: its cost is
/// the cost of a recall with history.
pub const TURNS_EMBEDDED: usize = 2;
/// Characters of one turn in the keyword search's context (its end).
pub const TURN_CHARS: usize = 300;
/// Characters of one turn in the embedded context (its end): the longest turn of MADial-Bench,
/// where the embedded context was chosen, so there it cuts nothing. A bot's reply is often
/// longer, and each character costs the recall about half a millisecond to embed.
pub const EMBEDDED_TURN_CHARS: usize = 60;
/// Characters of the whole context (its end): about 400 tokens, one window of the model.
pub const CONTEXT_CHARS: usize = 600;
/// The message's share of the query vector; the short context has the rest (cross-validated
/// on MADial: the module header).
pub const MESSAGE_WEIGHT: f32 = 0.3;

/// Who said a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnRole {
    User,
    Assistant,
}

/// One earlier turn of the conversation, oldest first in a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub role: TurnRole,
    pub content: String,
    /// The speaker's name in a group. Accepted so a host can send its history as it keeps it;
    /// not searched with (see the module header).
    #[serde(default)]
    pub name: Option<String>,
}

/// Why a history cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("history holds {0} turns; at most {MAX_TURNS} may be sent (send the most recent)")]
pub struct TooManyTurns(pub usize);

/// A history a request may send: at most [`MAX_TURNS`] turns.
pub(crate) fn check(history: &[Turn]) -> Result<(), TooManyTurns> {
    match history.len() {
        n if n > MAX_TURNS => Err(TooManyTurns(n)),
        _ => Ok(()),
    }
}

/// The context of `message`: the `turns` most recent turns of `history`, each cut to its last
/// `turn_chars` characters, and the message, one per line, oldest first, bounded as the module
/// header says. `None` when no turn has text.
pub(crate) fn context(
    history: &[Turn],
    message: &str,
    turns: usize,
    turn_chars: usize,
) -> Result<Option<String>, TooManyTurns> {
    check(history)?;
    let mut lines = recent_lines(history, turns, turn_chars);
    if lines.is_empty() {
        return Ok(None);
    }
    lines.push(message);
    Ok(Some(tail(&lines.join("\n"), CONTEXT_CHARS).to_string()))
}

/// The last `turns` turns of `history` that have text, each cut to its last `turn_chars`
/// characters, oldest first: the lines a context holds before its message.
pub(crate) fn recent_lines(history: &[Turn], turns: usize, turn_chars: usize) -> Vec<&str> {
    let mut lines: Vec<&str> = history
        .iter()
        .rev()
        .map(|t| tail(t.content.trim(), turn_chars))
        .filter(|t| !t.is_empty())
        .take(turns)
        .collect();
    lines.reverse();
    lines
}

/// What a recall embeds for the searched `text` after `history`: the message and, when a turn
/// has text, the short context, both redacted like any query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Embedded {
    pub(crate) message: String,
    pub(crate) context: Option<String>,
}

impl Embedded {
    pub(crate) fn of(history: &[Turn], text: &str) -> Result<Embedded, TooManyTurns> {
        let context = context(history, text, TURNS_EMBEDDED, EMBEDDED_TURN_CHARS)?;
        Ok(Embedded {
            message: redact(text),
            context: context.map(|c| redact(&c)),
        })
    }

    /// The texts the model embeds, the message first.
    pub(crate) fn texts(self) -> Vec<String> {
        std::iter::once(self.message).chain(self.context).collect()
    }
}

/// The last `chars` characters of `text`.
pub(crate) fn tail(text: &str, chars: usize) -> &str {
    if chars == 0 {
        return "";
    }
    match text.char_indices().rev().nth(chars - 1) {
        Some((i, _)) => &text[i..],
        None => text,
    }
}

/// The weighted sum of unit vectors, renormalised: one query vector whose cosine with a
/// memory ranks as the weighted sum of the parts' cosines. `None` when it has no length.
pub(crate) fn combine(parts: &[(&[f32], f32)]) -> Option<Vec<f32>> {
    let dim = parts.first()?.0.len();
    let mut sum = vec![0.0f32; dim];
    for (vector, weight) in parts {
        if vector.len() != dim {
            return None;
        }
        for (s, x) in sum.iter_mut().zip(vector.iter()) {
            *s += weight * x;
        }
    }
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return None;
    }
    sum.iter_mut().for_each(|x| *x /= norm);
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(role: TurnRole, content: &str) -> Turn {
        Turn {
            role,
            content: content.into(),
            name: Some("张三".into()),
        }
    }

    #[test]
    fn the_context_is_the_recent_turns_and_the_message_as_plain_lines() {
        let history = [
            turn(TurnRole::User, "奶奶最近身体怎么样"),
            turn(TurnRole::Assistant, "她上周去医院复查了"),
            turn(TurnRole::User, "  "),
        ];
        assert_eq!(
            context(&history, "那她后来呢", TURNS_MATCHED, TURN_CHARS)
                .unwrap()
                .as_deref(),
            Some("奶奶最近身体怎么样\n她上周去医院复查了\n那她后来呢")
        );
        assert_eq!(context(&[], "q", TURNS_MATCHED, TURN_CHARS).unwrap(), None);
        assert_eq!(
            context(&history[2..], "q", TURNS_MATCHED, TURN_CHARS).unwrap(),
            None,
            "no turn has text"
        );
    }

    #[test]
    fn a_context_is_bounded_in_turns_and_characters() {
        let long = "很".repeat(1000) + "结尾";
        let mut history: Vec<Turn> = (0..20)
            .map(|i| turn(TurnRole::User, &format!("turn {i}")))
            .collect();
        for turns in [TURNS_MATCHED, TURNS_EMBEDDED] {
            let got = context(&history, "now", turns, TURN_CHARS)
                .unwrap()
                .unwrap();
            assert_eq!(got.lines().count(), turns + 1);
            assert!(got.starts_with(&format!("turn {}", 20 - turns)), "{got}");
        }
        history.push(turn(TurnRole::User, &long));
        history.push(turn(TurnRole::Assistant, &long));
        let got = context(&history, "now", TURNS_MATCHED, TURN_CHARS)
            .unwrap()
            .unwrap();
        assert_eq!(got.chars().count(), CONTEXT_CHARS);
        assert!(got.ends_with("结尾\nnow"), "{got}");
        // The embedded context: each turn's last EMBEDDED_TURN_CHARS characters.
        let got = context(&history, "now", TURNS_EMBEDDED, EMBEDDED_TURN_CHARS)
            .unwrap()
            .unwrap();
        let ending = format!("{}结尾", "很".repeat(EMBEDDED_TURN_CHARS - 2));
        assert_eq!(got, format!("{ending}\n{ending}\nnow"));
        let too_many: Vec<Turn> = (0..=MAX_TURNS).map(|_| turn(TurnRole::User, "x")).collect();
        assert_eq!(
            context(&too_many, "q", TURNS_EMBEDDED, EMBEDDED_TURN_CHARS),
            Err(TooManyTurns(MAX_TURNS + 1))
        );
        assert_eq!(tail("abc", 5), "abc");
        assert_eq!(tail("abc", 2), "bc");
        assert_eq!(tail("abc", 0), "");
    }

    #[test]
    fn the_combined_vector_ranks_as_the_weighted_sum_of_cosines() {
        let a = [1.0f32, 0.0, 0.0];
        let b = [0.0f32, 1.0, 0.0];
        let q = combine(&[(&a, 1.0), (&b, 0.5)]).unwrap();
        let norm: f32 = q.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-6);
        // m1 is closer to a, m2 to b: the weighted sums of cosines order them as the combined
        // vector does.
        let m1 = [0.8f32, 0.6, 0.0];
        let m2 = [0.3f32, 0.954, 0.0];
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        let fused = |m: &[f32]| dot(m, &a) + 0.5 * dot(m, &b);
        assert_eq!(fused(&m1) > fused(&m2), dot(&q, &m1) > dot(&q, &m2));
        assert!(
            combine(&[(&a, 1.0), (&[1.0, 0.0], 1.0)]).is_none(),
            "dimensions differ"
        );
        assert!(combine(&[(&a, 1.0), (&a, -1.0)]).is_none(), "no length");
        assert!(combine(&[]).is_none());
    }
}
