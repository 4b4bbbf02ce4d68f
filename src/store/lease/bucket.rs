//! The lease in a bucket: `<table>.maintenance.json`, holding who has it and until when.
//!
//! - Taking a free lease creates the record with `If-None-Match: *`; taking over an expired
//!   one replaces it with `If-Match` on the ETag read, so of two instances racing for it
//!   exactly one wins.
//! - The holder renews every third of the TTL with `If-Match` on its own last write; a renewal
//!   that loses means another instance took over, and the holder stops at once.
//! - A holder that cannot reach the bucket stops maintaining when the TTL since its last
//!   successful renewal (on its own monotonic clock) runs out, before anyone may take over.
//! - Expiry is compared with the reader's wall clock: instances need clocks within a few
//!   seconds of each other (NTP), well under the TTL.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::LeaseHolder;
use crate::store::beside::{Beside, BesideError, Version, Written};

/// This instance's side of a bucket lease.
pub struct BucketLease {
    beside: Beside,
    name: String,
    instance: String,
    held: Arc<AtomicBool>,
    ttl: Duration,
    /// While held: the record's version after our last write, when we took it, and the
    /// monotonic deadline past which we no longer count on it.
    state: Mutex<Option<Held>>,
}

#[derive(Clone)]
struct Held {
    version: Version,
    since: DateTime<Utc>,
    deadline: Instant,
}

fn record_name(table: &str) -> String {
    format!("{table}.maintenance.json")
}

fn parse(bytes: &[u8]) -> Option<LeaseHolder> {
    serde_json::from_slice(bytes).ok()
}

fn lapsed(holder: &LeaseHolder, now: DateTime<Utc>) -> bool {
    holder.expires_at.is_none_or(|e| e <= now)
}

impl BucketLease {
    pub(crate) fn new(
        beside: Beside,
        table: &str,
        instance: &str,
        held: Arc<AtomicBool>,
        ttl: Duration,
    ) -> BucketLease {
        held.store(false, Ordering::Release);
        BucketLease {
            beside,
            name: record_name(table),
            instance: instance.to_owned(),
            held,
            ttl: ttl.max(Duration::from_secs(1)),
            state: Mutex::new(None),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    pub(crate) fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    fn record(&self, since: DateTime<Utc>, expires_at: DateTime<Utc>) -> Vec<u8> {
        let holder = LeaseHolder::me(&self.instance, since, Some(expires_at));
        serde_json::to_vec(&holder).unwrap_or_default()
    }

    fn expiry(&self, from: DateTime<Utc>) -> DateTime<Utc> {
        from + chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::seconds(30))
    }

    fn set(&self, held: Option<Held>) {
        let is_held = held.is_some();
        if let Ok(mut s) = self.state.lock() {
            *s = held;
        }
        self.held.store(is_held, Ordering::Release);
    }

    fn current(&self) -> Option<Held> {
        self.state.lock().ok().and_then(|s| s.clone())
    }

    /// Take the lease if it is free or has lapsed.
    pub(crate) async fn try_acquire(&self) -> Result<bool, BesideError> {
        if self.is_held() {
            return self.renew().await;
        }
        let now = Utc::now();
        let started = Instant::now();
        let found = self.beside.read(&self.name).await?;
        let (previous, version) = match &found {
            None => (None, None),
            Some((bytes, version)) => {
                let holder = parse(bytes);
                if let Some(h) = holder.as_ref().filter(|h| !lapsed(h, now)) {
                    if h.instance != self.instance {
                        return Ok(false);
                    }
                }
                (holder, Some(version))
            }
        };
        let body = self.record(now, self.expiry(now));
        match self.beside.write_if(&self.name, &body, version).await? {
            Written::Done(version) => {
                self.set(Some(Held {
                    version,
                    since: now,
                    deadline: started + self.ttl,
                }));
                tracing::info!(
                    instance = %self.instance,
                    previous = previous.as_ref().map(|p| p.instance.as_str()).unwrap_or("none"),
                    ttl_ms = self.ttl.as_millis() as u64,
                    "took the maintenance lease in the bucket"
                );
                Ok(true)
            }
            Written::Lost => Ok(false),
        }
    }

    /// Extend the lease by its TTL. `false`: it is gone (taken over, or not renewed in time).
    pub(crate) async fn renew(&self) -> Result<bool, BesideError> {
        let Some(held) = self.current() else {
            return Ok(false);
        };
        if Instant::now() >= held.deadline {
            self.lose("not renewed within its TTL");
            return Ok(false);
        }
        let now = Utc::now();
        let started = Instant::now();
        let body = self.record(held.since, self.expiry(now));
        match self
            .beside
            .write_if(&self.name, &body, Some(&held.version))
            .await
        {
            Ok(Written::Done(version)) => {
                self.set(Some(Held {
                    version,
                    since: held.since,
                    deadline: started + self.ttl,
                }));
                Ok(true)
            }
            Ok(Written::Lost) => {
                self.lose("another instance took it over");
                Ok(false)
            }
            Err(e) => {
                if Instant::now() >= held.deadline {
                    self.lose("the bucket could not be reached within its TTL");
                    return Ok(false);
                }
                Err(e)
            }
        }
    }

    fn lose(&self, why: &str) {
        self.set(None);
        tracing::warn!(instance = %self.instance, why, "lost the maintenance lease; maintenance stops here");
    }

    /// Mark the record lapsed (only if it is still ours), so the next instance need not wait.
    pub(crate) async fn release(&self) {
        let Some(held) = self.current() else { return };
        self.set(None);
        let now = Utc::now();
        let body = self.record(held.since, now);
        if let Err(e) = self
            .beside
            .write_if(&self.name, &body, Some(&held.version))
            .await
        {
            tracing::warn!(error = %e, "could not release the maintenance lease; it lapses by itself");
        }
    }
}

/// The holder of the lease in the bucket, unless its record has lapsed.
pub(crate) async fn current_holder(beside: &Beside, table: &str) -> Option<LeaseHolder> {
    let (bytes, _) = beside.read(&record_name(table)).await.ok()??;
    parse(&bytes).filter(|h| !lapsed(h, Utc::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(expires_at: Option<DateTime<Utc>>) -> LeaseHolder {
        LeaseHolder {
            instance: "a".into(),
            pid: 1,
            since: Utc::now(),
            host: None,
            expires_at,
        }
    }

    #[test]
    fn a_record_without_a_future_expiry_has_lapsed() {
        let now = Utc::now();
        assert!(lapsed(&holder(None), now));
        assert!(lapsed(&holder(Some(now)), now));
        assert!(!lapsed(
            &holder(Some(now + chrono::Duration::seconds(1))),
            now
        ));
    }
}
