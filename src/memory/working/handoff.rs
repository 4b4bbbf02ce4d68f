//! A bounded hand-off from a path that must never wait to the background task that does the
//! work: the feedback worker hands each stored message to the restatement check
//! ([`super::stored`]), a recall hands each message it returned a second time to the
//! consolidation of the threshold rule ([`super::recurrence`]). The producer offers and goes
//! on; what does not fit is not handed over, and counted (`skipped`): both rules are hints, and
//! the LLM pass still reads those messages.
//!
//! Why not inline: a recall that wrote the memory itself waited for a passage embedding behind
//! the worker's batches and for a table write. Under a 200 messages/s burst that made recalls
//! take 1 to 3 s (427 consolidations in 240 recalls, `make bench-working-memory`), and a
//! message accepted just before was then keyword-searchable only that late.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::mpsc;

/// The channel between the producers (which offer) and one task (which takes the receiver
/// once, when the service starts its background work).
pub struct Handoff<T> {
    tx: mpsc::Sender<T>,
    rx: Mutex<Option<mpsc::Receiver<T>>>,
    skipped: AtomicU64,
}

impl<T> Handoff<T> {
    /// Room for `capacity` items waiting for the task.
    pub(crate) fn with_capacity(capacity: usize) -> Handoff<T> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Handoff {
            tx,
            rx: Mutex::new(Some(rx)),
            skipped: AtomicU64::new(0),
        }
    }

    /// Hand `item` over, or count it skipped when the task is behind (or nobody takes them: a
    /// host without background tasks).
    pub(crate) fn offer(&self, item: T) {
        if self.tx.try_send(item).is_err() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The receiving end, once.
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<T>> {
        self.rx.lock().ok()?.take()
    }

    /// Items not handed over because the task was behind.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_does_not_fit_is_counted_and_the_receiver_is_handed_out_once() {
        let handoff = Handoff::with_capacity(4);
        for i in 0..7 {
            handoff.offer(i);
        }
        assert_eq!(handoff.skipped(), 3);
        let mut rx = handoff.take_receiver().unwrap();
        assert!(handoff.take_receiver().is_none());
        assert_eq!(rx.recv().await, Some(0));
        assert_eq!(rx.recv().await, Some(1));
    }
}
