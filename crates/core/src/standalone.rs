//! Whether a line means something on its own, or only beside the line it answers.
//!
//! Why: in a chat, "me too" after "I'm vegetarian", "同上" after "周五我不吃辣" and "sounds good
//! to me" after a plan are facts only together with what they answer. Alone, as a long-term
//! memory, they state nothing, yet a question about the statement they follow finds them (they
//! sit in the same turn, and a short reply is embedded with it), and two such recalls made
//! "same here" a memory of its own. No rule without an LLM may keep such a line alone, and no
//! writer may store one as a memory (issue 76): the reply carries no word of its own.
//!
//! The test is on words, not meaning: a line stands alone unless every word of it is one a
//! reaction is made of: agreement and acknowledgement ("同意", "收到", "agreed", "got it"),
//! words that point back ("也", "一样", "同上", "same", "too", "that"), pronouns, auxiliaries
//! and particles. One word outside them (a name, a place, a thing, a number) and the line
//! says something: "我也对花生过敏" and "same, I'm vegetarian" stand alone; "我也是", "跟你一样",
//! "so do I" and "count me in" do not.

/// Chinese words a reaction is made of, longest first where one holds another.
const REACTION_ZH: &[&str] = &[
    "一模一样",
    "这么觉得",
    "这么认为",
    "俺也一样",
    "我也一样",
    "也是这样",
    "说得对",
    "说的对",
    "说得",
    "说的",
    "有道理",
    "没问题",
    "没毛病",
    "同上",
    "同感",
    "同款",
    "附议",
    "赞同",
    "同意",
    "支持",
    "一样",
    "也是",
    "就是",
    "我们",
    "你们",
    "他们",
    "她们",
    "咱们",
    "大家",
    "对的",
    "没错",
    "确实",
    "真的",
    "好的",
    "好滴",
    "可以",
    "收到",
    "明白",
    "了解",
    "知道",
    "觉得",
    "认为",
    "这么",
    "这样",
    "那样",
    "如此",
    "这个",
    "那个",
    "加一",
    "一起",
    "一个",
    "算我",
    "带我",
    "加我",
    "主意",
    "情况",
    "楼上",
    "非常",
    "嗯嗯",
    "哈哈",
    "也",
    "都",
    "还",
    "我",
    "你",
    "他",
    "她",
    "它",
    "咱",
    "俺",
    "是",
    "对",
    "真",
    "嗯",
    "哦",
    "噢",
    "喔",
    "啊",
    "呀",
    "呢",
    "吧",
    "啦",
    "了",
    "的",
    "哈",
    "嘿",
    "嘻",
    "呵",
    "好",
    "行",
    "懂",
    "要",
    "想",
    "去",
    "会",
    "能",
    "来",
    "这",
    "那",
    "跟",
    "和",
    "同",
    "算",
    "太",
    "很",
    "赞",
    "棒",
    "+",
    "1",
];

/// English words a reaction is made of (lower case, apostrophes dropped: "I'm" is "im").
const REACTION_EN: &[&str] = &[
    "me",
    "too",
    "i",
    "im",
    "ill",
    "ive",
    "id",
    "am",
    "do",
    "does",
    "did",
    "so",
    "same",
    "here",
    "for",
    "neither",
    "nor",
    "either",
    "ditto",
    "likewise",
    "agreed",
    "agree",
    "also",
    "yes",
    "yeah",
    "yep",
    "yup",
    "ok",
    "okay",
    "sure",
    "totally",
    "exactly",
    "absolutely",
    "definitely",
    "true",
    "right",
    "indeed",
    "this",
    "that",
    "thats",
    "it",
    "its",
    "is",
    "was",
    "will",
    "would",
    "can",
    "could",
    "going",
    "go",
    "want",
    "wanna",
    "to",
    "as",
    "well",
    "the",
    "a",
    "with",
    "you",
    "him",
    "her",
    "them",
    "us",
    "we",
    "our",
    "in",
    "count",
    "on",
    "board",
    "one",
    "lol",
    "haha",
    "sounds",
    "sound",
    "good",
    "great",
    "nice",
    "cool",
    "works",
    "work",
    "makes",
    "sense",
    "fair",
    "enough",
    "noted",
    "got",
    "thanks",
    "thank",
    "thx",
    "no",
    "problem",
    "idea",
    "plan",
    "deal",
    "he",
    "she",
    "they",
    "said",
    "say",
    "just",
    "think",
    "feel",
    "like",
    "way",
    "mine",
    "be",
    "have",
    "has",
    "not",
    "dont",
    "should",
    "+1",
    "+",
    "1",
    "what",
    "all",
    "of",
    "honestly",
    "tbh",
    "really",
    "hahaha",
    "lmao",
    "omg",
    "wow",
    "oh",
    "exactly",
];

/// Whether `text` means nothing on its own: every word of it is one a reaction, an
/// acknowledgement or a "me too" is made of (see the module). A text with no word at all
/// (punctuation, an emoji) means nothing either.
pub fn means_nothing_alone(text: &str) -> bool {
    let lower = text.to_lowercase();
    let mut latin = String::new();
    let mut rest = lower.as_str();
    while let Some(c) = rest.chars().next() {
        if is_cjk(c) {
            if !latin.is_empty() {
                if !reaction_word(&latin) {
                    return false;
                }
                latin.clear();
            }
            let Some(word) = REACTION_ZH.iter().find(|w| rest.starts_with(*w)) else {
                return false;
            };
            rest = &rest[word.len()..];
            continue;
        }
        if c.is_alphanumeric() || c == '+' {
            latin.push(c);
        } else if c != '\'' && c != '\u{2019}' && !latin.is_empty() {
            if !reaction_word(&latin) {
                return false;
            }
            latin.clear();
        }
        rest = &rest[c.len_utf8()..];
    }
    latin.is_empty() || reaction_word(&latin)
}

/// Whether one Latin word (or a run of digits and `+`) is a reaction's.
fn reaction_word(word: &str) -> bool {
    REACTION_EN.contains(&word) || word.chars().all(|c| c == '+' || c == '1')
}

/// A CJK ideograph or kana (what the Chinese list is matched on).
fn is_cjk(c: char) -> bool {
    matches!(u32::from(c), 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_me_too_an_acknowledgement_or_an_agreement_means_nothing_alone() {
        for t in [
            "me too",
            "Me too!",
            "same here",
            "Same for me",
            "so do I",
            "me neither",
            "I think so too",
            "sounds good to me",
            "that works for me",
            "count me in",
            "I'm in too",
            "+1",
            "ditto",
            "我也是",
            "我也一样",
            "同上",
            "同上+1",
            "跟你一样",
            "我也是这么想的",
            "我也觉得",
            "我也要去",
            "对对对，我也是",
            "确实，说得对",
            "好的收到",
            "俺也一样",
            "👍",
            "同意楼上说的",
            "我也是我也是，跟你一模一样的情况呢",
            "same here, honestly I feel exactly the same way as you do",
            "so do I, same as you lol",
        ] {
            assert!(means_nothing_alone(t), "{t}");
        }
    }

    #[test]
    fn a_line_with_one_word_of_its_own_stands_alone() {
        for t in [
            "我也对花生过敏",
            "我也是素食主义者",
            "我也要去北京",
            "same, I'm vegetarian",
            "me too, my flight is at 6",
            "I'm allergic to peanuts",
            "周五我不吃辣",
            "订好了，在老地方",
            "张三也是",
            "我下周三去上海出差",
            "the meeting moved to 3",
            "好主意，就订海底捞",
        ] {
            assert!(!means_nothing_alone(t), "{t}");
        }
    }
}
