//! Which recent messages a recall shows, from the candidates its search found, by score. For a
//! prompt:
//! - a message that says nothing on its own ("👌", "+1", "[图片]": `working::statement`) is
//!   left out. Short messages sit close to everything in an embedding model's space, and on the
//!   group-chat bench they took the places of the answers. A reply embedded with the question
//!   it answers stays, however short ("一百二" after "家里网费多少钱一个月？"): on the short-reply
//!   set as injected, 19 of 30 replies were shown without that exception, 28 with it;
//! - a member's statements come first, then a member's terse statements (`is_terse`: "场地费记得
//!   转我", "that last turn was brutal Ken"; said alone, they carry a name or a word of the
//!   question and little else, and on the group-chat bench they held the places of the answers
//!   and became chatter memories by the threshold rule; a reply is embedded with the question
//!   it answers, so it stands as a statement) and guesses (`statement::is_a_guess`: "last I saw
//!   it was on Mia's shelf" stood above the line that said where the dice are now), then a
//!   member's questions (they share
//!   the question's words, so they outscore the answer, but they answer nothing), then the bot's
//!   own replies (they echo what it was told or, at worst, what it made up);
//! - the message that asks is left out (it was sent to the chat too, and finds itself first),
//!   and so are its twins (`recall::echo`: "早上好，今天好冷啊" for "今天好冷啊"; the search
//!   leaves them out too, but a message still waiting for its vector is matched here).
//!
//! A search by hand shows by score alone: it may look for any message, the bot's included, by
//! its own words.

use super::chorus::Chorus;
use super::statement::{answers_something, is_a_guess, is_a_question, is_terse};
use crate::memory::model::ScoredMemory;
use crate::memory::recall::echo::Asking;
use crate::memory::redact::redact;
use crate::store::schema::{BOT_TAG, REPLY_TAG};

/// Candidates a recall searches for each recent message it shows: room for the messages that
/// say nothing, the questions, the bot's replies and the asking message to give their places
/// up. In a group the questions members ask each other share the asker's words and outscore
/// the line that answers. On the group-chat set (facts found of 45, 3 shown), 4 a message
/// (12 searched) found 36: two answers stood below a dozen such lines; 5 found 37, 6 and 8
/// found 38, 10 and 12 found 37 (statements further down took the places). The short-reply set
/// finds 28/30 at 4, 6 and 8; chatter memories and small talk are the same.
pub const CANDIDATES_PER_SHOWN: usize = 6;

/// Where a candidate stands for a prompt: a member's statement, a member's terse statement or
/// a line several members said (a chorus), a member's question, the bot.
fn standing(h: &ScoredMemory, chorus: &Chorus) -> u8 {
    let tagged = |tag: &str| h.memory.tags.iter().any(|t| t == tag);
    if tagged(BOT_TAG) {
        3
    } else if is_a_question(&h.memory.content) {
        2
    } else if (is_terse(&h.memory.content) && !tagged(REPLY_TAG))
        || chorus.sings(&h.memory.content)
        || is_a_guess(&h.memory.content)
    {
        1
    } else {
        0
    }
}

