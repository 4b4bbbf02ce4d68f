//! What a conversation may read (docs/design.md rule 7), decided in exactly one place.
//!
//! `public` reads only `public`; any other scope reads itself and `public`; while migration
//! mode is on, legacy rows without a scope are readable too; expired rows never are; and
//! `scope_filter: disabled` (the rollback switch) drops the scope part. `scope` resolved the
//! conversation to its scope before this; the store applies the result, as SQL inside
//! LanceDB or column by column in the resident copy, from this one [`RowFilter`].
//!
//! A conversation's own chat (the working memory's messages and the facts consolidated from
//! them, design rule 11) has a scope of its own, which for an unmapped conversation is its
//! private scope: [`memories_filter`] adds it to the long-term tier, and [`messages_filter`] is
//! the message tier's whole rule, without `public`.

use chrono::{DateTime, Utc};

use crate::config::ScopeFilterMode;
use crate::scope::ScopeName;
use crate::store::{RowFilter, ScopeSet, Tier};

/// The rows a recall (or browse) in `current` may return, alive at `now`.
pub fn recall_filter(
    current: &ScopeName,
    migration_mode_on: bool,
    mode: ScopeFilterMode,
    now: DateTime<Utc>,
) -> RowFilter {
    let scopes = (mode != ScopeFilterMode::Disabled).then(|| {
        let mut names = vec![current.as_str().to_owned()];
        if !current.is_public() {
            names.push(ScopeName::public().as_str().to_owned());
        }
        ScopeSet {
            names,
            null: migration_mode_on,
        }
    });
    RowFilter {
        scopes,
        alive_at: Some(now),
        created: None,
        tier: None,
    }
}

/// [`recall_filter`] for the long-term tier, widened to the conversation's own chat scope
/// (`ScopeMap::resolve_chat`, design rule 11): facts consolidated from an unmapped
/// conversation's messages live in its private scope and are recalled there. `chat` is `None`
/// when a persona entry decided `current`: that entry decides the whole tier (rule 2).
pub(crate) fn memories_filter(
    current: &ScopeName,
    chat: Option<&ScopeName>,
    migration_mode_on: bool,
    mode: ScopeFilterMode,
    now: DateTime<Utc>,
) -> RowFilter {
    let mut rows = recall_filter(current, migration_mode_on, mode, now).in_tier(Tier::Memories);
    if let (Some(set), Some(chat)) = (rows.scopes.as_mut(), chat) {
        if !set.names.iter().any(|n| n == chat.as_str()) {
            set.names.push(chat.as_str().to_owned());
        }
    }
    rows
}

/// The working memory's messages a conversation may read (design rule 11): those of its own
/// chat scope only. Never `public` through rule 7, never legacy rows (a message always has a
/// scope), never expired ones; `scope_filter: disabled` drops the scope part as it does for
/// memories.
pub(crate) fn messages_filter(
    chat: &ScopeName,
    mode: ScopeFilterMode,
    now: DateTime<Utc>,
) -> RowFilter {
    RowFilter {
        scopes: (mode != ScopeFilterMode::Disabled).then(|| ScopeSet::only(chat.as_str())),
        alive_at: Some(now),
        created: None,
        tier: Some(Tier::Messages),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> ScopeName {
        ScopeName::parse(s).unwrap()
    }

    /// The scope part of the SQL, for readability.
    fn sql(current: &ScopeName, migration: bool, mode: ScopeFilterMode) -> Option<String> {
        RowFilter {
            alive_at: None,
            created: None,
            ..recall_filter(current, migration, mode, Utc::now())
        }
        .to_sql()
    }

    #[test]
    fn public_reads_public_others_read_themselves_and_public() {
        let e = ScopeFilterMode::Enforce;
        assert_eq!(
            sql(&ScopeName::public(), false, e).as_deref(),
            Some("memory_scope = 'public'")
        );
        assert_eq!(
            sql(&scope("家人"), false, e).as_deref(),
            Some("memory_scope IN ('家人', 'public')")
        );
        assert_eq!(
            sql(&ScopeName::public(), true, e).as_deref(),
            Some("(memory_scope = 'public' OR memory_scope IS NULL)")
        );
        assert_eq!(
            sql(&scope("work_team-2"), true, e).as_deref(),
            Some("(memory_scope IN ('work_team-2', 'public') OR memory_scope IS NULL)")
        );
        for migration in [false, true] {
            for s in [ScopeName::public(), scope("家人")] {
                let f = recall_filter(&s, migration, ScopeFilterMode::Disabled, Utc::now());
                assert_eq!(f.scopes, None);
                assert!(
                    f.alive_at.is_some(),
                    "expired rows stay hidden when disabled"
                );
            }
        }
    }

    #[test]
    fn messages_are_read_in_their_chat_scope_only_and_memories_also_there() {
        let now = Utc::now();
        let e = ScopeFilterMode::Enforce;
        let chat = scope("c_0123456789abcdef");
        let messages = messages_filter(&chat, e, now);
        assert!(messages.admits_scope(Some("c_0123456789abcdef")));
        assert!(!messages.admits_scope(Some("public")) && !messages.admits_scope(None));
        assert!(!messages.admits_type("knowledge") && messages.admits_type("message"));
        let memories = memories_filter(&ScopeName::public(), Some(&chat), true, e, now);
        assert_eq!(
            memories.scopes.as_ref().map(|s| s.names.clone()),
            Some(vec!["public".to_string(), "c_0123456789abcdef".to_string()])
        );
        assert!(memories.admits_scope(None) && !memories.admits_type("message"));
        // A mapped conversation's chat is its scope: nothing is added twice.
        let family = memories_filter(&scope("家人"), Some(&scope("家人")), false, e, now);
        assert_eq!(family.scopes.map(|s| s.names.len()), Some(2));
        let persona = memories_filter(&scope("恋爱"), None, false, e, now);
        assert_eq!(
            persona.scopes.map(|s| s.names),
            Some(vec!["恋爱".to_string(), "public".to_string()])
        );
        let open = messages_filter(&chat, ScopeFilterMode::Disabled, now);
        assert!(open.scopes.is_none() && open.alive_at.is_some());
    }

    #[test]
    fn another_scope_and_expired_rows_are_never_read() {
        let now = Utc::now();
        let f = recall_filter(&scope("家人"), false, ScopeFilterMode::Enforce, now);
        assert!(f.admits_scope(Some("家人")) && f.admits_scope(Some("public")));
        assert!(!f.admits_scope(Some("工作")) && !f.admits_scope(None));
        assert!(!f.admits_expiry(Some(now.timestamp_micros())));
    }
}
