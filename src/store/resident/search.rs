//! [`NearestVisible`] and [`KeywordMatching`] over the resident snapshot, with LanceDB answering
//! whatever the snapshot cannot: a search without a column filter, or one that finds the snapshot behind
//! the table in a way its transactions cannot explain (which also schedules a reload).

use std::sync::Arc;

use futures::future::BoxFuture;
use lancedb::Table;

use super::super::commit_rows;
use super::super::fulltext::{FulltextSearch, KeywordHit, KeywordMatching, KeywordRequest};
use super::super::search::{Hit, LanceSearch, NearestVisible, SearchRequest};
use super::super::StoreError;
use super::ResidentVectors;

pub struct ResidentSearch {
    table: Table,
    resident: Arc<ResidentVectors>,
    lance: Arc<LanceSearch>,
    fulltext: Arc<FulltextSearch>,
}

impl ResidentSearch {
    /// Starts loading the snapshot in the background (start-up does not wait for it). `lance`
    /// and `fulltext` answer what the snapshot cannot.
    pub fn new(
        table: Table,
        resident: Arc<ResidentVectors>,
        lance: Arc<LanceSearch>,
        fulltext: Arc<FulltextSearch>,
    ) -> Self {
        resident
            .wanted
            .store(true, std::sync::atomic::Ordering::Relaxed);
        resident.reload_in_background(&table);
        ResidentSearch {
            table,
            resident,
            lance,
            fulltext,
        }
    }

    async fn keywords(&self, req: &KeywordRequest) -> Result<Vec<KeywordHit>, StoreError> {
        let k = req.k.max(1);
        let hits = self
            .answer_from_memory(|version| self.resident.matching(version, &req.text, &req.rows, k))
            .await?;
        if let Some(hits) = hits {
            return Ok(hits);
        }
        let _running = self.resident.foreground.enter();
        self.fulltext.matching(req).await
    }

    async fn search(&self, req: &SearchRequest) -> Result<Vec<Hit>, StoreError> {
        let k = req.k.max(1);
        let hits = self
            .answer_from_memory(|version| {
                self.resident
                    .nearest(version, &req.vector, &req.rows, k, req.rescale)
            })
            .await?;
        if let Some(hits) = hits {
            return Ok(hits);
        }
        let _running = self.resident.foreground.enter();
        self.lance.nearest(req).await
    }

    /// `answer` from the snapshot at the table's current version, after looking up the
    /// versions nobody reported if it is behind; `None` (counted as deferred, with a reload
    /// scheduled) when the snapshot cannot show that version.
    async fn answer_from_memory<T>(
        &self,
        answer: impl Fn(u64) -> Option<T>,
    ) -> Result<Option<T>, StoreError> {
        let version = self.table.version().await?;
        if let Some(hits) = answer(version) {
            if self.resident.mostly_gone() {
                // The snapshot keeps serving until the fresh one replaces it.
                self.resident.reload_in_background(&self.table);
            }
            return Ok(Some(hits));
        }
        let why = match self.explain(version).await {
            Ok(()) => match answer(version) {
                Some(hits) => return Ok(Some(hits)),
                None => "the snapshot is loading or the table is too large",
            },
            Err(why) => why,
        };
        tracing::debug!(
            version,
            why,
            "resident copy behind the table; searching LanceDB"
        );
        self.resident.deferred_one();
        self.resident.reload_in_background(&self.table);
        Ok(None)
    }

