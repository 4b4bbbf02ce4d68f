//! Who asks, and whether the question is about them.
//!
//! Why: in a group, "我对什么过敏来着？", "我下周三要去哪出差？" and "I told you my flight number"
//! are the questions members ask a bot most naturally, and each member's answer is a different
//! line. Without knowing who asks, four members' "我对…过敏" lines rank alike and every asker
//! got the same one first (2 of 8 their own, chance). So the plugins send the asking member's
//! sender id with the injection event and `/v1/recall` (`sender_id`, optional), and a question
//! in the first person lifts what the asker said and what is about them, by id
//! (`speakers::Person`), within what the chat may read as always.
//!
//! First person: 我 (not 我们, which is the group; 我们家 is the asker's family), 俺, and the
//! English I, me, my, mine, myself (with I'm, I've, I'd, I'll). A question that only names
//! another member lifts that member instead (`speakers`).

/// Longest sender id accepted (the working memory's own bound).
pub(crate) const MAX_SENDER_CHARS: usize = 128;

/// Whether `query` asks in the first person singular (or about the asker's family, 我们家).
pub(crate) fn in_first_person(query: &str) -> bool {
    let chars: Vec<char> = query.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        match c {
            '俺' => return true,
            '我' => {
                let plural = chars.get(i + 1) == Some(&'们');
                let family = plural && chars.get(i + 2) == Some(&'家');
                if !plural || family {
                    return true;
                }
            }
            _ => {}
        }
    }
    let lower = query.to_lowercase();
    lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '\u{2019}'))
        .any(|w| {
            matches!(w, "i" | "me" | "my" | "mine" | "myself")
                || ["i'", "i\u{2019}"].iter().any(|p| w.starts_with(p))
        })
}

/// The asking member's sender id as a request gave it: trimmed, `None` when absent or blank,
/// an error message when it is longer than [`MAX_SENDER_CHARS`].
pub(crate) fn sender(raw: Option<&str>) -> Result<Option<String>, String> {
    let Some(id) = raw.map(str::trim).filter(|id| !id.is_empty()) else {
        return Ok(None);
    };
    if id.chars().count() > MAX_SENDER_CHARS {
        return Err(format!("at most {MAX_SENDER_CHARS} characters"));
    }
    Ok(Some(id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_about_the_asker_is_in_the_first_person() {
        for q in [
            "我对什么过敏来着？",
            "我下周三要去哪出差？",
            "我上次说的那个餐厅叫什么",
            "我们家WiFi密码是多少",
            "俺的车停哪了",
            "what am I allergic to?",
            "I told you my flight number",
            "where's my car",
            "what did I say about Friday? I'm not sure",
            "remind me of the dentist",
        ] {
            assert!(in_first_person(q), "{q}");
        }
    }

    #[test]
    fn a_question_about_the_group_or_someone_else_is_not() {
        for q in [
            "我们下周几聚餐？",
            "张三对什么过敏？",
            "what is Tom allergic to?",
            "when is the meeting",
            "is it raining in Milan",
        ] {
            assert!(!in_first_person(q), "{q}");
        }
    }

    #[test]
    fn a_sender_id_is_trimmed_optional_and_bounded() {
        assert_eq!(sender(None), Ok(None));
        assert_eq!(sender(Some("  ")), Ok(None));
        assert_eq!(sender(Some(" u-1 ")), Ok(Some("u-1".into())));
        assert!(sender(Some(&"x".repeat(MAX_SENDER_CHARS + 1))).is_err());
    }
}
