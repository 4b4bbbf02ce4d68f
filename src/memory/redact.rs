//! Redaction of personal data and secrets before anything is embedded or stored.
//! What is redacted never reaches the vector space, the table or the logs.

use std::sync::LazyLock;

use regex::{Captures, Regex};

static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b[A-Z0-9._%+-]+@[A-Z0-9.-]+\.[A-Z]{2,}\b").expect("static regex")
});
/// Secrets with well-known shapes (OpenAI/Anthropic `sk-`, AWS, GitHub, Slack, Google) and
/// `key=value` assignments whose name says it is a secret.
static API_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}",
        r"|AKIA[0-9A-Z]{16}",
        r"|gh[pousr]_[A-Za-z0-9]{30,}",
        r"|github_pat_[A-Za-z0-9_]{30,}",
        r"|xox[abposr]-[A-Za-z0-9-]{10,}",
        r"|AIza[0-9A-Za-z_-]{35})",
    ))
    .expect("static regex")
});
static KEY_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b((?:api[_-]?key|secret|token|password|passwd|access[_-]?key)\s*[:=]\s*)["']?[^\s"',;]{8,}["']?"#)
        .expect("static regex")
});
/// 13–19 digits, optionally grouped by spaces or dashes; only Luhn-valid runs are cards.
static CARD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").expect("static regex"));
/// International (+CC ...), Chinese mobile (1[3-9]x, 11 digits) and NANP-style numbers.
static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:\+\d{1,3}[ -]?)?(?:\(\d{2,4}\)[ -]?)?",
        r"(?:\b1[3-9]\d[ -]?\d{4}[ -]?\d{4}\b",
        r"|\b\d{3}[ .-]\d{3,4}[ .-]\d{4}\b)"
    ))
    .expect("static regex")
});

pub const EMAIL_MARK: &str = "[REDACTED_EMAIL]";
pub const PHONE_MARK: &str = "[REDACTED_PHONE]";
pub const CARD_MARK: &str = "[REDACTED_CARD]";
pub const KEY_MARK: &str = "[REDACTED_API_KEY]";

fn luhn_ok(digits: &str) -> bool {
    let ds: Vec<u32> = digits.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&ds.len()) {
        return false;
    }
    let sum: u32 = ds
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Replace e-mails, API keys, card numbers and phone numbers with fixed markers.
pub fn redact(text: &str) -> String {
    let s = KEY_ASSIGNMENT.replace_all(text, |c: &Captures| format!("{}{KEY_MARK}", &c[1]));
    let s = API_KEY.replace_all(&s, KEY_MARK);
    let s = EMAIL.replace_all(&s, EMAIL_MARK);
    let s = CARD.replace_all(&s, |c: &Captures| {
        if luhn_ok(&c[0]) {
            CARD_MARK.to_string()
        } else {
            c[0].to_string()
        }
    });
    PHONE.replace_all(&s, PHONE_MARK).into_owned()
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
}
