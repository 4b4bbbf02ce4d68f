//! The maintenance lease: which of the instances sharing a table does its background work
//! (backfill, compaction, version pruning, index builds), so two never rewrite the same
//! fragments at once. Every instance serves reads and writes either way.
//!
//! On a local directory it is an OS lock ([`local`]), released by the kernel the moment its
//! holder dies. In a bucket there is no such lock: the lease is a record with an expiry that its
//! holder renews with a conditional PUT ([`bucket`]); another instance takes it over once it
//! expires. Holding the lease is about efficiency, not safety: Lance's optimistic commits keep
//! two maintainers from corrupting the table, they would only redo each other's work.

pub(crate) mod bucket;
pub(crate) mod local;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::beside::{Beside, BesideError};

/// Who holds (or last held) the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseHolder {
    pub instance: String,
    pub pid: u32,
    pub since: DateTime<Utc>,
    /// The machine (instances on several machines may share a bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// When a bucket lease lapses unless renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

impl LeaseHolder {
    fn me(instance: &str, since: DateTime<Utc>, expires_at: Option<DateTime<Utc>>) -> LeaseHolder {
        LeaseHolder {
            instance: instance.to_owned(),
            pid: std::process::id(),
            since,
            host: host_name(),
            expires_at,
        }
    }
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("maintenance lease: {0}")]
    Io(#[from] std::io::Error),
    #[error("maintenance lease: {0}")]
    Beside(#[from] BesideError),
}

enum Kind {
    Local(local::LocalLease),
    Bucket(bucket::BucketLease),
}

/// This instance's side of the lease.
#[derive(Clone)]
pub struct Lease(Arc<Kind>);

/// A lease that does not keep its instance's lease alive: background loops hold this, so the
/// lease goes when the service that owns it does.
#[derive(Clone)]
pub struct WeakLease(Weak<Kind>);

impl WeakLease {
    pub(crate) fn upgrade(&self) -> Option<Lease> {
        self.0.upgrade().map(Lease)
    }
}

impl Lease {
    /// The lease of `table` beside it, for this instance; `held` is set while it is held (pass
    /// [`super::Store::maintainer`] so the store's maintenance follows the lease). `ttl` is how
    /// long a bucket lease outlives its holder's last renewal.
    pub fn new(
        beside: &Beside,
        table: &str,
        instance: &str,
        held: Arc<AtomicBool>,
        ttl: Duration,
    ) -> Lease {
        Lease(Arc::new(match beside {
            Beside::Dir(dir) => Kind::Local(local::LocalLease::new(dir, table, instance, held)),
            Beside::Bucket { .. } => Kind::Bucket(bucket::BucketLease::new(
                beside.clone(),
                table,
                instance,
                held,
                ttl,
            )),
        }))
    }

    pub(crate) fn downgrade(&self) -> WeakLease {
        WeakLease(Arc::downgrade(&self.0))
    }

    /// Whether this instance holds the lease (and so does the maintenance).
    pub fn is_held(&self) -> bool {
        match &*self.0 {
            Kind::Local(l) => l.is_held(),
            Kind::Bucket(b) => b.is_held(),
        }
    }

    /// Take the lease if nobody holds it. Returns whether this instance holds it now.
    pub async fn try_acquire(&self) -> Result<bool, LeaseError> {
        match &*self.0 {
            Kind::Local(l) => Ok(l.try_acquire()?),
            Kind::Bucket(b) => Ok(b.try_acquire().await?),
        }
    }

    /// Keep the lease: a bucket lease is extended by its TTL. Returns whether it is still held;
    /// `false` means another instance has it now and this one must stop maintaining.
    pub async fn renew(&self) -> Result<bool, LeaseError> {
        match &*self.0 {
            Kind::Local(l) => Ok(l.is_held()),
            Kind::Bucket(b) => Ok(b.renew().await?),
        }
    }

    /// How often [`Lease::renew`] must run while the lease is held.
    pub(crate) fn renew_every(&self) -> Duration {
        match &*self.0 {
            Kind::Local(_) => Duration::from_secs(3600),
            Kind::Bucket(b) => b.renew_every(),
        }
    }

    /// Give the lease up on a clean shutdown, so the next instance takes it at once.
    pub async fn release(&self) {
        match &*self.0 {
            Kind::Local(l) => l.release(),
            Kind::Bucket(b) => b.release().await,
        }
    }
}

/// Who holds the lease of `table` beside it now, if anyone (for `/v1/status` and `migrate
/// status`). A record whose lock is free, or whose expiry has passed, is stale: no holder.
pub async fn current_holder(beside: &Beside, table: &str) -> Option<LeaseHolder> {
    match beside {
        Beside::Dir(dir) => local::current_holder(dir, table),
        Beside::Bucket { .. } => bucket::current_holder(beside, table).await,
    }
}
