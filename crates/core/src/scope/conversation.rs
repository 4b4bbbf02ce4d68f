//! Validated conversation ids.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::ScopeError;

/// Maximum length of a (trimmed) conversation id in bytes.
pub const MAX_CONVERSATION_ID_BYTES: usize = 512;

/// A conversation id: non-empty after trimming, at most 512 bytes, no control characters.
///
/// Every read and write requires one (docs/design.md rule 5): it is the only input scope derivation
/// uses, so a malformed id must fail the request instead of landing in some default scope.
/// Read back (a journal line) through the same check.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ConversationId(String);

impl ConversationId {
    /// Validates and trims `raw`. The error never echoes the id, which may be huge or binary.
    pub fn parse(raw: &str) -> Result<ConversationId, ScopeError> {
        let id = raw.trim();
        let reason = if id.is_empty() {
            Some("conversation_id is empty")
        } else if id.len() > MAX_CONVERSATION_ID_BYTES {
            Some("conversation_id is longer than 512 bytes")
        } else if id.chars().any(char::is_control) {
            Some("conversation_id contains control characters")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(ScopeError::InvalidConversationId { reason }),
            None => Ok(ConversationId(id.to_owned())),
        }
    }

    /// The trimmed id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ConversationId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ConversationId {
    type Error = ScopeError;
    fn try_from(value: String) -> Result<ConversationId, ScopeError> {
        ConversationId::parse(&value)
    }
}

impl From<ConversationId> for String {
    fn from(value: ConversationId) -> String {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(raw: &str) -> &'static str {
        match ConversationId::parse(raw) {
            Err(ScopeError::InvalidConversationId { reason }) => reason,
            other => panic!("expected rejection of {raw:?}, got {other:?}"),
        }
    }

    #[test]
    fn accepts_and_trims() {
        let id = ConversationId::parse("default:GroupMessage:12345").unwrap();
        assert_eq!(id.as_str(), "default:GroupMessage:12345");
        let id = ConversationId::parse("  aiocqhttp:FriendMessage:42 \t").unwrap();
        assert_eq!(id.as_str(), "aiocqhttp:FriendMessage:42");
        assert_eq!(id.to_string(), "aiocqhttp:FriendMessage:42");
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"aiocqhttp:FriendMessage:42\""
        );
    }

    #[test]
    fn length_limit_is_in_bytes_after_trim() {
        let ok = "a".repeat(512);
        assert_eq!(ConversationId::parse(&ok).unwrap().as_str().len(), 512);
        assert_eq!(
            ConversationId::parse(&format!("  {ok}  "))
                .unwrap()
                .as_str(),
            ok
        );
        assert!(reason(&"a".repeat(513)).contains("512"));
        // 171 CJK chars = 513 bytes.
        assert!(reason(&"家".repeat(171)).contains("512"));
        assert!(ConversationId::parse(&"家".repeat(170)).is_ok());
    }

    #[test]
    fn rejects_empty_and_control() {
        assert!(reason("").contains("empty"));
        assert!(reason("   \t\n ").contains("empty"));
        assert!(reason("a\nb").contains("control"));
        assert!(reason("a\u{0}b").contains("control"));
        assert!(reason("a\u{7f}b").contains("control"));
        assert!(reason("a\u{85}b").contains("control"));
        let err = ConversationId::parse("x\ny").unwrap_err();
        assert_eq!(err.code(), "invalid_conversation_id");
        assert!(!err.to_string().contains('x'), "id must not be echoed");
    }

    #[test]
    fn read_back_through_the_same_check() {
        let id: ConversationId = serde_json::from_str("\"default:GroupMessage:1\"").unwrap();
        assert_eq!(id.as_str(), "default:GroupMessage:1");
        assert!(serde_json::from_str::<ConversationId>("\"a\\u0000b\"").is_err());
        assert!(serde_json::from_str::<ConversationId>("\"  \"").is_err());
    }
}
