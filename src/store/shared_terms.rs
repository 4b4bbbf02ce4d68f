//! Whether a keyword hit shares a term with the question, not only letters.
//!
//! The full-text index matches character n-grams (see [`super::fulltext`]), so BM25 finds a
//! row that shares one character with the question: 的 or an `e`. Its relative floor keeps the
//! best of those, and a question about the weather would recall the one memory that shares a
//! character with it. A hit counts only if it holds a term of the question:
//!
//! - a Latin (or digit) word of two or more letters that is not an English stop word, found
//!   anywhere in the row's text (`order` in `orders`, `99812` in `ZX-99812`);
//! - two adjacent characters of a CJK run (a Chinese word is mostly two or more characters);
//!   a question whose CJK runs are single characters contributes those characters.
//!
//! A question with no such term (only stop words or punctuation) admits no hit. Both keyword
//! searches (LanceDB's index and the resident copy) are judged by the same rule, on the
//! returned rows.

use std::sync::OnceLock;

use lance_index::scalar::inverted::tokenizer::document_tokenizer::LanceTokenizer;
use lance_tokenizer::TokenStream;
use lancedb::index::scalar::FtsIndexBuilder;

use super::record::MemoryRecord;
use crate::embed::script::is_cjk;

static WORDS: OnceLock<Option<Box<dyn LanceTokenizer>>> = OnceLock::new();

/// Lance's simple word splitter (runs of letters and digits; a CJK run is one token),
/// lower-cased, folded, without English stop words.
fn words() -> Option<Box<dyn LanceTokenizer>> {
    WORDS
        .get_or_init(|| {
            FtsIndexBuilder::default()
                .base_tokenizer("simple".to_string())
                .lower_case(true)
                .ascii_folding(true)
                .stem(false)
                .remove_stop_words(true)
                .max_token_length(None)
                .build()
                .map_err(|e| tracing::warn!(error = %e, "cannot build the word splitter; keyword hits are not gated"))
                .ok()
        })
        .as_ref()
        .map(|t| t.box_clone())
}

