//! Which chat messages could state a fact, the one test both threshold rules of consolidation
//! apply before a message may become a long-term memory with no LLM involved (design 5.13):
//! the recall rule (`working::recurrence`, a message returned a second time) and the
//! restatement rule (`working::restatement`, a second member says it again).
//!
//! What never states a fact:
//! - the bot's own messages: its replies echo what it was told, or what it made up;
//! - a message with nobody in particular as its speaker;
//! - short chatter: under [`MIN_CHARS`] characters once folded (`memory::fact`), or fewer than
//!   [`MIN_DISTINCT_CHARS`] different characters ("好的好的", "哈哈哈哈哈哈", "+1"), or only
//!   a platform's placeholder for media ("[图片]", "[Sticker]"): [`says_something`];
//! - a question: its last clause holds `?`/`？`, ends in a particle that asks (吗, 么, 呢, 不,
//!   没, 啥), holds a word that asks (几点, 哪, 什么, 怎么, 多少, 是不是, 来着, …) or a choice
//!   (是 A 还是 B), or starts
//!   as an English question does (who, what, is, do, can, …): "周末有人打球吗？", "妈妈能吃花生
//!   吗", "对了，我拔牙是几号来着", "@小助手 内部赛报名截止是哪天", "what are we playing? I vote
//!   something new". A recall returns questions twice as readily as answers, since they share
//!   the answer's words, and two members asking the same thing agree on nothing. Chinese asks
//!   with a word as often as with a question mark: on the group-chat bench the question mark and
//!   the final 吗/么 caught 32 of 63 questions, these rules 61, and no fact;
//! - a guess (`is_a_guess`: 好像, 可能, 估计, "I think", "maybe", "last I saw", …): on the
//!   group-chat bench the one chatter memory left was "last I saw it was on Mia's shelf after
//!   Catan", which a later line proved wrong; the set's 7 hedged lines are all chatter;
//! - a line that means nothing without the one it answers (`scopemem_core::standalone`: "me
//!   too", "same here", "同上", "我也是", "sounds good to me"): made a memory alone, "same
//!   here" no longer says what it agreed with (issue 76). The door refuses such a text from
//!   every writer of facts (`memory::door::fact`); here the rules pass over it before a
//!   recall counts it.
//!
//! Everything else is left to the rules' own evidence. Chatter that is long and phrased as a
//! statement ("楼下新开了一家奶茶店") still passes: telling it from a fact needs more than the
//! text's shape. The LLM pass (`memory::consolidation`) reads every message either way.

use super::{BOT_TAG, REPLY_TAG};
use crate::memory::fact;
use scopemem_core::standalone::means_nothing_alone;

/// Characters a message needs (folded: no punctuation or spaces) to be a fact at all.
pub const MIN_CHARS: usize = 6;
/// Different characters a message needs, so a repeated laugh or "好的好的好的" never is one.
pub const MIN_DISTINCT_CHARS: usize = 4;

/// Whether a message with this text, these tags and this speaker could state a fact. Never the
/// bot's, and never a short reply embedded with the question it answers (`replies`): "订好了，
/// 在老地方" as a memory of its own would say nothing.
pub(crate) fn could_state_a_fact(content: &str, tags: &[String], speaker_id: Option<&str>) -> bool {
    let short_reply = tags.iter().any(|t| t == REPLY_TAG) && is_short(content);
    if tags.iter().any(|t| t == BOT_TAG) || short_reply || speaker_id.is_none() {
        return false;
    }
    says_something(content)
        && !is_a_question(content)
        && !is_a_guess(content)
        && !means_nothing_alone(content)
}

/// Words that make a statement a guess in Chinese. Not 大概 ("大概五十块" states a price) nor
/// 我记得 (what a member recalls is usually so).
const GUESSING_ZH: [&str; 9] = [
    "好像",
    "可能",
    "应该是",
    "估计",
    "也许",
    "说不定",
    "似乎",
    "不确定",
    "不一定",
];

/// Words that make a statement a guess in English, as whole words (padded with a space on
/// each side, as [`is_a_guess`] pads the words of a message).
const GUESSING_EN: [&str; 11] = [
    " i think ",
    " i guess ",
    " i suppose ",
    " i believe ",
    " maybe ",
    " probably ",
    " perhaps ",
    " might ",
    " not sure ",
    " last i saw ",
    " last i checked ",
];

