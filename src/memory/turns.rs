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
//! [`MAX_TURNS`] turns. The embedded turns' bound was the cost's: a recall after a bot reply of
//! 162 characters took 118 ms (release, 2 cores; 57 ms with the bound) against 44 ms after a
//! 27-character one (`make bench-history-latency`). Since the texts of a history the service
//! has seen are embedded ahead (`recall::prefetch`), a longer context costs background CPU, not
//! the recall's latency, and 60 characters of English are about 12 words, so issue 77 asked for
//! the bound in the model's own tokens. [`TurnBound::Tokens`] cuts each turn to its last `n`
//! tokens as the embedding model's tokenizer counts them (`Embedder::query_tokens`), from a
//! word's start ([`token_tail`]). Cross-validated on MADial-Bench zh and on RealMem, an English
//! set of questions asked inside sessions after long assistant replies (the protocol of
//! `make bench-context`, run as `scripts/context-cv.py`: 1, 2 or 4 turns of 16, 32 or 64 tokens
//! and the message's weight picked on four folds of both sets), no token bound beat the 60
//! characters on either set: MRR@10 0.651 and 0.235 picked per fold, against 0.657 and 0.238
//! (8 whole turns: 0.666 and 0.207). On RealMem, whose questions are long and say what they
//! ask, the message alone scores best (0.250) and every longer context loses. A turn costs what
//! its tokens do, about 2 CPU ms each on one loaded core (60 characters: about 15–23 tokens). So the service keeps [`TurnBound::EMBEDDED`], 60 characters of each of
//! the last 2 turns, for every model; the token bound is the bench's, to choose again on a set
//! whose English questions need their turns. The short context is embedded in the same batch as
//! the message. Both contexts are redacted before they are embedded or matched, like any query.

use serde::{Deserialize, Serialize};

use crate::embed::script::is_cjk;
use crate::embed::Embedder;
use crate::memory::redact::redact;

/// Turns a request may send (more is a caller's error).
pub const MAX_TURNS: usize = 50;
/// The most recent turns of the context the keyword search asks with, beside the message.
pub const TURNS_MATCHED: usize = 8;
/// The most recent turns of the context that is embedded, beside the message (cross-validated
/// on MADial-Bench zh and RealMem: the module header).
pub const TURNS_EMBEDDED: usize = 2;
/// Characters of one turn in the keyword search's context (its end).
pub const TURN_CHARS: usize = 300;
/// Characters of one turn in the embedded context (its end): the longest turn of MADial-Bench
/// zh. Bounds in the model's tokens did not beat it on cross-validation (the module header).
pub const EMBEDDED_TURN_CHARS: usize = 60;
/// Characters of a context cut by characters (its end): about 400 tokens, one window of the
/// model.
pub const CONTEXT_CHARS: usize = 600;
/// The message's share of the query vector; the short context has the rest (cross-validated:
/// the module header).
pub const MESSAGE_WEIGHT: f32 = 0.3;
/// More bytes than any one token of a model covers: a text longer than `n` times this holds
/// more than `n` tokens, so [`token_tail`] need not count it whole.
const MAX_TOKEN_BYTES: usize = 256;

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

/// How one turn of a context is cut to its end.
#[derive(Clone, Copy)]
pub enum TurnBound<'a> {
    /// Its last `n` characters; the context then to its last [`CONTEXT_CHARS`].
    Chars(usize),
    /// Its last `tokens` tokens of `embedder`'s model, from a word's start ([`token_tail`]);
    /// the context is not cut again (it is at most the turns' tokens and the message's).
    Tokens {
        embedder: &'a dyn Embedder,
        tokens: usize,
    },
}

impl TurnBound<'_> {
    /// The embedded context's bound as shipped: [`EMBEDDED_TURN_CHARS`] characters of each turn.
    /// The same in the model's tokens ([`TurnBound::Tokens`]) did not score better on either set
    /// (the module header), so it is the bench's (`benches/context_turns.rs`), not the service's.
    pub const EMBEDDED: TurnBound<'static> = TurnBound::Chars(EMBEDDED_TURN_CHARS);

    /// The end of `text` this bound keeps. Cut again, what it kept is kept whole.
    pub(crate) fn cut<'t>(&self, text: &'t str) -> &'t str {
        match *self {
            TurnBound::Chars(n) => tail(text, n),
            TurnBound::Tokens { embedder, tokens } => {
                token_tail(text, tokens, |t| embedder.query_tokens(t))
                    .unwrap_or_else(|| tail(text, EMBEDDED_TURN_CHARS))
            }
        }
    }
}

