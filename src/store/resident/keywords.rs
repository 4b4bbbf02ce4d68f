//! The keyword half of the resident search: an inverted index of every resident row's content
//! and tags, tokenized by the analyzer LanceDB's full-text index is built with
//! ([`fulltext_params`]: character n-grams of one to three, lower-cased and folded) and
//! scored by BM25 with statistics over the whole table, as Lance's index is. A search scores
//! the admitted partitions only.

use std::collections::HashMap;
use std::sync::OnceLock;

use lance_index::scalar::inverted::tokenizer::document_tokenizer::LanceTokenizer;
use lance_tokenizer::TokenStream;

use super::super::fulltext::fulltext_params;
use super::super::record::MemoryRecord;

/// BM25's term-frequency saturation and length normalisation (the usual values, Lance's too).
const K1: f32 = 1.2;
const B: f32 = 0.75;

static PROTOTYPE: OnceLock<Option<Box<dyn LanceTokenizer>>> = OnceLock::new();

/// A tokenizer of its own for the caller (building one loads the segmenter's data once).
/// `None` if it cannot be built: keyword searches then stay on LanceDB.
pub(crate) fn analyzer() -> Option<Box<dyn LanceTokenizer>> {
    PROTOTYPE
        .get_or_init(|| match fulltext_params().build() {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "cannot build the keyword analyzer; keyword search stays on LanceDB");
                None
            }
        })
        .as_ref()
        .map(|t| t.box_clone())
}

/// A row's terms: its content's, then its tags'.
pub(crate) fn document_terms(
    analyzer: &mut dyn LanceTokenizer,
    record: &MemoryRecord,
) -> Vec<String> {
    let mut terms = Vec::new();
    for text in std::iter::once(&record.content).chain(&record.tags) {
        let mut stream = analyzer.token_stream_for_doc(text);
        while stream.advance() {
            terms.push(stream.token().text.clone());
        }
    }
    terms
}

/// The distinct terms of a query.
pub(crate) fn query_terms(analyzer: &mut dyn LanceTokenizer, text: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut stream = analyzer.token_stream_for_search(text);
    while stream.advance() {
        let t = &stream.token().text;
        if !terms.contains(t) {
            terms.push(t.clone());
        }
    }
    terms
}

/// Term ids shared by every partition, with how many rows hold each (BM25's document
/// frequency) and the table's row and term counts.
#[derive(Default)]
pub struct Vocabulary {
    ids: HashMap<String, u32>,
    df: Vec<u32>,
    docs: u64,
    terms: u64,
}

impl Vocabulary {
    fn intern(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.ids.get(term) {
            return id;
        }
        let id = self.df.len() as u32;
        self.ids.insert(term.to_string(), id);
        self.df.push(0);
        id
    }

    pub(crate) fn lookup(&self, term: &str) -> Option<u32> {
        self.ids.get(term).copied()
    }

    /// BM25's inverse document frequency (never negative).
    pub(crate) fn idf(&self, term: u32) -> f32 {
        let n = self.docs as f32;
        let df = self.df.get(term as usize).copied().unwrap_or(0) as f32;
        ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
    }

    pub(crate) fn average_length(&self) -> f32 {
        (self.terms as f32 / self.docs.max(1) as f32).max(1.0)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.ids.keys().map(|k| k.capacity() + 48).sum::<usize>() + self.df.capacity() * 4
    }
}

/// One partition's postings: for each term, the rows holding it and how often.
#[derive(Default)]
pub struct Postings {
    by_term: HashMap<u32, TermRows>,
    lengths: Vec<u32>,
}

/// One term's rows in one partition, in row order, as LEB128 varints: the gap from the
/// previous row (from 0 for the first), then the term's count in the row. Rows only ever
/// append, so gaps are small and most counts are 1: about 2 bytes a posting where a
/// `(u32, u32)` pair takes 8. An n-gram index has about three postings a character.
#[derive(Default)]
struct TermRows {
    last: u32,
    bytes: Vec<u8>,
}

impl TermRows {
    fn push(&mut self, row: u32, count: u32) {
        put_varint(&mut self.bytes, row - self.last);
        put_varint(&mut self.bytes, count);
        self.last = row;
    }