/// Whether `content` hedges what it says: "last I saw it was on Mia's shelf", "好像有一个黑色
/// 的", "我下班赶过去，可能七点十分到". A guess is no fact to keep for good, and a rule without
/// an LLM cannot tell whether a later line settled it ("found them, they were in my car"). 不可
/// 能 is no guess. Runs on every candidate a prompt's recall shows: a line without Latin
/// letters allocates nothing.
pub(crate) fn is_a_guess(content: &str) -> bool {
    let zh = GUESSING_ZH.iter().any(|w| {
        content
            .match_indices(w)
            .any(|(at, _)| !(*w == "可能" && content[..at].ends_with('不')))
    });
    if zh || !content.bytes().any(|b| b.is_ascii_alphabetic()) {
        return zh;
    }
    // The words, lowercased, one space between them and one at each end.
    let mut words = String::with_capacity(content.len() + 2);
    words.push(' ');
    for word in content
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
    {
        words.push_str(&word.to_lowercase());
        words.push(' ');
    }
    GUESSING_EN.iter().any(|w| words.contains(w))
}

/// Characters a short message has at most when it is mostly CJK.
pub const SHORT_CHARS: usize = 16;
/// Words a short message has at most otherwise.
pub const SHORT_WORDS: usize = 8;
/// Whether `text` is short: too short to state a fact without what it answers.
pub(crate) fn is_short(text: &str) -> bool {
    at_most(text, SHORT_CHARS, SHORT_WORDS)
}

/// Characters a terse message has at most when it is mostly CJK: "场地费记得转我" (7),
/// "我到了，场地开好了" (9), but not "房租这个月涨到四千二了" (11).
pub const TERSE_CHARS: usize = 10;
/// Words a terse message has at most otherwise: "that last turn was brutal Ken" (6), but not
/// "The quarterly report is due next Tuesday" (7).
pub const TERSE_WORDS: usize = 6;
/// Whether `text` is terse: a line that, said alone, carries a name or a word and little else.
pub(crate) fn is_terse(text: &str) -> bool {
    at_most(text, TERSE_CHARS, TERSE_WORDS)
}

/// Whether `text` has at most `chars` characters (spaces aside) when it is mostly CJK, or at
/// most `words` words otherwise.
fn at_most(text: &str, chars: usize, words: usize) -> bool {
    let count = text.chars().filter(|c| !c.is_whitespace()).count();
    let cjk = text.chars().filter(|c| u32::from(*c) >= 0x2E80).count();
    if cjk * 2 >= count {
        count <= chars
    } else {
        text.split_whitespace().count() <= words
    }
}

/// Whether a message says anything on its own: long and varied enough, and not only what a
/// platform shows for a sticker, a picture or a voice message ("[图片]", "[动画表情]",
/// "[Sticker]"). "👌", "+1" and "[图片]" answer no question, so a prompt never shows them.
pub(crate) fn says_something(content: &str) -> bool {
    long_and_varied(&fact::fold(content)) && !only_placeholders(content)
}

/// Whether a message may answer a question in a prompt: one that says something, or a reply
/// embedded with the question it answers (`replies`), however short: "老王", "一百二" and
/// "上周打过了" answer "谁来主持？", "网费多少？" and "疫苗打了没？", while alone they say
/// nothing. Never a placeholder, and never one character said over ("哈哈哈", "嗯嗯").
pub(crate) fn answers_something(content: &str, tags: &[String]) -> bool {
    if says_something(content) {
        return true;
    }
    let folded = fact::fold(content);
    let letters = folded.chars().filter(|c| c.is_alphanumeric());
    tags.iter().any(|t| t == REPLY_TAG) && distinct(letters) >= 2 && !only_placeholders(content)
}

/// How many different characters `chars` holds.
fn distinct(chars: impl Iterator<Item = char>) -> usize {
    let mut chars: Vec<char> = chars.collect();
    chars.sort_unstable();
    chars.dedup();
    chars.len()
}

/// The longest placeholder a platform puts for media, in characters ("[动画表情]" is 4).
const PLACEHOLDER_MAX_CHARS: usize = 12;

/// Whether `content` is nothing but bracketed placeholders ("[图片]", "[表情][表情]").
fn only_placeholders(content: &str) -> bool {
    let mut rest = content.trim();
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let Some(inner) = rest.strip_prefix('[') else {
            return false;
        };
        let Some(end) = inner.find(']') else {
            return false;
        };
        let name = &inner[..end];
        if name.is_empty() || name.chars().count() > PLACEHOLDER_MAX_CHARS || name.contains('[') {
            return false;
        }
        rest = inner[end + 1..].trim_start();
    }
    true
}

