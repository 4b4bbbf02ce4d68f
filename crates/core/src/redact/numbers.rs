//! Resident IDs, phone numbers and card numbers: numeric spans in the normalised view.
//!
//! Why a hand-written pass and not one regex per kind: one match covers a whole run of digit
//! groups, and the span, not the regex, decides where it is cut (`卡号4111111111111111 1234` must
//! not become a 20-digit non-card), with checksums and date checks that a regex cannot express.
//! Chinese text has no spaces and `regex` counts CJK as word characters, so `\b` never fires in
//! `卡号4111111111111111谢谢`; each span looks at its neighbours itself instead. ASCII letters,
//! digits and `_` glue a candidate into a larger token (`RTX4090`, hashes, UUIDs,
//! `SF1234567890123`); CJK text and punctuation do not. The view has already folded full-width
//! digits, Unicode spaces, dashes between digits and long Chinese-numeral runs to ASCII.
//!
//! Not redacted, on purpose: IP addresses (no person behind `192.168.1.1`; dotted numbers are
//! mostly versions), bare 5–10 digit numbers (QQ numbers, group ids, timestamps), 15-digit
//! first-generation resident IDs.

use std::sync::LazyLock;

use regex::Regex;

use super::{Hit, CARD_MARK, ID_MARK, PHONE_MARK};

/// A numeric span: digit groups (ASCII or full-width, as Chinese IMEs type them) joined by one
/// space, dash or dot, `(area)` groups, an optional leading `+` and a trailing `X` (the ID check
/// character). One match covers a whole run, so the span decides where it is cut, not the regex
/// (`卡号4111111111111111 1234` must not become a 20-digit non-card).
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"[+＋]?(?:[0-9０-９]+|\([0-9０-９]{1,4}\))",
        r"(?:[ .-]?(?:[0-9０-９]+|\([0-9０-９]{1,4}\)))*[Xx]?",
    ))
    .expect("static regex")
});

/// Most space-separated chunks one item can span: `+33 1 23 45 67` style phones, 19-digit cards in
/// groups of four. Bounds the work per chunk, so the numeric pass stays linear.
const MAX_CHUNKS: usize = 6;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sep {
    /// First group of a span, or a group right after `(area)`.
    None,
    Space,
    Dash,
    Dot,
}

/// One digit group of a numeric span: byte range in the text, range in the digit buffer.
#[derive(Clone, Copy)]
struct Group {
    start: usize,
    end: usize,
    d0: usize,
    d1: usize,
    paren: bool,
    sep: Sep,
}

impl Group {
    fn len(&self) -> usize {
        self.d1 - self.d0
    }
}

