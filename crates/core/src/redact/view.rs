//! The normalised view the detectors run on, and the way back to the original bytes.
//!
//! Why: people paste from phone UIs and type with Chinese IMEs, so one phone number arrives as
//! `138－1234－5678`, `138　1234　5678`, `+86 138 1234 5678` with no-break spaces, or
//! `一三八一二三四五六七八`. Rather than teach every detector every spelling, the detectors read a
//! view in which those spellings are ASCII. Every byte of the view remembers the byte range of
//! the original character it came from, so a redaction replaces exactly the original span and the
//! text outside it is kept byte for byte, full-width characters included. The stored text is
//! never normalised.
//!
//! Folding rules, each a rule about what a character *means*, not how it looks:
//! - Full-width ASCII (U+FF01–U+FF5E) becomes ASCII: `１３８`, `＠`, `Ｘ`, `．`, `ａｂｃ`. The
//!   sentence punctuation `！，；？～` stays: after a value it ends the value, as it did before.
//!   So do `：` and `＝`, which every detector that cares accepts in both widths: left alone,
//!   ordinary Chinese text (`时间：…`) needs no copy of the view at all.
//! - Every Unicode space (U+3000, U+00A0, U+202F, U+2000–U+200A, …) and every ASCII control
//!   character but tab and line breaks becomes a space, and a run of spaces becomes one space
//!   (`138  1234  5678`). Tabs and line breaks stay: a list of numbers is not one number.
//! - Zero-width characters and the soft hyphen (U+200B–U+200D, U+2060, U+FEFF, U+00AD), which
//!   web pages and chat apps paste inside numbers, are dropped.
//! - Dashes (`－ ‐ ‑ ‒ – — ― − ﹣ ー`) become `-` only between two digits; `（` becomes `(` only
//!   before a digit and `）` becomes `)` only after one (`（010）12345678`). Elsewhere they are prose:
//!   `——` and `（备注）` are left alone.
//! - `。` and `｡` become `.` only inside an e-mail domain that has no dot yet, between an ASCII
//!   letter or digit and an ASCII letter (`zhang.san@example。com`). Anywhere else they end a
//!   sentence (`bob@example.com。Thanks`, `13812345678。2点打给我`).
//! - Chinese numerals `〇零一幺二两三四五六七八九` become digits only in a cluster of at least 7,
//!   where a cluster is numerals with at most one space or dash between neighbours. Shorter runs
//!   are words and years (`一三八路`, `二〇二四年`, `三三两两`); 7 is the shortest number any
//!   detector redacts. The detectors still decide: `一二三四五六七八九` folds but is no phone.
//! - Any other character goes through NFKC (`𝟏𝟑𝟖` in a pasted "font", small forms like `﹫`),
//!   except circled, parenthesised, super- and subscript, fraction, letterlike and CJK-square
//!   characters (`①`, `²`, `½`, `℡`, `㎡`, `㈠`): NFKC would turn `①138…` into `1138…` and
//!   `℡138…` into `TEL138…`, gluing a symbol onto the number it labels. CJK ideographs, kana
//!   and Hangul skip NFKC; it leaves them as is.

use std::borrow::Cow;
use std::ops::Range;

use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// What a redacted span turns into in the view, so later passes see a boundary where an earlier
/// one redacted, as they saw `]` and `[` when each pass replaced text with its marker. Control
/// characters from the input never reach the view as themselves (they fold to a space).
pub(super) const MASK: char = '\u{1}';

/// Shortest Chinese-numeral cluster read as digits.
const MIN_NUMERALS: usize = 7;

pub(super) struct View<'a> {
    original: &'a str,
    text: Cow<'a, str>,
    /// For each byte of `text`, the byte range of the original character it came from. `None`
    /// while every byte of `text` sits where it sits in `original`; masking keeps that true.
    src: Option<Vec<(usize, usize)>>,
}