/// At least [`MIN_CHARS`] characters, [`MIN_DISTINCT_CHARS`] of them different.
fn long_and_varied(folded: &str) -> bool {
    folded.chars().count() >= MIN_CHARS && distinct(folded.chars()) >= MIN_DISTINCT_CHARS
}

/// Words that make the clause they stand in a question.
const ASKING_WORDS: [&str; 18] = [
    "几号",
    "几点",
    "几个",
    "几天",
    "几位",
    "几时",
    "哪",
    "什么",
    "啥",
    "怎么",
    "多少",
    "为什么",
    "是不是",
    "要不要",
    "能不能",
    "有没有",
    "行不行",
    "来着",
];
/// Sentence-final particles that ask.
const ASKING_ENDS: [char; 8] = ['?', '？', '吗', '么', '呢', '不', '没', '啥'];
/// First words of an English question (not `will` or `may`: names as often).
const ASKING_STARTS: [&str; 16] = [
    "who", "what", "when", "where", "why", "how", "which", "is", "are", "do", "does", "did", "can",
    "could", "should", "anyone",
];

/// Whether `content` asks: see the module header. Only its last clause counts ("他什么都不吃，
/// 只喝粥" states; "好怕，明天几点到" asks).
pub(crate) fn is_a_question(content: &str) -> bool {
    let Some(last) = content
        .split(['，', ',', '。', '！', '!', '；', ';', '\n', '~', '～'])
        .map(str::trim)
        .rfind(|c| {
            c.chars()
                .any(|ch| ch.is_alphanumeric() || ch == '?' || ch == '？')
        })
    else {
        return false;
    };
    let ends_asking = last
        .chars()
        .rev()
        .find(|&c| c == '?' || c == '？' || c.is_alphanumeric())
        .is_some_and(|c| ASKING_ENDS.contains(&c));
    let first_word = last
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .find(|w| !w.is_empty())
        .unwrap_or("")
        .to_lowercase();
    ends_asking
        || last.contains(['?', '？'])
        || ASKING_WORDS.iter().any(|w| last.contains(w))
        || ASKING_STARTS.contains(&first_word.as_str())
        || offers_a_choice(last)
}

/// Whether a clause asks to choose, "是 A 还是 B": "妈明天是我去接还是你去接", "我们是各买各的
/// 还是一起买". Not 还是 alone, which also means "still" or "better": "还是三号馆", "你还是
/// 老实歇满两周".
fn offers_a_choice(clause: &str) -> bool {
    clause
        .find("还是")
        .is_some_and(|at| at > 0 && clause[..at].contains('是'))
}

/// Words that ask the bot to look something up without a question: "帮我查下乐乐的新地址",
/// "tell me the December plan".
const REQUESTS: [&str; 14] = [
    "帮我",
    "告诉我",
    "提醒我",
    "查一下",
    "查下",
    "找一下",
    "找下",
    "总结",
    "回顾",
    "tell me",
    "remind me",
    "look up",
    "summar",
    "recap",
];