fn digit(c: char) -> Option<u8> {
    match c {
        '0'..='9' => Some(c as u8 - b'0'),
        '０'..='９' => u8::try_from(c as u32 - '０' as u32).ok(),
        _ => None,
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || digit(c).is_some()
}

/// The span continues a token on its left: `RTX4090`, `9f4e-123…`, `/u/123…`, `10:30`.
/// CJK, spaces and other punctuation are boundaries (`卡号4111…`, `tel:138…`).
fn glued_left(text: &str, start: usize) -> bool {
    let mut before = text[..start].chars().rev();
    match (before.next(), before.next()) {
        (Some(c), _) if is_word(c) => true,
        (Some('-' | '/'), Some(c)) => is_word(c),
        (Some(':' | '.'), Some(c)) => digit(c).is_some(),
        _ => false,
    }
}

/// Mirror of [`glued_left`]. A full stop followed by a letter is not glue (`…5678.Thanks`).
fn glued_right(text: &str, end: usize) -> bool {
    let mut after = text[end..].chars();
    match (after.next(), after.next()) {
        (Some(c), _) if is_word(c) => true,
        (Some('-' | '/'), Some(c)) => is_word(c),
        (Some(':' | '.'), Some(c)) => digit(c).is_some(),
        _ => false,
    }
}

/// Split a numeric span into digit groups; returns (has `+`, last group carries an `X`, end).
fn parse_span(
    base: usize,
    span: &str,
    groups: &mut Vec<Group>,
    digits: &mut Vec<u8>,
) -> (bool, bool, usize) {
    let (mut plus, mut sep, mut in_paren, mut prev_digit) = (false, Sep::None, false, false);
    let mut x_at = None;
    for (i, c) in span.char_indices() {
        let at = base + i;
        match c {
            '+' | '＋' => plus = true,
            ' ' | '-' | '.' => {
                sep = match c {
                    ' ' => Sep::Space,
                    '-' => Sep::Dash,
                    _ => Sep::Dot,
                };
                prev_digit = false;
            }
            '(' => {
                let d = digits.len();
                groups.push(Group {
                    start: at,
                    end: at + 1,
                    d0: d,
                    d1: d,
                    paren: true,
                    sep,
                });
                (sep, in_paren, prev_digit) = (Sep::None, true, false);
            }
            ')' => {
                if let Some(g) = groups.last_mut() {
                    g.end = at + 1;
                }
                (in_paren, prev_digit) = (false, false);
            }
            'X' | 'x' => x_at = Some(at),
            _ => {
                let Some(d) = digit(c) else { continue };
                let end = at + c.len_utf8();
                match groups.last_mut() {
                    Some(g) if in_paren || prev_digit => {
                        g.d1 += 1;
                        g.end = g.end.max(end);
                    }
                    _ => {
                        let d0 = digits.len();
                        groups.push(Group {
                            start: at,
                            end,
                            d0,
                            d1: d0 + 1,
                            paren: false,
                            sep,
                        });
                        sep = Sep::None;
                    }
                }
                digits.push(d);
                prev_digit = true;
            }
        }
    }
    let mut end = base + span.len();
    let mut x = false;
    if let Some(at) = x_at {
        let body = id_body(groups);
        match groups.last_mut() {
            Some(g) if body => {
                g.end = at + 1;
                x = true;
            }
            // Not an ID: the X is a letter glued to the number (`1920x1080`, `123X`).
            _ => end = at,
        }
    }
    (plus, x, end)
}

/// The groups end in the 17 digits an ID check character follows (one run, or 6-8-3).
fn id_body(gs: &[Group]) -> bool {
    match gs {
        [.., g] if g.len() == 17 => !g.paren,
        [.., a, b, c] => lens(&[*a, *b, *c], &[6, 8, 3]) && no_paren(&[*a, *b, *c]),
        _ => false,
    }
}

/// Find resident IDs, phones and cards in every numeric span of `text`. A span is cut only between
/// space-separated chunks (a dash- or dot-joined chunk like `2024-05-01` or `3.14159…` is one
/// token), trying the longest run of chunks first, so `13812345678 13912345678` gives two phones
/// and `2024-05-01 13812345678` one.
pub(super) fn find(text: &str, hits: &mut Vec<Hit>) {
    let (mut groups, mut digits, mut chunks) = (Vec::new(), Vec::new(), Vec::new());
    for m in NUMBER.find_iter(text) {
        groups.clear();
        digits.clear();
        chunks.clear();
        let (plus, x, end) = parse_span(m.start(), m.as_str(), &mut groups, &mut digits);
        chunks.extend((0..groups.len()).filter(|&k| k == 0 || groups[k].sep == Sep::Space));
        let n = chunks.len();
        if n == 0 {
            continue;
        }
        let mut i = usize::from(glued_left(text, m.start()));
        let hi = if glued_right(text, end) { n - 1 } else { n };
        while i < hi {
            let hit = (i..hi.min(i + MAX_CHUNKS)).rev().find_map(|j| {
                let (a, b) = (
                    chunks[i],
                    chunks.get(j + 1).map_or(groups.len(), |&k| k) - 1,
                );
                let gs = &groups[a..=b];
                let ds = &digits[groups[a].d0..groups[b].d1];
                let last_x = x && b + 1 == groups.len();
                classify(gs, ds, plus && i == 0, last_x)
                    .map(|(mark, with_plus)| (j, a, b, mark, with_plus))
            });
            match hit {
                Some((j, a, b, mark, with_plus)) => {
                    let start = if with_plus {
                        m.start()
                    } else {
                        groups[a].start
                    };
                    hits.push(Hit {
                        range: start..groups[b].end,
                        mark,
                    });
                    i = j + 1;
                }
                None => i += 1,
            }
        }
    }
}

/// What a run of digit groups is, ID before phone before card (an 18-digit ID must not end up a
/// card; `8613812345678` is a phone that happens to pass Luhn). Returns the marker and whether
/// the leading `+` goes with it.
fn classify(gs: &[Group], ds: &[u8], plus: bool, x: bool) -> Option<(&'static str, bool)> {
    if ds.len() < 7 || ds.len() > 19 {
        return None;
    }
    if resident_id(gs, ds, x) {
        return Some((ID_MARK, false));
    }
    if x {
        return None;
    }
    if phone(gs, ds, plus) {
        return Some((PHONE_MARK, plus));
    }
    if card(gs, ds) {
        return Some((CARD_MARK, false));
    }
    None
}

fn lens(gs: &[Group], want: &[usize]) -> bool {
    gs.len() == want.len() && gs.iter().zip(want).all(|(g, w)| g.len() == *w)
}

/// All groups after the first use one separator (`138-1234-5678`, not `138-1234 5678`).
fn same_sep(gs: &[Group]) -> bool {
    gs.get(1..)
        .unwrap_or_default()
        .windows(2)
        .all(|w| w[0].sep == w[1].sep)
}

fn no_paren(gs: &[Group]) -> bool {
    gs.iter().all(|g| !g.paren)
}

/// Chinese resident ID, one run or grouped 6-8-4: 17 digits and a check character (ISO 7064
/// MOD 11-2), a province code 1–8 and a real birth date in digits 7–14. The date and province
/// checks cut the random 18-digit runs that pass the checksum (1 in 11) by another ~30×.
fn resident_id(gs: &[Group], ds: &[u8], x: bool) -> bool {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK: &[u8; 11] = b"10X98765432";
    let (last, shape) = if x { (3, 17) } else { (4, 18) };
    let grouped = lens(gs, &[6, 8, last]) && matches!(gs[1].sep, Sep::Space | Sep::Dash);
    let shaped = (lens(gs, &[shape]) || grouped) && same_sep(gs);
    if !shaped || !no_paren(gs) || ds.len() != shape {
        return false;
    }
    let num = |r: std::ops::Range<usize>| ds[r].iter().fold(0u32, |n, &d| n * 10 + u32::from(d));
    let (year, month, day) = (num(6..10), num(10..12), num(12..14));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    };
    if !(1..=8).contains(&ds[0]) || !(1900..=2099).contains(&year) || day == 0 || day > days {
        return false;
    }
    let sum: u32 = ds.iter().zip(WEIGHTS).map(|(&d, w)| u32::from(d) * w).sum();
    let expected = CHECK[(sum % 11) as usize];
    let got = if x { b'X' } else { ds[17] + b'0' };
    got == expected
}

