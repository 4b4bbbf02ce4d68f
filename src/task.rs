//! A background task slot: start at most one task, stop it (joining) or kill it (as a crash
//! would). Shared by the feedback worker and the backfill.

use std::future::Future;
use std::sync::Mutex;

use tokio::task::JoinHandle;

#[derive(Default)]
pub struct TaskSlot(Mutex<Option<JoinHandle<()>>>);

impl TaskSlot {
    /// Spawn `fut` unless a task is already running; returns whether it spawned.
    pub(crate) fn spawn_if_idle<F>(&self, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(mut slot) = self.0.lock() else {
            return false;
        };
        if slot.as_ref().is_some_and(|t| !t.is_finished()) {
            return false;
        }
        *slot = Some(tokio::spawn(fut));
        true
    }

    /// Wait for the task to end (callers signal it to stop first).
    pub(crate) async fn join(&self) {
        let task = self.0.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
            let _ = t.await;
        }
    }

    /// Kill the task at once, as a crash would (tests).
    pub(crate) fn abort(&self) {
        if let Some(t) = self.0.lock().ok().and_then(|mut t| t.take()) {
            t.abort();
        }
    }

    /// Kill the task as a crash would, and wait until it is gone (its resources dropped):
    /// `abort` alone only requests cancellation.
    pub(crate) async fn kill(&self) {
        let task = self.0.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = task {
            t.abort();
            let _ = t.await;
        }
    }

    /// Whether a task was ever started and has not been joined or aborted.
    pub(crate) fn is_set(&self) -> bool {
        self.0.lock().map(|t| t.is_some()).unwrap_or(false)
    }
}