    /// `(row, count)` in row order.
    fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut at = 0;
        let mut row = 0u32;
        std::iter::from_fn(move || {
            if at >= self.bytes.len() {
                return None;
            }
            row += take_varint(&self.bytes, &mut at);
            let count = take_varint(&self.bytes, &mut at);
            Some((row, count))
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at `*at`, moving past it. Only reads what `put_varint` wrote.
fn take_varint(bytes: &[u8], at: &mut usize) -> u32 {
    let mut v = 0u32;
    let mut shift = 0;
    while let Some(&b) = bytes.get(*at) {
        *at += 1;
        v |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    v
}

impl Postings {
    /// Index the partition's next row.
    pub(crate) fn push(&mut self, vocabulary: &mut Vocabulary, terms: &[String]) {
        let row = self.lengths.len() as u32;
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for t in terms {
            *counts.entry(vocabulary.intern(t)).or_default() += 1;
        }
        for (term, n) in counts {
            vocabulary.df[term as usize] += 1;
            self.by_term.entry(term).or_default().push(row, n);
        }
        self.lengths.push(terms.len() as u32);
        vocabulary.docs += 1;
        vocabulary.terms += terms.len() as u64;
    }

    /// The partition's rows, indexed or not.
    pub(crate) fn rows(&self) -> usize {
        self.lengths.len()
    }

    /// Add every row's BM25 score for `terms` to `scores` (indexed by row, [`Postings::rows`]
    /// long). Dense: a gram of one character is held by a large share of the rows, where a
    /// map per matching row costs more than a slot per row.
    pub(crate) fn score(&self, vocabulary: &Vocabulary, terms: &[u32], scores: &mut [f32]) {
        let average = vocabulary.average_length();
        for &term in terms {
            let Some(rows) = self.by_term.get(&term) else {
                continue;
            };
            let idf = vocabulary.idf(term);
            for (row, tf) in rows.iter() {
                let length = self.lengths[row as usize] as f32;
                let tf = tf as f32;
                let norm = K1 * (1.0 - B + B * length / average);
                scores[row as usize] += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
    }

    /// Heap bytes: each term's bytes, its map slot and allocation, the row lengths.
    pub(crate) fn bytes(&self) -> usize {
        self.by_term
            .values()
            .map(|t| t.bytes.capacity() + 56)
            .sum::<usize>()
            + self.lengths.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(content: &str, tags: &[&str]) -> MemoryRecord {
        MemoryRecord::with_text(content, tags)
    }

    #[test]
    fn the_index_analyzer_cuts_chinese_and_codes_into_short_grams() {
        let mut a = analyzer().expect("analyzer");
        let terms = document_terms(a.as_mut(), &record("外婆喜欢兰花", &["Grandma"]));
        for gram in ["兰", "兰花", "喜欢兰", "gra"] {
            assert!(terms.iter().any(|t| t == gram), "{gram}: {terms:?}");
        }
        let q = query_terms(a.as_mut(), "Orders ZX-99812 orders");
        assert!(q.iter().any(|t| t == "998"), "{q:?}");
        assert!(q.iter().any(|t| t == "zx"), "lower-cased: {q:?}");
        assert_eq!(
            q.iter().filter(|t| *t == "ord").count(),
            1,
            "distinct: {q:?}"
        );
    }

    #[test]
    fn a_name_the_row_holds_inside_a_longer_word_is_a_shared_term() {
        // 氨氯地平 (a drug name) is one run of characters in the row and alone in the question:
        // the question's grams are all in the row.
        let mut a = analyzer().expect("analyzer");
        let row = document_terms(a.as_mut(), &record("爸爸吃的氨氯地平是5毫克一片", &[]));
        let q = query_terms(a.as_mut(), "氨氯地平");
        assert!(q.iter().all(|t| row.contains(t)), "{q:?} in {row:?}");
    }

    #[test]
    fn a_terms_rows_read_back_as_written() {
        let mut rows = TermRows::default();
        let written = [
            (0, 1),
            (1, 3),
            (2, 1),
            (200, 1),
            (70_000, 300),
            (u32::MAX, u32::MAX),
        ];
        for (row, count) in written {
            rows.push(row, count);
        }
        assert_eq!(rows.iter().collect::<Vec<_>>(), written);
        // Small gaps and counts take a byte each.
        let mut small = TermRows::default();
        for row in 0..100 {
            small.push(row, 1);
        }
        assert_eq!(small.bytes.len(), 200);
    }

    #[test]
    fn rarer_terms_and_shorter_rows_score_higher() {
        let mut a = analyzer().expect("analyzer");
        let mut vocabulary = Vocabulary::default();
        let mut postings = Postings::default();
        for text in [
            "tea with grandma",
            "tea with grandpa in the long afternoon garden",
            "xyz",
        ] {
            let terms = document_terms(a.as_mut(), &record(text, &[]));
            postings.push(&mut vocabulary, &terms);
        }
        let score = |q: &str| {
            let terms: Vec<u32> = query_terms(a.clone().as_mut(), q)
                .iter()
                .filter_map(|t| vocabulary.lookup(t))
                .collect();
            let mut scores = vec![0.0; postings.rows()];
            postings.score(&vocabulary, &terms, &mut scores);
            scores
        };
        let tea = score("tea");
        assert!(tea[0] > tea[1], "same term, shorter row first: {tea:?}");
        assert_eq!(tea[2], 0.0);
        let both = score("tea grandma");
        assert!(both[0] > both[1]);
        assert!(score("grandma")[0] > tea[0], "the rarer term weighs more");
    }
}
