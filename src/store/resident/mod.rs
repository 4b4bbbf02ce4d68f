//! The resident search: every row's vector (int8 + f16) and record held in memory per
//! `memory_scope`, searched exactly over the admitted scopes only. LanceDB stays the single
//! source of truth: a snapshot belongs to one table version and serves a search only when it
//! is at least as new as the table the search sees.
//!
//! Why: a prefiltered LanceDB query costs ~10 ms at 100k rows however small the admitted set,
//! mostly planning and I/O; scanning the admitted partitions' int8 codes costs ~1 ms and is
//! exact, so tiny scopes and uniform vectors lose no neighbours.
//!
//! Freshness follows `scope_counts`: the writer reports each append (rows and vectors) and
//! each delete (the ids it removed) at the version it committed, and a snapshot behind the
//! table applies them in place. A version nobody reported is looked up in its Lance
//! transaction ([`commit_rows`](super::commit_rows)): a compaction or an index build (by any
//! process) leaves the rows as they were and only moves the version; another process's
//! append, delete or row-moving update is read back from the fragments it names. Any other
//! commit (an overwrite, a restore, a version already pruned) breaks that chain: searches go
//! to LanceDB until a background reload catches up. Not the old snapshot meanwhile: a commit
//! it cannot explain may have erased rows it still holds.

mod keywords;
mod load;
mod partition;
mod search;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use lancedb::Table;

use super::commit_rows::RowChanges;
use super::filter::RowFilter;
use super::fulltext::KeywordHit;
use super::record::MemoryRecord;
use super::schema::{COL_MEMORY_SCOPE, COL_SCOPE_SOURCE};
use super::search::Hit;
use super::strengths::StrengthSet;
use super::writer::{CommitObserver, FilledBlanks};
use crate::embed::ScriptRescale;
use keywords::{Postings, Vocabulary};
use lance_index::scalar::inverted::tokenizer::document_tokenizer::LanceTokenizer;
use partition::{Partition, Query, Scored, TopN};
pub use search::ResidentSearch;

/// The table's rows at one version, by scope.
pub struct Snapshot {
    version: u64,
    dim: usize,
    /// Keyed by scope (`None`: the legacy NULL scope); a `Vec` index keeps scans cheap.
    partitions: Vec<Partition>,
    by_scope: HashMap<Option<String>, usize>,
    rows: usize,
    /// The keyword index: postings per partition (same order), terms shared. Without an
    /// analyzer there is none, and keyword searches stay on LanceDB.
    analyzer: Option<Box<dyn LanceTokenizer>>,
    postings: Vec<Postings>,
    vocabulary: Vocabulary,
    /// Where each row of the NULL (or blank) scope is, built at the first backfill batch.
    blank_rows: Option<HashMap<String, (usize, usize)>>,
    /// Rows removed or moved since the load: still in memory, skipped by every scan.
    gone: usize,
}

impl Snapshot {
    /// An empty snapshot at `version`, filled row by row with [`Snapshot::push`].
    fn empty(version: u64, dim: usize) -> Snapshot {
        Snapshot {
            version,
            dim,
            partitions: Vec::new(),
            by_scope: HashMap::new(),
            rows: 0,
            analyzer: keywords::analyzer(),
            postings: Vec::new(),
            vocabulary: Vocabulary::default(),
            blank_rows: None,
            gone: 0,
        }
    }

    fn push(&mut self, record: MemoryRecord, vector: &[f32]) {
        let next = self.partitions.len();
        let i = *self
            .by_scope
            .entry(record.memory_scope.clone())
            .or_insert(next);
        if i == next {
            self.partitions.push(Partition::new(self.dim));
            self.postings.push(Postings::default());
        }
        if let Some(analyzer) = self.analyzer.as_mut() {
            let terms = keywords::document_terms(analyzer.as_mut(), &record);
            self.postings[i].push(&mut self.vocabulary, &terms);
        }
        if let Some(index) = self.blank_rows.as_mut() {
            if record
                .memory_scope
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
            {
                index.insert(record.id.clone(), (i, self.partitions[i].len()));
            }
        }
        self.partitions[i].push(record, vector);
        self.rows += 1;
    }

