//! Redaction of personal data and secrets before anything is embedded or stored.
//! What is redacted never reaches the vector space, the table or the logs.
//!
//! Why a normalised view: what people paste from phone UIs or type with Chinese IMEs spells the
//! same number or address many ways (`138－1234－5678`, `138　1234　5678`, no-break spaces,
//! `一三八一二三四五六七八`, `zhang.san＠example.com`). The detectors read a view in which those
//! spellings are ASCII (`view.rs` states the folding rules) and report ranges of the view; each
//! range maps back to the original bytes it came from, and only those are replaced. Everything
//! outside a match is kept byte for byte, full-width characters included.
//!
//! Passes run in a fixed order, each on the view with the earlier passes' finds blanked out (as if
//! replaced by a marker), so one span is never claimed twice: secret assignments (`secrets.rs`),
//! keys of well-known shapes, e-mail addresses and WeChat ids (`contacts.rs`), then resident IDs,
//! phone and card numbers (`numbers.rs`). Each file states its rules and its false-positive
//! guards.
//!
//! A documented gap: street addresses (`上海市浦东新区世纪大道100号3栋502室`) are not redacted.
//! No pattern tells an address from a place name in ordinary chat without many false positives.

mod contacts;
mod numbers;
mod secrets;
#[cfg(test)]
mod tests;
mod view;

use std::ops::Range;

use view::{View, MASK};

pub const EMAIL_MARK: &str = "[REDACTED_EMAIL]";
pub const PHONE_MARK: &str = "[REDACTED_PHONE]";
pub const CARD_MARK: &str = "[REDACTED_CARD]";
pub const KEY_MARK: &str = "[REDACTED_API_KEY]";
pub const ID_MARK: &str = "[REDACTED_ID]";
pub const WECHAT_MARK: &str = "[REDACTED_WECHAT]";

const MARKS: [&str; 6] = [
    EMAIL_MARK,
    PHONE_MARK,
    CARD_MARK,
    KEY_MARK,
    ID_MARK,
    WECHAT_MARK,
];

/// One find of a pass: a byte range of the text the pass read, and what replaces it.
struct Hit {
    range: Range<usize>,
    mark: &'static str,
}

type Pass = fn(&str, &mut Vec<Hit>);

/// In order: a later pass sees what an earlier one found as blank.
const PASSES: [Pass; 7] = [
    secrets::english,
    secrets::chinese,
    secrets::glued,
    secrets::shaped,
    contacts::emails,
    contacts::wechat,
    numbers::find,
];

/// Replace secrets, e-mails, WeChat ids, resident ID numbers, phone numbers and card numbers
/// with fixed markers. Idempotent: markers contain nothing any pass matches.
pub fn redact(text: &str) -> String {
    let mut view = View::new(text);
    let mut found = Vec::new();
    // Ranges of the original text, sorted and disjoint.
    let mut spans: Vec<Hit> = Vec::new();
    for pass in PASSES {
        found.clear();
        pass(view.text(), &mut found);
        for hit in found.drain(..) {
            let Some(range) = view.original_range(hit.range.clone()) else {
                continue;
            };
            view.mask(hit.range);
            add(&mut spans, range, hit.mark);
        }
    }
    if spans.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for Hit { range, mark } in spans {
        out.push_str(text.get(last..range.start).unwrap_or_default());
        out.push_str(mark);
        last = range.end;
    }
    out.push_str(text.get(last..).unwrap_or_default());
    out
}

/// Add a find, swallowing earlier finds it overlaps (`密码:api_key=…` is one secret); the later
/// find's marker wins, as it did when each pass replaced the output of the one before.
fn add(spans: &mut Vec<Hit>, mut range: Range<usize>, mark: &'static str) {
    let at = spans.partition_point(|h| h.range.end <= range.start);
    let mut to = at;
    while to < spans.len() && spans[to].range.start < range.end {
        range.start = range.start.min(spans[to].range.start);
        range.end = range.end.max(spans[to].range.end);
        to += 1;
    }
    spans.drain(at..to);
    spans.insert(at, Hit { range, mark });
}

/// A value that is already a marker (`password: [REDACTED_PHONE]` after an earlier call) or
/// blank (found by an earlier pass of this call) stays, so that redacting twice gives the same
/// text.
fn already_redacted(value: &str) -> bool {
    value.starts_with(MASK) || MARKS.iter().any(|m| value.starts_with(m))
}
