//! The one door every memory row goes through on its way to the table (design section 2, rule
//! 12 and its table of writers).
//!
//! Why: each writer used to keep the rules of a new memory itself, and the least checked one
//! kept the fewest. The LLM pass's UPDATE went through the operator's correction path, which
//! keeps a row's scope and swaps its text: a private chat's words, written into a `public`
//! memory the pass had shown, were then recalled in every chat. It dropped the row's sources,
//! took no erase lock and skipped the "only the bot said it" check; and a forget of that chat
//! never reached the words, since the row still named the chat that first wrote it. A model's
//! answer is input from a stranger, like an HTTP body: it gets the same rules as every other
//! writer, from the same code.
//!
//! So every writer names itself ([`Writer`]) and hands its row to this module, which applies
//! that writer's row of the table: the scope it may write (never chosen by the caller, the
//! tool arguments or the model), the sources it needs, and what a forget of those sources
//! reaches (`source_conversations`). What passes is an [`Admitted`] row, and the calls that
//! write memory rows take nothing else; `tests/shape.rs` checks that no code outside the store
//! and this module hands rows to the table's writer.
//!
//! One stage a file:
//! - [`admitted`]: the admitted row, and the writes that take it;
//! - [`sources`]: a fact's sources: member messages of the fact's scope, all still stored,
//!   none forgotten, and the conversations they were said in;
//! - [`about`]: the members a fact is about, by id;
//! - [`forgotten`]: facts a forget by id erased and the messages they were made of, kept
//!   beside the table (ids and hashes, never words) so no rule lifts them again, in any
//!   process, after any restart;
//! - [`fact`]: a fact made of messages (the rules without an LLM and the LLM pass's ADD);
//! - [`change`]: a memory's text changed (a correction, the LLM pass's UPDATE);
//! - [`repetition`]: one copy of a fact: a fact stored already is reinforced, not repeated.

mod about;
mod admitted;
mod change;
mod fact;
pub(crate) mod forgotten;
mod repetition;
mod sources;

pub(crate) use admitted::{insert_missing, may_merge, Admitted};
pub(crate) use change::{Change, Changed, Changer};
pub(crate) use fact::{Consolidated, FactWriter, Written};
pub(crate) use forgotten::Forgotten;
pub(crate) use repetition::{derived_id, Repetitions};

use serde::Serialize;

use crate::scope::{ConversationId, ScopeMap};
use crate::store::ScopeSet;

/// Who writes a memory row: each has its row of the table in design section 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// The remember tool, `POST /v1/memories`, MCP: the bot's choice. Its conversation's scope
    /// (`derive_scope`: the map, else `unmapped_scope`); no sources.
    Remember,
    /// A reflection's new memory: the scope derived when the job was accepted.
    Reflection,
    /// A reflection's merge: only memories of the scope its new memories go to, into it.
    Merge,
    /// The rules without an LLM (recalled twice, restated): the chat scope of the conversation
    /// (rule 11), member messages of that scope as sources.
    Rule,
    /// The LLM pass (ADD, and UPDATE of a memory of the chat scope): as a rule.
    Pass,
    /// A correction (`POST /v1/memories/update`, `core_memory_update`, MCP): a memory of a
    /// scope the conversation writes (its scope or its chat scope), never one it only reads.
    Correction,
    /// `scopemem import`: the operator's restore, rows as exported.
    Import,
    /// A chat message of the working memory: its chat scope, derived at acceptance.
    Message,
}

impl Writer {
    /// The name logs and `/metrics` use.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Writer::Remember => "remember",
            Writer::Reflection => "reflection",
            Writer::Merge => "merge",
            Writer::Rule => "rule",
            Writer::Pass => "pass",
            Writer::Correction => "correction",
            Writer::Import => "import",
            Writer::Message => "message",
        }
    }
}

/// The scopes whose memories `writer`, as `conversation`, may change or erase by id (design
/// section 2): a correction (and a forget by id) those of its scope and its chat scope, with
/// legacy NULL rows from a `public` conversation while migration mode is on; the LLM pass its
/// chat scope alone, where its ADDs go. Every other writer changes no stored memory.
pub(crate) fn writable(
    writer: Writer,
    map: &ScopeMap,
    conversation: &ConversationId,
    persona: Option<&str>,
    migration: bool,
) -> ScopeSet {
    let chat = map.resolve_chat(conversation).scope;
    match writer {
        Writer::Correction => {
            let scope = map.resolve(conversation, persona).scope;
            let mut own = ScopeSet {
                names: vec![scope.as_str().to_owned()],
                null: scope.is_public() && migration,
            };
            if chat != scope {
                own.names.push(chat.as_str().to_owned());
            }
            own
        }
        Writer::Pass => ScopeSet {
            names: vec![chat.as_str().to_owned()],
            null: false,
        },
        _ => ScopeSet {
            names: vec![],
            null: false,
        },
    }
}

