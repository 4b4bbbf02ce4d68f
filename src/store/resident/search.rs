//! [`NearestVisible`] over the resident snapshot, with LanceDB answering whatever the
//! snapshot cannot: a search without a column filter, or one that finds the snapshot behind
//! the table (which also schedules a reload).

use std::sync::Arc;

use futures::future::BoxFuture;
use lancedb::Table;

use super::super::search::{Hit, LanceSearch, NearestVisible, SearchRequest};
use super::super::StoreError;
use super::ResidentVectors;

pub struct ResidentSearch {
    table: Table,
    resident: Arc<ResidentVectors>,
    lance: Arc<LanceSearch>,
}

impl ResidentSearch {
    /// Starts loading the snapshot in the background (start-up does not wait for it).
    pub fn new(table: Table, resident: Arc<ResidentVectors>, lance: Arc<LanceSearch>) -> Self {
        resident
            .wanted
            .store(true, std::sync::atomic::Ordering::Relaxed);
        resident.reload_in_background(&table);
        ResidentSearch {
            table,
            resident,
            lance,
        }
    }

    pub fn resident(&self) -> &Arc<ResidentVectors> {
        &self.resident
    }

    async fn search(&self, req: &SearchRequest) -> Result<Vec<Hit>, StoreError> {
        if let Some(rows) = &req.rows {
            let version = self.table.version().await?;
            if let Some(hits) = self
                .resident
                .nearest(version, &req.vector, rows, req.k.max(1))
            {
                return Ok(hits);
            }
            self.resident.reload_in_background(&self.table);
        }
        self.lance.nearest(req).await
    }
}

impl NearestVisible for ResidentSearch {
    fn nearest<'a>(
        &'a self,
        req: &'a SearchRequest,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(self.search(req))
    }
}
