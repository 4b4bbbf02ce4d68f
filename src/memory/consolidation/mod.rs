//! Consolidation by an LLM (docs/design.md section 5.13): every `every_messages` messages, or
//! after `quiet_minutes` of quiet, a conversation's recent messages and its scope's nearest
//! long-term memories go to an OpenAI-compatible chat-completions endpoint, which answers
//! ADD / UPDATE(id) / NONE decisions as JSON. One file per stage:
//! - [`triggers`]: which conversations are due;
//! - [`chat`]: the one HTTP call;
//! - [`decisions`]: the prompt, and the answer parsed and checked against what was sent;
//! - [`host_passes`]: passes the host's own LLM answers (a plugin relays prompt and answer);
//! - [`budget`]: which chats get passes, and the tokens a day may spend.
//!
//! The messages and the answer are untrusted. The answer cannot name a scope (a decision with
//! any field beyond its own is refused), an UPDATE may only name a memory the pass showed it,
//! an ADD's sources only messages the pass showed it, and every decision goes through the door
//! every other writer goes through (`memory::door`), as the conversation itself: its chat
//! scope, member sources still stored, redaction, one copy of a fact, and a forget that
//! reaches what it wrote. Malformed answers are dropped and counted.

pub mod budget;
pub mod chat;
pub mod decisions;
pub mod host_passes;
pub mod triggers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

pub use chat::{ChatClient, ChatError};
pub use decisions::{Decision, Shown};
pub use host_passes::{HostAnswer, HostPass, HostPasses, PreparedPass};
pub use triggers::Triggers;

/// `consolidation.*` as the memory layer uses it; `None` client: no LLM pass.
#[derive(Debug, Clone)]
pub struct ConsolidationSettings {
    pub every_messages: usize,
    pub quiet: Duration,
    pub max_messages: usize,
    /// The rules without an LLM that are on (`consolidation.rules`).
    pub rules: crate::config::ConsolidationRules,
}

impl ConsolidationSettings {
    pub(crate) fn from_config(c: &crate::config::ConsolidationConfig) -> ConsolidationSettings {
        ConsolidationSettings {
            every_messages: c.every_messages,
            quiet: Duration::from_secs(c.quiet_minutes.saturating_mul(60)),
            max_messages: c.max_messages,
            rules: c.rules,
        }
    }
}

/// What the passes did, for `/v1/status` and `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub passes: AtomicU64,
    pub added: AtomicU64,
    pub updated: AtomicU64,
    /// UPDATEs of a memory the pass may only read, written as an ADD of the chat's scope
    /// instead (counted in `added` too).
    pub updates_added: AtomicU64,
    /// Decisions refused: unknown fields (a scope), ids the pass did not show, empty text.
    pub refused: AtomicU64,
    /// Answers that were not the JSON asked for.
    pub malformed: AtomicU64,
    /// Calls that failed or timed out.
    pub failed: AtomicU64,
}

/// The counters as numbers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConsolidationStatus {
    pub llm: bool,
    pub passes: u64,
    pub added: u64,
    pub updated: u64,
    /// UPDATEs of a memory the pass may only read, written as ADDs (counted in `added` too).
    pub updates_added: u64,
    pub refused: u64,
    pub malformed: u64,
    pub failed: u64,
    /// Conversations waiting out a failed or malformed pass (`consolidation.retry_secs`).
    pub backing_off: triggers::BackingOff,
    /// The day's tokens and chats (`consolidation.daily_tokens`).
    pub budget: budget::BudgetStatus,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    pub(crate) fn status(
        &self,
        llm: bool,
        backing_off: triggers::BackingOff,
        budget: budget::BudgetStatus,
    ) -> ConsolidationStatus {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConsolidationStatus {
            llm,
            passes: get(&self.passes),
            added: get(&self.added),
            updated: get(&self.updated),
            updates_added: get(&self.updates_added),
            refused: get(&self.refused),
            malformed: get(&self.malformed),
            failed: get(&self.failed),
            backing_off,
            budget,
        }
    }
}

/// The LLM pass's parts, held by the service: the client (none without a base URL), when it
/// runs, which conversations are due, and what it did.
#[derive(Debug)]
pub struct Consolidator {
    pub client: Option<ChatClient>,
    pub settings: ConsolidationSettings,
    pub triggers: Triggers,
    pub counters: Counters,
    /// Passes handed to the host's LLM, waiting for its answer.
    pub host: HostPasses,
    /// Which chats get passes (`consolidation.active_days`).
    pub active: budget::Active,
    /// What the day's passes may spend (`consolidation.daily_tokens`).
    pub budget: budget::Budget,
}

impl Consolidator {
    /// The consolidator of `c`; `zone`: where a day ends for the budget.
    pub(crate) fn from_config(
        c: &crate::config::ConsolidationConfig,
        zone: chrono_tz::Tz,
    ) -> Result<Consolidator, ChatError> {
        Ok(Consolidator {
            client: ChatClient::from_config(c)?,
            settings: ConsolidationSettings::from_config(c),
            triggers: Triggers::new(Duration::from_secs(c.retry_secs)),
            counters: Counters::default(),
            host: HostPasses::default(),
            active: budget::Active::new(Duration::from_secs(c.active_days.saturating_mul(86_400))),
            budget: budget::Budget::new(c.daily_tokens, zone),
        })
    }

    pub(crate) fn status(&self) -> ConsolidationStatus {
        self.counters.status(
            self.client.is_some(),
            self.triggers.backing_off(),
            self.budget.status(),
        )
    }
}