    /// The `k` best BM25 matches among the admitted rows, best first; `None` without an
    /// analyzer.
    fn matching(&self, text: &str, rows: &RowFilter, k: usize) -> Option<Vec<KeywordHit>> {
        // Without the analyzer the rows were never indexed.
        self.analyzer.as_ref()?;
        let mut analyzer = keywords::analyzer()?;
        let terms: Vec<u32> = keywords::query_terms(analyzer.as_mut(), text)
            .iter()
            .filter_map(|t| self.vocabulary.lookup(t))
            .collect();
        let mut top = TopN::new(k);
        if terms.is_empty() {
            return Some(Vec::new());
        }
        for (scope, &i) in &self.by_scope {
            if !rows.admits_scope(scope.as_deref()) {
                continue;
            }
            let mut scores = vec![0.0f32; self.postings[i].rows()];
            self.postings[i].score(&self.vocabulary, &terms, &mut scores);
            let partition = &self.partitions[i];
            for (row, &score) in scores.iter().enumerate() {
                if score > 0.0 && partition.alive(row, rows) {
                    top.offer(Scored {
                        similarity: score,
                        partition: i,
                        row,
                    });
                }
            }
        }
        Some(
            top.into_sorted()
                .into_iter()
                .map(|s| KeywordHit {
                    record: self.partitions[s.partition].record(s.row).clone(),
                    score: s.similarity,
                })
                .collect(),
        )
    }

    /// Remove the rows a delete or an update took away (by id), whatever their scope.
    fn remove_ids(&mut self, ids: &HashSet<String>) {
        if ids.is_empty() {
            return;
        }
        let removed: usize = self.partitions.iter_mut().map(|p| p.remove(ids)).sum();
        self.rows -= removed;
        self.gone += removed;
        if let Some(index) = self.blank_rows.as_mut() {
            for id in ids {
                index.remove(id);
            }
        }
    }

    /// Patch the rows a strength set changed (one pass over the records: sets are rare next
    /// to searches, and an id index would cost ~100 bytes a row).
    fn set_strengths(&mut self, set: &StrengthSet) {
        let new: HashMap<&str, i32> = set.changes.iter().map(|c| (c.id.as_str(), c.new)).collect();
        for partition in &mut self.partitions {
            for record in &mut partition.records {
                if let Some(strength) = new.get(record.id.as_str()) {
                    record.strength = *strength;
                    record.last_recalled_at = Some(set.recalled_at);
                }
            }
        }
    }

    /// Move the rows a backfill gave a scope out of the NULL (or blank) partitions into their
    /// scope's. Only a fill of `memory_scope` (and `scope_source`) can be followed; for any
    /// other this returns false before changing anything, and the snapshot is reloaded.
    fn fill_blanks(&mut self, filled: &FilledBlanks) -> bool {
        let mut scope = None;
        let mut source = None;
        for (column, value) in &filled.values {
            match column.as_str() {
                COL_MEMORY_SCOPE => scope = Some(value.clone()),
                COL_SCOPE_SOURCE => source = Some(value.clone()),
                _ => return false,
            }
        }
        if filled.values.first().map(|(c, _)| c.as_str()) != Some(COL_MEMORY_SCOPE) {
            return false;
        }
        if self.blank_rows.is_none() {
            // Built once per snapshot: a backfill moves its rows in many small batches.
            let mut index = HashMap::new();
            for (scope, &i) in &self.by_scope {
                if scope.as_deref().is_none_or(|s| s.trim().is_empty()) {
                    for (row, r) in self.partitions[i].records.iter().enumerate() {
                        index.insert(r.id.clone(), (i, row));
                    }
                }
            }
            self.blank_rows = Some(index);
        }
        let mut moved = Vec::new();
        if let Some(index) = self.blank_rows.as_mut() {
            for id in &filled.ids {
                if let Some((i, row)) = index.remove(id) {
                    if let Some(taken) = self.partitions[i].take(row) {
                        moved.push(taken);
                    }
                }
            }
        }
        for (mut record, vector) in moved {
            record.memory_scope = scope.clone();
            if source.is_some() {
                record.scope_source = source.clone();
            }
            self.push(record, &vector);
            // `push` counted the row again; it only moved.
            self.rows -= 1;
            self.gone += 1;
        }
        true
    }

