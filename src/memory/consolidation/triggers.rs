//! Which conversations are due for a consolidation pass: `every_messages` messages since their
//! last pass, or new messages and `quiet` without another. Kept in the process that accepts the
//! messages; a restart starts the counts over (the next quiet spell runs the pass).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

#[derive(Debug, Clone)]
struct Conversation {
    new_messages: usize,
    last_message: Instant,
    /// Messages sent after this are the next pass's (the newest a pass read).
    read_until: Option<DateTime<Utc>>,
    running: bool,
}

#[derive(Debug, Default)]
pub struct Triggers {
    conversations: Mutex<HashMap<String, Conversation>>,
}

impl Triggers {
    /// A message of `conversation` was accepted.
    pub fn message(&self, conversation: &str) {
        if let Ok(mut c) = self.conversations.lock() {
            let entry = c
                .entry(conversation.to_string())
                .or_insert_with(|| Conversation {
                    new_messages: 0,
                    last_message: Instant::now(),
                    read_until: None,
                    running: false,
                });
            entry.new_messages += 1;
            entry.last_message = Instant::now();
        }
    }

    /// Conversations due now (at most `limit`), each marked running, with the time its
    /// messages are read from.
    pub fn due(
        &self,
        every: usize,
        quiet: Duration,
        limit: usize,
    ) -> Vec<(String, Option<DateTime<Utc>>)> {
        let Ok(mut c) = self.conversations.lock() else {
            return Vec::new();
        };
        c.iter_mut()
            .filter(|(_, s)| {
                !s.running
                    && s.new_messages > 0
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
    /// applied its answer (a failed pass reads the same messages again next time).
    pub fn finished(&self, conversation: &str, read: usize, read_until: Option<DateTime<Utc>>) {
        if let Ok(mut c) = self.conversations.lock() {
            if let Some(s) = c.get_mut(conversation) {
                s.running = false;
                if read_until.is_some() {
                    s.new_messages = s.new_messages.saturating_sub(read.max(1));
                    s.read_until = read_until.max(s.read_until);
                } else {
                    // Failed: wait for the next quiet spell rather than retrying at once.
                    s.last_message = Instant::now();
                }
            }
        }
    }

    /// The pass over `conversation` did not run yet (its messages are still being written):
    /// due again at the next look.
    pub fn later(&self, conversation: &str) {
        if let Ok(mut c) = self.conversations.lock() {
            if let Some(s) = c.get_mut(conversation) {
                s.running = false;
            }
        }
    }

    /// A pass found no message of `conversation` to read (its messages expired or were
    /// erased): nothing is due until the next message.
    pub fn nothing_to_read(&self, conversation: &str) {
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
        let t = Triggers::default();
        t.message("a");
        t.message("a");
        t.message("b");
        let long = Duration::from_secs(3600);
        let due = t.due(2, long, usize::MAX);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "a");
        assert!(t.due(2, long, usize::MAX).is_empty(), "a pass is running");
        let until = Utc::now();
        t.finished("a", 2, Some(until));
        assert!(t.due(2, long, usize::MAX).is_empty());
        let quiet = t.due(2, Duration::ZERO, 1);
        assert_eq!(quiet.len(), 1, "b after quiet");
        assert_eq!(quiet[0].0, "b");
    }
}
