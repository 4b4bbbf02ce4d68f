//! Which embedding model serves a table: the one place that looks at both the config and the
//! table's recorded model before an embedder is loaded.
//!
//! `embedding.provider: auto` (the default) means multilingual-e5-small for a new table. A
//! table whose vectors came from the bundled all-MiniLM-L6-v2 (the default before e5) keeps
//! MiniLM, so an upgrade changes nothing by itself, whatever `migration.reembed` says (the
//! AstrBot plugin writes `auto` there for every start, as a standing "re-embed instead of
//! refusing"; it is not an operator's request to change models). The table moves to e5 when
//! the operator asks for it: `scopemem migrate reembed`, or `embedding.provider: "e5"` (with
//! `migration.reembed: auto` the move runs in the background). An explicit provider is loaded
//! as configured, and the store refuses it on a table of another model, naming how to
//! re-embed.
//!
//! The embedder itself (`embed`) knows nothing of tables; this module sits above both.

use std::sync::Arc;

use crate::config::{Config, EmbeddingProvider};
use crate::embed::{e5_model, provider, EmbedError, Embedder};
use crate::store::reembed::VectorColumns;
use crate::store::Store;

/// Why the embedder is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Serve (or export, import): `auto` follows a MiniLM table.
    Serve,
    /// `scopemem migrate reembed`: the operator asked to move the table to the default model.
    Reembed,
}

/// Load the embedder `config` names for its table (see the module header for `auto`).
pub async fn load_embedder(
    config: &Config,
    purpose: Purpose,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    // A table that cannot be read here is left for the store to report when it opens it.
    let recorded = Store::recorded_model(&config.storage.db_dir, &config.storage.table_name)
        .await
        .ok()
        .flatten();
    let mut embedding = config.embedding.clone();
    if embedding.provider == EmbeddingProvider::Auto {
        embedding.provider = choose(recorded.as_ref(), purpose == Purpose::Reembed);
        if embedding.provider == EmbeddingProvider::Local {
            tracing::warn!(
                "this table's memories were embedded with the bundled English model \
                 (all-MiniLM-L6-v2), so scopemem keeps using it; for Chinese and cross-lingual \
                 recall move it to multilingual-e5-small with `scopemem migrate reembed` (or \
                 embedding.provider \"e5\" with migration.reembed auto, in the background)"
            );
        }
    }
    let dimension = recorded.map(|r| r.dimension);
    provider::load_embedding(&embedding, || async move { dimension }).await
}

/// What `auto` becomes for a table recorded as `recorded` (`None`: no table yet); `reembed`:
/// the operator asked to re-embed it (`scopemem migrate reembed`).
pub(crate) fn choose(recorded: Option<&VectorColumns>, reembed: bool) -> EmbeddingProvider {
    let Some(cols) = recorded else {
        return EmbeddingProvider::E5;
    };
    let e5_under_way = cols
        .next
        .as_ref()
        .is_some_and(|n| e5_model::is_e5_model_id(&n.id));
    let minilm = cols
        .current
        .as_deref()
        .is_some_and(|id| id.starts_with("onnx-sha256:"));
    if minilm && !reembed && !e5_under_way {
        EmbeddingProvider::Local
    } else {
        EmbeddingProvider::E5
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::ModelInfo;

    fn table(current: Option<&str>, next: Option<&str>) -> VectorColumns {
        VectorColumns {
            current: current.map(str::to_owned),
            recorded: current.map(str::to_owned),
            dimension: 384,
            next: next.map(|id| ModelInfo {
                id: id.to_owned(),
                dimension: 384,
            }),
        }
    }

    #[test]
    fn auto_is_e5_for_new_tables_and_keeps_minilm_until_the_operator_reembeds() {
        let e5 = e5_model::model_id();
        let minilm = "onnx-sha256:8199be6f699a395f";
        assert_eq!(choose(None, false), EmbeddingProvider::E5);
        assert_eq!(
            choose(Some(&table(Some(&e5), None)), false),
            EmbeddingProvider::E5
        );
        assert_eq!(
            choose(Some(&table(Some(minilm), None)), false),
            EmbeddingProvider::Local
        );
        assert_eq!(
            choose(Some(&table(Some(minilm), None)), true),
            EmbeddingProvider::E5
        );
        // A re-embed to e5 that a restart interrupted goes on with e5.
        assert_eq!(
            choose(Some(&table(Some(minilm), Some(&e5))), false),
            EmbeddingProvider::E5
        );
        assert_eq!(
            choose(Some(&table(Some("openai:bge-m3"), None)), false),
            EmbeddingProvider::E5
        );
    }
}
