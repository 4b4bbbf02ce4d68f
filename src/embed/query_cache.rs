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
//!
//! A text being embedded is known while it runs: a second call for it waits for that run
//! instead of starting its own. That is how a question's vectors, embedded when its message
//! arrived (`memory::recall::prefetch`), serve the recall that comes while they are still
//! being computed: the recall pays what is left of that run, not a second one. A run that fails
//! or is cancelled hands nothing on; the calls that waited embed the text themselves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use super::{EmbedError, Embedder, TextRole};

/// Query texts kept.
pub const QUERY_CACHE_ENTRIES: usize = 256;

/// (model id, query text).
type Key = (String, String);

/// A text the model is embedding now: its vector once that run is done. The sender dropped
/// without a value means the run failed or was cancelled.
type Running = watch::Receiver<Option<Arc<Vec<f32>>>>;
/// The end of a [`Running`] that the call embedding the text holds.
type Runner = watch::Sender<Option<Arc<Vec<f32>>>>;

#[derive(Default)]
struct Entries {
    /// Key → (last use, vector).
    map: HashMap<Key, (u64, Arc<Vec<f32>>)>,
    /// Texts being embedded now, so a recall that asks for one waits for that run (a
    /// question's texts embedded when its message arrived, `memory::recall::prefetch`)
    /// instead of starting a second.
    running: HashMap<Key, Running>,
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
    runs: AtomicU64,
    texts_embedded: AtomicU64,
    hits: AtomicU64,
    joins: AtomicU64,
}

/// What the queries cost since start: the model's time for them, its calls (runs), the texts
/// it embedded, the texts answered from the cache, and those answered by a run already under
/// way.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueryCost {
    pub model_seconds: f64,
    pub runs: u64,
    pub texts_embedded: u64,
    pub hits: u64,
    pub joins: u64,
}

/// Where each text of a call gets its vector.
#[derive(Default)]
struct Plan {
    /// Texts this call embeds, with the senders that tell the others.
    mine: Vec<(String, Runner)>,
    /// Texts another call is embedding now.
    waits: Vec<(String, Running)>,
}

/// Takes this call's texts out of `running` however it ends (done, failed or cancelled).
struct Claimed<'a> {
    cache: &'a QueryCache,
    keys: Vec<Key>,
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        let mut entries = self.cache.lock();
        for key in &self.keys {
            entries.running.remove(key);
        }
    }
}

impl QueryCache {
    /// The vector for `text`, from the cache or the model.
    pub async fn embed(
        &self,
        embedder: &dyn Embedder,
        text: &str,
    ) -> Result<Arc<Vec<f32>>, EmbedError> {
        self.embed_all(embedder, &[text.to_string()])
            .await?
            .pop()
            .ok_or_else(|| EmbedError::Model("embedder returned no vector".into()))
    }

