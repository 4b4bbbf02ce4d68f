//! Who a name in a question means, by id. A platform gives every message a `sender_id` that
//! stays and a `sender_name` that does not: 张三 becomes 老张 in the group's nickname list, and
//! "老张上周说了什么" must still find what 张三 said. The names each speaker id went by in a
//! scope are learned from the messages this process accepts ([`SpeakerNames::learn`]), so a
//! name in a question resolves to the ids that used it, and then to every name those ids went
//! by ([`Person`]).
//!
//! A recall lifts a memory for that person (`service::recall`, `SPEAKER_BOOST`) when
//! - it was said by one of the ids (the rename case), or under a name the question holds (what
//!   the row itself says, so this holds after a restart too, before anyone spoke again);
//! - or it is *about* the person: its `about_ids` hold one of the ids (`door::about`), or its
//!   text names one of their names ("张三的妈妈对花生过敏").
//!
//! A name counts from two characters; a Latin name only as a whole word ("Tom" is not in
//! "Tomorrow"). Names are learned per scope and looked up only in the scopes the asking
//! conversation may read, so a nickname in one group never resolves to a member of another.
//! Bounded: [`PER_SCOPE`] (id, name) pairs per scope, the least recently said dropped first,
//! and [`MAX_SCOPES`] scopes, the one heard from least recently dropped first. Kept in memory:
//! ids and names are what rows already hold, never message text, and at start-up the index is
//! learned again from the table's rows ([`SpeakerNames::learn_rows`]), so a member renamed
//! before a restart keeps both names.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use crate::store::MemoryRecord;

/// (id, name) pairs kept per scope.
pub const PER_SCOPE: usize = 512;
/// Scopes kept at most.
pub const MAX_SCOPES: usize = 256;

/// The names speakers went by, per scope.
#[derive(Default)]
pub struct SpeakerNames {
    scopes: Mutex<Names>,
}

#[derive(Default)]
struct Names {
    /// Per scope, its (id, name) pairs, least recently said first, and when it was last heard.
    by_scope: HashMap<String, (VecDeque<(String, String)>, u64)>,
    clock: u64,
}

/// The person a question names: the speaker ids that used a name it holds, and every name
/// those ids went by (the question's own names included).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Person {
    pub ids: HashSet<String>,
    pub names: Vec<String>,
}

/// Whether `text` speaks of its speaker alone: in the first person singular (我 but not 我们,
/// I, my, me), with nobody else in it (`someone_else_in`). "我对海鲜过敏" said by 李四 is about
/// 李四; "奶奶最爱听越剧，我偷偷练了两句" is about 奶奶 too.
fn of_its_speaker(text: &str) -> bool {
    let mut chars = text.chars().peekable();
    let mut first_person = false;
    while let Some(c) = chars.next() {
        if c == '我' && chars.peek() != Some(&'们') {
            first_person = true;
            break;
        }
    }
    let words = latin_words(text);
    first_person = first_person
        || words.iter().any(|w| {
            matches!(
                w.as_str(),
                "i" | "me" | "my" | "mine" | "myself" | "i'm" | "i've" | "i'll" | "i'd"
            )
        });
    first_person && !someone_else_in(text, &words)
}

/// Someone other than the speaker in `text`: a person addressed (你, 您, you), a third person
/// (他, 她, he, she, they) or a relative (妈, 奶奶, 哥, mom, grandma, …).
fn someone_else_in(text: &str, words: &[String]) -> bool {
    const CJK: [&str; 30] = [
        "你", "您", "他", "她", "妈", "爸", "奶奶", "爷爷", "外婆", "外公", "姥姥", "姥爷", "哥",
        "姐", "弟", "妹", "儿子", "女儿", "老婆", "老公", "媳妇", "孩子", "宝宝", "舅", "姨", "叔",
        "婶", "姑", "伯", "娃",
    ];
    CJK.iter().any(|w| text.contains(w))
        || words.iter().any(|w| {
            matches!(
                w.as_str(),
                "you"
                    | "your"
                    | "yours"
                    | "you're"
                    | "you'll"
                    | "you've"
                    | "he"
                    | "she"
                    | "him"
                    | "her"
                    | "his"
                    | "hers"
                    | "they"
                    | "them"
                    | "their"
                    | "mom"
                    | "mum"
                    | "dad"
                    | "mother"
                    | "father"
                    | "grandma"
                    | "grandpa"
                    | "brother"
                    | "sister"
                    | "son"
                    | "daughter"
                    | "wife"
                    | "husband"
                    | "kid"
                    | "kids"
            )
        })
}

fn latin_words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

