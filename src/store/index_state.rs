//! What indexes the table has and how much of it each covers (the operator page's index state).

use serde::Serialize;

use super::{Store, StoreError};

/// One index of the table.
#[derive(Debug, Clone, Serialize)]
pub struct IndexState {
    pub name: String,
    pub columns: Vec<String>,
    /// Lance's name for the kind, e.g. `BTREE`, `BITMAP`, `IVF_HNSW_SQ`.
    pub index_type: String,
    /// Rows the index covers; the rest are searched without it until it is refreshed.
    pub indexed_rows: Option<usize>,
    pub unindexed_rows: Option<usize>,
}

impl Store {
    /// Every index with its coverage. A statistic that cannot be read is left out (`None`)
    /// rather than failing the listing: the page should still show the rest.
    pub async fn index_states(&self) -> Result<Vec<IndexState>, StoreError> {
        let mut out = Vec::new();
        for index in self.table().list_indices().await? {
            let stats = match self.table().index_stats(&index.name).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(index = %index.name, error = %e, "cannot read index statistics");
                    None
                }
            };
            out.push(IndexState {
                index_type: index.index_type.to_string(),
                indexed_rows: stats.as_ref().map(|s| s.num_indexed_rows),
                unindexed_rows: stats.as_ref().map(|s| s.num_unindexed_rows),
                name: index.name,
                columns: index.columns,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}