fn phone(gs: &[Group], ds: &[u8], plus: bool) -> bool {
    if plus {
        // +86 138 1234 5678, +8613812345678, +1 415-555-0134, +44 20 7946 0958, +81-3-1234-5678
        return (8..=15).contains(&ds.len())
            && (gs.len() == 1 || (!gs[0].paren && gs[0].len() <= 3));
    }
    cn_mobile(gs, ds) || cn_landline(gs, ds) || nanp(gs, ds)
}

fn mobile_digits(ds: &[u8]) -> bool {
    ds.len() == 11 && ds[0] == 1 && (3..=9).contains(&ds[1])
}

/// 13812345678, 138 1234 5678, 138-1234-5678, optionally after 86 / 0086.
fn cn_mobile(gs: &[Group], ds: &[u8]) -> bool {
    let bare = |gs: &[Group], ds: &[u8]| {
        mobile_digits(ds)
            && no_paren(gs)
            && (lens(gs, &[11]) || lens(gs, &[3, 4, 4]) || lens(gs, &[3, 8]))
            && same_sep(gs)
    };
    if bare(gs, ds) {
        return true;
    }
    [&[8, 6][..], &[0, 0, 8, 6]].iter().any(|cc| {
        ds.starts_with(cc)
            && if gs.len() == 1 {
                mobile_digits(&ds[cc.len()..])
            } else {
                gs[0].len() == cc.len() && !gs[0].paren && bare(&gs[1..], &ds[cc.len()..])
            }
    })
}