impl<'a> View<'a> {
    pub(super) fn new(original: &'a str) -> Self {
        let mut b = Builder {
            original,
            text: None,
            prev: None,
            domain: None,
        };
        let mut numerals = Numerals::default();
        for (i, c) in original.char_indices() {
            let end = i + c.len_utf8();
            if plain(c) {
                b.keep(i, end, c);
                continue;
            }
            if let Some(d) = numerals.digit(original, i, c) {
                b.push(i, end, char::from(b'0' + d));
                continue;
            }
            let next = original[end..].chars().next();
            let mut next_digit = || {
                next.is_some_and(|n| ascii_digit(n).is_some() || numerals.folds(original, end, n))
            };
            let prev_digit = b.prev.is_some_and(|p| p.is_ascii_digit());
            match c {
                ' ' => b.space(i, end, c),
                '\t' | '\n' | '\r' => b.keep(i, end, c),
                _ if c.is_ascii_control() => b.space(i, end, c),
                _ if c.is_ascii() => b.keep(i, end, c),
                '\u{a0}'
                | '\u{1680}'
                | '\u{2000}'..='\u{200a}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}' => b.space(i, end, c),
                '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{ad}' => b.skip(i),
                '‐' | '‑' | '‒' | '–' | '—' | '―' | '−' | '﹣' | '－' | 'ー' => {
                    if prev_digit && next_digit() {
                        b.push(i, end, '-');
                    } else {
                        b.keep(i, end, c);
                    }
                }
                '（' if next_digit() => b.push(i, end, '('),
                '）' if prev_digit => b.push(i, end, ')'),
                '。' | '｡' => {
                    let after_word = b.prev.is_some_and(|p| p.is_ascii_alphanumeric());
                    let before_letter = next.and_then(fullwidth).unwrap_or(' ');
                    if b.domain == Some(false) && after_word && before_letter.is_ascii_alphabetic()
                    {
                        b.push(i, end, '.');
                    } else {
                        b.keep(i, end, c);
                    }
                }
                '！' | '，' | '；' | '？' | '～' | '（' | '）' | '：' | '＝' => {
                    b.keep(i, end, c)
                }
                _ => match fullwidth(c) {
                    Some(a) => b.push(i, end, a),
                    None if nfkc_stable(c) => b.keep(i, end, c),
                    None => b.nfkc(i, end, c),
                },
            }
        }
        match b.text {
            Some((text, src)) => View {
                original,
                text: Cow::Owned(text),
                src: Some(src),
            },
            None => View {
                original,
                text: Cow::Borrowed(original),
                src: None,
            },
        }
    }

    pub(super) fn text(&self) -> &str {
        &self.text
    }

    /// The original byte range behind `r`, a range of the view on character boundaries.
    pub(super) fn original_range(&self, r: Range<usize>) -> Option<Range<usize>> {
        if r.is_empty() {
            return None;
        }
        match &self.src {
            Some(src) => Some(src.get(r.start)?.0..src.get(r.end - 1)?.1),
            None => {
                // A mask may have split a multi-byte character of the view into single bytes;
                // widen to whole original characters.
                let (mut start, mut end) = (r.start.min(self.original.len()), r.end);
                while !self.original.is_char_boundary(start) {
                    start -= 1;
                }
                while end < self.original.len() && !self.original.is_char_boundary(end) {
                    end += 1;
                }
                Some(start..end.min(self.original.len()))
            }
        }
    }

    /// Blank out a redacted range of the view, keeping its length so offsets stay valid.
    pub(super) fn mask(&mut self, r: Range<usize>) {
        let text = self.text.to_mut();
        if r.end > text.len() || !text.is_char_boundary(r.start) || !text.is_char_boundary(r.end) {
            return;
        }
        let blank: String = std::iter::repeat_n(MASK, r.len()).collect();
        text.replace_range(r, &blank);
    }
}

/// Builds the view lazily: nothing is allocated until the first character that does not map to
/// itself, so plain text costs one scan.
struct Builder<'a> {
    original: &'a str,
    /// The view so far and its byte map, from the first change on.
    text: Option<(String, Vec<(usize, usize)>)>,
    /// Last character of the view.
    prev: Option<char>,
    /// Inside an e-mail domain: `Some(false)` right after `@`, `Some(true)` once it has a dot.
    domain: Option<bool>,
}

impl Builder<'_> {
    /// Start the owned view at original byte `at`, copying everything before it as is.
    fn owned(&mut self, at: usize) -> &mut (String, Vec<(usize, usize)>) {
        let original = self.original;
        self.text.get_or_insert_with(|| {
            let mut src = Vec::with_capacity(original.len());
            for (i, c) in original[..at].char_indices() {
                let end = i + c.len_utf8();
                src.extend(std::iter::repeat_n((i, end), c.len_utf8()));
            }
            let mut text = String::with_capacity(original.len());
            text.push_str(&original[..at]);
            (text, src)
        })
    }

    fn last(&mut self, c: char) {
        self.prev = Some(c);
        self.domain = match (c, self.domain) {
            ('@', _) => Some(false),
            ('.', Some(_)) => Some(true),
            (c, d) if c.is_ascii_alphanumeric() || c == '-' => d,
            _ => None,
        };
    }

    /// The original character, unchanged.
    fn keep(&mut self, i: usize, end: usize, c: char) {
        if let Some((text, src)) = &mut self.text {
            text.push(c);
            src.extend(std::iter::repeat_n((i, end), c.len_utf8()));
        }
        self.last(c);
    }

    /// Something else in place of the original character.
    fn push(&mut self, i: usize, end: usize, c: char) {
        let (text, src) = self.owned(i);
        text.push(c);
        src.extend(std::iter::repeat_n((i, end), c.len_utf8()));
        self.last(c);
    }

    /// A space, merged into the space before it.
    fn space(&mut self, i: usize, end: usize, c: char) {
        if self.prev == Some(' ') {
            let (_, src) = self.owned(i);
            if let Some(last) = src.last_mut() {
                last.1 = end;
            }
        } else if c == ' ' {
            self.keep(i, end, c);
        } else {
            self.push(i, end, ' ');
        }
    }

    fn skip(&mut self, i: usize) {
        self.owned(i);
    }

    fn nfkc(&mut self, i: usize, end: usize, c: char) {
        let mut folded = std::iter::once(c).nfkc().peekable();
        if folded.peek() == Some(&c) {
            self.keep(i, end, c);
            return;
        }
        for f in folded {
            match f {
                ' ' => self.space(i, end, f),
                _ => self.push(i, end, f),
            }
        }
    }
}

