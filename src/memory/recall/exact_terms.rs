//! Exact terms: the parts of a question that only the memory holding them verbatim answers.
//!
//! Names with digits, numbers, codes and tags (`1502`, `JIRA-4821`, `v2.3.1`, `粤B·7K3Q9`),
//! titles in 《》 and quoted phrases mean one memory and no look-alike. (Acronyms do not: on the
//! quality bench "PM" and "BOSS" in a question promoted memories that merely held the word.) An
//! embedding model reads them as their neighbours (JIRA-4821 is close to JIRA-4812), and so
//! does the keyword index, whose character n-grams JIRA-4128 shares too; with a model that
//! ranks well the fusion followed the vectors and dropped what keyword search had put first.
//! So in the keyword list the memories that hold every exact term of the question verbatim go
//! first ([`promote`]), and when one does, that list leads the fusion for the question
//! (`memory::hybrid`); a question without exact terms keeps the calibrated weights, and with
//! them the vector list's gains on paraphrases.

use std::sync::OnceLock;

use regex::Regex;

fn patterns() -> &'static [Regex] {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            // 《title》, “quote”, "quote", 「quote」: the text inside.
            r"《([^》]{1,40})》",
            r"“([^”]{1,40})”",
            r#""([^"]{1,40})""#,
            r"「([^」]{1,40})」",
            // A run of ASCII letters, digits and joiners that holds a digit: numbers, codes,
            // versions, plates, room numbers.
            r"(?i)([a-z0-9][a-z0-9._\-·:/#]*[0-9][a-z0-9._\-·:/#]*|[0-9])",
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    })
}

/// The exact terms of `query`, lower-cased, without joiners at their ends.
pub(crate) fn of(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for re in patterns() {
        for cap in re.captures_iter(query) {
            let Some(m) = cap.get(1) else { continue };
            let term = m
                .as_str()
                .trim_matches(|c: char| ".-·:/#".contains(c))
                .to_lowercase();
            if !term.is_empty() && !terms.contains(&term) {
                terms.push(term);
            }
        }
    }
    // A lone digit is part of a longer term found by the same pattern, or too common alone.
    terms.retain(|t| t.chars().count() > 1);
    terms
}

/// Whether `text` holds every one of `terms` (lower-cased), and there is at least one.
pub(crate) fn all_in(terms: &[String], text: &str) -> bool {
    if terms.is_empty() {
        return false;
    }
    let text = text.to_lowercase();
    terms.iter().all(|t| text.contains(t.as_str()))
}

/// Move the items whose text holds every one of `terms` ([`of`] a question) ahead of the rest,
/// keeping the order within both groups. Nothing moves without terms.
pub(crate) fn promote<T>(terms: &[String], items: Vec<T>, text: impl Fn(&T) -> String) -> Vec<T> {
    if terms.is_empty() {
        return items;
    }
    let (mut exact, rest): (Vec<T>, Vec<T>) = items
        .into_iter()
        .partition(|item| all_in(terms, &text(item)));
    exact.extend(rest);
    exact
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_codes_titles_and_tags_are_exact_terms() {
        assert_eq!(of("1502的物业费交了没"), ["1502"]);
        assert_eq!(of("JIRA-4821是什么bug"), ["jira-4821"]);
        assert_eq!(of("staging 用哪个分支, v2.3.1 呢？"), ["v2.3.1"]);
        assert_eq!(of("粤B·7K3Q9是谁的车"), ["b·7k3q9"]);
        assert_eq!(of("谁唱的《富士山下》"), ["富士山下"]);
        assert!(of("VPN连不上怎么办").is_empty());
        assert!(of("Is Lily still the PM for the mobile app?").is_empty());
        assert!(of("妈妈有什么药不能用？").is_empty());
        assert!(of("where does grandma live").is_empty());
        assert!(of("早上好呀").is_empty());
    }

    #[test]
    fn holders_of_every_exact_term_go_first_in_their_order() {
        let items = vec![
            "JIRA-4128 bug",
            "JIRA-4812 bug",
            "JIRA-4821 bug",
            "JIRA-4821 again",
        ];
        let promoted = promote(&of("JIRA-4821 是什么 bug"), items.clone(), |s| {
            s.to_string()
        });
        assert_eq!(
            promoted,
            [
                "JIRA-4821 bug",
                "JIRA-4821 again",
                "JIRA-4128 bug",
                "JIRA-4812 bug"
            ]
        );
        assert_eq!(
            promote(&of("什么 bug"), items.clone(), |s| s.to_string()),
            items
        );
    }

    #[test]
    fn a_memory_must_hold_every_term() {
        let terms = of("JIRA-4821 和 v2.3.1");
        assert!(all_in(&terms, "jira-4821 是 v2.3.1 的登录 bug"));
        assert!(!all_in(&terms, "JIRA-4821 是登录 bug"));
        assert!(!all_in(&[], "anything"));
    }
}
