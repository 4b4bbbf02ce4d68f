//! Which embedder a config names, loaded the one way the service, the CLI and the benches do.
//!
//! `e5` (and `auto`, which the caller that knows the table has already turned into `e5` or
//! `local`) and `local` load a model from disk, failing loudly: without it nothing can be
//! embedded and the files are the operator's to fix. `openai` asks its server for the dimension once;
//! an unreachable server is only a warning, so the service still comes up and recalls by
//! keyword, with the dimension taken from `embedding.dimensions` or from the table itself.
//! Only when neither says it does start-up fail, naming what to set.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{EmbeddingConfig, EmbeddingProvider, PoolingMode};

use super::openai::{probe_dimension, OpenAiEmbedder, OpenAiSettings};
use super::{
    e5_model, E5Embedder, EmbedError, Embedder, FastEmbedder, LocalSettings, ModelFiles,
    PoolingKind,
};

/// The local model's settings from config.
pub(crate) fn local_settings(config: &EmbeddingConfig) -> LocalSettings {
    LocalSettings {
        pooling: match config.pooling {
            PoolingMode::Mean => PoolingKind::Mean,
            PoolingMode::Cls => PoolingKind::Cls,
        },
        normalize: config.normalize,
        max_length: config.max_length,
        query_prefix: config.query_prefix.clone(),
        passage_prefix: config.passage_prefix.clone(),
    }
}

/// The OpenAI-compatible provider's settings from config.
pub(crate) fn openai_settings(config: &EmbeddingConfig) -> OpenAiSettings {
    OpenAiSettings {
        base_url: config.base_url.clone(),
        model: config.model.clone(),
        api_key: config.api_key.as_ref().map(|k| k.expose().to_owned()),
        dimensions: config.dimensions,
        query_input_type: config.query_input_type.clone(),
        passage_input_type: config.passage_input_type.clone(),
        query_prefix: config.query_prefix.clone(),
        passage_prefix: config.passage_prefix.clone(),
        batch_size: config.batch_size.max(1),
        max_concurrency: config.max_concurrency.max(1),
        timeout: Duration::from_millis(config.timeout_ms.max(1)),
        max_retries: config.max_retries,
        normalize: config.normalize,
    }
}

/// Load the embedder of `config`; `table_dimension` finds the existing table's vector
/// dimension, the fallback when an `openai` server cannot be asked at start-up.
pub(crate) async fn load_embedding<F, Fut>(
    config: &EmbeddingConfig,
    table_dimension: F,
) -> Result<Arc<dyn Embedder>, EmbedError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Option<usize>>,
{
    match config.provider {
        EmbeddingProvider::Auto | EmbeddingProvider::E5 => {
            let files = e5_model::resolve_files(config.model_dir.as_deref());
            let batch = config.batch_size.max(1);
            let threads = config.threads;
            let model =
                tokio::task::spawn_blocking(move || E5Embedder::load(&files, batch, threads))
                    .await
                    .map_err(|e| EmbedError::Model(format!("model loader panicked: {e}")))??;
            Ok(Arc::new(model))
        }
        EmbeddingProvider::Local => {
            let files = ModelFiles::resolve(
                config.model_dir.as_deref(),
                config.ort_dylib_path.as_deref(),
            );
            let batch = config.batch_size.max(1);
            let settings = local_settings(config);
            let model = tokio::task::spawn_blocking(move || {
                FastEmbedder::load_with(&files, batch, settings)
            })
            .await
            .map_err(|e| EmbedError::Model(format!("model loader panicked: {e}")))??;
            Ok(Arc::new(model))
        }
        EmbeddingProvider::Openai => {
            let settings = openai_settings(config);
            let dimension = match probe_dimension(&settings).await {
                Ok(d) => d,
                Err(e) => {
                    let known = match config.dimensions {
                        Some(d) => Some(d),
                        None => table_dimension().await,
                    };
                    let Some(d) = known else {
                        return Err(EmbedError::Files(format!(
                            "{e}; and no dimension is known without it: set embedding.dimensions \
                             (or start once while the provider answers)"
                        )));
                    };
                    tracing::warn!(
                        error = %e,
                        dimension = d,
                        "embedding provider unreachable at start-up; serving keyword recall \
                         until it answers"
                    );
                    d
                }
            };
            Ok(Arc::new(OpenAiEmbedder::new(settings, dimension)?))
        }
    }
}
