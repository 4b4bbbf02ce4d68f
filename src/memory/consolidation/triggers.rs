//! Which conversations are due for a consolidation pass: `every_messages` messages since their
//! last pass, or new messages and `quiet` without another. Kept in the process that accepts the
//! messages; a restart starts the counts over (the next quiet spell runs the pass).
//!
//! A failed or malformed pass backs off: the conversation is not due again for
//! `consolidation.retry_secs`, doubled for each failure in a row up to [`MAX_RETRY`]. Without
//! it a busy chat past `every_messages` was handed out again at once, so a model that answers
//! prose, errors or is missing meant an LLM call (and a warning) every few seconds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// The longest wait after failed passes.
pub const MAX_RETRY: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
struct Conversation {
    new_messages: usize,
    last_message: Instant,
    /// Messages sent after this are the next pass's (the newest a pass read).
    read_until: Option<DateTime<Utc>>,
    running: bool,
    /// Passes failed in a row, and when the next may run.
    failures: u32,
    retry_at: Option<Instant>,
}

#[derive(Debug)]
pub struct Triggers {
    conversations: Mutex<HashMap<String, Conversation>>,
    /// The first wait after a failed pass.
    retry: Duration,
}

/// Conversations waiting out a failed pass, for `/v1/status`.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq, Eq)]
pub struct BackingOff {
    pub conversations: usize,
    /// The longest of their waits still to run (seconds).
    pub longest_wait_secs: u64,
}

impl Triggers {
    /// Counts for no conversation yet; a failed pass waits `retry` first.
    pub(crate) fn new(retry: Duration) -> Triggers {
        Triggers {
            conversations: Mutex::new(HashMap::new()),
            retry,
        }
    }

    /// A message of `conversation` was accepted.
    pub(crate) fn message(&self, conversation: &str) {
        if let Ok(mut c) = self.conversations.lock() {
            let entry = c
                .entry(conversation.to_string())
                .or_insert_with(|| Conversation {
                    new_messages: 0,
                    last_message: Instant::now(),
                    read_until: None,
                    running: false,
                    failures: 0,
                    retry_at: None,
                });
            entry.new_messages += 1;
            entry.last_message = Instant::now();
        }
    }

    /// Conversations due now (at most `limit`) among those `admitted` (`budget::Active`),
    /// each marked running, with the time its messages are read from.
    pub(crate) fn due(
        &self,
        every: usize,
        quiet: Duration,
        limit: usize,
        admitted: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, Option<DateTime<Utc>>)> {
        let Ok(mut c) = self.conversations.lock() else {
            return Vec::new();
        };
        let now = Instant::now();
        c.iter_mut()
            .filter(|(id, s)| {
                admitted(id)
                    && !s.running
                    && s.new_messages > 0
                    && s.retry_at.is_none_or(|at| at <= now)
                    && (s.new_messages >= every || s.last_message.elapsed() >= quiet)
            })
            .take(limit)
            .map(|(id, s)| {
                s.running = true;
                (id.clone(), s.read_until)
            })
            .collect()
    }

    /// The pass over `conversation` ended. `read_until`: the newest message it read, when it
    /// applied its answer; `None`: it failed, and the same messages are read again once its
    /// wait ([`Self::retry_after`]) is over.
    pub(crate) fn finished(
        &self,
        conversation: &str,
        read: usize,
        read_until: Option<DateTime<Utc>>,
    ) {
        if let Ok(mut c) = self.conversations.lock() {
            if let Some(s) = c.get_mut(conversation) {
                s.running = false;
                if read_until.is_some() {
                    s.new_messages = s.new_messages.saturating_sub(read.max(1));
                    s.read_until = read_until.max(s.read_until);
                    s.failures = 0;
                    s.retry_at = None;
                } else {
                    s.failures = s.failures.saturating_add(1);
                    s.retry_at = Some(Instant::now() + self.retry_after(s.failures));
                }
            }
        }
    }

