//! The memory layer: remember, recall, redaction, and the one place scopes are derived.

pub(crate) mod asker;
pub mod consolidation;
pub(crate) mod door;
pub(crate) mod erase_generation;
pub(crate) mod erase_lock;
pub(crate) mod erase_notices;
pub(crate) use scopemem_core::fact;
pub mod feedback;
pub mod intake;
pub(crate) mod model;
pub mod model_choice;
pub(crate) mod new_memory;
pub mod person;
pub mod recall;
pub(crate) use scopemem_core::redact;
pub(crate) mod retention;
pub mod service;
pub(crate) mod speakers;
pub mod turns;
pub mod working;

pub use intake::{journal, journal_files};
pub use model::*;
pub use service::{MemoryService, Status, Visibility};

use crate::embed::{EmbedError, Embedder, TextRole};
use crate::scope::ScopeError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Scope(#[from] ScopeError),
    #[error("invalid {field}: {message}")]
    InvalidInput {
        field: &'static str,
        message: String,
    },
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No memory with this id that the conversation may reach (never says whether one exists
    /// elsewhere).
    #[error("no such memory for this conversation ({0})")]
    NotFound(&'static str),
    /// A memory the conversation may read but not change: another scope's (`public` from a
    /// mapped chat). Says nothing a recall would not show.
    #[error("this memory belongs to a scope this conversation may read but not change; remember a corrected memory instead")]
    ReadOnly,
    /// Another write kept changing the row; the caller may try again.
    #[error("{0}")]
    Conflict(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl MemoryError {
    /// Stable machine-readable code for API errors.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            MemoryError::Scope(e) => e.code(),
            MemoryError::InvalidInput { .. } => "invalid_input",
            MemoryError::Embed(_) => "embedding_unavailable",
            MemoryError::Store(_) => "store_failed",
            MemoryError::NotFound(_) => "not_found",
            MemoryError::ReadOnly => "read_only",
            MemoryError::Conflict(_) => "conflict",
            MemoryError::Internal(_) => "internal",
        }
    }

    /// Whether the caller sent something wrong (4xx) rather than the service failing (5xx).
    pub(crate) fn is_client_error(&self) -> bool {
        matches!(
            self,
            MemoryError::Scope(_)
                | MemoryError::InvalidInput { .. }
                | MemoryError::NotFound(_)
                | MemoryError::ReadOnly
                | MemoryError::Conflict(_)
        )
    }
}

/// The passage vector of one text: what every path that writes a single row embeds with.
pub(crate) async fn embed_passage(
    embedder: &dyn Embedder,
    text: &str,
) -> Result<Vec<f32>, MemoryError> {
    embedder
        .embed(TextRole::Passage, vec![text.to_owned()])
        .await?
        .pop()
        .ok_or_else(|| MemoryError::Internal("embedder returned no vector".into()))
}