    /// The `k` nearest admitted rows. Scores every admitted row from its int8 code, then
    /// re-ranks the best `candidates` from the f16 copies.
    fn nearest(
        &self,
        vector: &[f32],
        rows: &RowFilter,
        k: usize,
        rescale: Option<ScriptRescale>,
    ) -> Vec<Hit> {
        let q = Query::new(vector, rescale);
        // Enough int8 candidates that the exact re-rank sees every true top-k row even on
        // uniform random vectors, whose similarities crowd together (measured: ×4 kept 0.999).
        let candidates = (k * 10).max(k + 32);
        let mut top = TopN::new(candidates);
        for (scope, &i) in &self.by_scope {
            if rows.admits_scope(scope.as_deref()) {
                self.partitions[i].scan(i, &q, rows, &mut top);
            }
        }
        let mut exact: Vec<(f32, usize, usize)> = top
            .into_sorted()
            .into_iter()
            .map(|s| {
                let p = &self.partitions[s.partition];
                (p.exact(&q, s.row), s.partition, s.row)
            })
            .collect();
        exact.sort_by(|a, b| b.0.total_cmp(&a.0));
        exact
            .into_iter()
            .take(k)
            .map(|(similarity, p, row)| Hit {
                record: self.partitions[p].record(row).clone(),
                distance: 1.0 - similarity,
                vector: Some(self.partitions[p].unit_vector(row)),
            })
            .collect()
    }
}

/// One append's rows and vectors.
type Appended = Arc<Vec<(MemoryRecord, Vec<f32>)>>;

/// What one table version changed, as far as the snapshot is concerned.
enum Change {
    /// The writer appended these rows.
    Rows(Appended),
    /// The rows are the same (compaction, an index build): only the version moves.
    Same,
    /// The writer set these rows' strengths and `last_recalled_at`.
    Strengths(Arc<StrengthSet>),
    /// The writer filled blank scope columns (the backfill).
    Filled(Arc<FilledBlanks>),
    /// Rows removed by id, then rows added: a delete (by any process), or another process's
    /// append or update, read back from the commit's fragments.
    Replaced(Arc<RowChanges>),
}

impl Change {
    /// Rows the change carries (what the chain's row bound counts).
    fn rows(&self) -> usize {
        match self {
            Change::Rows(rows) => rows.len(),
            Change::Replaced(changes) => changes.added.len() + changes.removed.len(),
            Change::Same | Change::Strengths(_) | Change::Filled(_) => 0,
        }
    }
}

#[derive(Default)]
struct Chain {
    /// What each version the snapshot may still have to apply changed, by version.
    changes: BTreeMap<u64, Change>,
    /// Rows held in `changes`.
    rows: usize,
}

impl Chain {
    /// Record what `version` changed (replacing a guess), dropping the oldest entries beyond
    /// the bounds: a snapshot that far behind reloads instead.
    fn insert(&mut self, version: u64, change: Change) {
        self.rows += change.rows();
        if let Some(old) = self.changes.insert(version, change) {
            self.rows -= old.rows();
        }
        while self.rows > MAX_CHAIN_ROWS || self.changes.len() > MAX_CHAIN_VERSIONS {
            let Some(first) = self.changes.keys().next().copied() else {
                break;
            };
            self.remove(first);
        }
    }

    fn remove(&mut self, version: u64) -> Option<Change> {
        let change = self.changes.remove(&version)?;
        self.rows -= change.rows();
        Some(change)
    }
}

/// Appends kept for a snapshot that is behind (or being loaded); beyond this the chain is
/// dropped and the next reload reads them from the table.
const MAX_CHAIN_ROWS: usize = 100_000;
/// Dead rows a snapshot may carry before it is read again (in the background; it serves
/// meanwhile): about 2 MB at 384 dimensions.
const RELOAD_GONE_ROWS: usize = 1000;
/// Versions kept in the chain at most.
const MAX_CHAIN_VERSIONS: usize = 10_000;

