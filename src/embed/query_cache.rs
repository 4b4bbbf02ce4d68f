//! The embeddings of recent recall queries. Chained recall, the framework hook and a recall
//! tool call often send the same text within seconds; a hit skips the model (milliseconds on
//! two cores). Bounded and least-recently-used, keyed by the exact text; only queries go here,
//! never memory content. Keyed by model as well as text, so a vector of one model is never
//! answered for another (a provider switch, a re-embed).
//!
//! It also counts what queries cost: the time the model ran for them and the texts it took,
//! beside the hits. A recall with the conversation's turns embeds the context as well as the
//! message (`memory::turns`), and that time is most of what a bot turn costs scopemem; `/metrics`
//! shows it, so an operator sees it next to the working memory's ingest on the same cores.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{EmbedError, Embedder, TextRole};

/// Query texts kept.
pub const QUERY_CACHE_ENTRIES: usize = 256;

/// (model id, query text).
type Key = (String, String);

#[derive(Default)]
struct Entries {
    /// Key → (last use, vector).
    map: HashMap<Key, (u64, Arc<Vec<f32>>)>,
    clock: u64,
}

/// A small LRU in front of an embedder, for query texts.
#[derive(Default)]
pub struct QueryCache {
    entries: Mutex<Entries>,
    cost: Counters,
}

#[derive(Default)]
struct Counters {
    model_micros: AtomicU64,
    texts_embedded: AtomicU64,
    hits: AtomicU64,
}

/// What the queries cost since start: the model's time for them, the texts it embedded, and
/// the texts answered from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueryCost {
    pub model_seconds: f64,
    pub texts_embedded: u64,
    pub hits: u64,
}

impl QueryCache {
    /// The vector for `text`, from the cache or the model.
    pub async fn embed(
        &self,
        embedder: &dyn Embedder,
        text: &str,
    ) -> Result<Arc<Vec<f32>>, EmbedError> {
        let key = (embedder.model_id().to_string(), text.to_string());
        if let Some(v) = self.get(&key) {
            return Ok(v);
        }
        let vector = self
            .run(embedder, vec![text.to_string()])
            .await?
            .pop()
            .ok_or_else(|| EmbedError::Model("embedder returned no vector".into()))?;
        let vector = Arc::new(vector);
        self.put(key, vector.clone());
        Ok(vector)
    }

