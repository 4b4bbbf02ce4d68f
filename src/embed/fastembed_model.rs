//! fastembed with a user-defined model loaded from local files (no model hub), run on one
//! dedicated OS thread so the async runtime never blocks. Any sentence-embedding ONNX export
//! works: the tokenizer comes from the model directory, and [`LocalSettings`] carries what the
//! model card asks for (pooling, maximum length, e5's `"query: "` / `"passage: "` prefixes).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use fastembed::{
    InitOptionsUserDefined, Pooling, QuantizationMode, TextEmbedding, TokenizerFiles,
    UserDefinedEmbeddingModel,
};
use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use super::assets::assets_dir;
use super::batch_worker::{BatchModel, BatchWorker};
use super::e5_engine::hex;
use super::{EmbedError, Embedder, TextRole};

/// How token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolingKind {
    /// Average over the tokens (MiniLM, e5, paraphrase-multilingual).
    Mean,
    /// The first token's vector (bge).
    Cls,
}

/// A local model's settings beyond its files; the defaults are the bundled MiniLM's.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalSettings {
    pub pooling: PoolingKind,
    /// Re-normalise to unit length (fastembed's pipeline already L2-normalises pooled vectors).
    pub normalize: bool,
    /// Tokens per text; longer texts are truncated (capped by the tokenizer's own maximum).
    pub max_length: usize,
    /// Put in front of every query text (e5: `"query: "`).
    pub query_prefix: String,
    /// Put in front of every stored text (e5: `"passage: "`).
    pub passage_prefix: String,
}

impl Default for LocalSettings {
    fn default() -> Self {
        LocalSettings {
            pooling: PoolingKind::Mean,
            normalize: true,
            max_length: 512,
            query_prefix: String::new(),
            passage_prefix: String::new(),
        }
    }
}

impl LocalSettings {
    /// What of these settings changes a text's vector, appended to the model's content id so a
    /// table built one way refuses the other. Empty for the defaults, so tables built before
    /// these settings existed keep their id.
    fn id_suffix(&self) -> String {
        let mut suffix = String::new();
        if self.pooling != PoolingKind::Mean {
            suffix.push_str("+cls");
        }
        if !self.query_prefix.is_empty() || !self.passage_prefix.is_empty() {
            let digest =
                Sha256::digest(format!("{}\u{0}{}", self.query_prefix, self.passage_prefix));
            suffix.push_str(&format!("+prefix:{}", &hex(&digest)[..8]));
        }
        suffix
    }

    fn prefix(&self, role: TextRole) -> &str {
        match role {
            TextRole::Query => &self.query_prefix,
            TextRole::Passage => &self.passage_prefix,
        }
    }
}

/// Where the model and the ONNX Runtime library live.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    pub model_dir: PathBuf,
    pub ort_dylib: PathBuf,
}

impl ModelFiles {
    /// Resolve from config, then the environment the Makefile sets, then the assets a wheel
    /// installed beside the binary, then the set-up cache.
    pub fn resolve(model_dir: Option<&Path>, ort_dylib: Option<&Path>) -> ModelFiles {
        let cache = assets_dir();
        let model_dir = model_dir
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("SCOPEMEM_MODEL_DIR").map(PathBuf::from))
            .unwrap_or_else(|| cache.join("all-MiniLM-L6-v2-int8"));
        let ort_dylib = ort_dylib
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from))
            .unwrap_or_else(|| cache.join("onnxruntime-1.31.1/libonnxruntime.so.1.31.1"));
        ModelFiles {
            model_dir,
            ort_dylib,
        }
    }
}

/// The offline fastembed model behind a batching worker thread.
pub struct FastEmbedder {
    worker: BatchWorker,
    model_id: String,
    dimension: usize,
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| {
        EmbedError::Files(format!(
            "cannot read {} ({e}); run `make setup` (scripts/setup.sh) to install the offline model",
            path.display()
        ))
    })
}

fn load_runtime(path: &Path) -> Result<(), EmbedError> {
    // ORT can be initialised once per process; remember the outcome for later callers.
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    if !path.is_file() {
        return Err(EmbedError::Runtime {
            path: path.display().to_string(),
            message: "file not found; run `make setup` or set ORT_DYLIB_PATH".into(),
        });
    }
    INIT.get_or_init(|| {
        // Loads the library; fastembed builds its own environment on top of it.
        ort::init_from(path).map(drop).map_err(|e| e.to_string())
    })
    .clone()
    .map_err(|message| EmbedError::Runtime {
        path: path.display().to_string(),
        message,
    })
}

impl FastEmbedder {
    /// Load the model (about half a second) with the default (MiniLM) settings and start the
    /// worker. `batch_size` caps how many texts go through the model at once.
    pub fn load(files: &ModelFiles, batch_size: usize) -> Result<FastEmbedder, EmbedError> {
        Self::load_with(files, batch_size, LocalSettings::default())
    }