/// The resident snapshot, the writer's append chain, and counters for `/v1/status`.
pub struct ResidentVectors {
    dim: usize,
    max_rows: std::sync::atomic::AtomicUsize,
    snapshot: RwLock<Option<Snapshot>>,
    chain: Mutex<Chain>,
    /// Set once a search uses it: a table nobody searches this way costs no memory.
    pub(super) wanted: AtomicBool,
    loading: AtomicBool,
    /// When the last reload ended, and how long it took (reloads are spaced by twice that).
    last_load: Mutex<Option<(Instant, Duration)>>,
    served: AtomicU64,
    keyword_served: AtomicU64,
    deferred: AtomicU64,
    loads: AtomicU64,
    /// LanceDB searches running now, which a background load gives way to.
    pub(super) foreground: load::Foreground,
}

/// How a search went, for `/v1/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ResidentStats {
    /// Rows held in memory (0 until the first load).
    pub rows: usize,
    /// Heap bytes they take (vectors as int8 + f16, records with their text).
    pub bytes: usize,
    /// Table version the snapshot is at.
    pub version: u64,
    /// Vector searches it answered.
    pub served: u64,
    /// Keyword searches it answered.
    pub keyword_served: u64,
    /// Searches it left to LanceDB (snapshot behind, loading, or the table is too large).
    pub deferred: u64,
    /// Full reloads from the table.
    pub loads: u64,
}

impl ResidentVectors {
    pub(crate) fn new(dim: usize) -> ResidentVectors {
        ResidentVectors {
            dim,
            max_rows: std::sync::atomic::AtomicUsize::new(usize::MAX),
            snapshot: RwLock::new(None),
            chain: Mutex::new(Chain::default()),
            wanted: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            last_load: Mutex::new(None),
            served: AtomicU64::new(0),
            keyword_served: AtomicU64::new(0),
            deferred: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            foreground: load::Foreground::default(),
        }
    }

    /// Tables larger than this stay on LanceDB search (memory is ~1.5 KB a row plus the
    /// record's text); 0 turns the resident search off.
    pub(crate) fn limit_rows(&self, max_rows: usize) {
        self.max_rows.store(max_rows, Ordering::Relaxed);
    }