/// The context of `message`: the `turns` most recent turns of `history`, each cut to its end by
/// `bound`, and the message, one per line, oldest first, bounded as the module header says.
/// `None` when no turn has text.
pub fn context(
    history: &[Turn],
    message: &str,
    turns: usize,
    bound: TurnBound<'_>,
) -> Result<Option<String>, TooManyTurns> {
    check(history)?;
    let mut lines = recent_lines(history, turns, bound);
    if lines.is_empty() {
        return Ok(None);
    }
    lines.push(message);
    let joined = lines.join("\n");
    Ok(Some(match bound {
        TurnBound::Chars(_) => tail(&joined, CONTEXT_CHARS).to_string(),
        TurnBound::Tokens { .. } => joined,
    }))
}

/// The last `turns` turns of `history` that have text, each cut to its end by `bound`, oldest
/// first: the lines a context holds before its message.
pub(crate) fn recent_lines<'h>(
    history: &'h [Turn],
    turns: usize,
    bound: TurnBound<'_>,
) -> Vec<&'h str> {
    let mut lines: Vec<&str> = history
        .iter()
        .rev()
        .map(|t| bound.cut(t.content.trim()))
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
    /// `bound`: how a turn is cut ([`TurnBound::EMBEDDED`] in the service).
    pub(crate) fn of(
        history: &[Turn],
        text: &str,
        bound: TurnBound<'_>,
    ) -> Result<Embedded, TooManyTurns> {
        let context = context(history, text, TURNS_EMBEDDED, bound)?;
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

/// The longest end of `text` that starts where a word does and takes at most `max` tokens by
/// `count` (the embedding model's tokenizer): `text` itself when it fits. `None` when `count`
/// cannot count.
///
/// A word starts after a space, at a CJK letter (written without spaces: each is a word here)
/// and where letters or digits meet anything else, so the cut never splits a word into pieces
/// the model would read as others; a suffix that starts at a word keeps the later words'
/// tokens as they were. The search gallops back from the end, so its work is about the length
/// kept, not the turn's (a pasted log of 80,000 characters costs what its end does).
pub(crate) fn token_tail(
    text: &str,
    max: usize,
    count: impl Fn(&str) -> Option<usize>,
) -> Option<&str> {
    if text.len() <= max.saturating_mul(MAX_TOKEN_BYTES) && count(text)? <= max {
        return Some(text);
    }
    let mut starts = word_starts(text);
    starts.push(text.len());
    let fits = |i: usize| count(&text[starts[i]..]).map(|n| n <= max);
    // The empty end fits; step back 1, 2, 4… words until a start does not, then bisect.
    let (mut good, mut step) = (starts.len() - 1, 1usize);
    let mut bad = loop {
        if good == 0 {
            return Some(&text[starts[0]..]);
        }
        let probe = good.saturating_sub(step);
        if fits(probe)? {
            good = probe;
            step = step.saturating_mul(2);
        } else {
            break probe;
        }
    };
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if fits(mid)? {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(&text[starts[good]..])
}

/// Byte offsets where a word starts in `text` ([`token_tail`]), ascending.
fn word_starts(text: &str) -> Vec<usize> {
    let word = |c: char| c.is_alphanumeric() && !is_cjk(c);
    let mut starts = Vec::new();
    let mut prev: Option<char> = None;
    for (i, c) in text.char_indices() {
        let starts_here =
            !c.is_whitespace() && prev.is_none_or(|p| p.is_whitespace() || !(word(p) && word(c)));
        if starts_here {
            starts.push(i);
        }
        prev = Some(c);
    }
    starts
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
            context(
                &history,
                "那她后来呢",
                TURNS_MATCHED,
                TurnBound::Chars(TURN_CHARS)
            )
            .unwrap()
            .as_deref(),
            Some("奶奶最近身体怎么样\n她上周去医院复查了\n那她后来呢")
        );
        assert_eq!(
            context(&[], "q", TURNS_MATCHED, TurnBound::Chars(TURN_CHARS)).unwrap(),
            None
        );
        assert_eq!(
            context(
                &history[2..],
                "q",
                TURNS_MATCHED,
                TurnBound::Chars(TURN_CHARS)
            )
            .unwrap(),
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
            let got = context(&history, "now", turns, TurnBound::Chars(TURN_CHARS))
                .unwrap()
                .unwrap();
            assert_eq!(got.lines().count(), turns + 1);
            assert!(got.starts_with(&format!("turn {}", 20 - turns)), "{got}");
        }
        history.push(turn(TurnRole::User, &long));
        history.push(turn(TurnRole::Assistant, &long));
        let got = context(&history, "now", TURNS_MATCHED, TurnBound::Chars(TURN_CHARS))
            .unwrap()
            .unwrap();
        assert_eq!(got.chars().count(), CONTEXT_CHARS);
        assert!(got.ends_with("结尾\nnow"), "{got}");
        // The embedded context: each turn's last EMBEDDED_TURN_CHARS characters.
        let got = context(
            &history,
            "now",
            TURNS_EMBEDDED,
            TurnBound::Chars(EMBEDDED_TURN_CHARS),
        )
        .unwrap()
        .unwrap();
        let ending = format!("{}结尾", "很".repeat(EMBEDDED_TURN_CHARS - 2));
        assert_eq!(got, format!("{ending}\n{ending}\nnow"));
        let too_many: Vec<Turn> = (0..=MAX_TURNS).map(|_| turn(TurnRole::User, "x")).collect();
        assert_eq!(
            context(
                &too_many,
                "q",
                TURNS_EMBEDDED,
                TurnBound::Chars(EMBEDDED_TURN_CHARS)
            ),
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

    /// Words as tokens: a counter whose cuts are easy to state.
    fn words(text: &str) -> Option<usize> {
        Some(text.split_whitespace().count())
    }

    #[test]
    fn a_token_bound_keeps_the_turns_end_from_a_words_start() {
        let text = "we booked the table for six at the old place near the river";
        assert_eq!(token_tail(text, 3, words), Some("near the river"));
        assert_eq!(token_tail(text, 100, words), Some(text), "it fits: whole");
        assert_eq!(token_tail(text, 0, words), Some(""));
        assert_eq!(token_tail("", 5, words), Some(""));
        // Cut again, what was kept is kept whole: a text embedded ahead is the recall's.
        for max in 0..14 {
            let once = token_tail(text, max, words).unwrap();
            assert_eq!(token_tail(once, max, words), Some(once), "{max}");
            assert!(text.ends_with(once));
        }
        // A long turn costs about what its end does: counted on short texts only.
        let long = "filler ".repeat(20_000) + "the end";
        let longest = std::cell::Cell::new(0usize);
        let counted = |t: &str| {
            longest.set(longest.get().max(t.len()));
            words(t)
        };
        assert_eq!(token_tail(&long, 2, counted), Some("the end"));
        assert!(longest.get() < 200, "counted {} bytes", longest.get());
        assert_eq!(token_tail(text, 3, |_| None), None, "no counter");
    }

    #[test]
    fn words_start_after_spaces_at_cjk_letters_and_at_punctuation() {
        fn starts(t: &str) -> Vec<&str> {
            word_starts(t).into_iter().map(|i| &t[i..]).collect()
        }
        assert_eq!(starts("hi  there"), ["hi  there", "there"]);
        assert_eq!(starts("奶奶ok"), ["奶奶ok", "奶ok", "ok"]);
        assert_eq!(starts("don't"), ["don't", "'t", "t"]);
    }

    #[test]
    fn the_models_tokens_bound_a_turn_at_token_boundaries_keeping_its_end() {
        let model =
            crate::embed::E5Embedder::load(&crate::embed::e5_model::resolve_files(None), 8, 1)
                .expect("make setup installs the e5 model");
        let count = |t: &str| model.query_tokens(t);
        assert_eq!(count(""), Some(0));
        assert_eq!(count("a"), Some(1));
        // Words' tokens add up: a suffix from a word's start is counted as the model reads it.
        let (a, b) = (count("hello").unwrap(), count("world").unwrap());
        assert_eq!(count("hello world"), Some(a + b));
        let reply =
            "Sure! For the trip I'd book the Britz Voyager for the twelve days, pick it up \
                     in Christchurch on April 5th, and keep the last evening in Wanaka quiet, \
                     as you asked: the lake at dusk, no driving after dinner.";
        let bound = TurnBound::Tokens {
            embedder: &model,
            tokens: 16,
        };
        let kept = bound.cut(reply);
        assert!(reply.ends_with(kept) && kept.len() < reply.len(), "{kept}");
        assert!(
            kept.ends_with("no driving after dinner."),
            "the end is kept: {kept}"
        );
        assert!(count(kept).unwrap() <= 16);
        let before = &reply[..reply.len() - kept.len()];
        assert!(before.ends_with(' '), "cut at a word's start: {kept}");
        // One word more would not fit.
        let wider = before.trim_end().rsplit(' ').next().unwrap();
        assert!(count(&format!("{wider} {kept}")).unwrap() > 16);
        assert_eq!(bound.cut(kept), kept, "what was kept is kept whole");
        // Chinese, written without spaces: cut between letters, the end kept.
        let zh = "她上周去医院复查了，医生说恢复得不错，就是还不能吃太甜的东西，要少走动多休息";
        let short = TurnBound::Tokens {
            embedder: &model,
            tokens: 8,
        }
        .cut(zh);
        assert!(zh.ends_with(short) && short.ends_with("多休息") && short.len() < zh.len());
        assert!(count(short).unwrap() <= 8);
    }
}
