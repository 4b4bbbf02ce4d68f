//! The threshold rule of consolidation (design 5.13): a message that a recall returns a second
//! time is wanted again, and becomes a long-term memory, with no LLM involved. Counted in
//! this process (a restart forgets the first return; the rule then needs two more). The recall
//! hands the message over ([`ReturnedAgain`]) and answers; a background task writes the
//! memory, so no recall waits for an embedding or a write. Only a message that could state a
//! fact is counted (`working::statement`): a recall returns the bot's echo, chatter and
//! questions as readily as the fact they share words with.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Returns that make a message a long-term memory.
pub const CONSOLIDATE_AT: u8 = 2;
/// Messages waiting for their consolidation at most.
pub const WAITING: usize = 1024;

/// The ids of messages returned a second time, handed from the recall to the task that makes
/// them long-term memories.
pub type ReturnedAgain = super::Handoff<String>;

/// An empty hand-off of [`WAITING`].
pub(crate) fn returned_again() -> ReturnedAgain {
    super::Handoff::with_capacity(WAITING)
}

/// Messages counted at most; past it the counts start over (they are hints, not state).
const MAX_COUNTED: usize = 100_000;

#[derive(Default)]
pub struct Recurrences {
    returned: Mutex<HashMap<String, u8>>,
    /// Messages that reached [`CONSOLIDATE_AT`] since the process started.
    due: AtomicU64,
}

impl Recurrences {
    /// Count one more return of each of `ids`; the ids that reached [`CONSOLIDATE_AT`] just
    /// now (each message once).
    pub(crate) fn returned<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let Ok(mut counts) = self.returned.lock() else {
            return Vec::new();
        };
        if counts.len() > MAX_COUNTED {
            counts.clear();
        }
        let mut due = Vec::new();
        for id in ids {
            let n = counts.entry(id.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            if *n == CONSOLIDATE_AT {
                due.push(id.to_string());
            }
        }
        self.due.fetch_add(due.len() as u64, Ordering::Relaxed);
        due
    }

    /// Messages that reached [`CONSOLIDATE_AT`] since the process started.
    pub(crate) fn due_so_far(&self) -> u64 {
        self.due.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_return_consolidates_once() {
        let r = Recurrences::default();
        assert!(r.returned(["a", "b"]).is_empty());
        assert_eq!(r.returned(["a"]), vec!["a".to_string()]);
        assert!(r.returned(["a"]).is_empty());
        assert_eq!(r.returned(["b", "c"]), vec!["b".to_string()]);
        assert_eq!(r.due_so_far(), 2);
    }
}
