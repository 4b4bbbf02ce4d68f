//! What the service keeps of the working memory between calls: the threshold rule's counts and
//! hand-off, each conversation's last line (what the next short reply answers), the restatement
//! rule's recent statements, and whether the table holds any message yet. One value the
//! service owns (`MemoryService::working`), so a reader following a message finds its state in
//! one place rather than among the service's other fields.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::restatement::RecentStatements;
use super::{LastSaid, MessageAccepted, MessageEvent, Recurrences, ReturnedAgain, MESSAGE_TYPE};
use crate::memory::MemoryError;
use crate::scope::ScopeResolver;
use crate::store::schema::COL_MEMORY_TYPE;
use crate::store::{sql_literal, Store, StoreError};

/// How often the table is counted again while no message was seen ([`MessagesPresent`]): a
/// recall in a store nobody sends messages to skips the second tier's search.
const RECHECK: Duration = Duration::from_secs(10);

/// The working memory's state in one service.
pub struct WorkingMemory {
    /// How often recalls returned each recent message (the threshold rule).
    pub(crate) recurrences: Recurrences,
    /// Each conversation's last message, which the next short one answers (`replies`).
    pub(crate) last_said: LastSaid,
    /// Messages a recall returned a second time, for the task that consolidates them.
    pub(crate) returned_again: ReturnedAgain,
    /// Facts consolidated because a second member stated them again.
    pub(crate) restated: AtomicU64,
    /// The recent statements a stored message is compared with (`restatement`).
    pub(crate) recent_statements: Mutex<RecentStatements>,
    /// Whether the table holds any message, so recalls skip the second tier until it does.
    pub(crate) present: MessagesPresent,
}

impl WorkingMemory {
    /// Empty state; a short reply is embedded with a line said at most `reply_window` before.
    pub(crate) fn new(reply_window: chrono::Duration) -> WorkingMemory {
        WorkingMemory {
            recurrences: Recurrences::default(),
            last_said: LastSaid::new(reply_window),
            returned_again: super::returned_again(),
            restated: AtomicU64::new(0),
            recent_statements: Mutex::default(),
            present: MessagesPresent::default(),
        }
    }

    /// A message's first stage: checked, its scope derived from the conversation id with the
    /// current map and its text redacted (`event::accept`), then given the lines it answers or
    /// goes on from (`replies`), which it joins as the conversation's last. `Ok(None)`: the
    /// conversation is incognito, nothing of it is kept.
    pub(crate) fn admit(
        &self,
        ev: MessageEvent,
        scopes: &ScopeResolver,
        ttl: chrono::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<MessageAccepted>, MemoryError> {
        let Some(mut accepted) = super::accept(ev, scopes, ttl, now)? else {
            return Ok(None);
        };
        accepted.job.answers = self.last_said.follow(
            accepted.conversation_id.as_str(),
            &accepted.job.speaker_id,
            &accepted.job.content,
            accepted.job.sent_at,
        );
        Ok(Some(accepted))
    }
}

/// Whether the table may hold a message: once one is seen it is remembered for good; until
/// then the table is counted again now and then ([`RECHECK`]), so messages another process
/// writes are searched from then on.
#[derive(Default)]
pub struct MessagesPresent {
    seen: AtomicBool,
    checked: Mutex<Option<Instant>>,
}

impl MessagesPresent {
    /// The intake took a message: the table holds one from now on.
    pub(crate) fn note(&self) {
        self.seen.store(true, Ordering::Relaxed);
    }

    /// Whether a message is known to be in the table (no count).
    pub(crate) fn known(&self) -> bool {
        self.seen.load(Ordering::Relaxed)
    }

    /// Whether `store` may hold a message, counting its messages at most every [`RECHECK`]
    /// until one is found.
    pub(crate) async fn any(&self, store: &Store) -> Result<bool, StoreError> {
        if self.known() {
            return Ok(true);
        }
        {
            let Ok(mut checked) = self.checked.lock() else {
                return Ok(true);
            };
            if checked.is_some_and(|t| t.elapsed() < RECHECK) {
                return Ok(false);
            }
            *checked = Some(Instant::now());
        }
        let messages = format!("{COL_MEMORY_TYPE} = {}", sql_literal(MESSAGE_TYPE));
        let found = store.count(Some(messages)).await? > 0;
        if found {
            self.note();
        }
        Ok(found)
    }
}