/// Whether a message to the bot asks for something the chat said: a question
/// ([`is_a_question`]) or a request to look it up ([`REQUESTS`]). A remark ("今天好冷啊，大家多
/// 穿点衣服", "腿好酸啊") asks for nothing, however close its twins in the chat are.
pub(crate) fn asks(content: &str) -> bool {
    let lower = content.to_lowercase();
    is_a_question(content) || REQUESTS.iter().any(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_or_a_request_asks_and_a_remark_does_not() {
        for asking in [
            "这周的羽毛球谁负责带？",
            "工作日晚上有没有固定的活动",
            "帮我查下乐乐的新地址",
            "Tell me the December plan",
            "大家在干嘛呢",
        ] {
            assert!(asks(asking), "{asking}");
        }
        for remark in [
            "今天好冷啊，大家多穿点衣服",
            "腿好酸啊",
            "周末愉快",
            "good morning",
        ] {
            assert!(!asks(remark), "{remark}");
        }
    }

    fn member(text: &str) -> bool {
        could_state_a_fact(text, &[], Some("u1"))
    }

    #[test]
    fn a_guess_never_states_a_fact() {
        for guess in [
            "last I saw it was on Mia's shelf after Catan",
            "I think the booking is for Saturday at seven",
            "probably at Tom's place this time, not sure yet",
            "好像有一个黑色的，周三给你带",
            "我下班赶过去，可能七点十分到",
            "应该是周六下午两点开始吧",
        ] {
            assert!(!member(guess), "{guess}");
        }
        for fact in [
            "这事不可能再拖了，周六下午两点三号馆",
            "穿线大概三十块，东门旁边那家",
            "Mighty Bean on 5th is where we meet on Sunday",
            "the tank in Gloomhaven is Priya, we pause without her",
        ] {
            assert!(member(fact), "{fact}");
        }
    }

    #[test]
    fn a_member_stating_something_long_enough_could_state_a_fact() {
        for fact in [
            "妈妈对花生过敏，别点沙爹",
            "周六下午三点老地方聚餐",
            "The dentist moved Tom's appointment to Friday at 4pm.",
            "下周三交报告 😂",
            // A word that asks, in an earlier clause, asks nothing of the statement.
            "他什么都不吃，只喝粥",
            "那支弓箭11一直放在老周车上的球包里，谁想试打周六找老周拿就行",
            "so with Priya away the 5th to the 19th, any December session has to be at someone else's",
            "Will is bringing the snacks on Friday",
            // 还是 without a choice: "still", "better".
            "从下周开始每周三晚上七点到九点加一场，还是三号馆",
            "那你还是老实歇满两周，韧带拉伤别急着上场",
            "没涨没涨，还是每人三十五，打完转王姐",
        ] {
            assert!(member(fact), "{fact}");
        }
    }

    #[test]
    fn the_bot_nobody_chatter_and_questions_never_do() {
        let fact = "妈妈对花生过敏，别点沙爹";
        assert!(!could_state_a_fact(fact, &[BOT_TAG.into()], Some("bot")));
        assert!(!could_state_a_fact(fact, &[], None));
        // A reply embedded with its question: its own words say where, never what.
        assert!(member("订好了，在老地方"));
        assert!(!could_state_a_fact(
            "订好了，在老地方",
            &[REPLY_TAG.into()],
            Some("ming")
        ));
        for chatter in [
            "好的好的好的",
            "哈哈哈哈哈哈哈",
            "+1",
            "收到！",
            "今天好热",
            "[Sticker]",
            "[动画表情]",
            "[图片] [图片]",
        ] {
            assert!(!member(chatter), "{chatter}");
        }
        // A placeholder beside words is a message with a picture: the words still count.
        assert!(member("[图片] 这是新球馆的场地图，五号六号场"));
        // Long enough and varied, but nothing without the line it answers (issue 76).
        for reply in [
            "same here",
            "sounds good to me",
            "我也是这么想的",
            "count me in too",
        ] {
            assert!(!member(reply), "{reply}");
        }
        for question in [
            "周末有人打球吗？",
            "妈妈能吃花生吗",
            "有人知道快递几点到吗 🙏",
            "你们周末在干什么",
            "Is the dentist on Friday?",
            "周六几点聚餐？ ",
            "真的假的?!",
            "对了，我拔牙是几号来着",
            "@小助手 内部赛报名截止是哪天",
            "老弟，妈明天是我去接还是你去接呢",
            "老弟，妈明天是我去接还是你去接",
            "那礼物呢？我们是各买各的还是一起买",
            "婷婷你明天几点到家？能早点回来帮忙不",
            "妈中午吃的啥",
            "what are we playing? I vote something new",
            "anyone know where the dice went? the bag with all the d20s",
        ] {
            assert!(!member(question), "{question}");
        }
    }

    #[test]
    fn short_is_counted_in_characters_for_cjk_and_in_words_otherwise() {
        assert!(is_short("订好了，在老地方"));
        assert!(is_short("我来弄"));
        assert!(is_short("Booked it, the usual place."));
        assert!(!is_short("妈妈对花生过敏，点菜的时候千万别点沙爹和花生酱"));
        assert!(!is_short(
            "The plumber is coming on Thursday morning between nine and eleven"
        ));
    }

    #[test]
    fn terse_is_shorter_than_the_shortest_facts() {
        for chatter in [
            "场地费记得转我",
            "我到了，场地开好了",
            "that last turn was brutal Ken",
        ] {
            assert!(is_terse(chatter), "{chatter}");
        }
        for fact in [
            "房租这个月涨到四千二了",
            "妈妈对花生过敏，聚餐别点沙爹",
            "The quarterly report is due next Tuesday",
        ] {
            assert!(!is_terse(fact), "{fact}");
        }
    }
}
