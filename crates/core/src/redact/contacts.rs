//! Contact handles that are not numbers: e-mail addresses and WeChat ids.
//!
//! Why: for a Chinese-speaking user a WeChat id is as personal as a phone number (it finds the
//! person, and is often their name plus birth year), and people give it in chat the way they give
//! a phone number. Both regexes read the normalised view, so `zhang.san＠example.com` and
//! `example。com` reach them as ASCII.
//!
//! WeChat rule: an id is what WeChat allows (6–20 characters, an ASCII letter first, then
//! letters, digits, `_` or `-`) after 微信 / 微信号 / 微信ID / vx / wx / wechat / weixin (any case).
//! - After an explicit label (`微信号`, `微信ID`, `vx号`) or a separator (`:` `=` `是` `为`) any
//!   such id is redacted: `微信号：zhangsan`, `vx: zhangsan_1988`.
//! - After a bare trigger, glued (`微信zhangsan_1988`, CJK trigger only) or after a space
//!   (`wx zhangsan_1988`), the id must also contain a digit, `_` or `-`, and not be a product word
//!   (`微信OAuth2登录`, `微信Windows11版`): a bare word after 微信 is usually prose (`微信 official`).
//! - vx / wx / wechat / weixin must not continue an ASCII word (`devx`, `wxWidgets`), and need a
//!   separator (`wxpython3` is a word).
//! - The id must end there: a longer token, or one followed by `.`/`@` and more (`wx.qq.com`,
//!   `微信OAuth2.0`, an e-mail), is not an id.
//! - `wxid_…`, WeChat's internal account id, is redacted wherever it stands.
//!
//! What stays: 微信 with no id after it (`微信群`, `微信里说`, `微信号是多少`, `加我微信`),
//! version numbers (`微信 8.0.45`), the mini-program API (`wx.login()`). A WeChat id that is a
//! phone number is left to the phone detector, which runs after this one.

use std::sync::LazyLock;

use regex::Regex;

use super::{Hit, EMAIL_MARK, WECHAT_MARK};

/// No boundary needed: the leftmost match starts right after the first character outside the
/// local-part class, so ASCII letters next to an address are part of it and CJK ones are not.
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}").expect("static regex")
});

/// Group 1 the trigger, 2 the separator, 3 the candidate id (longer than any id, so a longer
/// token is seen whole and refused rather than cut).
static WECHAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(微信(?:号码?|[Ii][Dd])?|(?i:vx|wx|wechat|weixin)(?:号码?| ?id)?)",
        r"( ?(?:[:=：＝]|是|为)? ?)",
        r"([A-Za-z][A-Za-z0-9_-]{0,30})",
    ))
    .expect("static regex")
});

static WXID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"wxid_[A-Za-z0-9_-]{6,30}").expect("static regex"));

/// Words that follow 微信 in product talk and look like ids once a digit is added.
const PRODUCT_WORDS: [&str; 14] = [
    "oauth",
    "openid",
    "unionid",
    "appid",
    "appsecret",
    "jsapi",
    "jssdk",
    "sdk",
    "api",
    "windows",
    "android",
    "iphone",
    "ios",
    "macos",
];

pub(super) fn emails(text: &str, hits: &mut Vec<Hit>) {
    hits.extend(EMAIL.find_iter(text).map(|m| Hit {
        range: m.range(),
        mark: EMAIL_MARK,
    }));
}

pub(super) fn wechat(text: &str, hits: &mut Vec<Hit>) {
    for id in WXID.find_iter(text) {
        if !glued_left(text, id.start()) && !continues(&text[id.end()..]) {
            hits.push(Hit {
                range: id.range(),
                mark: WECHAT_MARK,
            });
        }
    }
    for c in WECHAT.captures_iter(text) {
        let (Some(trigger), Some(sep), Some(id)) = (c.get(1), c.get(2), c.get(3)) else {
            continue;
        };
        let (t, s, v) = (trigger.as_str(), sep.as_str(), id.as_str());
        let ascii = t.starts_with(|c: char| c.is_ascii_alphabetic());
        let labelled = t.ends_with(['号', '码', 'd', 'D']);
        let explicit = labelled || s.contains([':', '=', '：', '＝', '是', '为']);
        if ascii && (glued_left(text, trigger.start()) || (s.is_empty() && !labelled)) {
            continue;
        }
        if !(6..=20).contains(&v.len()) || continues(&text[id.end()..]) {
            continue;
        }
        if !explicit && !v.contains(|c: char| c.is_ascii_digit() || c == '_' || c == '-') {
            continue;
        }
        let word = v
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_ascii_lowercase();
        if PRODUCT_WORDS.contains(&word.as_str()) {
            continue;
        }
        hits.push(Hit {
            range: id.range(),
            mark: WECHAT_MARK,
        });
    }
}

/// The candidate continues an ASCII word on its left (`devx`, `mywxid_…`).
fn glued_left(text: &str, start: usize) -> bool {
    text[..start]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The token goes on past the candidate: more id characters, or `.`/`@` and more
/// (`wx.qq.com`, `OAuth2.0`, an e-mail address).
fn continues(after: &str) -> bool {
    let mut it = after.chars();
    match (it.next(), it.next()) {
        (Some(c), _) if c.is_ascii_alphanumeric() || c == '_' || c == '-' => true,
        (Some('.' | '@'), Some(c)) => c.is_ascii_alphanumeric(),
        _ => false,
    }
}
