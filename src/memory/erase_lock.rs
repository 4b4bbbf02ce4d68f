//! The one lock between an erase and every writer that could race it. The intake's worker
//! holds it while it applies a job; an erase holds it while it reads what to delete, deletes it
//! and drops the pending jobs that would write it back; the working memory's rules hold it
//! while they write a fact made of messages. So an erase either waits for a write in flight
//! (and erases what it wrote) or runs first (and the writer finds its sources gone).
//!
//! Its own module, below both the intake (which owns the lock) and the working memory (whose
//! rules take it), so neither imports the other for it.

/// The lock (see the module header).
#[derive(Default)]
pub(crate) struct EraseLock(tokio::sync::Mutex<()>);

/// Proof that the lock is held: no other holder runs until it is dropped.
pub(crate) struct EraseHeld<'a>(#[allow(dead_code)] tokio::sync::MutexGuard<'a, ()>);

impl EraseLock {
    /// Wait for the holder in flight, then hold the lock until the guard is dropped.
    pub(crate) async fn hold(&self) -> EraseHeld<'_> {
        EraseHeld(self.0.lock().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_for_the_first_to_drop() {
        let lock = EraseLock::default();
        let first = lock.hold().await;
        let second = lock.hold();
        tokio::pin!(second);
        assert!(futures::poll!(&mut second).is_pending());
        drop(first);
        let _held = second.await;
    }
}
