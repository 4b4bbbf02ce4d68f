//! The one place a memory's scope is derived for a write: every write path (remember, the
//! remember tool, feedback's new memories) calls [`derive_scope`] with only what the
//! request context carries, the conversation id and the persona; never with anything the LLM
//! or the caller says. What the chat itself said (the working memory's messages, and the facts
//! consolidated from them) takes [`derive_chat_scope`] instead: the same map and incognito
//! list, but an unmapped chat stays in its conversation (docs/design.md rule 11). It lives in `scope` so that the writers (the service, feedback's
//! acceptance) depend on it and not on each other.

use super::{ConversationId, ResolvedScope, ScopeMap};

/// The one function that decides a memory's scope. Every write path calls it with only what
/// the request context carries: the conversation id and the persona. `None` means the
/// conversation (or persona) is incognito: the write path stores nothing and says so.
pub fn derive_scope(
    map: &ScopeMap,
    conversation: &ConversationId,
    persona: Option<&str>,
) -> Option<ResolvedScope> {
    if map.is_incognito(conversation, persona) {
        tracing::info!(
            conversation_id = conversation.as_str(),
            "incognito conversation: write not stored"
        );
        return None;
    }
    Some(map.resolve(conversation, persona))
}

/// The scope a chat message, or a fact consolidated from messages, is written in
/// ([`ScopeMap::resolve_chat`]): its conversation's entry, else the conversation's private
/// scope. `None`: the conversation is incognito, nothing is stored.
pub fn derive_chat_scope(map: &ScopeMap, conversation: &ConversationId) -> Option<ResolvedScope> {
    if map.is_incognito(conversation, None) {
        tracing::info!(
            conversation_id = conversation.as_str(),
            "incognito conversation: message not stored"
        );
        return None;
    }
    Some(map.resolve_chat(conversation))
}
