//! Working memory (docs/design.md section 5.13): every message of a chat, the members' words to
//! each other included, kept for `working_memory.ttl_hours` and searched as a second tier beside
//! long-term memories. One file per stage:
//! - [`event`]: validate a message, derive its scope once from the conversation id, redact it,
//!   and give it an id (the same platform message is one row however often it is sent);
//! - [`pending`]: what was accepted but not embedded yet, searchable by keyword at once;
//! - [`recurrence`]: the threshold rule that makes a message a long-term memory (recalled a
//!   second time);
//! - [`stored`]: what the worker has just stored, with vectors, handed to the second rule;
//! - [`restatement`]: that rule (a fact stated again by a second member), and [`restated`]:
//!   the rule applied to each message the worker stores;
//! - [`statement`]: which messages either rule may make a memory (no bot, chatter or question);
//! - [`shown`]: which of a recall's candidates it shows (members' words first, never the
//!   message that asks for a prompt);
//! - [`chorus`]: a line several members said word for word (复读), a reaction, not a fact;
//! - [`second_tier`]: what a recall's second tier shows of what its search found, and which
//!   message it counts toward the threshold rule;
//! - [`over_cap`]: which messages the per-scope cap lets go (the sweeper erases them);
//! - [`said_since`]: a conversation's messages since the last LLM consolidation pass;
//! - the facts both rules make are written through the door's writer of a fact made of
//!   messages (`memory::door::fact`), as the LLM pass's are;
//! - [`replies`]: what a message answers, embedded with it (the question before it);
//! - [`handoff`]: how a path that must not wait (the worker, a recall) hands work to the
//!   background task of a rule;
//! - [`state`]: what the service keeps of all this between calls, as one value;
//! - [`status`]: what it reports (`/v1/status`) and what became of one message.
//!
//! Messages are rows of the `memories` table with `memory_type` [`MESSAGE_TYPE`]: the scope
//! filter, expiry, every forget, erasure from disk and the export hold for them with no second
//! code path. They reach the table through the intake (`memory::intake`: journaled before the
//! 202, replayed after a crash, dropped by an erase that selects them, embedded in batches).

mod chorus;
mod event;
mod handoff;
mod over_cap;
mod pending;
mod recurrence;
mod replies;
mod restated;
pub mod restatement;
mod said_since;
mod second_tier;
mod shown;
mod state;
mod statement;
mod status;
mod stored;

pub use crate::store::schema::MESSAGE_TYPE;
pub(crate) use chorus::Chorus;
pub(crate) use event::accept;
pub use event::{MessageAccepted, MessageEvent, MessageJob, BOT_TAG, REPLY_TAG};
pub use handoff::Handoff;
pub(crate) use over_cap::oldest_over_cap;
pub use pending::PendingMessages;
pub(crate) use recurrence::returned_again;
pub use recurrence::{Recurrences, ReturnedAgain};
pub use replies::{passage, LastSaid};
pub(crate) use said_since::said_since;
pub(crate) use second_tier::{Asked as TierAsked, Found};
pub(crate) use shown::{shown, CANDIDATES_PER_SHOWN};
pub use state::{MessagesPresent, WorkingMemory};
pub(crate) use statement::{asks, could_state_a_fact, is_short};
pub use status::{MessageOutcome, WorkingStatus};
pub(crate) use stored::stored_messages;
pub use stored::{StoredMessage, StoredMessages};

/// `working_memory.*` as the memory layer uses it.
#[derive(Debug, Clone)]
pub struct WorkingSettings {
    pub enabled: bool,
    /// How long a message lives after it was sent.
    pub ttl: chrono::Duration,
    pub max_per_scope: usize,
    pub queue_capacity: usize,
    pub recall_limit: usize,
    /// How long after a message a short reply is embedded with it (`replies`); zero: never.
    pub reply_window: chrono::Duration,
}

impl WorkingSettings {
    pub(crate) fn from_config(c: &crate::config::WorkingMemoryConfig) -> WorkingSettings {
        WorkingSettings {
            enabled: c.enabled,
            ttl: chrono::Duration::hours(i64::from(c.ttl_hours)),
            max_per_scope: c.max_per_scope,
            queue_capacity: c.queue_capacity,
            recall_limit: c.recall_limit,
            reply_window: chrono::Duration::minutes(i64::from(c.reply_context_minutes)),
        }
    }
}
