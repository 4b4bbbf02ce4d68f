//! The memory Lance's caches may take, for the whole process.
//!
//! Lance keeps an index cache (6 GiB by default) and a metadata cache (1 GiB: manifests,
//! fragment and deletion metadata, index metadata) per session, and lancedb makes a new
//! session for every connection. A burst of writes commits thousands of versions, each with
//! its own manifest and index metadata, so the metadata cache alone grew `serve` by hundreds of
//! megabytes (issue 24). Connections share one session, with budgets from
//! `storage.index_cache_mb` and `storage.metadata_cache_mb`, which the service sets with
//! [`configure`] before it opens its table (a connection made earlier, such as a start-up
//! look at the table's dimension, keeps the default budgets below); what Lance evicts it
//! reads again from disk.
//!
//! The defaults are small because recall runs from the resident copy: Lance's indexes serve
//! the writer and the fallback searches, and each index refresh during a burst leaves entries
//! for index files no search reads again. Measured with `make bench-burst` (100,000 remembers,
//! release): budgets of 256 + 64 MB let `serve` peak at 1,801 MB (1,551 MB at 90k rows);
//! 32 + 16 MB peaked at 1,061 MB (886 MB at 90k), with recall right after the burst at p50 /
//! p99 7.0 / 12.5 ms (8.6 / 18.6 before) and ingest within run-to-run noise (124 vs 136/s).

use std::sync::{Arc, RwLock};

use lance::io::ObjectStoreRegistry;
use lance::session::Session;

/// Cache budgets in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    pub index_bytes: usize,
    pub metadata_bytes: usize,
}

impl Default for CacheLimits {
    /// The schema's defaults (`storage.index_cache_mb` 32, `storage.metadata_cache_mb` 16).
    fn default() -> Self {
        CacheLimits {
            index_bytes: 32 << 20,
            metadata_bytes: 16 << 20,
        }
    }
}

static SESSION: RwLock<Option<Arc<Session>>> = RwLock::new(None);

/// Use these budgets for the connections made from now on (one session for all of them).
pub(crate) fn configure(limits: CacheLimits) {
    *SESSION.write().unwrap_or_else(|e| e.into_inner()) = Some(session(limits));
}

/// The session new connections use.
pub(crate) fn shared() -> Arc<Session> {
    let mut slot = SESSION.write().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(|| session(CacheLimits::default()))
        .clone()
}

fn session(limits: CacheLimits) -> Arc<Session> {
    Arc::new(Session::new(
        limits.index_bytes,
        limits.metadata_bytes,
        Arc::new(ObjectStoreRegistry::default()),
    ))
}
