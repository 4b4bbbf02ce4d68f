//! A person: the platform plus the sender id, as the plugins send them (issue 77).
//!
//! Why: a member is the same person in every chat of a bot on one platform (their QQ number in
//! the family group and in the work group), whatever name they go by, and a different person on
//! another platform that happens to give the same id. So a person is keyed by the platform (the
//! conversation id's first part, before `:`: AstrBot's `unified_msg_origin` starts with the
//! platform id, NoneBot2's with the adapter, `onebot11:group_123`) and the sender id. A
//! conversation id names the platform and proves nothing else: "forget me" from any chat of
//! the platform reaches the person's words in every chat of it.

use serde::{Deserialize, Serialize};

use crate::memory::asker::MAX_SENDER_CHARS;
use crate::scope::ConversationId;

/// A person (see the module header).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersonKey {
    pub platform: String,
    pub sender_id: String,
}

/// Why a person could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersonError {
    #[error("sender_id must be 1 to {MAX_SENDER_CHARS} characters")]
    SenderId,
    #[error("a person is PLATFORM:SENDER_ID, both non-empty")]
    Spelling,
}

/// The platform a conversation belongs to: its id up to the first `:`.
pub(crate) fn platform_of(conversation: &ConversationId) -> &str {
    let id = conversation.as_str();
    id.split(':').next().unwrap_or(id)
}

impl PersonKey {
    /// The member `sender_id` of the platform `conversation` is on.
    pub(crate) fn in_conversation(
        conversation: &ConversationId,
        sender_id: &str,
    ) -> Result<PersonKey, PersonError> {
        let sender_id = sender_id.trim();
        if sender_id.is_empty() || sender_id.chars().count() > MAX_SENDER_CHARS {
            return Err(PersonError::SenderId);
        }
        Ok(PersonKey {
            platform: platform_of(conversation).to_string(),
            sender_id: sender_id.to_string(),
        })
    }

    /// `PLATFORM:SENDER_ID`, as the operator names a person (`scopemem forget --person`).
    pub fn parse(spelled: &str) -> Result<PersonKey, PersonError> {
        let (platform, sender) = spelled.split_once(':').ok_or(PersonError::Spelling)?;
        let (platform, sender) = (platform.trim(), sender.trim());
        if platform.is_empty() || sender.is_empty() {
            return Err(PersonError::Spelling);
        }
        if sender.chars().count() > MAX_SENDER_CHARS {
            return Err(PersonError::SenderId);
        }
        Ok(PersonKey {
            platform: platform.to_string(),
            sender_id: sender.to_string(),
        })
    }

    /// Whether a message `sender` said in `conversation` is this person's.
    pub(crate) fn said(&self, conversation: &str, sender: &str) -> bool {
        sender == self.sender_id
            && conversation
                .split(':')
                .next()
                .is_some_and(|p| p == self.platform)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_is_the_platform_of_the_chat_and_the_sender_id() {
        let group = ConversationId::parse("aiocqhttp:GroupMessage:123").unwrap();
        let p = PersonKey::in_conversation(&group, " 10001 ").unwrap();
        assert_eq!(
            (p.platform.as_str(), p.sender_id.as_str()),
            ("aiocqhttp", "10001")
        );
        assert!(p.said("aiocqhttp:FriendMessage:10001", "10001"));
        assert!(
            !p.said("telegram:FriendMessage:10001", "10001"),
            "another platform"
        );
        assert!(!p.said("aiocqhttp:GroupMessage:123", "10002"));
        assert_eq!(
            PersonKey::in_conversation(&group, " "),
            Err(PersonError::SenderId)
        );
        assert_eq!(PersonKey::parse("aiocqhttp:10001"), Ok(p));
        assert_eq!(PersonKey::parse("10001"), Err(PersonError::Spelling));
        assert_eq!(PersonKey::parse("aiocqhttp:"), Err(PersonError::Spelling));
        let bare = ConversationId::parse("local-chat").unwrap();
        assert_eq!(platform_of(&bare), "local-chat");
    }
}