/// Characters that are themselves in the view whatever surrounds them: most of any message,
/// checked first so that plain text costs a range test per character.
fn plain(c: char) -> bool {
    match c {
        '!'..='~' => true,
        '\u{4e00}'..='\u{9fff}' => numeral(c).is_none(),
        '，' | '、' | '；' | '！' | '？' | '“' | '”' | '‘' | '’' | '《' | '》' | '：' | '＝' => {
            true
        }
        _ => false,
    }
}

/// Chinese-numeral clusters: which original bytes fold to digits.
#[derive(Default)]
struct Numerals {
    /// Original bytes before this end the last cluster scanned.
    scanned: usize,
    /// That cluster is long enough to fold.
    fold: bool,
}

impl Numerals {
    /// The digit for a numeral at original byte `at`, if its cluster folds.
    fn digit(&mut self, original: &str, at: usize, c: char) -> Option<u8> {
        let d = numeral(c)?;
        self.folds(original, at, c).then_some(d)
    }

    fn folds(&mut self, original: &str, at: usize, c: char) -> bool {
        if numeral(c).is_none() {
            return false;
        }
        if at >= self.scanned {
            self.scan(original, at);
        }
        self.fold
    }

    /// Measure the cluster starting at `at`.
    fn scan(&mut self, original: &str, at: usize) {
        let (mut count, mut end, mut gap) = (0, at, false);
        for (i, c) in original[at..].char_indices() {
            if numeral(c).is_some() {
                count += 1;
                end = at + i + c.len_utf8();
                gap = false;
            } else if !gap && count > 0 && separator(c) {
                gap = true;
            } else {
                break;
            }
        }
        self.scanned = end;
        self.fold = count >= MIN_NUMERALS;
    }
}

fn numeral(c: char) -> Option<u8> {
    Some(match c {
        '〇' | '零' => 0,
        '一' | '幺' => 1,
        '二' | '两' => 2,
        '三' => 3,
        '四' => 4,
        '五' => 5,
        '六' => 6,
        '七' => 7,
        '八' => 8,
        '九' => 9,
        _ => return None,
    })
}

/// A space or dash between two numerals of one number.
fn separator(c: char) -> bool {
    matches!(
        c,
        ' ' | '-'
            | '\u{a0}'
            | '\u{202f}'
            | '\u{3000}'
            | '‐'
            | '‑'
            | '‒'
            | '–'
            | '—'
            | '−'
            | '﹣'
            | '－'
    )
}

fn ascii_digit(c: char) -> Option<char> {
    fullwidth(c).filter(char::is_ascii_digit)
}

/// The ASCII character a full-width one stands for (ASCII stays itself).
fn fullwidth(c: char) -> Option<char> {
    match c {
        _ if c.is_ascii() => Some(c),
        '\u{ff01}'..='\u{ff5e}' => char::from_u32(c as u32 - 0xfee0),
        _ => None,
    }
}

/// Characters NFKC leaves alone, or that the view keeps although NFKC would change them.
fn nfkc_stable(c: char) -> bool {
    matches!(c,
        // CJK ideographs, kana, Hangul syllables, CJK punctuation: what Chinese text is made of.
        '\u{3001}'..='\u{303f}' | '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}'
        | '\u{4e00}'..='\u{9fff}' | '\u{ac00}'..='\u{d7a3}'
        // Kept on purpose: super/subscripts, letterlike symbols, fractions, number forms,
        // enclosed alphanumerics, enclosed CJK and CJK squares.
        | '\u{b2}' | '\u{b3}' | '\u{b9}' | '\u{bc}'..='\u{be}' | '\u{2070}'..='\u{209f}'
        | '\u{2100}'..='\u{214f}'
        | '\u{2150}'..='\u{218f}' | '\u{2460}'..='\u{24ff}' | '\u{3200}'..='\u{33ff}'
        | '\u{1f100}'..='\u{1f1ff}')
        || is_nfkc_quick(std::iter::once(c)) == IsNormalized::Yes
}
