//! Text embeddings. The [`Embedder`] trait is the seam; [`fastembed_model::FastEmbedder`] runs
//! the offline ONNX model on a dedicated thread, batching concurrent requests.

pub mod fastembed_model;
pub mod query_cache;

use futures::future::BoxFuture;

pub use fastembed_model::{FastEmbedder, ModelFiles};
pub use query_cache::QueryCache;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model files: {0}")]
    Files(String),
    #[error("ONNX Runtime could not be loaded from {path}: {message}")]
    Runtime { path: String, message: String },
    #[error("embedding model failed: {0}")]
    Model(String),
    #[error("the embedding worker has stopped")]
    WorkerGone,
}

/// Turns texts into unit-norm vectors of a fixed dimension.
pub trait Embedder: Send + Sync {
    /// Identifies the model, recorded in the table so a different model is refused.
    fn model_id(&self) -> &str;
    fn dimension(&self) -> usize;
    fn embed(&self, texts: Vec<String>) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>>;
}
