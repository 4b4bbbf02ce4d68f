//! Redaction of personal data and secrets before anything is embedded or stored.
//! What is redacted never reaches the vector space, the table or the logs.
//!
//! Chinese text has no spaces, and `regex` counts CJK characters as word characters, so a
//! `\b` never fires in `卡号4111111111111111谢谢`. Nothing here relies on `\b`: `regex` has no
//! look-around, so each pass matches a candidate and then looks at its neighbours itself.
//! ASCII letters, digits and `_` still glue a candidate into a larger token (as `\b` did for
//! English: `RTX4090`, hashes, UUIDs, `SF1234567890123`); CJK text and punctuation do not.
//! Classes are spelled out in ASCII: `\d`, `\w` and `(?i)` are Unicode-aware in `regex`.
//! Full-width digits (`１３８…`, typed by Chinese IMEs) count as digits.
//!
//! Not redacted, on purpose: IP addresses (no person behind `192.168.1.1`; a public IP is at
//! most a weak identifier, and dotted numbers are mostly versions), bare 5–10 digit numbers
//! (QQ numbers, group ids, timestamps), 15-digit first-generation resident IDs.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

pub const EMAIL_MARK: &str = "[REDACTED_EMAIL]";
pub const PHONE_MARK: &str = "[REDACTED_PHONE]";
pub const CARD_MARK: &str = "[REDACTED_CARD]";
pub const KEY_MARK: &str = "[REDACTED_API_KEY]";
pub const ID_MARK: &str = "[REDACTED_ID]";

const MARKS: [&str; 5] = [EMAIL_MARK, PHONE_MARK, CARD_MARK, KEY_MARK, ID_MARK];

/// The value of a secret assignment: no whitespace, quotes or list punctuation, and no CJK or
/// full-width text, so in `密码：hunter2hunter2，别告诉别人` it stops where the sentence resumes.
const SECRET_VALUE: &str =
    r#"[^\s"'“”‘’,;\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\x{3000}-\x{303F}\x{FF00}-\x{FFEF}]"#;

/// `api_key=…`, `token: …`, `DB_PASSWORD=…`, `"client_secret": "…"`. Group 1 stands in for the
/// missing look-behind: the name must not continue an ASCII word (`mytoken=` is not a secret),
/// but may follow CJK (`配置里api_key=…`).
static KEY_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        concat!(
            r#"(^|[^A-Za-z0-9_])((?i:(?:[a-z0-9]+[_-])*"#,
            r#"(?:api[_-]?key|secret|token|password|passwd|access[_-]?key))["']?\s*[:=]\s*)"#,
            r#"["']?({}{{8,}})["']?"#
        ),
        SECRET_VALUE
    ))
    .expect("static regex")
});

/// `密码：…`, `密码:…`, `口令=…`, `支付密码是…`. Chinese needs no left boundary. After `：`/`=` an
/// ASCII run is a secret from 4 characters (6-digit PINs are common); after `是`/`为` from 6,
/// since those words also introduce ordinary answers.
static CN_KEY_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r#"((?:密码|口令|密钥|秘钥|私钥|令牌)\s*([:：=＝]|是|为)\s*)["'“‘]?({SECRET_VALUE}{{4,}})["'”’]?"#
    ))
    .expect("static regex")
});

/// Secrets with well-known shapes (OpenAI/Anthropic `sk-`, AWS, GitHub, Slack, Google). Group 1
/// is the character before (not an ASCII word character), kept as is.
static API_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(^|[^A-Za-z0-9_])(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",
        r"|AKIA[0-9A-Z]{16}",
        r"|gh[pousr]_[A-Za-z0-9]{30,}",
        r"|github_pat_[A-Za-z0-9_]{30,}",
        r"|xox[abposr]-[A-Za-z0-9-]{10,}",
        r"|AIza[0-9A-Za-z_-]{35})",
    ))
    .expect("static regex")
});