    /// Load any sentence-embedding ONNX export with its settings and start the worker.
    pub fn load_with(
        files: &ModelFiles,
        batch_size: usize,
        settings: LocalSettings,
    ) -> Result<FastEmbedder, EmbedError> {
        let started = Instant::now();
        load_runtime(&files.ort_dylib)?;
        let dir = &files.model_dir;
        let onnx = read(dir, "model.onnx")?;
        // Identified by content, so moving the directory does not look like a new model.
        let model_id = format!(
            "onnx-sha256:{}{}",
            &hex(&Sha256::digest(&onnx))[..16],
            settings.id_suffix()
        );
        let tokenizer = TokenizerFiles {
            tokenizer_file: read(dir, "tokenizer.json")?,
            config_file: read(dir, "config.json")?,
            special_tokens_map_file: read(dir, "special_tokens_map.json")?,
            tokenizer_config_file: read(dir, "tokenizer_config.json")?,
        };
        // The int8 MiniLM graph has no dynamic-quantisation ops (its activations are not
        // re-ranged per batch), so batching does not change a text's embedding; see the test
        // `batching_does_not_change_embeddings`.
        let model = UserDefinedEmbeddingModel::new(onnx, tokenizer)
            .with_pooling(match settings.pooling {
                PoolingKind::Mean => Pooling::Mean,
                PoolingKind::Cls => Pooling::Cls,
            })
            .with_quantization(QuantizationMode::None);
        // ORT's intra-op threads busy-wait for the next piece of work by default; beside the
        // HTTP server and LanceDB on a small box that spinning takes the cores they need.
        let options = InitOptionsUserDefined::default()
            .with_max_length(settings.max_length.max(1))
            .with_session_config("session.intra_op.allow_spinning", "0");
        let mut embedding = TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(|e| EmbedError::Model(e.to_string()))?;
        let probe = embedding
            .embed(vec!["dimension probe"], None)
            .map_err(|e| EmbedError::Model(e.to_string()))?;
        let dimension = probe.first().map(Vec::len).unwrap_or(0);
        if dimension == 0 {
            return Err(EmbedError::Model(
                "the model returned an empty embedding".into(),
            ));
        }
        let batch_size = batch_size.max(1);
        let worker = BatchWorker::spawn(
            "scopemem-embed",
            OnnxModel {
                model: embedding,
                batch_size,
                settings,
            },
            batch_size,
        )?;
        tracing::info!(
            model = %model_id,
            dimension,
            ms = started.elapsed().as_millis() as u64,
            "embedding model loaded"
        );
        Ok(FastEmbedder {
            worker,
            model_id,
            dimension,
        })
    }
}

/// The fastembed model on the worker thread.
struct OnnxModel {
    model: TextEmbedding,
    batch_size: usize,
    settings: LocalSettings,
}

impl BatchModel for OnnxModel {
    fn embed_batch(&mut self, role: TextRole, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prefix = self.settings.prefix(role);
        let prefixed: Vec<String>;
        let texts: Vec<&str> = if prefix.is_empty() {
            texts.to_vec()
        } else {
            prefixed = texts.iter().map(|t| format!("{prefix}{t}")).collect();
            prefixed.iter().map(String::as_str).collect()
        };
        let vectors = embed_by_length(&mut self.model, &texts, self.batch_size)
            .map_err(|e| EmbedError::Model(e.to_string()))?;
        Ok(if self.settings.normalize {
            vectors.into_iter().map(normalize).collect()
        } else {
            vectors
        })
    }
}

/// A text's length in quarter tokens, as a tokenizer roughly cuts it: about four ASCII
/// characters a token, one token per other character (a CJK character is a token of its own).
fn quarter_tokens(text: &str) -> usize {
    text.chars().map(|c| if c.is_ascii() { 1 } else { 4 }).sum()
}

/// Texts in the order of their length, cut into runs of similar length: a run's texts go
/// through the model together. A batch is padded to its longest text, so one long memory among
/// fifteen short ones made the model work on sixteen long ones (1-15% less CPU a text on
/// `bench-burst`'s mix of English and Chinese lines, more where lengths differ more). A run
/// ends where a text is more than half again as long as the run's first (and a few tokens
/// more), since every model call also costs about a millisecond of its own.
fn length_runs(texts: &[&str]) -> Vec<Vec<usize>> {
    let mut order: Vec<(usize, usize)> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| (quarter_tokens(t), i))
        .collect();
    order.sort_unstable();
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut first = 0;
    for (len, i) in order {
        match runs.last_mut() {
            Some(run) if len <= first + first / 2 + 32 => run.push(i),
            _ => {
                first = len;
                runs.push(vec![i]);
            }
        }
    }
    runs
}

/// Embed `texts` run by run ([`length_runs`]) and return the vectors in the texts' order.
fn embed_by_length(
    model: &mut TextEmbedding,
    texts: &[&str],
    batch_size: usize,
) -> Result<Vec<Vec<f32>>, fastembed::Error> {
    let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
    for run in length_runs(texts) {
        let batch: Vec<&str> = run.iter().map(|&i| texts[i]).collect();
        for (i, v) in run.into_iter().zip(model.embed(&batch, Some(batch_size))?) {
            vectors[i] = v;
        }
    }
    Ok(vectors)
}

/// fastembed already normalises; re-normalising is cheap insurance that cosine == dot.
fn normalize(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

impl Embedder for FastEmbedder {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_hold_every_text_once_and_keep_short_texts_apart_from_long_ones() {
        let texts = [
            "好久不见，最近怎么样？我们周末去爬山吧",
            "ok",
            "see you",
            "a much longer line about the quarterly tax filing and the accountant",
            "hi",
        ];
        let runs = length_runs(&texts);
        assert_eq!(runs, vec![vec![1, 4, 2], vec![3, 0]]);
        assert!(length_runs(&[]).is_empty());
    }
}
