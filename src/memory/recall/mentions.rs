//! A message to the bot in a group often starts by naming it ("@小助手 早上好"). The mention says
//! whom the message is for, not what it asks: searched with, the bot's name is a content word
//! that every message naming the bot shares, so "@小助手 早上好" read as a question about the
//! bot and recalled the chat's other mentions. A recall asks with the message after its leading
//! mentions; a message that is nothing but mentions asks with itself.

/// `text` without its leading `@name` words (a name runs to the next space).
pub(crate) fn without_mentions(text: &str) -> &str {
    let mut rest = text.trim_start();
    while let Some(after_at) = rest.strip_prefix(['@', '＠']) {
        let Some(space) = after_at.find(char::is_whitespace) else {
            return text.trim();
        };
        rest = after_at[space..].trim_start();
    }
    match rest.trim() {
        "" => text.trim(),
        asked => asked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_mentions_are_left_out_and_the_rest_is_asked() {
        assert_eq!(without_mentions("@小助手 早上好"), "早上好");
        assert_eq!(
            without_mentions("＠小助手  @王姐 内部赛报名截止是哪天"),
            "内部赛报名截止是哪天"
        );
        assert_eq!(without_mentions("王姐@小助手 你好"), "王姐@小助手 你好");
        assert_eq!(without_mentions("@小助手"), "@小助手");
        assert_eq!(without_mentions("  @Helper   "), "@Helper");
        assert_eq!(
            without_mentions("email me at a@b.com"),
            "email me at a@b.com"
        );
    }
}
