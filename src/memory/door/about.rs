//! Who a fact is about, by id: the door fills `about_ids` for every fact made of messages.
//!
//! Why: a fact kept only its first source's speaker, and a fact *about* a member was found by a
//! text match on the names this process had heard. "我对花生过敏" said by 张三 is about 张三; "张三
//! 的妈妈对花生过敏" said by 李四 is about 张三 too. With ids, a member's first-person question
//! (`memory::asker`), their browse and their forget (`service::people`) reach what is about
//! them whatever name they go by now.
//!
//! A fact is about
//! - its speaker, when it is said in the first person (`asker::in_first_person`: 我, 我们家, I,
//!   my, …; never 我们, the group);
//! - every member of its scope one of whose names it holds (`speakers`: the names this scope's
//!   members went by, learned from their messages and, after a restart, from the table);
//! - every member the LLM pass names in its decision's `about`, which the pass checked against
//!   the members it showed.

use crate::memory::asker::in_first_person;
use crate::memory::speakers::SpeakerNames;

/// The members (sender ids) a fact of `scope` with `content`, said by `speaker`, is about,
/// with the ids the pass gave (`given`), each once.
pub(crate) fn about(
    speakers: &SpeakerNames,
    scope: &str,
    speaker: Option<&str>,
    content: &str,
    given: &[String],
) -> Vec<String> {
    let mut ids: Vec<String> = given.to_vec();
    if let Some(speaker) = speaker.filter(|_| in_first_person(content)) {
        ids.push(speaker.to_string());
    }
    let scopes = [scope.to_string()];
    let mut named: Vec<String> = speakers
        .named_in(Some(&scopes), content)
        .ids
        .into_iter()
        .collect();
    named.sort();
    ids.extend(named);
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(id.clone()));
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_person_fact_is_about_its_speaker_and_a_named_member_about_them() {
        let names = SpeakerNames::default();
        names.learn("家人", "u-zhang", "张三");
        names.learn("家人", "u-li", "李四");
        names.learn("工作", "u-boss", "老王");
        let about = |speaker, content| about(&names, "家人", speaker, content, &[]);
        assert_eq!(about(Some("u-zhang"), "我对花生过敏"), ["u-zhang"]);
        assert_eq!(about(Some("u-li"), "张三的妈妈对花生过敏"), ["u-zhang"]);
        assert_eq!(
            about(Some("u-li"), "我和张三周六去爬山"),
            ["u-li", "u-zhang"]
        );
        assert!(
            about(Some("u-li"), "我们周六聚餐").is_empty(),
            "我们 is the group"
        );
        assert!(
            about(Some("u-li"), "老王周五请客").is_empty(),
            "another scope's name"
        );
        let given = ["u-li".to_string()];
        let with_given = super::about(&names, "家人", None, "张三和李四周六去爬山", &given);
        assert_eq!(with_given, ["u-li", "u-zhang"]);
    }
}