    /// Look up the versions nobody reported in their transactions; Ok if the copy can follow
    /// every one of them: a compaction or an index build (by any process) leaves the rows as
    /// they were; another process's append, delete or update is read back from the fragments
    /// it names. Otherwise why not.
    async fn explain(&self, version: u64) -> Result<(), &'static str> {
        let Some(versions) = self.resident.unexplained(version) else {
            return Err("no snapshot to catch up");
        };
        // Nothing left to look up: the writer reported its commit after this search first
        // tried (it tells the copy just after the commit, and a search can read the new
        // version in between). The search tries again; a reload here would be for nothing.
        if versions.is_empty() {
            return Ok(());
        }
        if versions.len() > MAX_LOOKUPS {
            return Err("too many versions behind");
        }
        let Some(wrapper) = self.table.dataset() else {
            return Err("no dataset");
        };
        let Ok(dataset) = wrapper.get().await else {
            return Err("dataset unreadable");
        };
        let dim = self.resident.dim();
        for v in versions {
            let operation = match dataset.read_transaction_by_version(v).await {
                Ok(Some(t)) => t.operation,
                Ok(None) => return Err("a commit has no transaction"),
                Err(e) => {
                    tracing::debug!(version = v, error = %e, "could not read a transaction");
                    return Err("a transaction could not be read");
                }
            };
            match commit_rows::changed(&dataset, v, &operation, dim).await {
                Ok(Some(changes)) => self.resident.changed_at(v, changes),
                Ok(None) => {
                    tracing::debug!(version = v, operation = %operation, "a commit the copy cannot follow");
                    return Err("a commit changed rows in a way the copy cannot follow");
                }
                Err(e) => {
                    tracing::debug!(version = v, error = %e, "could not read a commit's rows");
                    return Err("a commit's rows could not be read");
                }
            }
        }
        Ok(())
    }
}

/// Versions looked up per search at most; a snapshot further behind is reloaded instead.
const MAX_LOOKUPS: usize = 8;

impl NearestVisible for ResidentSearch {
    fn nearest<'a>(
        &'a self,
        req: &'a SearchRequest,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(self.search(req))
    }
}

impl KeywordMatching for ResidentSearch {
    fn matching<'a>(
        &'a self,
        req: &'a KeywordRequest,
    ) -> BoxFuture<'a, Result<Vec<KeywordHit>, StoreError>> {
        Box::pin(self.keywords(req))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::store::record::{to_batch, MemoryRecord};
    use crate::store::schema::memories_schema;
    use crate::store::writer::CommitObserver;

    const DIM: usize = 4;

    async fn append(table: &Table, id: &str) {
        let mut record = MemoryRecord::with_text("tea with grandma", &[]);
        record.id = id.into();
        let batch = to_batch(&memories_schema(DIM), &[(record, vec![1.0, 0.0, 0.0, 0.0])]);
        table.add(batch.unwrap()).execute().await.unwrap();
    }

    /// The writer tells the copy about its commit just after it: a search can read the new
    /// version first, miss it in the chain, and find it there when it looks why. That is no
    /// reason to search LanceDB and reload the whole copy (it did: 7 deferrals and as many
    /// full reloads in a 100k-row burst); the search tries again and is answered from memory.
    #[tokio::test]
    async fn a_commit_reported_while_the_search_looks_is_not_a_reason_to_reload() {
        let dir = tempfile::tempdir().unwrap();
        let db = lancedb::connect(dir.path().to_str().unwrap())
            .execute()
            .await
            .unwrap();
        let table = db
            .create_empty_table("memories", memories_schema(DIM))
            .execute()
            .await
            .unwrap();
        append(&table, "a").await;
        let resident = Arc::new(ResidentVectors::new(DIM));
        let lance = Arc::new(
            LanceSearch::new(table.clone(), usize::MAX, 0)
                .await
                .unwrap(),
        );
        let fulltext = Arc::new(FulltextSearch::new(table.clone()));
        let search = ResidentSearch::new(table.clone(), resident.clone(), lance, fulltext);
        // The first load runs in the background.
        let started = std::time::Instant::now();
        while resident.loading.load(Ordering::SeqCst) || resident.stats().rows == 0 {
            assert!(
                started.elapsed().as_secs() < 30,
                "the first load never ended"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // The writer's commit, reported late.
        append(&table, "b").await;
        let tries = AtomicUsize::new(0);
        let answered = search
            .answer_from_memory(|version| {
                if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                    resident.unchanged(version);
                    return None;
                }
                resident.catch_up(version).then_some(version)
            })
            .await
            .unwrap();
        assert!(answered.is_some(), "answered from memory");
        assert_eq!(tries.load(Ordering::SeqCst), 2);
        assert_eq!(resident.stats().deferred, 0, "nothing left to LanceDB");
        assert!(
            !resident.loading.load(Ordering::SeqCst),
            "no reload scheduled"
        );
    }
}
