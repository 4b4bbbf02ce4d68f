//! Secrets: `key = value` assignments in English and Chinese, and keys with well-known shapes.
//!
//! Why: a secret pasted into a chat ("WiFi密码Abc12345xyz", `OPENAI_API_KEY=…`) is worth more to
//! an attacker than anything else in a memory, and nothing about it is worth remembering.
//! Every regex here reads the normalised view (see `view.rs`), so full-width letters and digits
//! in a value reach it as ASCII; `：` and `＝` stay full-width there and are accepted as
//! separators. Classes are spelled out in ASCII: `\d`, `\w` and `(?i)` are Unicode-aware in
//! `regex`.
//!
//! A secret straight after `密码`/`口令` with no separator or one space (`WiFi密码Abc12345xyz`)
//! is redacted when the ASCII run that follows is 6+ digits (a PIN) or 6+ characters mixing
//! letters and digits, and does not start with a cipher or hash name (`密码AES256加密`, `SM4`).
//! What stays: prose about passwords (`密码学`, `密码是什么`, `密码至少8位`, `密码12位`), dates and
//! versions after the word (`密码2024-01-01过期`: digits with separators and no letter).

use std::sync::LazyLock;

use regex::{Captures, Regex};

use super::{already_redacted, Hit, KEY_MARK};

/// The value of a secret assignment: no whitespace, quotes or list punctuation, and no CJK or
/// full-width text, so in `密码：hunter2hunter2，别告诉别人` it stops where the sentence resumes.
const SECRET_VALUE: &str =
    r#"[^\s"'“”‘’,;\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\x{3000}-\x{303F}\x{FF00}-\x{FFEF}]"#;

/// `api_key=…`, `token: …`, `DB_PASSWORD=…`, `"client_secret": "…"`. `regex` has no look-behind,
/// so [`english`] checks that the name does not continue an ASCII word (`mytoken=` is not a
/// secret); it may follow CJK (`配置里api_key=…`). Keeping that check out of the pattern lets
/// `regex` look for the name's literals first instead of trying every position.
static KEY_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        concat!(
            r#"((?i:(?:[a-z0-9]+[_-])*"#,
            r#"(?:api[_-]?key|secret|token|password|passwd|access[_-]?key))["']?\s*[:=：＝]\s*)"#,
            r#"["']?({}{{8,}})["']?"#
        ),
        SECRET_VALUE
    ))
    .expect("static regex")
});

/// The literal heart of every name [`KEY_ASSIGNMENT`] accepts. The full pattern starts with a
/// repeated class, which `regex` must try at every position; this one it can find with a
/// literal search, so text without any such word costs one fast scan.
static KEY_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)key|secret|token|passw").expect("static regex"));

/// `密码：…`, `密码:…`, `口令=…`, `支付密码是…`. Chinese needs no left boundary. After `：`/`=` an
/// ASCII run is a secret from 4 characters (6-digit PINs are common); after `是`/`为` from 6,
/// since those words also introduce ordinary answers.
static CN_KEY_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r#"((?:密码|口令|密钥|秘钥|私钥|令牌)\s*([:：=＝]|是|为)\s*)["'“‘]?({SECRET_VALUE}{{4,}})["'”’]?"#
    ))
    .expect("static regex")
});

/// Secrets with well-known shapes (OpenAI/Anthropic `sk-`, AWS, GitHub, Slack, Google), not
/// continuing an ASCII word ([`shaped`] checks the character before, as in [`english`]).
static API_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",
        r"|AKIA[0-9A-Z]{16}",
        r"|gh[pousr]_[A-Za-z0-9]{30,}",
        r"|github_pat_[A-Za-z0-9_]{30,}",
        r"|xox[abposr]-[A-Za-z0-9-]{10,}",
        r"|AIza[0-9A-Za-z_-]{35})",
    ))
    .expect("static regex")
});

/// `WiFi密码Abc12345xyz`, `银行卡密码123456`: the secret glued to the word, no separator.
static CN_GLUED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:密码|口令) ?([A-Za-z0-9][!-~&&[^"',;]]*)"#).expect("static regex")
});

/// Cipher and hash names that follow 密码 in prose about cryptography (`密码SHA256加密`).
const ALGORITHMS: [&str; 14] = [
    "aes", "sha", "rsa", "md5", "des", "3des", "sm2", "sm3", "sm4", "hmac", "ecc", "pbkdf",
    "bcrypt", "argon",
];

fn group<'t>(c: &Captures<'t>, i: usize) -> Option<regex::Match<'t>> {
    c.get(i)
}

/// `api_key=…`: the value (and its quotes) after the name and separator, which stay.
pub(super) fn english(text: &str, hits: &mut Vec<Hit>) {
    if !KEY_NAME.is_match(text) {
        return;
    }
    for c in KEY_ASSIGNMENT.captures_iter(text) {
        let (Some(all), Some(head), Some(value)) = (group(&c, 0), group(&c, 1), group(&c, 2))
        else {
            continue;
        };
        if !glued_left(text, all.start()) && !already_redacted(value.as_str()) {
            hits.push(Hit {
                range: head.end()..all.end(),
                mark: KEY_MARK,
            });
        }
    }
}

/// The match continues an ASCII word on its left.
fn glued_left(text: &str, start: usize) -> bool {
    text[..start]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `密码：…`, `口令是…`: the value after the word and separator.
pub(super) fn chinese(text: &str, hits: &mut Vec<Hit>) {
    for c in CN_KEY_ASSIGNMENT.captures_iter(text) {
        let (Some(all), Some(head), Some(sep), Some(value)) =
            (group(&c, 0), group(&c, 1), group(&c, 2), group(&c, 3))
        else {
            continue;
        };
        let weak = matches!(sep.as_str(), "是" | "为");
        if already_redacted(value.as_str()) || (weak && value.as_str().chars().count() < 6) {
            continue;
        }
        hits.push(Hit {
            range: head.end()..all.end(),
            mark: KEY_MARK,
        });
    }
}

/// `WiFi密码Abc12345xyz`: see the module doc for what counts.
pub(super) fn glued(text: &str, hits: &mut Vec<Hit>) {
    for c in CN_GLUED.captures_iter(text) {
        let Some(value) = group(&c, 1) else { continue };
        // A full stop or question mark after the secret ends the sentence, not the secret.
        let v = value.as_str().trim_end_matches(['.', '!', '?']);
        if glued_secret(v) {
            hits.push(Hit {
                range: value.start()..value.start() + v.len(),
                mark: KEY_MARK,
            });
        }
    }
}

fn glued_secret(v: &str) -> bool {
    let digits = v.bytes().filter(u8::is_ascii_digit).count();
    let letters = v.bytes().filter(u8::is_ascii_alphabetic).count();
    let pin = digits == v.len();
    let mixed = digits > 0 && letters > 0;
    let cipher = ALGORITHMS.iter().any(|a| {
        v.get(..a.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(a))
    });
    v.len() >= 6 && (pin || mixed) && !cipher
}

/// A key of a well-known shape, wherever it stands.
pub(super) fn shaped(text: &str, hits: &mut Vec<Hit>) {
    hits.extend(
        API_KEY
            .find_iter(text)
            .filter(|m| !glued_left(text, m.start()))
            .map(|m| Hit {
                range: m.range(),
                mark: KEY_MARK,
            }),
    );
}