fn tokens(splitter: &mut dyn LanceTokenizer, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stream = splitter.token_stream_for_doc(text);
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// A question's terms, to judge its keyword hits with.
pub struct QueryTerms {
    terms: Vec<String>,
    /// One splitter for the question and every hit. `None`: it could not be built, and every
    /// hit is kept, as before the rule.
    splitter: Option<Box<dyn LanceTokenizer>>,
}

impl QueryTerms {
    pub(crate) fn of(query: &str) -> QueryTerms {
        let Some(mut splitter) = words() else {
            return QueryTerms {
                terms: Vec::new(),
                splitter: None,
            };
        };
        let mut terms: Vec<String> = Vec::new();
        let mut singles: Vec<String> = Vec::new();
        for token in tokens(splitter.as_mut(), query) {
            for run in runs(&token) {
                let chars: Vec<char> = run.chars().collect();
                if !is_cjk(chars[0]) {
                    if chars.len() >= 2 {
                        terms.push(run);
                    }
                } else if chars.len() == 1 {
                    singles.push(run);
                } else {
                    terms.extend(chars.windows(2).map(|w| w.iter().collect::<String>()));
                }
            }
        }
        if terms.is_empty() {
            terms = singles;
        }
        terms.sort();
        terms.dedup();
        QueryTerms {
            terms,
            splitter: Some(splitter),
        }
    }

    /// Whether `record`'s content or tags hold one of the question's terms.
    pub(crate) fn found_in(&mut self, record: &MemoryRecord) -> bool {
        let words = self.words_of(record);
        self.found_in_words(words.as_ref())
    }

    /// [`QueryTerms::found_in`] on a record's words split beforehand ([`SplitWords::of`]).
    pub(crate) fn found_in_words(&self, words: Option<&SplitWords>) -> bool {
        match words {
            None => true,
            Some(SplitWords(text)) => self.terms.iter().any(|t| text.contains(t.as_str())),
        }
    }

    /// Whether `record`'s content or tags hold every term of the question (and it has one):
    /// the question names that memory in its own words ("family" for "family: keep me").
    pub(crate) fn all_found_in(&mut self, record: &MemoryRecord) -> bool {
        let words = self.words_of(record);
        self.all_found_in_words(words.as_ref())
    }

    /// [`QueryTerms::all_found_in`] on a record's words split beforehand.
    pub(crate) fn all_found_in_words(&self, words: Option<&SplitWords>) -> bool {
        match words {
            None => false,
            Some(SplitWords(text)) => {
                !self.terms.is_empty() && self.terms.iter().all(|t| text.contains(t.as_str()))
            }
        }
    }

    /// The record's content and tags as split words, or `None` without a splitter.
    fn words_of(&mut self, record: &MemoryRecord) -> Option<SplitWords> {
        Some(SplitWords::split(self.splitter.as_mut()?.as_mut(), record))
    }
}

/// A record's content and tags as the splitter's words, space-separated: what a question's
/// terms are looked for in. Split once where many questions read the same record (the
/// messages waiting for their vectors, `memory::working::pending`).
#[derive(Debug, Clone)]
pub struct SplitWords(String);

impl SplitWords {
    /// `record`'s words, or `None` without a splitter (then every hit is kept, as by
    /// [`QueryTerms::found_in`]).
    pub(crate) fn of(record: &MemoryRecord) -> Option<SplitWords> {
        let mut splitter = words()?;
        Some(SplitWords::split(splitter.as_mut(), record))
    }

    fn split(splitter: &mut dyn LanceTokenizer, record: &MemoryRecord) -> SplitWords {
        let mut text = String::new();
        for part in std::iter::once(&record.content).chain(&record.tags) {
            for token in tokens(splitter, part) {
                text.push_str(&token);
                text.push(' ');
            }
        }
        SplitWords(text)
    }
}

/// A token split where it changes between CJK and other letters (`订单zx99812`: `订单`,
/// `zx99812`).
fn runs(token: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut last: Option<bool> = None;
    for c in token.chars() {
        let cjk = is_cjk(c);
        match out.last_mut() {
            Some(run) if last == Some(cjk) => run.push(c),
            _ => out.push(c.to_string()),
        }
        last = Some(cjk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(content: &str, tags: &[&str]) -> MemoryRecord {
        MemoryRecord::with_text(content, tags)
    }

    #[test]
    fn a_shared_word_or_character_pair_counts_and_a_shared_letter_does_not() {
        let cases = [
            ("妈妈有什么药不能用？", "妈妈对青霉素过敏", true),
            ("今天天气怎么样", "妈妈对青霉素过敏", false),
            ("订单ZX-99812到哪了", "订单号 zx-99812 已签收", true),
            ("99812", "订单号 ZX-99812 已签收", true),
            ("tomatoes", "Grandpa plants tomatoes every spring", true),
            ("tomatoes", "The deploy freeze starts on Thursday", false),
            ("orders", "order history", false),
            ("order", "three orders", true),
            ("the of and ???", "The team prefers Rust", false),
            ("药", "爸爸的药在抽屉里", true),
            ("药", "爸爸的书在抽屉里", false),
            ("grandma", "dinner at the lake", false),
        ];
        for (query, content, want) in cases {
            let mut q = QueryTerms::of(query);
            let terms = q.terms.clone();
            assert_eq!(
                q.found_in(&record(content, &[])),
                want,
                "{query} in {content}: {terms:?}"
            );
        }
        assert!(QueryTerms::of("grandma").found_in(&record("dinner", &["Grandma"])));
    }

    #[test]
    fn a_question_names_a_memory_when_the_memory_holds_every_term() {
        let cases = [
            ("family", "family: keep me", true),
            ("Family?", "奶奶喜欢兰花", false),
            ("兰花", "奶奶喜欢兰花", true),
            ("奶奶的兰花", "奶奶喜欢兰花", false),
            ("ZX-99812", "订单号 zx-99812 已签收", true),
            ("早上好", "早上七点出发", false),
            ("+1", "+1", false),
            ("the of", "the of", false),
        ];
        for (query, content, want) in cases {
            let mut q = QueryTerms::of(query);
            let terms = q.terms.clone();
            assert_eq!(
                q.all_found_in(&record(content, &[])),
                want,
                "{query} in {content}: {terms:?}"
            );
        }
    }
}
