//! What the service keeps of the working memory between calls: the threshold rule's counts and
//! hand-off, each conversation's last line (what the next short reply answers), the restatement
//! rule's recent statements, and whether the table holds any message yet. One value the
//! service owns (`MemoryService::working`), so a reader following a message finds its state in
//! one place rather than among the service's other fields.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;
use std::time::Instant;

use super::restatement::RecentStatements;
use super::{LastSaid, Recurrences, ReturnedAgain};

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
}

/// Whether the table may hold a message: once one is seen it is remembered for good; until
/// then the table is counted again now and then (`service::working`), so messages another
/// process writes are searched from then on.
#[derive(Default)]
pub struct MessagesPresent {
    pub(crate) seen: AtomicBool,
    pub(crate) checked: Mutex<Option<Instant>>,
}
