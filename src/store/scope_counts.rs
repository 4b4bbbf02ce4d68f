//! Rows per scope for `/v1/status` and `/metrics` without scanning the `memory_scope` column on
//! every call.
//!
//! Counts belong to a table version. The writer reports what each of its appends added, at the
//! version that append committed. A reader whose table moved on only through such commits
//! applies them: O(scopes). Any other commit (a delete, a backfill patch, a compaction, another
//! process's write) breaks that chain, and the next read reconciles with one scan of the
//! column at the latest version. [`ScopeCounts::reconcile_every`] does that read in the
//! background, so requests usually find counts that are already current.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::TryStreamExt;
use lancedb::arrow::arrow_array::{Array, StringArray};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::Table;

use super::schema::COL_MEMORY_SCOPE;
use super::StoreError;

/// Row counts at one table version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub version: u64,
    pub rows: usize,
    pub rows_by_scope: BTreeMap<String, usize>,
    pub null_scope_rows: usize,
}

impl Counts {
    fn add(&mut self, added: &BTreeMap<Option<String>, usize>) {
        for (scope, n) in added {
            self.rows += n;
            match scope {
                Some(s) => *self.rows_by_scope.entry(s.clone()).or_default() += n,
                None => self.null_scope_rows += n,
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    counts: Option<Counts>,
    /// Rows each known commit added, by the version it created (from `version - 1`).
    appends: BTreeMap<u64, BTreeMap<Option<String>, usize>>,
}

/// The counts cache shared by the writer (which reports its appends) and the readers.
#[derive(Default)]
pub struct ScopeCounts {
    inner: Mutex<Inner>,
    scans: AtomicU64,
}

/// Known appends kept for readers that are behind; older ones are dropped (a reader that far
/// behind scans instead).
const MAX_KNOWN_APPENDS: usize = 4096;

impl ScopeCounts {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the counts half-updated in a way that
        // matters: the worst case is a stale cache, which the next scan replaces.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer committed `version` by appending rows of these scopes (`None`: NULL scope).
    pub(crate) fn appended_scopes(&self, version: u64, added: BTreeMap<Option<String>, usize>) {
        let mut inner = self.lock();
        inner.appends.insert(version, added);
        while inner.appends.len() > MAX_KNOWN_APPENDS {
            inner.appends.pop_first();
        }
    }

    /// How many full scans have run (a status or metrics call that found current counts ran
    /// none).
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }

    /// Counts at the table's latest version (as this process sees it).
    pub(crate) async fn current(&self, table: &Table) -> Result<Counts, StoreError> {
        let latest = table.version().await?;
        if let Some(counts) = self.advance(latest) {
            return Ok(counts);
        }
        let counts = scan(table).await?;
        self.scans.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        let newer = inner
            .counts
            .as_ref()
            .is_some_and(|c| c.version > counts.version);
        if !newer {
            let version = counts.version;
            inner.appends.retain(|v, _| *v > version);
            inner.counts = Some(counts.clone());
        }
        Ok(counts)
    }

    /// The cached counts moved forward to `latest` through known appends, if they can be.
    fn advance(&self, latest: u64) -> Option<Counts> {
        let mut inner = self.lock();
        let mut counts = inner.counts.clone()?;
        if counts.version > latest {
            return None;
        }
        while counts.version < latest {
            let added = inner.appends.get(&(counts.version + 1))?;
            counts.add(added);
            counts.version += 1;
        }
        let version = counts.version;
        inner.appends.retain(|v, _| *v > version);
        inner.counts = Some(counts.clone());
        Some(counts)
    }

    /// Keep the counts current in the background, every `interval`, until `stop` is notified.
    pub(crate) fn reconcile_every(
        self: Arc<Self>,
        table: Table,
        interval: Duration,
        stop: Arc<tokio::sync::Notify>,
    ) {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.notified() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                if let Err(e) = self.current(&table).await {
                    tracing::debug!(error = %e, "scope counts not reconciled; retrying");
                }
            }
        });
    }
}

/// One scan of the `memory_scope` column, at a single version: a commit during the scan makes
/// it start again (up to three times, then the counts are labelled with the older version, so
/// the next read scans again).
async fn scan(table: &Table) -> Result<Counts, StoreError> {
    let mut attempt = 0;
    loop {
        let before = table.version().await?;
        let mut counts = Counts {
            version: before,
            ..Counts::default()
        };
        let mut stream = table
            .query()
            .select(Select::columns(&[COL_MEMORY_SCOPE]))
            .execute()
            .await?;
        while let Some(batch) = stream.try_next().await? {
            counts.rows += batch.num_rows();
            let Some(col) = batch
                .column_by_name(COL_MEMORY_SCOPE)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            else {
                counts.null_scope_rows += batch.num_rows();
                continue;
            };
            for i in 0..col.len() {
                if col.is_valid(i) {
                    *counts
                        .rows_by_scope
                        .entry(col.value(i).to_string())
                        .or_default() += 1;
                } else {
                    counts.null_scope_rows += 1;
                }
            }
        }
        let after = table.version().await?;
        if after == before || attempt >= 2 {
            return Ok(counts);
        }
        attempt += 1;
    }
}

impl super::writer::CommitObserver for ScopeCounts {
    fn appended(&self, version: u64, rows: &[(super::record::MemoryRecord, Vec<f32>)]) {
        let mut added: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for (record, _) in rows {
            *added.entry(record.memory_scope.clone()).or_default() += 1;
        }
        self.appended_scopes(version, added);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(pairs: &[(Option<&str>, usize)]) -> BTreeMap<Option<String>, usize> {
        pairs
            .iter()
            .map(|(s, n)| (s.map(String::from), *n))
            .collect()
    }

    fn seeded(version: u64) -> ScopeCounts {
        let c = ScopeCounts::default();
        c.lock().counts = Some(Counts {
            version,
            rows: 3,
            rows_by_scope: [("public".to_string(), 3)].into(),
            null_scope_rows: 0,
        });
        c
    }

    #[test]
    fn known_appends_advance_the_counts_without_a_scan() {
        let c = seeded(5);
        c.appended_scopes(6, added(&[(Some("家人"), 2)]));
        c.appended_scopes(7, added(&[(Some("public"), 1), (None, 4)]));
        let now = c.advance(7).expect("advanced");
        assert_eq!(now.version, 7);
        assert_eq!(now.rows, 10);
        assert_eq!(now.rows_by_scope["家人"], 2);
        assert_eq!(now.rows_by_scope["public"], 4);
        assert_eq!(now.null_scope_rows, 4);
        assert!(c.lock().appends.is_empty(), "applied appends are dropped");
        assert_eq!(c.advance(7), Some(now), "nothing new: same counts");
    }

    #[test]
    fn an_unknown_commit_breaks_the_chain() {
        let c = seeded(5);
        // Version 6 was someone else's (a delete, a compaction, another process).
        c.appended_scopes(7, added(&[(Some("家人"), 2)]));
        assert_eq!(c.advance(7), None);
        assert_eq!(
            c.advance(4),
            None,
            "a table behind the cache is not served from it"
        );
        assert!(ScopeCounts::default().advance(1).is_none(), "no counts yet");
    }
}