/// Landline with an area code: 010-12345678, 0755-1234567, (010)12345678, 021 6123 4567, with
/// an optional dash extension (010-12345678-801). Without a separator `01012345678` is too
/// ambiguous (order numbers, UUID tails) and stays.
fn cn_landline(gs: &[Group], ds: &[u8]) -> bool {
    let Some((area, rest)) = gs.split_first() else {
        return false;
    };
    if !(3..=4).contains(&area.len()) || ds[0] != 0 || ds[1] == 0 || rest.is_empty() {
        return false;
    }
    if rest[0].sep == Sep::Dot || (!area.paren && rest[0].sep == Sep::None) || !no_paren(rest) {
        return false;
    }
    let local = |l: &[Group]| {
        let n: usize = l.iter().map(Group::len).sum();
        (7..=8).contains(&n)
            && (l.len() == 1
                || (l.len() == 2 && l.iter().all(|g| g.len() >= 3) && l[1].sep != Sep::Dot))
    };
    match rest.split_last() {
        _ if local(rest) => true,
        Some((ext, number)) => {
            ext.sep == Sep::Dash && (1..=5).contains(&ext.len()) && local(number)
        }
        None => false,
    }
}

/// NANP and the generic 3-3/4-4 shape the old pattern knew: 415-555-0134, (415) 555-0134,
/// 415.555.0134, 1-800-555-0199.
fn nanp(gs: &[Group], ds: &[u8]) -> bool {
    let gs = match gs {
        [one, rest @ ..] if rest.len() == 3 && !one.paren && one.len() == 1 && ds[0] == 1 => rest,
        _ => gs,
    };
    (lens(gs, &[3, 3, 4]) || lens(gs, &[3, 4, 4])) && no_paren(&gs[1..])
}

/// 13–19 digits, one run or grouped like 4111 1111 1111 1111 / 3782 822463 10005, Luhn-valid.
/// No card network issues numbers starting with 0 or 1 (1 is only UATP airline accounts);
/// skipping them keeps millisecond timestamps (`1732272000123`, Luhn-valid) and many order
/// numbers, of which Luhn alone passes one in ten.
fn card(gs: &[Group], ds: &[u8]) -> bool {
    (13..=19).contains(&ds.len())
        && ds[0] >= 2
        && no_paren(gs)
        && (gs.len() == 1
            || (gs[0].len() == 4
                && gs.iter().all(|g| (3..=6).contains(&g.len()))
                && matches!(gs[1].sep, Sep::Space | Sep::Dash)
                && same_sep(gs)))
        && luhn_ok(ds)
}

fn luhn_ok(ds: &[u8]) -> bool {
    let sum: u32 = ds
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            match (i % 2 == 1, d * 2) {
                (true, x) if x > 9 => x - 9,
                (true, x) => x,
                (false, _) => d,
            }
        })
        .sum();
    sum.is_multiple_of(10)
}