    /// The vectors of `texts`, in order: the cached ones from the cache, those another call is
    /// embedding now from that run, the others from one call to the model (a recall with the
    /// conversation's turns embeds what is new in one batch).
    pub(crate) async fn embed_all(
        &self,
        embedder: &dyn Embedder,
        texts: &[String],
    ) -> Result<Vec<Arc<Vec<f32>>>, EmbedError> {
        let model = embedder.model_id().to_string();
        let mut found: Vec<Option<Arc<Vec<f32>>>> = vec![None; texts.len()];
        let plan = self.plan(&model, texts, &mut found);
        let claimed = Claimed {
            cache: self,
            keys: plan
                .mine
                .iter()
                .map(|(t, _)| (model.clone(), t.clone()))
                .collect(),
        };
        let mine: Vec<String> = plan.mine.iter().map(|(t, _)| t.clone()).collect();
        let embedding = async {
            match mine.is_empty() {
                true => Ok(Vec::new()),
                false => self.run(embedder, mine.clone()).await,
            }
        };
        let joining =
            futures::future::join_all(plan.waits.into_iter().map(|(text, mut rx)| async move {
                let vector = rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|v| v.clone());
                (text, vector)
            }));
        let (embedded, joined) = tokio::join!(embedding, joining);
        let mut resolved: HashMap<String, Arc<Vec<f32>>> = HashMap::new();
        for ((text, tx), vector) in plan.mine.into_iter().zip(checked(embedded?, mine.len())?) {
            let vector = Arc::new(vector);
            // Into the cache before the run is taken out of `running`: a call in between
            // finds one or the other.
            self.put((model.clone(), text.clone()), vector.clone());
            let _ = tx.send(Some(vector.clone()));
            resolved.insert(text, vector);
        }
        drop(claimed);
        let mut again: Vec<String> = Vec::new();
        for (text, vector) in joined {
            match vector {
                Some(v) => {
                    self.cost.joins.fetch_add(1, Ordering::Relaxed);
                    resolved.insert(text, v);
                }
                None => again.push(text),
            }
        }
        if !again.is_empty() {
            // The run these waited for failed: embed them here, and fail as it would.
            let vectors = checked(self.run(embedder, again.clone()).await?, again.len())?;
            for (text, vector) in again.into_iter().zip(vectors) {
                let vector = Arc::new(vector);
                self.put((model.clone(), text.clone()), vector.clone());
                resolved.insert(text, vector);
            }
        }
        for (slot, text) in found.iter_mut().zip(texts) {
            if slot.is_none() {
                *slot = resolved.get(text).cloned();
            }
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// Sorts `texts` into cached (filled into `found`), running elsewhere and this call's own,
    /// which it claims in `running`; under one lock, so two calls never claim one text.
    fn plan(&self, model: &str, texts: &[String], found: &mut [Option<Arc<Vec<f32>>>]) -> Plan {
        let mut plan = Plan::default();
        let mut entries = self.lock();
        for (slot, text) in found.iter_mut().zip(texts) {
            let key = (model.to_string(), text.clone());
            if let Some(vector) = entries.touch(&key) {
                self.cost.hits.fetch_add(1, Ordering::Relaxed);
                *slot = Some(vector);
            } else if plan.mine.iter().any(|(t, _)| t == text)
                || plan.waits.iter().any(|(t, _)| t == text)
            {
                // The same text twice in one call: the first one's vector serves both.
            } else if let Some(rx) = entries.running.get(&key) {
                plan.waits.push((text.clone(), rx.clone()));
            } else {
                let (tx, rx) = watch::channel(None);
                entries.running.insert(key, rx);
                plan.mine.push((text.clone(), tx));
            }
        }
        plan
    }

    /// The model on `texts` as queries, counted.
    async fn run(
        &self,
        embedder: &dyn Embedder,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let n = texts.len() as u64;
        let started = Instant::now();
        embedder.recall_asked();
        let vectors = embedder.embed(TextRole::Query, texts).await;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.cost.model_micros.fetch_add(micros, Ordering::Relaxed);
        self.cost.runs.fetch_add(1, Ordering::Relaxed);
        self.cost.texts_embedded.fetch_add(n, Ordering::Relaxed);
        vectors
    }

    /// What the queries cost since start.
    pub(crate) fn cost(&self) -> QueryCost {
        QueryCost {
            model_seconds: self.cost.model_micros.load(Ordering::Relaxed) as f64 / 1e6,
            runs: self.cost.runs.load(Ordering::Relaxed),
            texts_embedded: self.cost.texts_embedded.load(Ordering::Relaxed),
            hits: self.cost.hits.load(Ordering::Relaxed),
            joins: self.cost.joins.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // The map holds only finished entries: a panic elsewhere cannot leave one half-written.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Drop every cached vector (an erase: a question embedded ahead holds a message's text as
    /// its key). Runs under way finish and are cached; they were asked before the erase.
    pub(crate) fn forget_all(&self) {
        self.lock().map.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }
}

impl Entries {
    /// The cached vector of `key`, marked as used now.
    fn touch(&mut self, key: &Key) -> Option<Arc<Vec<f32>>> {
        self.clock += 1;
        let now = self.clock;
        let (used, vector) = self.map.get_mut(key)?;
        *used = now;
        Some(vector.clone())
    }
}

/// `vectors`, when the model returned one per text.
fn checked(vectors: Vec<Vec<f32>>, texts: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    match vectors.len() == texts {
        true => Ok(vectors),
        false => Err(EmbedError::Model(format!(
            "embedder returned {} vectors for {texts} texts",
            vectors.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts model runs, and the recalls it is told of; the vector encodes the text's length
    /// (negated for passages).
    struct Counting(AtomicUsize, &'static str, AtomicUsize);

    impl Counting {
        fn new(id: &'static str) -> Counting {
            Counting(AtomicUsize::new(0), id, AtomicUsize::new(0))
        }
    }

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
        fn recall_asked(&self) {
            self.2.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Embeds only when let through (`release`), and fails its first run when told to.
    struct Gated {
        runs: AtomicUsize,
        started: tokio::sync::Notify,
        release: tokio::sync::Semaphore,
        fail_first: bool,
    }

    impl Gated {
        fn new(fail_first: bool) -> Gated {
            Gated {
                runs: AtomicUsize::new(0),
                started: tokio::sync::Notify::new(),
                release: tokio::sync::Semaphore::new(0),
                fail_first,
            }
        }
    }

    impl Embedder for Gated {
        fn model_id(&self) -> &str {
            "gated"
        }
        fn dimension(&self) -> usize {
            1
        }
        fn embed(
            &self,
            _role: TextRole,
            texts: Vec<String>,
        ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
            Box::pin(async move {
                let run = self.runs.fetch_add(1, Ordering::SeqCst);
                self.started.notify_one();
                let permit = self.release.acquire().await;
                drop(permit);
                if self.fail_first && run == 0 {
                    return Err(EmbedError::Model("first run fails".into()));
                }
                Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
            })
        }
    }

    #[tokio::test]
    async fn a_text_being_embedded_is_waited_for_not_embedded_twice() {
        let model = Arc::new(Gated::new(false));
        let cache = Arc::new(QueryCache::default());
        let ahead = {
            let (model, cache) = (model.clone(), cache.clone());
            let texts = vec!["message".to_string(), "turns\nmessage".to_string()];
            tokio::spawn(async move { cache.embed_all(model.as_ref(), &texts).await })
        };
        model.started.notified().await;
        let texts = vec!["message".to_string(), "turns\nmessage".to_string()];
        let asking = cache.embed_all(model.as_ref(), &texts);
        let release = async {
            model.release.add_permits(8);
        };
        let (asked, ()) = tokio::join!(asking, release);
        let asked: Vec<f32> = asked.unwrap().iter().map(|v| v[0]).collect();
        assert_eq!(asked, [7.0, 13.0]);
        assert!(ahead.await.unwrap().is_ok());
        assert_eq!(
            model.runs.load(Ordering::SeqCst),
            1,
            "one run for both calls"
        );
        let cost = cache.cost();
        assert_eq!((cost.joins, cost.texts_embedded), (2, 2), "{cost:?}");
    }

    /// On the current-thread runtime of `#[tokio::test]`: the spawned run is blocked in the
    /// model when the second call plans (join! polls it first), and the abort takes effect
    /// before the released run is polled again.
    #[tokio::test]
    async fn a_failed_or_cancelled_run_leaves_its_waiters_to_embed_it_themselves() {
        for cancel in [false, true] {
            let model = Arc::new(Gated::new(!cancel));
            let cache = Arc::new(QueryCache::default());
            let ahead = {
                let (model, cache) = (model.clone(), cache.clone());
                tokio::spawn(async move { cache.embed(model.as_ref(), "message").await })
            };
            model.started.notified().await;
            let waiting = cache.embed(model.as_ref(), "message");
            let end_the_run = async {
                if cancel {
                    ahead.abort();
                }
                model.release.add_permits(8);
            };
            let (got, ()) = tokio::join!(waiting, end_the_run);
            match got {
                Ok(v) => assert_eq!(*v, vec![7.0], "cancel {cancel}"),
                Err(e) => panic!("cancel {cancel}: {e}"),
            }
            assert_eq!(
                model.runs.load(Ordering::SeqCst),
                2,
                "cancel {cancel}: embedded again"
            );
            assert_eq!(cache.cost().joins, 0, "cancel {cancel}");
            assert!(
                cache.lock().running.is_empty(),
                "cancel {cancel}: nothing left running"
            );
        }
    }

    #[tokio::test]
    async fn queries_are_embedded_as_queries_and_keyed_per_model() {
        let a = Counting::new("model-a");
        let b = Counting::new("model-b");
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
    async fn a_query_run_tells_the_model_a_recall_is_asked() {
        let model = Counting::new("told");
        let cache = QueryCache::default();
        cache.embed(&model, "abc").await.unwrap();
        // A hit runs nothing, and is no news to the model.
        cache.embed(&model, "abc").await.unwrap();
        assert_eq!(model.2.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_cost_counts_texts_the_model_took_and_the_hits() {
        let model = Counting::new("counting");
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
        let model = Counting::new("counting");
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
        let model = Counting::new("counting");
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