    /// The vectors of `texts`, in order: the cached ones from the cache, the others from one
    /// call to the model (a recall with the conversation's turns embeds what is new in one
    /// batch; earlier turns were usually queries already).
    pub(crate) async fn embed_all(
        &self,
        embedder: &dyn Embedder,
        texts: &[String],
    ) -> Result<Vec<Arc<Vec<f32>>>, EmbedError> {
        let model = embedder.model_id().to_string();
        let mut found: Vec<Option<Arc<Vec<f32>>>> = texts
            .iter()
            .map(|t| self.get(&(model.clone(), t.clone())))
            .collect();
        let mut missing: Vec<String> = Vec::new();
        for (text, hit) in texts.iter().zip(&found) {
            if hit.is_none() && !missing.contains(text) {
                missing.push(text.clone());
            }
        }
        if !missing.is_empty() {
            let vectors = self.run(embedder, missing.clone()).await?;
            if vectors.len() != missing.len() {
                return Err(EmbedError::Model(format!(
                    "embedder returned {} vectors for {} texts",
                    vectors.len(),
                    missing.len()
                )));
            }
            for (text, vector) in missing.into_iter().zip(vectors) {
                let vector = Arc::new(vector);
                for (slot, t) in found.iter_mut().zip(texts) {
                    if slot.is_none() && *t == text {
                        *slot = Some(vector.clone());
                    }
                }
                self.put((model.clone(), text), vector);
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The model on `texts` as queries, counted.
    async fn run(
        &self,
        embedder: &dyn Embedder,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let n = texts.len() as u64;
        let started = Instant::now();
        let vectors = embedder.embed(TextRole::Query, texts).await;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.cost.model_micros.fetch_add(micros, Ordering::Relaxed);
        self.cost.texts_embedded.fetch_add(n, Ordering::Relaxed);
        vectors
    }

    /// What the queries cost since start.
    pub(crate) fn cost(&self) -> QueryCost {
        QueryCost {
            model_seconds: self.cost.model_micros.load(Ordering::Relaxed) as f64 / 1e6,
            texts_embedded: self.cost.texts_embedded.load(Ordering::Relaxed),
            hits: self.cost.hits.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The map holds only finished entries: a panic elsewhere cannot leave one half-written.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &Key) -> Option<Arc<Vec<f32>>> {
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        let (used, vector) = entries.map.get_mut(key)?;
        *used = now;
        self.cost.hits.fetch_add(1, Ordering::Relaxed);
        Some(vector.clone())
    }

    fn put(&self, key: Key, vector: Arc<Vec<f32>>) {
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        if entries.map.len() >= QUERY_CACHE_ENTRIES && !entries.map.contains_key(&key) {
            let oldest = entries
                .map
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                entries.map.remove(&oldest);
            }
        }
        entries.map.insert(key, (now, vector));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts model runs; the vector encodes the text's length (negated for passages).
    #[derive(Default)]
    struct Counting(AtomicUsize, &'static str);

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            self.1
        }
        fn dimension(&self) -> usize {
            1
        }
        fn embed(
            &self,
            role: TextRole,
            texts: Vec<String>,
        ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            let sign = if role == TextRole::Query { 1.0 } else { -1.0 };
            Box::pin(async move { Ok(texts.iter().map(|t| vec![sign * t.len() as f32]).collect()) })
        }
    }

    #[tokio::test]
    async fn queries_are_embedded_as_queries_and_keyed_per_model() {
        let a = Counting(AtomicUsize::new(0), "model-a");
        let b = Counting(AtomicUsize::new(0), "model-b");
        let cache = QueryCache::default();
        assert_eq!(
            *cache.embed(&a, "abc").await.unwrap(),
            vec![3.0],
            "query role"
        );
        cache.embed(&b, "abc").await.unwrap();
        assert_eq!(
            b.0.load(Ordering::Relaxed),
            1,
            "another model is not served a's vector"
        );
        cache.embed(&a, "abc").await.unwrap();
        assert_eq!(a.0.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_cost_counts_texts_the_model_took_and_the_hits() {
        let model = Counting(AtomicUsize::new(0), "counting");
        let cache = QueryCache::default();
        cache.embed(&model, "a").await.unwrap();
        cache.embed(&model, "a").await.unwrap();
        let texts: Vec<String> = ["a", "bb", "ccc"].map(String::from).to_vec();
        cache.embed_all(&model, &texts).await.unwrap();
        let cost = cache.cost();
        assert_eq!((cost.texts_embedded, cost.hits), (3, 2), "{cost:?}");
        assert!(cost.model_seconds >= 0.0);
    }

    #[tokio::test]
    async fn turns_embed_what_is_new_in_one_call_and_keep_their_order() {
        let model = Counting(AtomicUsize::new(0), "counting");
        let cache = QueryCache::default();
        cache.embed(&model, "bb").await.unwrap();
        let texts: Vec<String> = ["a", "bb", "ccc", "a"].map(String::from).to_vec();
        let got = cache.embed_all(&model, &texts).await.unwrap();
        let got: Vec<f32> = got.iter().map(|v| v[0]).collect();
        assert_eq!(got, [1.0, 2.0, 3.0, 1.0]);
        assert_eq!(model.0.load(Ordering::Relaxed), 2, "one call for a and ccc");
        cache.embed_all(&model, &texts).await.unwrap();
        assert_eq!(model.0.load(Ordering::Relaxed), 2, "all cached now");
    }

    #[tokio::test]
    async fn repeated_queries_skip_the_model_and_the_oldest_goes_first() {
        let model = Counting(AtomicUsize::new(0), "counting");
        let cache = QueryCache::default();
        let a = cache.embed(&model, "where is 4B会议室").await.unwrap();
        let again = cache.embed(&model, "where is 4B会议室").await.unwrap();
        assert_eq!(a, again);
        assert_eq!(model.0.load(Ordering::Relaxed), 1);
        for i in 0..QUERY_CACHE_ENTRIES {
            cache.embed(&model, &format!("q{i}")).await.unwrap();
            if i == 10 {
                // Keep the first query in use: it must outlive older entries.
                cache.embed(&model, "where is 4B会议室").await.unwrap();
            }
        }
        assert_eq!(cache.len(), QUERY_CACHE_ENTRIES);
        let runs = model.0.load(Ordering::Relaxed);
        cache.embed(&model, "where is 4B会议室").await.unwrap();
        assert_eq!(model.0.load(Ordering::Relaxed), runs, "recently used: kept");
        cache.embed(&model, "q0").await.unwrap();
        assert_eq!(
            model.0.load(Ordering::Relaxed),
            runs + 1,
            "least recently used: evicted"
        );
    }
}
