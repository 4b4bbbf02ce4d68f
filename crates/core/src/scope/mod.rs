//! Memory scopes: who may see which memories (docs/design.md section 2).
//!
//! - [`ScopeName`] / [`ConversationId`]: validated newtypes, so an invalid scope or id cannot
//!   reach the store.
//! - [`ScopeMap`]: the conversation/persona → scope map with the unmapped policy; the one place
//!   a scope is derived ([`ScopeMap::resolve`]).
//! - [`ScopeResolver`] + [`watch_config`]: the hot-reloaded, lock-free current map.

mod conversation;
mod derive;
mod map;
mod name;
mod reload;
mod resolver;
mod source;
mod view;

pub use conversation::{ConversationId, MAX_CONVERSATION_ID_BYTES};
pub use derive::{derive_chat_scope, derive_scope};
pub use map::{IgnoredEntry, MapSummary, ResolvedScope, ScopeMap, PERSONA_KEY_PREFIX};
pub use name::{ScopeName, MAX_SCOPE_NAME_CHARS, PUBLIC_SCOPE};
pub use reload::watch_config;
pub use reload::{ConfigWatcher, DEFAULT_DEBOUNCE};
pub use resolver::ScopeResolver;
pub use source::ScopeSource;
pub use view::{MapEntry, MapView};

/// Errors of scope validation and config watching.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// A scope name does not match `^[A-Za-z0-9\u4e00-\u9fff_-]{1,64}$`.
    #[error("invalid scope name {}: {reason}", display_truncated(value, 80))]
    InvalidScopeName {
        /// The rejected value (shown truncated).
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A conversation id is empty, too long or contains control characters.
    #[error("invalid conversation id: {reason}")]
    InvalidConversationId {
        /// Why it was rejected (the raw id is deliberately not echoed).
        reason: &'static str,
    },
    /// The config file could not be watched.
    #[error("cannot watch config file: {0}")]
    Watch(String),
}

impl ScopeError {
    /// Stable machine-readable code for API error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            ScopeError::InvalidScopeName { .. } => "invalid_scope_name",
            ScopeError::InvalidConversationId { .. } => "invalid_conversation_id",
            ScopeError::Watch(_) => "watch_failed",
        }
    }
}

/// `s` cut to at most `max_bytes` on a char boundary, debug-quoted, with `…` when cut; keeps
/// oversized user input out of error messages and logs.
pub(crate) fn display_truncated(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return format!("{s:?}");
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_char_boundaries() {
        let s = "家".repeat(100); // 3 bytes each
        let t = display_truncated(&s, 10);
        assert_eq!(t, format!("{:?}…", "家".repeat(3)));
        assert_eq!(display_truncated("ab", 10), "\"ab\"");
    }

    #[test]
    fn error_codes() {
        let e = ScopeError::InvalidConversationId { reason: "empty" };
        assert_eq!(e.code(), "invalid_conversation_id");
        assert_eq!(
            ScopeName::parse("a b").unwrap_err().code(),
            "invalid_scope_name"
        );
        assert_eq!(ScopeError::Watch("x".into()).code(), "watch_failed");
    }

    #[test]
    fn oversized_scope_name_is_truncated_in_message() {
        let long = "x".repeat(10_000);
        let msg = ScopeName::parse(&long).unwrap_err().to_string();
        assert!(msg.len() < 300, "{}", msg.len());
    }
}
