//! When two memory texts state the same fact, and the id a fact gets in a scope.
//!
//! Why: a group says the same thing again and again ("妈妈对青霉素过敏。" today, "妈妈对青霉素过敏"
//! tomorrow, "妈妈 对 青霉素 过敏！" next week). Stored three times, it takes three of the five
//! recall slots and the prompt repeats it three times. Two texts are one fact when they are equal
//! after folding what does not change their meaning: Unicode compatibility forms (NFKC, so
//! full-width `ＡＢＣ１２３` is `ABC123`), whitespace and punctuation. Letters, digits and every
//! CJK character stay, so `青霉素` and `阿莫西林` never fold together; neither do `3点` and `4点`.
//!
//! The folded text also names the row: a new memory's id is derived from its scope and folded
//! text ([`fact_id`]), so two processes remembering the same fact at once write the same id, and
//! the writer's insert-if-missing on the table's primary key keeps one of the two rows
//! (`store::writer`). The same text in two scopes gets two ids: a fact never crosses a scope.

use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// The text with compatibility forms, whitespace and punctuation folded away (see the module).
/// Punctuation that is part of a number stays: a sign before a digit (`-5`), and `.`, `,`, `:`
/// and `/` between two digits (`3.5`, `3:30`, `5/3`), so `-5度` is not `5度` and `3.5` not `35`.
pub fn fold(text: &str) -> String {
    let chars: Vec<char> = text.nfkc().collect();
    let digit = |i: Option<usize>| {
        i.and_then(|i| chars.get(i))
            .is_some_and(char::is_ascii_digit)
    };
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        let before = i.checked_sub(1);
        let in_number = match c {
            '-' | '+' | '\u{2212}' => digit(Some(i + 1)) && !digit(before),
            '.' | ',' | ':' | '/' => digit(before) && digit(Some(i + 1)),
            _ => false,
        };
        if in_number || !(c.is_whitespace() || is_punctuation(c)) {
            out.push(c);
        }
    }
    out
}

/// Punctuation in the sense of Unicode's P* categories, plus the ASCII symbols chat uses as
/// punctuation (`~`, `^`, `` ` ``, `|`) and the zero-width characters pasted into text.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation() && !matches!(c, '+' | '$' | '<' | '=' | '>' | '%');
    }
    matches!(c,
        '\u{00A1}' | '\u{00A7}' | '\u{00AB}' | '\u{00B6}' | '\u{00B7}' | '\u{00BB}' | '\u{00BF}'
        | '\u{00AD}'
        | '\u{200B}'..='\u{200F}' | '\u{2060}' | '\u{FEFF}'
        | '\u{2010}'..='\u{2027}' | '\u{2030}'..='\u{205E}'
        | '\u{3001}'..='\u{3003}' | '\u{3008}'..='\u{3011}' | '\u{3014}'..='\u{301F}'
        | '\u{30FB}' | '\u{FE10}'..='\u{FE19}' | '\u{FE30}'..='\u{FE4F}'
        | '\u{FE50}'..='\u{FE6B}' | '\u{FF01}'..='\u{FF0F}' | '\u{FF1A}'..='\u{FF1B}'
        | '\u{FF1F}'..='\u{FF20}' | '\u{FF3B}'..='\u{FF3D}' | '\u{FF3F}' | '\u{FF5B}'
        | '\u{FF5D}' | '\u{FF5F}'..='\u{FF65}'
    )
}

/// Whether two memory texts state the same fact (equal once folded). A text that folds to
/// nothing (only punctuation) equals nothing, not even itself.
pub fn same_fact(a: &str, b: &str) -> bool {
    let a = fold(a);
    !a.is_empty() && a == fold(b)
}

/// The id a new memory with this folded text gets in this scope: a UUID (version 8, RFC 9562's
/// custom layout) made of sha256(scope, 0, folded text). Stable across processes and versions.
pub fn fact_id(scope: &str, folded: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"scopemem fact v1\0");
    hash.update(scope.as_bytes());
    hash.update([0u8]);
    hash.update(folded.as_bytes());
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetitions_of_one_fact_fold_together() {
        let said = [
            "妈妈对青霉素过敏",
            "妈妈对青霉素过敏。",
            "妈妈 对 青霉素 过敏！",
            "妈妈对青霉素过敏!!",
            "「妈妈对青霉素过敏」",
            "妈妈对\u{200B}青霉素过敏……",
        ];
        for s in said {
            assert!(same_fact(said[0], s), "{s}");
        }
        assert!(!same_fact(
            "Grandma's birthday is May 3.",
            "grandma's birthday is may 3"
        ));
        assert!(same_fact(
            "Grandma's birthday is May 3.",
            "Grandmas birthday is May 3"
        ));
        assert!(same_fact("Ｐｉｎ ｃｏｄｅ １２３", "Pin code 123"));
    }

    #[test]
    fn different_facts_never_fold_together() {
        let pairs = [
            ("妈妈对青霉素过敏", "妈妈对阿莫西林过敏"),
            ("会议改到3点", "会议改到4点"),
            ("温度是-5度", "温度是5度"),
            ("x+1", "x1"),
            ("价格3.5元", "价格35元"),
            ("3:30开会", "330开会"),
            ("1,000", "1000"),
        ];
        for (a, b) in pairs {
            assert!(!same_fact(a, b), "{a} / {b}");
        }
        assert!(same_fact("温度是-5度。", "温度是 -5 度"));
    }

    #[test]
    fn punctuation_alone_is_no_fact() {
        assert!(!same_fact("。。。", "!!!"));
        assert!(!same_fact("", ""));
    }

    #[test]
    fn the_id_is_stable_per_scope_and_differs_across_scopes() {
        let a = fact_id("家人", &fold("妈妈对青霉素过敏"));
        assert_eq!(a, fact_id("家人", &fold("妈妈对青霉素过敏。")));
        assert_ne!(a, fact_id("public", &fold("妈妈对青霉素过敏")));
        assert_ne!(a, fact_id("家人", &fold("妈妈对阿莫西林过敏")));
        let parsed = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!(parsed.get_version_num(), 8);
    }
}