/// The at most `limit` messages of `candidates` to show for `query`.
pub(crate) fn shown(
    mut candidates: Vec<ScoredMemory>,
    query: &str,
    for_prompt: bool,
    limit: usize,
    chorus: &Chorus,
) -> Vec<ScoredMemory> {
    let standing = |h: &ScoredMemory| if for_prompt { standing(h, chorus) } else { 0 };
    if for_prompt {
        let asking = Asking::new(&redact(query));
        candidates.retain(|h| {
            !asking.echoed_by(&h.memory.content)
                && answers_something(&h.memory.content, &h.memory.tags)
        });
    }
    candidates.sort_by(|a, b| {
        standing(a)
            .cmp(&standing(b))
            .then_with(|| b.score.total_cmp(&a.score))
    });
    candidates.truncate(limit);
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::model::Memory;

    fn said(content: &str, score: f32, bot: bool) -> ScoredMemory {
        tagged(content, score, if bot { &[BOT_TAG] } else { &[] })
    }

    fn tagged(content: &str, score: f32, tags: &[&str]) -> ScoredMemory {
        ScoredMemory {
            memory: Memory {
                id: content.into(),
                content: content.into(),
                reasoning: None,
                tags: tags.iter().map(|t| t.to_string()).collect(),
                memory_type: "message".into(),
                strength: 1,
                is_active: false,
                memory_scope: Some("家人".into()),
                scope_source: Some("conversation".into()),
                created_at: None,
                expires_at: None,
                speaker_id: Some("u".into()),
                speaker_name: None,
                source_ids: vec![],
                about_ids: vec![],
            },
            score,
        }
    }

    fn texts(shown: &[ScoredMemory]) -> Vec<&str> {
        shown.iter().map(|h| h.memory.content.as_str()).collect()
    }

    #[test]
    fn statements_come_before_questions_and_the_bots_and_the_asking_message_is_left_out() {
        let candidates = vec![
            said("echo: 妈妈有什么不能吃的", 0.95, true),
            said("那妈妈有什么不能吃的呀", 0.99, false),
            said("妈妈有什么不能吃的", 0.93, false),
            said("好的，那我们点海南鸡饭吧", 0.80, false),
            said("妈妈对花生过敏，别点沙爹", 0.85, false),
        ];
        let for_prompt = shown(
            candidates.clone(),
            "那妈妈有什么不能吃的呀",
            true,
            3,
            &Chorus::default(),
        );
        // "妈妈有什么不能吃的" is a twin of the asking message (`recall::echo`): it answers
        // nothing. The bot's line says more than the question, and stands last.
        assert_eq!(
            texts(&for_prompt),
            [
                "妈妈对花生过敏，别点沙爹",
                "好的，那我们点海南鸡饭吧",
                "echo: 妈妈有什么不能吃的"
            ]
        );
        // A search by hand finds any message by its own words, by score alone.
        let by_hand = shown(
            candidates,
            "那妈妈有什么不能吃的呀",
            false,
            2,
            &Chorus::default(),
        );
        assert_eq!(
            texts(&by_hand),
            ["那妈妈有什么不能吃的呀", "echo: 妈妈有什么不能吃的"]
        );
    }

    #[test]
    fn a_prompt_never_shows_a_message_that_says_nothing() {
        let candidates = vec![
            said("👌", 0.97, false),
            said("+1", 0.96, false),
            said("[图片]", 0.95, false),
            said(
                "这周六活动照常：下午两点到四点，体育中心三号馆",
                0.80,
                false,
            ),
        ];
        let for_prompt = shown(
            candidates.clone(),
            "这周末在哪个馆打？",
            true,
            3,
            &Chorus::default(),
        );
        assert_eq!(
            texts(&for_prompt),
            ["这周六活动照常：下午两点到四点，体育中心三号馆"]
        );
        assert_eq!(
            shown(
                candidates,
                "这周末在哪个馆打？",
                false,
                3,
                &Chorus::default()
            )
            .len(),
            3
        );
    }

    #[test]
    fn a_prompt_shows_a_reply_however_short_but_never_a_laugh() {
        let candidates = vec![
            tagged("一百二", 0.95, &[REPLY_TAG]),
            tagged("哈哈哈", 0.94, &[REPLY_TAG]),
            tagged("[图片]", 0.93, &[REPLY_TAG]),
            tagged("一百二", 0.92, &[]),
        ];
        let for_prompt = shown(candidates, "网费每月交多少？", true, 4, &Chorus::default());
        assert_eq!(texts(&for_prompt), ["一百二"]);
        assert_eq!(for_prompt[0].memory.tags, [REPLY_TAG]);
    }

    #[test]
    fn a_line_several_members_said_gives_its_place_to_a_statement() {
        let chorus_line = "心疼阿杰一秒，好好养伤";
        let candidates = vec![
            tagged(chorus_line, 0.97, &[]),
            tagged("上周三打球落地把脚踝扭了，至少歇两周", 0.90, &[]),
        ];
        let chorus = Chorus::among([(chorus_line, Some("u1")), (chorus_line, Some("u2"))]);
        let for_prompt = shown(candidates.clone(), "阿杰怎么了？", true, 2, &chorus);
        assert_eq!(
            texts(&for_prompt),
            ["上周三打球落地把脚踝扭了，至少歇两周", chorus_line]
        );
        let alone = shown(candidates, "阿杰怎么了？", true, 2, &Chorus::default());
        assert_eq!(texts(&alone)[0], chorus_line, "said by one member");
    }

    #[test]
    fn a_terse_statement_gives_its_place_to_a_longer_one_unless_it_is_a_reply() {
        let candidates = vec![
            tagged("场地费记得转我", 0.97, &[]),
            tagged("订好了，在老地方", 0.93, &[REPLY_TAG]),
            tagged("我到了，场地开好了", 0.96, &[]),
            tagged(
                "这周六活动照常：下午两点到四点，体育中心三号馆，五号六号场",
                0.80,
                &[],
            ),
        ];
        let for_prompt = shown(
            candidates.clone(),
            "这周末在哪个馆打？",
            true,
            3,
            &Chorus::default(),
        );
        assert_eq!(
            texts(&for_prompt),
            [
                "订好了，在老地方",
                "这周六活动照常：下午两点到四点，体育中心三号馆，五号六号场",
                "场地费记得转我"
            ]
        );
        let by_hand = shown(
            candidates,
            "这周末在哪个馆打？",
            false,
            1,
            &Chorus::default(),
        );
        assert_eq!(texts(&by_hand), ["场地费记得转我"]);
    }

    #[test]
    fn a_guess_gives_its_place_to_a_statement() {
        let candidates = vec![
            tagged(
                "last I saw it was on Mia's shelf after Catan",
                0.95,
                &[REPLY_TAG],
            ),
            said(
                "perfect, Tom's car is officially the dice vault",
                0.90,
                false,
            ),
        ];
        let for_prompt = shown(
            candidates.clone(),
            "where are the dice kept?",
            true,
            2,
            &Chorus::default(),
        );
        assert_eq!(
            texts(&for_prompt),
            [
                "perfect, Tom's car is officially the dice vault",
                "last I saw it was on Mia's shelf after Catan"
            ]
        );
    }
}