    fn max_rows(&self) -> usize {
        self.max_rows.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> ResidentStats {
        let (rows, bytes, version) = match &*self.read() {
            Some(s) => (
                s.rows,
                s.partitions.iter().map(Partition::bytes).sum::<usize>()
                    + s.postings.iter().map(Postings::bytes).sum::<usize>()
                    + s.vocabulary.bytes(),
                s.version,
            ),
            None => (0, 0, 0),
        };
        ResidentStats {
            rows,
            bytes,
            version,
            served: self.served.load(Ordering::Relaxed),
            keyword_served: self.keyword_served.load(Ordering::Relaxed),
            deferred: self.deferred.load(Ordering::Relaxed),
            loads: self.loads.load(Ordering::Relaxed),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Option<Snapshot>> {
        // A panic mid-update can leave a snapshot with a partition half pushed; it is still
        // only ever a subset of real rows, and the next reload replaces it.
        self.snapshot.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Option<Snapshot>> {
        self.snapshot.write().unwrap_or_else(|e| e.into_inner())
    }

    fn chain(&self) -> std::sync::MutexGuard<'_, Chain> {
        self.chain.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `k` nearest rows at table version `version` or later, or `None` when the snapshot
    /// cannot show that version (then the caller asks LanceDB, and counts it deferred).
    pub(crate) fn nearest(
        &self,
        version: u64,
        vector: &[f32],
        rows: &RowFilter,
        k: usize,
        rescale: Option<ScriptRescale>,
    ) -> Option<Vec<Hit>> {
        self.wanted.store(true, Ordering::Relaxed);
        if !self.catch_up(version) {
            return None;
        }
        let hits = self
            .read()
            .as_ref()
            .map(|s| s.nearest(vector, rows, k, rescale))?;
        self.served.fetch_add(1, Ordering::Relaxed);
        Some(hits)
    }

    /// The `k` best keyword (BM25) matches at table version `version` or later, or `None` when
    /// the snapshot cannot show that version or has no keyword index.
    pub(crate) fn matching(
        &self,
        version: u64,
        text: &str,
        rows: &RowFilter,
        k: usize,
    ) -> Option<Vec<KeywordHit>> {
        self.wanted.store(true, Ordering::Relaxed);
        if !self.catch_up(version) {
            return None;
        }
        let hits = self.read().as_ref()?.matching(text, rows, k)?;
        self.keyword_served.fetch_add(1, Ordering::Relaxed);
        Some(hits)
    }

    /// Bring the snapshot to `version` through known appends; false if it cannot.
    fn catch_up(&self, version: u64) -> bool {
        match &*self.read() {
            None => return false,
            Some(s) if s.version >= version => return true,
            Some(_) => {}
        }
        let mut guard = self.write();
        let Some(snapshot) = guard.as_mut() else {
            return false;
        };
        let mut chain = self.chain();
        while snapshot.version < version {
            match chain.remove(snapshot.version + 1) {
                None => return false,
                Some(Change::Same) => {}
                Some(Change::Rows(rows)) => {
                    for (record, vector) in rows.iter() {
                        snapshot.push(record.clone(), vector);
                    }
                }
                Some(Change::Replaced(changes)) => {
                    snapshot.remove_ids(&changes.removed);
                    for (record, vector) in changes.added.iter() {
                        snapshot.push(record.clone(), vector);
                    }
                }
                Some(Change::Strengths(set)) => snapshot.set_strengths(&set),
                Some(Change::Filled(filled)) => {
                    if !snapshot.fill_blanks(&filled) {
                        return false;
                    }
                }
            }
            snapshot.version += 1;
        }
        true
    }

    /// The versions after the snapshot, up to `version`, that nothing reported: the ones a
    /// search must look up before the snapshot can serve it. `None` without a snapshot.
    fn unexplained(&self, version: u64) -> Option<Vec<u64>> {
        let from = self.read().as_ref().map(|s| s.version)?;
        let chain = self.chain();
        Some(
            (from + 1..=version)
                .filter(|v| !chain.changes.contains_key(v))
                .collect(),
        )
    }

    /// Record what a commit nobody reported did at `version` (read from its transaction and
    /// fragments).
    fn changed_at(&self, version: u64, changes: RowChanges) {
        let mut chain = self.chain();
        if !chain.changes.contains_key(&version) {
            let change = if changes.is_empty() {
                Change::Same
            } else {
                Change::Replaced(Arc::new(changes))
            };
            chain.insert(version, change);
        }
    }

    fn dim(&self) -> usize {
        self.dim
    }

    /// Whether the rows deletes and moves left behind (skipped, still in memory) are worth a
    /// fresh read: past a quarter of the live rows, and at least [`RELOAD_GONE_ROWS`].
    fn mostly_gone(&self) -> bool {
        self.read()
            .as_ref()
            .is_some_and(|s| s.gone >= RELOAD_GONE_ROWS && s.gone > s.rows / 4)
    }

    /// Count a search the snapshot could not answer.
    fn deferred_one(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// Replace the snapshot with a fresh read of the table, unless one is already due or
    /// running. Returns at once; reloads are spaced by twice the last one's duration, so a
    /// table that changes constantly costs at most a third of a core.
    pub(crate) fn reload_in_background(self: &Arc<Self>, table: &Table) {
        if !self.wanted.load(Ordering::Relaxed) || self.loading.swap(true, Ordering::AcqRel) {
            return;
        }
        let wait = match *self.last_load.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((ended, took)) => (took * 2)
                .max(Duration::from_millis(200))
                .saturating_sub(ended.elapsed()),
            None => Duration::ZERO,
        };
        let me = self.clone();
        let table = table.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let started = Instant::now();
            match load::snapshot(&table, me.dim, me.max_rows(), &me.foreground).await {
                Ok(Some(s)) => {
                    let rows = s.rows;
                    me.install(s);
                    // The streamed batches are freed; the old snapshot too.
                    crate::store::heap::release_freed_memory();
                    tracing::info!(
                        rows,
                        ms = started.elapsed().as_millis() as u64,
                        "resident vectors loaded"
                    );
                }
                Ok(None) => {
                    tracing::debug!("resident vectors not loaded (table moving or too large)")
                }
                Err(e) => tracing::warn!(error = %e, "could not load resident vectors"),
            }
            *me.last_load.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((Instant::now(), started.elapsed()));
            me.loading.store(false, Ordering::Release);
        });
    }

    fn install(&self, s: Snapshot) {
        self.loads.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.write();
        if guard.as_ref().is_some_and(|old| old.version > s.version) {
            return;
        }
        let version = s.version;
        *guard = Some(s);
        drop(guard);
        let mut chain = self.chain();
        let stale: Vec<u64> = chain.changes.range(..=version).map(|(v, _)| *v).collect();
        for v in stale {
            chain.remove(v);
        }
    }
}

impl CommitObserver for ResidentVectors {
    fn unchanged(&self, version: u64) {
        if self.wanted.load(Ordering::Relaxed) {
            self.changed_at(version, RowChanges::default());
        }
    }

    fn follows_deletes(&self) -> bool {
        self.wanted.load(Ordering::Relaxed)
    }

    fn deleted(&self, version: u64, ids: &HashSet<String>) {
        if self.wanted.load(Ordering::Relaxed) {
            let changes = RowChanges {
                removed: ids.clone(),
                added: Vec::new(),
            };
            self.chain()
                .insert(version, Change::Replaced(Arc::new(changes)));
        }
    }

    fn blanks_filled(&self, version: u64, filled: &Arc<FilledBlanks>) {
        if self.wanted.load(Ordering::Relaxed) {
            self.chain().insert(version, Change::Filled(filled.clone()));
        }
    }

    fn strengths_set(&self, version: u64, set: &Arc<StrengthSet>) {
        if self.wanted.load(Ordering::Relaxed) {
            self.chain().insert(version, Change::Strengths(set.clone()));
        }
    }

    fn appended(&self, version: u64, rows: &[(MemoryRecord, Vec<f32>)]) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        self.chain()
            .insert(version, Change::Rows(Arc::new(rows.to_vec())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: String, scope: &str) -> MemoryRecord {
        let mut r = MemoryRecord::with_text("tea with grandma", &[]);
        r.id = id;
        r.memory_scope = Some(scope.into());
        r
    }

    fn all() -> RowFilter {
        RowFilter {
            scopes: None,
            alive_at: None,
            created: None,
            tier: None,
        }
    }

    /// Deleted rows stay in memory, skipped, until the snapshot is read again; past a quarter
    /// of the live rows (and a floor) it asks for that read.
    #[test]
    fn deleted_rows_are_skipped_and_ask_for_a_reload_past_a_quarter() {
        let resident = ResidentVectors::new(4);
        let mut s = Snapshot::empty(1, 4);
        for i in 0..4000 {
            let scope = if i % 2 == 0 { "家人" } else { "public" };
            s.push(record(format!("r{i}"), scope), &[1.0, i as f32, 0.0, 0.0]);
        }
        *resident.write() = Some(s);
        let ids = |range: std::ops::Range<usize>| -> HashSet<String> {
            range.map(|i| format!("r{i}")).collect()
        };

        // Every live row, from a search that asks for more than there are.
        let found = |resident: &ResidentVectors| -> HashSet<String> {
            let guard = resident.read();
            let s = guard.as_ref().unwrap();
            s.nearest(&[1.0, 0.0, 0.0, 0.0], &all(), 5000, None)
                .into_iter()
                .map(|h| h.record.id)
                .collect()
        };
        assert_eq!(found(&resident).len(), 4000);
        resident.write().as_mut().unwrap().remove_ids(&ids(0..999));
        assert_eq!(resident.stats().rows, 3001);
        assert_eq!(found(&resident), ids(999..4000));
        assert!(!resident.mostly_gone(), "999 dead rows: under the floor");

        // Removing an id twice (or one that is not there) counts once.
        resident
            .write()
            .as_mut()
            .unwrap()
            .remove_ids(&ids(990..1001));
        assert_eq!(resident.stats().rows, 2999);
        assert_eq!(found(&resident), ids(1001..4000));
        assert!(resident.mostly_gone(), "1001 dead rows of 2999 live");
    }
}
