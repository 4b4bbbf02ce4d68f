//! The messages the feedback worker has just stored, with their vectors, handed to the
//! service's restatement check (`working::restatement`). The worker writes and goes on: the
//! check runs on its own task, behind a bounded channel, so a burst never slows the ingest.
//! What does not fit is not checked, and counted (`skipped`): agreement is a hint, and the
//! recall threshold rule and the LLM pass still see those messages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::mpsc;

use crate::store::MemoryRecord;

/// Messages waiting for the restatement check at most.
pub const CAPACITY: usize = 4096;

/// A message as stored, with its vector (unit length).
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub record: MemoryRecord,
    pub vector: Vec<f32>,
}

/// The channel between the worker (which offers) and the check (which takes the receiver once).
pub struct StoredMessages {
    tx: mpsc::Sender<StoredMessage>,
    rx: Mutex<Option<mpsc::Receiver<StoredMessage>>>,
    skipped: AtomicU64,
}

impl Default for StoredMessages {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(CAPACITY);
        StoredMessages {
            tx,
            rx: Mutex::new(Some(rx)),
            skipped: AtomicU64::new(0),
        }
    }
}

impl StoredMessages {
    /// Hand a stored message to the check, or count it skipped when the check is behind (or
    /// nobody checks: a host without background tasks).
    pub fn offer(&self, record: MemoryRecord, vector: Vec<f32>) {
        if self.tx.try_send(StoredMessage { record, vector }).is_err() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The receiving end, once (the check's task takes it when the service starts).
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<StoredMessage>> {
        self.rx.lock().ok()?.take()
    }

    /// Messages not checked because the check was behind.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_does_not_fit_is_counted_and_the_receiver_is_handed_out_once() {
        let stored = StoredMessages::default();
        let record = MemoryRecord {
            id: "msg-1".into(),
            memory_type: super::super::MESSAGE_TYPE.into(),
            ..MemoryRecord::with_text("x", &[])
        };
        for _ in 0..CAPACITY + 3 {
            stored.offer(record.clone(), vec![1.0]);
        }
        assert_eq!(stored.skipped(), 3);
        let mut rx = stored.take_receiver().unwrap();
        assert!(stored.take_receiver().is_none());
        assert_eq!(rx.recv().await.unwrap().record.id, "msg-1");
    }
}