    /// The wait after `failures` failed passes in a row: `retry`, doubled for each one after
    /// the first, at most [`MAX_RETRY`].
    pub(crate) fn retry_after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.retry.saturating_mul(1u32 << doublings).min(MAX_RETRY)
    }

    /// The conversations waiting out a failed pass now.
    pub(crate) fn backing_off(&self) -> BackingOff {
        let Ok(c) = self.conversations.lock() else {
            return BackingOff::default();
        };
        let now = Instant::now();
        let waits: Vec<Duration> = c
            .values()
            .filter_map(|s| s.retry_at.filter(|at| *at > now).map(|at| at - now))
            .collect();
        BackingOff {
            conversations: waits.len(),
            longest_wait_secs: waits.iter().max().map_or(0, |w| w.as_secs()),
        }
    }

    /// The pass over `conversation` did not run yet (its messages are still being written):
    /// due again at the next look.
    pub(crate) fn later(&self, conversation: &str) {
        if let Ok(mut c) = self.conversations.lock() {
            if let Some(s) = c.get_mut(conversation) {
                s.running = false;
            }
        }
    }

    /// A pass found no message of `conversation` to read (its messages expired or were
    /// erased): nothing is due until the next message.
    pub(crate) fn nothing_to_read(&self, conversation: &str) {
        if let Ok(mut c) = self.conversations.lock() {
            if let Some(s) = c.get_mut(conversation) {
                s.running = false;
                s.new_messages = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_is_due_after_enough_messages_or_quiet_and_once_at_a_time() {
        let t = Triggers::new(Duration::from_secs(60));
        t.message("a");
        t.message("a");
        t.message("b");
        let long = Duration::from_secs(3600);
        let due = t.due(2, long, usize::MAX, &|_| true);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "a");
        assert!(
            t.due(2, long, usize::MAX, &|_| true).is_empty(),
            "a pass is running"
        );
        let until = Utc::now();
        t.finished("a", 2, Some(until));
        assert!(t.due(2, long, usize::MAX, &|_| true).is_empty());
        let quiet = t.due(2, Duration::ZERO, 1, &|_| true);
        assert_eq!(quiet.len(), 1, "b after quiet");
        assert_eq!(quiet[0].0, "b");
    }

    #[test]
    fn a_failed_pass_waits_doubling_up_to_the_cap_and_a_success_starts_over() {
        let t = Triggers::new(Duration::from_secs(60));
        assert_eq!(t.retry_after(1), Duration::from_secs(60));
        assert_eq!(t.retry_after(2), Duration::from_secs(120));
        assert_eq!(t.retry_after(4), Duration::from_secs(480));
        assert_eq!(t.retry_after(30), MAX_RETRY);
        let long = Duration::from_secs(3600);
        for _ in 0..5 {
            t.message("a");
        }
        assert_eq!(t.due(2, long, usize::MAX, &|_| true).len(), 1);
        t.finished("a", 0, None);
        // Still five new messages past `every`: not handed out again during the wait.
        assert!(t.due(2, long, usize::MAX, &|_| true).is_empty());
        t.message("a");
        assert!(t.due(2, Duration::ZERO, usize::MAX, &|_| true).is_empty());
        let waiting = t.backing_off();
        assert_eq!(waiting.conversations, 1);
        assert!(waiting.longest_wait_secs > 50, "{waiting:?}");

        // A wait of zero (what `retry_secs` tests use) is over at once; a success clears it.
        let quick = Triggers::new(Duration::ZERO);
        quick.message("b");
        assert_eq!(quick.due(1, long, 1, &|_| true).len(), 1);
        quick.finished("b", 0, None);
        assert_eq!(
            quick.due(1, long, 1, &|_| true).len(),
            1,
            "due again after a zero wait"
        );
        quick.finished("b", 1, Some(Utc::now()));
        assert_eq!(quick.backing_off(), BackingOff::default());
    }
}