impl SpeakerNames {
    /// `id` spoke as `name` in `scope`.
    pub(crate) fn learn(&self, scope: &str, id: &str, name: &str) {
        let name = name.trim();
        if id.is_empty() || name.chars().count() < 2 {
            return;
        }
        let Ok(mut names) = self.scopes.lock() else {
            return;
        };
        names.clock += 1;
        let now = names.clock;
        if !names.by_scope.contains_key(scope) && names.by_scope.len() >= MAX_SCOPES {
            let stalest = names
                .by_scope
                .iter()
                .min_by_key(|(_, (_, heard))| *heard)
                .map(|(s, _)| s.clone());
            if let Some(s) = stalest {
                names.by_scope.remove(&s);
            }
        }
        let (pairs, heard) = names.by_scope.entry(scope.to_owned()).or_default();
        *heard = now;
        if let Some(at) = pairs.iter().position(|(i, n)| i == id && n == name) {
            pairs.remove(at);
        } else if pairs.len() >= PER_SCOPE {
            pairs.pop_front();
        }
        pairs.push_back((id.to_owned(), name.to_owned()));
    }

    /// Learn every (scope, id, name) the table's rows hold (`Store::speakers`); a pair this
    /// process heard already keeps its place.
    pub(crate) fn learn_rows(&self, rows: impl IntoIterator<Item = (String, String, String)>) {
        for (scope, id, name) in rows {
            let Ok(names) = self.scopes.lock() else {
                return;
            };
            let known = names
                .by_scope
                .get(&scope)
                .is_some_and(|(pairs, _)| pairs.iter().any(|(i, n)| *i == id && *n == name));
            if known {
                continue;
            }
            drop(names);
            self.learn(&scope, &id, &name);
        }
    }

    /// Forget every name `id` went by, in every scope (the person was forgotten).
    pub(crate) fn forget_id(&self, id: &str) {
        if let Ok(mut names) = self.scopes.lock() {
            for (pairs, _) in names.by_scope.values_mut() {
                pairs.retain(|(i, _)| i != id);
            }
        }
    }

    /// The names `id` went by in `scopes` (`None`: every scope), sorted.
    pub(crate) fn names_of(&self, scopes: Option<&[String]>, id: &str) -> Vec<String> {
        let Ok(names) = self.scopes.lock() else {
            return Vec::new();
        };
        let mut all: Vec<String> = names
            .by_scope
            .iter()
            .filter(|(s, _)| scopes.is_none_or(|set| set.iter().any(|x| x == *s)))
            .flat_map(|(_, (pairs, _))| pairs.iter())
            .filter(|(i, _)| i == id)
            .map(|(_, name)| name.clone())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The person `query` names, looked up in `scopes` (`None`: every scope, the rollback
    /// switch). Empty when it names nobody this process heard.
    pub(crate) fn named_in(&self, scopes: Option<&[String]>, query: &str) -> Person {
        let Ok(names) = self.scopes.lock() else {
            return Person::default();
        };
        let pairs: Vec<&(String, String)> = names
            .by_scope
            .iter()
            .filter(|(s, _)| scopes.is_none_or(|set| set.iter().any(|x| x == *s)))
            .flat_map(|(_, (pairs, _))| pairs.iter())
            .collect();
        let ids: HashSet<String> = pairs
            .iter()
            .filter(|(_, name)| mentions(query, name))
            .map(|(id, _)| id.clone())
            .collect();
        let mut all: Vec<String> = pairs
            .iter()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, name)| name.clone())
            .collect();
        all.sort();
        all.dedup();
        Person { ids, names: all }
    }
}

impl Person {
    /// This person and the member who asks a question in the first person (`memory::asker`):
    /// their id and the names they went by.
    pub(crate) fn with_asker(mut self, id: &str, names: Vec<String>) -> Person {
        self.ids.insert(id.to_owned());
        for name in names {
            if !self.names.contains(&name) {
                self.names.push(name);
            }
        }
        self
    }

    /// Whether `record` is about someone other than this person, for a question about them
    /// (the asker of a first-person question, or a member it names): a memory whose
    /// `about_ids` name others only, or another speaker's line about themselves alone (first
    /// person, no one else in it: `of_its_speaker`) that names none of this person's names.
    /// "我对海鲜过敏" by 李四 answers nothing 张三 asks about himself ("我对什么过敏来着？") or
    /// about 王五 ("王五对什么过敏？"), and shown beside the right line it read as the answer:
    /// such rows are left out. A line with someone else in it stays: "那我明天六点到妈楼下接她"
    /// (about 外婆, whom her son calls 妈), "我帮你订了周三的票" (about whoever it addressed).
    pub(crate) fn about_someone_else(&self, record: &MemoryRecord) -> bool {
        if self.ids.is_empty() {
            return false;
        }
        if record
            .speaker_id
            .as_deref()
            .is_some_and(|id| self.ids.contains(id))
        {
            return false;
        }
        if !record.about_ids.is_empty() {
            return !record.about_ids.iter().any(|id| self.ids.contains(id));
        }
        record.speaker_id.is_some()
            && of_its_speaker(&record.content)
            && !self.names.iter().any(|n| mentions(&record.content, n))
    }