/// No boundary needed: the leftmost match starts right after the first character outside the
/// local-part class, so ASCII letters next to an address are part of it and CJK ones are not.
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}").expect("static regex")
});

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

/// Replace secrets, e-mails, resident ID numbers, phone numbers and card numbers with fixed
/// markers. Idempotent: markers contain nothing any pass matches.
pub fn redact(text: &str) -> String {
    let s = Cow::Borrowed(text);
    let s = then(s, |t| KEY_ASSIGNMENT.replace_all(t, english_assignment));
    let s = then(s, |t| CN_KEY_ASSIGNMENT.replace_all(t, chinese_assignment));
    let s = then(s, |t| {
        API_KEY.replace_all(t, |c: &Captures| format!("{}{KEY_MARK}", group(c, 1)))
    });
    let s = then(s, |t| EMAIL.replace_all(t, EMAIL_MARK));
    then(s, redact_numbers).into_owned()
}

/// Chain passes without copying the text when a pass changes nothing.
fn then<'a>(s: Cow<'a, str>, pass: impl FnOnce(&str) -> Cow<'_, str>) -> Cow<'a, str> {
    let changed = match pass(&s) {
        Cow::Borrowed(_) => None,
        Cow::Owned(o) => Some(o),
    };
    changed.map_or(s, Cow::Owned)
}

fn group<'t>(c: &Captures<'t>, i: usize) -> &'t str {
    c.get(i).map_or("", |m| m.as_str())
}

/// A value that is already a marker (`password: [REDACTED_PHONE]` after an earlier call) stays,
/// so that redacting twice gives the same text.
fn already_redacted(value: &str) -> bool {
    MARKS.iter().any(|m| value.starts_with(m))
}

fn english_assignment(c: &Captures) -> String {
    if already_redacted(group(c, 3)) {
        return group(c, 0).to_string();
    }
    format!("{}{}{KEY_MARK}", group(c, 1), group(c, 2))
}

fn chinese_assignment(c: &Captures) -> String {
    let value = group(c, 3);
    let weak = matches!(group(c, 2), "是" | "为");
    if already_redacted(value) || (weak && value.chars().count() < 6) {
        return group(c, 0).to_string();
    }
    format!("{}{KEY_MARK}", group(c, 1))
}

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

