//! Which recent messages a recall shows, from the candidates its search found, by score. For a
//! prompt, a member's words come before the bot's own replies (the members' are the evidence;
//! the bot's echo what it was told or, at worst, what it made up, and an echo of a question
//! outranked the answer it asked for), and the message that asks is left out (it was sent to
//! the chat too, and finds itself first). A search by hand shows by score alone: it may look
//! for any message, the bot's included, by its own words.

use crate::memory::model::ScoredMemory;
use crate::memory::recall::mentions::without_mentions;
use crate::memory::redact::redact;
use crate::store::schema::BOT_TAG;

/// Candidates a recall searches for each recent message it shows: room for the bot's replies
/// and the asking message to give their places up.
pub const CANDIDATES_PER_SHOWN: usize = 2;

/// The at most `limit` messages of `candidates` to show for `query`.
pub fn shown(
    mut candidates: Vec<ScoredMemory>,
    query: &str,
    for_prompt: bool,
    limit: usize,
) -> Vec<ScoredMemory> {
    let by_bot = |h: &ScoredMemory| for_prompt && h.memory.tags.iter().any(|t| t == BOT_TAG);
    if for_prompt {
        let asking = redact(query);
        let asking = without_mentions(&asking);
        candidates.retain(|h| without_mentions(&h.memory.content) != asking);
    }
    candidates.sort_by(|a, b| {
        by_bot(a)
            .cmp(&by_bot(b))
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
        ScoredMemory {
            memory: Memory {
                id: content.into(),
                content: content.into(),
                reasoning: None,
                tags: if bot { vec![BOT_TAG.into()] } else { vec![] },
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
            },
            score,
        }
    }

    fn texts(shown: &[ScoredMemory]) -> Vec<&str> {
        shown.iter().map(|h| h.memory.content.as_str()).collect()
    }

    #[test]
    fn members_words_come_before_the_bots_and_the_asking_message_is_left_out() {
        let candidates = vec![
            said("echo: 妈妈有什么不能吃的", 0.95, true),
            said("那妈妈有什么不能吃的呀", 0.99, false),
            said("妈妈有什么不能吃的", 0.93, false),
            said("好的，那我们点海南鸡饭吧", 0.80, false),
            said("妈妈对花生过敏，别点沙爹", 0.85, false),
        ];
        let for_prompt = shown(candidates.clone(), "那妈妈有什么不能吃的呀", true, 3);
        assert_eq!(
            texts(&for_prompt),
            [
                "妈妈有什么不能吃的",
                "妈妈对花生过敏，别点沙爹",
                "好的，那我们点海南鸡饭吧"
            ]
        );
        // A search by hand finds any message by its own words, by score alone.
        let by_hand = shown(candidates, "那妈妈有什么不能吃的呀", false, 2);
        assert_eq!(
            texts(&by_hand),
            ["那妈妈有什么不能吃的呀", "echo: 妈妈有什么不能吃的"]
        );
    }
}