    /// Whether a recall for a question naming this person (`query`) lifts `record`: said by
    /// them (by id, or under a name the question holds), or about them (a name of theirs in
    /// its text).
    pub(crate) fn lifts(&self, query: &str, record: &MemoryRecord) -> bool {
        let said_by_id = record
            .speaker_id
            .as_deref()
            .is_some_and(|id| self.ids.contains(id));
        let said_as_named = record
            .speaker_name
            .as_deref()
            .is_some_and(|name| name.chars().count() >= 2 && mentions(query, name));
        let about_by_id = record.about_ids.iter().any(|id| self.ids.contains(id));
        let about = self
            .names
            .iter()
            .any(|name| mentions(&record.content, name));
        said_by_id || said_as_named || about_by_id || about
    }
}

/// Where the CJK blocks start (CJK Radicals Supplement, U+2E80).
const CJK_START: u32 = 0x2E80;

/// Whether `text` names `name`: anywhere for a name with CJK (no spaces between words), as a
/// whole word, ignoring case, for a Latin one.
fn mentions(text: &str, name: &str) -> bool {
    if name.chars().count() < 2 {
        return false;
    }
    if !name.is_ascii() {
        return text.contains(name);
    }
    // Compared byte-wise, ignoring ASCII case, with no copy of the text: this runs for every
    // name heard in the scopes at every recall. A match of ASCII bytes starts and ends on
    // character boundaries, since every byte of a multi-byte character is above 0x7F.
    let (bytes, name) = (text.as_bytes(), name.as_bytes());
    // A letter of a word the name would be part of: Latin, Greek, Cyrillic and the like, not
    // CJK (Chinese writes a Latin name with no space beside it: "问一下Tom他来吗").
    let word = |c: Option<char>| {
        c.is_some_and(|c| (c.is_alphanumeric() && u32::from(c) < CJK_START) || c == '_')
    };
    bytes
        .windows(name.len())
        .enumerate()
        .filter(|(_, w)| w.eq_ignore_ascii_case(name))
        .any(|(at, _)| {
            !word(text[..at].chars().next_back()) && !word(text[at + name.len()..].chars().next())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(speaker: Option<(&str, &str)>, content: &str) -> MemoryRecord {
        MemoryRecord {
            speaker_id: speaker.map(|(id, _)| id.into()),
            speaker_name: speaker.map(|(_, n)| n.into()),
            ..MemoryRecord::with_text(content, &[])
        }
    }

    #[test]
    fn a_renamed_speaker_is_found_by_either_name() {
        let names = SpeakerNames::default();
        names.learn("家人", "u-zhang", "张三");
        names.learn("家人", "u-zhang", "老张");
        names.learn("家人", "u-li", "李四");
        let scopes = ["家人".to_string(), "public".to_string()];
        let person = names.named_in(Some(&scopes), "老张上周说了什么");
        assert_eq!(person.ids, HashSet::from(["u-zhang".to_string()]));
        assert_eq!(person.names, ["张三", "老张"]);
        let q = "老张上周说了什么";
        // Said under the old name, by the same id: lifted.
        assert!(person.lifts(q, &row(Some(("u-zhang", "张三")), "周六去爬山")));
        // About them by their old name: lifted.
        assert!(person.lifts(q, &row(None, "张三的妈妈对花生过敏")));
        // Someone else, about someone else: not.
        assert!(!person.lifts(q, &row(Some(("u-li", "李四")), "周日去钓鱼")));
    }

    #[test]
    fn the_asker_of_a_first_person_question_is_lifted_by_id_and_by_name() {
        let names = SpeakerNames::default();
        names.learn("家人", "u-zhang", "张三");
        names.learn("家人", "u-li", "李四");
        let scopes = ["家人".to_string()];
        assert_eq!(names.names_of(Some(&scopes), "u-zhang"), ["张三"]);
        let q = "我对什么过敏来着？";
        let asker = names.named_in(Some(&scopes), q);
        let asker = asker.with_asker("u-zhang", names.names_of(Some(&scopes), "u-zhang"));
        assert!(asker.lifts(q, &row(Some(("u-zhang", "张三")), "我对花生过敏")));
        assert!(asker.lifts(q, &row(None, "张三对花生过敏")));
        assert!(!asker.lifts(q, &row(Some(("u-li", "李四")), "我对海鲜过敏")));
    }

    #[test]
    fn a_question_about_a_person_leaves_out_what_is_about_someone_else() {
        let asker = Person::default().with_asker("u-zhang", vec!["张三".into()]);
        let about = |ids: &[&str], r: MemoryRecord| MemoryRecord {
            about_ids: ids.iter().map(|s| s.to_string()).collect(),
            ..r
        };
        // Another member's first-person line, as a message or a memory about them: out.
        assert!(asker.about_someone_else(&row(Some(("u-li", "李四")), "我对海鲜过敏")));
        let li = about(&["u-li"], row(Some(("u-li", "李四")), "我对海鲜过敏"));
        assert!(asker.about_someone_else(&li));
        // His own, about him, naming him, or about nobody in particular: kept.
        assert!(!asker.about_someone_else(&row(Some(("u-zhang", "张三")), "我对花生过敏")));
        let named = about(&["u-zhang"], row(Some(("u-li", "李四")), "张三对芒果过敏"));
        assert!(!asker.about_someone_else(&named));
        assert!(!asker.about_someone_else(&row(Some(("u-li", "李四")), "我跟张三周六去爬山")));
        assert!(!asker.about_someone_else(&row(Some(("u-li", "李四")), "我们周六聚餐")));
        assert!(!asker.about_someone_else(&row(None, "周六聚餐改到晚上")));
        // Said to someone, who may be the asker: kept.
        let to_you = row(Some(("u-li", "李四")), "我帮你订了周三去上海的票");
        assert!(!asker.about_someone_else(&to_you));
        assert!(!asker.about_someone_else(&row(Some(("u-li", "Li")), "I booked your flight")));
        assert!(
            !Person::default().about_someone_else(&li),
            "nobody asked about"
        );
    }

    #[test]
    fn a_line_with_someone_else_in_it_is_not_left_out() {
        // The group-chat set's family: 外婆 is a member, and the others speak of her as 妈 and
        // 奶奶, in their own first person.
        let names = SpeakerNames::default();
        names.learn("家人", "u-waipo", "外婆");
        names.learn("家人", "u-dad", "老爸");
        let scopes = ["家人".to_string()];
        let waipo = names.named_in(Some(&scopes), "寿宴那天谁去接外婆，几点？");
        assert!(waipo.ids.contains("u-waipo"), "{waipo:?}");
        let fetch = row(Some(("u-dad", "老爸")), "那我明天六点整到妈楼下接她");
        assert!(!waipo.about_someone_else(&fetch));
        let opera = row(Some(("u-tt", "婷婷")), "奶奶最爱听越剧，我偷偷练了两句");
        assert!(!waipo.about_someone_else(&opera));
        let flight = row(Some(("u-tt", "Tina")), "I booked her flight for Friday");
        assert!(!waipo.about_someone_else(&flight));
        // Another member's line about themselves alone still answers nothing about her.
        let own = row(Some(("u-dad", "老爸")), "我对芒果过敏");
        assert!(waipo.about_someone_else(&own));
    }

    #[test]
    fn a_name_resolves_only_in_the_scopes_the_conversation_reads() {
        let names = SpeakerNames::default();
        names.learn("家人", "u-zhang", "张三");
        names.learn("工作", "u-boss", "老张");
        let family = ["家人".to_string(), "public".to_string()];
        let person = names.named_in(Some(&family), "老张喜欢什么");
        assert!(person.ids.is_empty(), "{person:?}");
        // The name the row itself was written under still counts.
        assert!(person.lifts("老张喜欢什么", &row(Some(("u-x", "老张")), "喜欢钓鱼")));
        assert_eq!(names.named_in(None, "老张喜欢什么").ids.len(), 1);
    }

    #[test]
    fn a_latin_name_counts_only_as_a_whole_word() {
        assert!(mentions("what does Tom like?", "Tom"));
        assert!(mentions("tom's car", "Tom"));
        assert!(!mentions("Tomorrow we play", "Tom"));
        assert!(!mentions("Atom", "Tom"));
        assert!(!mentions("我", "我"));
        assert!(mentions("问一下TOM，他来吗", "Tom"), "beside CJK, any case");
        assert!(!mentions("Tomás", "Tom"));
    }

    #[test]
    fn each_scope_keeps_its_most_recent_pairs_and_the_stalest_scope_goes_first() {
        let names = SpeakerNames::default();
        for i in 0..PER_SCOPE + 10 {
            names.learn("群", &format!("u{i}"), &format!("name{i}"));
        }
        let all = ["群".to_string()];
        assert!(names.named_in(Some(&all), "name0 said").ids.is_empty());
        assert_eq!(names.named_in(Some(&all), "name520 said").ids.len(), 1);
        for s in 0..MAX_SCOPES {
            names.learn(&format!("s{s}"), "u", "someone");
        }
        // "群" was heard from least recently: dropped for the last scope.
        assert!(names.named_in(Some(&all), "name520 said").ids.is_empty());
        let last = [format!("s{}", MAX_SCOPES - 1)];
        assert_eq!(names.named_in(Some(&last), "someone said").ids.len(), 1);
    }
}