/// Redact resident IDs, phones and cards in every numeric span. A span is cut only between
/// space-separated chunks (a dash- or dot-joined chunk like `2024-05-01` or `3.14159…` is one
/// token), trying the longest run of chunks first, so `13812345678 13912345678` gives two phones
/// and `2024-05-01 13812345678` one.
fn redact_numbers(text: &str) -> Cow<'_, str> {
    let mut cuts: Vec<(usize, usize, &str)> = Vec::new();
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
                    cuts.push((start, groups[b].end, mark));
                    i = j + 1;
                }
                None => i += 1,
            }
        }
    }
    if cuts.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (start, end, mark) in cuts {
        out.push_str(&text[last..start]);
        out.push_str(mark);
        last = end;
    }
    out.push_str(&text[last..]);
    Cow::Owned(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_each_kind() {
        assert_eq!(
            redact("mail me at a.b+c@example.co.uk now"),
            format!("mail me at {EMAIL_MARK} now")
        );
        assert_eq!(
            redact("手机 13812345678 找我"),
            format!("手机 {PHONE_MARK} 找我")
        );
        assert_eq!(redact("call +1 415-555-0134"), format!("call {PHONE_MARK}"));
        assert_eq!(
            redact("card 4111 1111 1111 1111 ok"),
            format!("card {CARD_MARK} ok")
        );
        assert_eq!(
            redact("key sk-proj-abcdefghijklmnop1234"),
            format!("key {KEY_MARK}")
        );
        assert_eq!(redact("AKIAIOSFODNN7EXAMPLE"), KEY_MARK);
        assert_eq!(
            redact("api_key=\"hunter2hunter2\""),
            format!("api_key={KEY_MARK}")
        );
    }

    #[test]
    fn leaves_ordinary_text_and_non_luhn_numbers() {
        let text = "Order 1234567890123 shipped; 家人 likes tea; meeting at 10:30 on 2024-05-01";
        assert_eq!(redact(text), text);
        assert_eq!(redact("we met in 2019"), "we met in 2019");
    }

    /// (input, expected). Expected == input means "must stay untouched".
    const CASES: &[(&str, &str)] = &[
        // --- the issue's examples ---
        (
            "我的手机号13812345678，记住",
            "我的手机号[REDACTED_PHONE]，记住",
        ),
        ("邮箱bob@example.com请记住", "邮箱[REDACTED_EMAIL]请记住"),
        ("卡号4111111111111111谢谢", "卡号[REDACTED_CARD]谢谢"),
        ("身份证号110101199003078515", "身份证号[REDACTED_ID]"),
        // --- resident IDs ---
        (
            "身份证11010519491231002X，别外传",
            "身份证[REDACTED_ID]，别外传",
        ),
        ("身份证号是11010119900307002x", "身份证号是[REDACTED_ID]"),
        ("ID: 110101199003078515.", "ID: [REDACTED_ID]."),
        (
            "身份证 110101 19900307 8515 收好",
            "身份证 [REDACTED_ID] 收好",
        ),
        ("证件号110105-19491231-002X", "证件号[REDACTED_ID]"),
        // --- phones ---
        ("电话138 1234 5678", "电话[REDACTED_PHONE]"),
        ("电话138-1234-5678找我", "电话[REDACTED_PHONE]找我"),
        ("手机+86 138 1234 5678", "手机[REDACTED_PHONE]"),
        ("手机+8613812345678谢谢", "手机[REDACTED_PHONE]谢谢"),
        ("号码8613812345678", "号码[REDACTED_PHONE]"),
        ("手机１３８１２３４５６７８", "手机[REDACTED_PHONE]"),
        ("座机010-12345678", "座机[REDACTED_PHONE]"),
        ("座机0755-1234567转总机", "座机[REDACTED_PHONE]转总机"),
        ("办公室(010)12345678", "办公室[REDACTED_PHONE]"),
        ("上海021 6123 4567", "上海[REDACTED_PHONE]"),
        ("分机010-12345678-801", "分机[REDACTED_PHONE]"),
        ("call +1 415-555-0134", "call [REDACTED_PHONE]"),
        (
            "London office +44 20 7946 0958.",
            "London office [REDACTED_PHONE].",
        ),
        ("东京+81-3-1234-5678", "东京[REDACTED_PHONE]"),
        ("call 415-555-0134 today", "call [REDACTED_PHONE] today"),
        ("(415) 555-0134", "[REDACTED_PHONE]"),
        ("toll free 1-800-555-0199", "toll free [REDACTED_PHONE]"),
        (
            "两个号码13812345678和13912345678",
            "两个号码[REDACTED_PHONE]和[REDACTED_PHONE]",
        ),
        (
            "13812345678 13912345678",
            "[REDACTED_PHONE] [REDACTED_PHONE]",
        ),
        ("第3 13812345678", "第3 [REDACTED_PHONE]"),
        ("tel:13812345678", "tel:[REDACTED_PHONE]"),
        ("手机 13812345678 找我", "手机 [REDACTED_PHONE] 找我"),
        // --- e-mail ---
        (
            "我的邮箱是Alice.Smith+work@mail.example.co.uk，谢谢",
            "我的邮箱是[REDACTED_EMAIL]，谢谢",
        ),
        ("联系13812345678@qq.com", "联系[REDACTED_EMAIL]"),
        ("email: John.Doe@Example.COM.", "email: [REDACTED_EMAIL]."),
        (
            "mail me at a.b+c@example.co.uk now",
            "mail me at [REDACTED_EMAIL] now",
        ),
        // --- cards ---
        (
            "卡号4111 1111 1111 1111，有效期",
            "卡号[REDACTED_CARD]，有效期",
        ),
        ("卡号4111-1111-1111-1111谢谢", "卡号[REDACTED_CARD]谢谢"),
        (
            "5555555555554444是我的万事达卡",
            "[REDACTED_CARD]是我的万事达卡",
        ),
        ("amex 378282246310005 ok", "amex [REDACTED_CARD] ok"),
        ("卡号4111111111111111 1234", "卡号[REDACTED_CARD] 1234"),
        // --- API keys and secrets ---
        (
            "密钥sk-proj-abcdefghijklmnop1234谢谢",
            "密钥[REDACTED_API_KEY]谢谢",
        ),
        (
            "token是ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "token是[REDACTED_API_KEY]",
        ),
        (
            "AWS密钥AKIAIOSFODNN7EXAMPLE已轮换",
            "AWS密钥[REDACTED_API_KEY]已轮换",
        ),
        (
            "key AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
            "key [REDACTED_API_KEY]",
        ),
        (
            "用这个sk-ant-api03-abcdefghijklmnopqrstuv",
            "用这个[REDACTED_API_KEY]",
        ),
        (
            "slack xoxb-123456789012-abcdefghij",
            "slack [REDACTED_API_KEY]",
        ),
        ("密码：hunter2hunter2", "密码：[REDACTED_API_KEY]"),
        (
            "密码:hunter2hunter2，别告诉别人",
            "密码:[REDACTED_API_KEY]，别告诉别人",
        ),
        ("我的支付密码是123456", "我的支付密码是[REDACTED_API_KEY]"),
        (
            "配置里api_key=abcd1234efgh5678了",
            "配置里api_key=[REDACTED_API_KEY]了",
        ),
        (
            "OPENAI_API_KEY=abcdefgh12345678",
            "OPENAI_API_KEY=[REDACTED_API_KEY]",
        ),
        ("password: 'tr0ub4dor&3'", "password: [REDACTED_API_KEY]"),
        ("api_key=\"hunter2hunter2\"", "api_key=[REDACTED_API_KEY]"),
        (
            "{\"client_secret\": \"abcdefgh12345678\"}",
            "{\"client_secret\": [REDACTED_API_KEY]}",
        ),
        // --- mixed ---
        (
            "身份证110101199003078515，手机13812345678，邮箱bob@example.com",
            "身份证[REDACTED_ID]，手机[REDACTED_PHONE]，邮箱[REDACTED_EMAIL]",
        ),
        // --- must stay untouched ---
        ("订单号1234567890123已发货", "订单号1234567890123已发货"),
        (
            "Order 1234567890123 shipped; 家人 likes tea; meeting at 10:30 on 2024-05-01",
            "Order 1234567890123 shipped; 家人 likes tea; meeting at 10:30 on 2024-05-01",
        ),
        ("we met in 2019", "we met in 2019"),
        ("会议定在2024-05-01", "会议定在2024-05-01"),
        ("2024年5月1日见", "2024年5月1日见"),
        ("生日20240501", "生日20240501"),
        ("10:30开会", "10:30开会"),
        ("14:05:59 服务器重启", "14:05:59 服务器重启"),
        ("2024-05-01 10:30", "2024-05-01 10:30"),
        ("2024-05-01T10:30:00Z", "2024-05-01T10:30:00Z"),
        ("2024.05.01", "2024.05.01"),
        ("升级到v1.2.3了", "升级到v1.2.3了"),
        ("Python 3.11.7", "Python 3.11.7"),
        ("rustc 1.95.0", "rustc 1.95.0"),
        ("版本1.2.3.4", "版本1.2.3.4"),
        ("价格¥1299", "价格¥1299"),
        ("costs $19.99", "costs $19.99"),
        ("总价1,299.00元", "总价1,299.00元"),
        ("1,234,567,890", "1,234,567,890"),
        ("群号123456789", "群号123456789"),
        ("QQ号1234567890", "QQ号1234567890"),
        ("时间戳1732272000", "时间戳1732272000"),
        ("毫秒时间戳1732272000123", "毫秒时间戳1732272000123"),
        ("服务器192.168.1.1", "服务器192.168.1.1"),
        ("在4B会议室", "在4B会议室"),
        ("显卡RTX 4090", "显卡RTX 4090"),
        ("RTX4090显卡", "RTX4090显卡"),
        (
            "UUID 0190f3c2-7b1e-7c3a-9f4e-123456789abc",
            "UUID 0190f3c2-7b1e-7c3a-9f4e-123456789abc",
        ),
        (
            "id 01901234-5678-7123-8123-456789012345",
            "id 01901234-5678-7123-8123-456789012345",
        ),
        (
            "default:GroupMessage:123456789",
            "default:GroupMessage:123456789",
        ),
        // wrong check digit; not Luhn-valid either
        ("身份证号110101199003078514", "身份证号110101199003078514"),
        // check digit right, month 13 (and Luhn-valid, but starts with 1)
        ("编号110101199013078519", "编号110101199013078519"),
        // check digit right, 30 February
        ("编号110101202302301232", "编号110101202302301232"),
        ("流水号123456789012345678", "流水号123456789012345678"),
        ("编号12345678901", "编号12345678901"),
        ("pi是3.14159265358979323", "pi是3.14159265358979323"),
        ("共有12345人", "共有12345人"),
        ("房间1203", "房间1203"),
        ("第5名", "第5名"),
        ("hello world", "hello world"),
        ("", ""),
        (
            "邮件地址是bob at example dot com",
            "邮件地址是bob at example dot com",
        ),
        ("他说“密码是多少”", "他说“密码是多少”"),
        ("密码学：RSA2048", "密码学：RSA2048"),
        ("密码至少8位", "密码至少8位"),
        ("密码是abc", "密码是abc"),
        ("max_tokens: 4096", "max_tokens: 4096"),
        ("the token is valid", "the token is valid"),
        ("tokenizer: tiktoken", "tokenizer: tiktoken"),
        ("1920x1080分辨率", "1920x1080分辨率"),
        ("比分3:1", "比分3:1"),
        ("ISBN 978-7-111-12345-6", "ISBN 978-7-111-12345-6"),
        ("快递单号SF1234567890123", "快递单号SF1234567890123"),
        (
            "commit 3f2a4111111111111111b",
            "commit 3f2a4111111111111111b",
        ),
        ("电话号码是多少？", "电话号码是多少？"),
        ("卡号4111111111111112", "卡号4111111111111112"),
        ("增长了+12.5%", "增长了+12.5%"),
        ("腾讯会议 123 456 789", "腾讯会议 123 456 789"),
        ("温度-20度", "温度-20度"),
        ("IPv6 2001:db8::1", "IPv6 2001:db8::1"),
        ("银行卡尾号1234", "银行卡尾号1234"),
        ("无分隔的01012345678", "无分隔的01012345678"),
    ];

    #[test]
    fn table() {
        let mut failed = Vec::new();
        for (i, (input, expected)) in CASES.iter().enumerate() {
            let got = redact(input);
            if got != *expected {
                failed.push(format!(
                    "case {i}: {input:?}\n     got: {got:?}\nexpected: {expected:?}"
                ));
            }
        }
        assert!(
            failed.is_empty(),
            "{} case(s) failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }

    #[test]
    fn table_size() {
        let untouched = CASES.iter().filter(|(i, e)| i == e).count();
        assert!(CASES.len() >= 60, "{} cases", CASES.len());
        assert!(
            untouched * 2 >= CASES.len(),
            "{untouched} of {} untouched",
            CASES.len()
        );
    }

    #[test]
    fn idempotent() {
        for (input, _) in CASES {
            let once = redact(input);
            let twice = redact(&once);
            assert_eq!(twice, once, "not idempotent on {input:?}");
        }
        // A secret name in front of a value another pass redacted.
        let once = redact("password: +86 138 1234 5678");
        assert_eq!(once, "password: [REDACTED_PHONE]");
        assert_eq!(redact(&once), once);
    }
}