/// Why the door let a write through no further. Every refusal is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Refusal {
    /// A memory its writer may read but not change (`public` from a mapped chat, another
    /// chat's memory, a legacy row).
    ReadOnly,
    /// The conversation maps to another scope now than when its messages were said, or is
    /// incognito.
    ScopeMoved,
    /// A message it was made of is no longer stored (erased or expired).
    SourcesGone,
    /// No member's message among its sources: none named, or only the bot's replies.
    NoMemberSource,
    /// A source that is no message of the fact's scope.
    ForeignSource,
    /// A fact a forget by id erased, or made of the messages such a fact was made of.
    Forgotten,
    /// Words that mean nothing without the line they answer ("me too", "同上").
    NotAlone,
}

impl Refusal {
    /// Every refusal, in the order `/metrics` lists them.
    pub(crate) const ALL: [Refusal; 7] = [
        Refusal::ReadOnly,
        Refusal::ScopeMoved,
        Refusal::SourcesGone,
        Refusal::NoMemberSource,
        Refusal::ForeignSource,
        Refusal::Forgotten,
        Refusal::NotAlone,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refusal::ReadOnly => "read_only",
            Refusal::ScopeMoved => "scope_moved",
            Refusal::SourcesGone => "sources_gone",
            Refusal::NoMemberSource => "no_member_source",
            Refusal::ForeignSource => "foreign_source",
            Refusal::Forgotten => "forgotten",
            Refusal::NotAlone => "not_alone",
        }
    }
}

/// How many writes the door refused, by reason, since the process started (`/metrics`).
#[derive(Debug, Default)]
pub(crate) struct Refusals([std::sync::atomic::AtomicU64; 7]);

impl Refusals {
    pub(crate) fn count(&self, why: Refusal) {
        let i = Refusal::ALL.iter().position(|r| *r == why).unwrap_or(0);
        self.0[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// `(reason, count)` for every reason.
    pub(crate) fn counts(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .zip(&self.0)
            .map(|(r, n)| (r.as_str(), n.load(std::sync::atomic::Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn map() -> ScopeMap {
        let config = Config::from_value(&serde_json::json!({
            "conversation_scope_map": {"g:family": "家人"},
        }))
        .expect("a valid config")
        .config;
        ScopeMap::from_config(&config)
    }

    fn chat(id: &str) -> ConversationId {
        ConversationId::parse(id).unwrap()
    }

    #[test]
    fn the_pass_changes_only_its_chat_scope_and_a_correction_its_scope_and_chat_scope() {
        let map = map();
        let family = chat("g:family");
        let pass = writable(Writer::Pass, &map, &family, None, true);
        assert!(pass.admits(Some("家人")));
        assert!(!pass.admits(Some("public")) && !pass.admits(None));
        let correction = writable(Writer::Correction, &map, &family, None, true);
        assert!(correction.admits(Some("家人")));
        assert!(!correction.admits(Some("public")) && !correction.admits(None));

        // An unmapped chat: the pass its private chat scope, never the public its remembers
        // go to; a correction both, and legacy rows while migration mode is on.
        let private = chat("g:private");
        let own = map.resolve_chat(&private).scope;
        let pass = writable(Writer::Pass, &map, &private, None, true);
        assert!(pass.admits(Some(own.as_str())));
        assert!(!pass.admits(Some("public")) && !pass.admits(None));
        let correction = writable(Writer::Correction, &map, &private, None, true);
        assert!(correction.admits(Some(own.as_str())) && correction.admits(Some("public")));
        assert!(correction.admits(None));
        assert!(!writable(Writer::Correction, &map, &private, None, false).admits(None));

        // Every other writer changes no stored memory.
        for w in [
            Writer::Remember,
            Writer::Rule,
            Writer::Reflection,
            Writer::Import,
        ] {
            assert!(!writable(w, &map, &family, None, true).admits(Some("家人")));
        }
    }

    #[test]
    fn every_refusal_is_counted_under_its_reason() {
        let counts = Refusals::default();
        counts.count(Refusal::ReadOnly);
        counts.count(Refusal::ReadOnly);
        counts.count(Refusal::NotAlone);
        let all: std::collections::HashMap<_, _> = counts.counts().into_iter().collect();
        assert_eq!(all.len(), Refusal::ALL.len());
        assert_eq!(
            (all["read_only"], all["not_alone"], all["forgotten"]),
            (2, 1, 0)
        );
    }
}
