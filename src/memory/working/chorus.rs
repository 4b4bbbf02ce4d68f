//! A chorus: one line that two or more members said word for word.
//!
//! In a group the same line said again by another member is a reaction joined, not a fact
//! confirmed: 复读 ("心疼阿杰一秒，好好养伤" from three members), a blessing ("生日快乐！福如东海，
//! 寿比南山" from five), a sticker's caption. A member who confirms a fact says it in their own
//! words (on the group-chat set none of the 25 restated facts was restated word for word, and 41
//! lines were said by several members, every one chatter). Yet a chorus line stands high in a
//! recall: each copy has the same vector, so it is as close to a question as its best copy, and
//! on the group-chat bench two of the nine chatter memories the threshold rule made were choruses
//! shown as a question's best statement.
//!
//! So a chorus stands after the members' statements in a prompt's recent messages (as a terse
//! line does, `working::shown`) and is never counted toward the threshold rule. It is told from
//! a recall's own candidates: the copies of one line share a vector and its words, so the
//! search that finds one finds the others beside it. Nothing is kept between recalls, so
//! nothing is lost to a restart or left behind by an erase.

use std::collections::{HashMap, HashSet};

use crate::memory::fact::fold;

/// The folded lines that at least two members said among some candidates.
#[derive(Debug, Default)]
pub(crate) struct Chorus {
    lines: HashSet<String>,
}

impl Chorus {
    /// The choruses among candidates given as (text, speaker id). A line without a speaker
    /// (the bot's, an import's) joins no chorus.
    pub(crate) fn among<'a>(said: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Chorus {
        let mut speakers: HashMap<String, HashSet<&'a str>> = HashMap::new();
        for (text, speaker) in said {
            let Some(speaker) = speaker else { continue };
            let folded = fold(text);
            if !folded.is_empty() {
                speakers.entry(folded).or_default().insert(speaker);
            }
        }
        let lines = speakers
            .into_iter()
            .filter(|(_, who)| who.len() >= 2)
            .map(|(line, _)| line)
            .collect();
        Chorus { lines }
    }

    /// Whether `text` is one of them.
    pub(crate) fn sings(&self, text: &str) -> bool {
        !self.lines.is_empty() && self.lines.contains(&fold(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_two_members_said_is_a_chorus_and_one_said_twice_by_one_member_is_not() {
        let chorus = Chorus::among([
            ("心疼阿杰一秒，好好养伤", Some("u-dapeng")),
            ("心疼阿杰一秒，好好养伤 ", Some("u-lele")),
            ("上周三打球落地把脚踝扭了", Some("u-ajie")),
            ("周六见", Some("u-wang")),
            ("周六见！", Some("u-wang")),
            ("收到", None),
            ("收到", None),
        ]);
        assert!(chorus.sings("心疼阿杰一秒，好好养伤"));
        assert!(
            chorus.sings("心疼阿杰一秒 好好养伤！"),
            "folded as the facts are"
        );
        assert!(!chorus.sings("上周三打球落地把脚踝扭了"));
        assert!(!chorus.sings("周六见"), "one member twice");
        assert!(!chorus.sings("收到"), "no speaker, no chorus");
    }
}
