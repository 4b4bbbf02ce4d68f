//! The one thread a local model runs on, and the batching in front of it.
//!
//! A local model (ONNX through fastembed, or the e5 engine) is CPU work that must not run on
//! the async runtime's threads, and is fastest fed many texts at once. Every caller's texts go
//! through a channel to one dedicated OS thread; that thread drains what is queued, and runs
//! model calls of at most the batch size, queries before passages, handing every caller its
//! vectors once all its texts are done. One failed call is the answer of every caller with a
//! text in it.
//!
//! A caller's texts may span several calls (a working-memory batch hands over 64 messages at
//! once), and between two calls the thread looks at the channel again: a recall's query waits
//! behind at most one call of passages, never behind a whole bulk write (docs/design.md section
//! 5.13, "keyword-searchable at once").
//!
//! That one call is kept short too (issue 78): passage calls are sized to about
//! [`PASSAGE_CALL_BUDGET`] by what the last calls took per character, at least one text. A
//! call's time grows with its texts while texts per second barely do: e5 on 2 cores took
//! 441 ms for a call of 32 chat lines, 15.6 ms for one, and 13.4 to 15.6 ms a line at any size.
//! A bot's question arriving while a group's chatter was embedded in calls of 32 waited p50
//! 468 ms for its block in AstrBot (docs/benchmarks.md, "Chatbot hosts").
//!
//! Short calls cost throughput, though, and more inside scopemem than the engine alone shows
//! (each call's OpenMP regions wake and put to sleep its threads beside the store's own): a
//! re-embed of 5,000 rows ran at 22 rows/s in calls of one text against 35–46 in calls of 32.
//! So calls are paced only while recalls are asked ([`BatchWorker::recall_asked`], one within
//! [`PACED_AFTER_RECALL`]): a `migrate reembed`, an import or a burst of remembers that no recall
//! waits on runs in calls of the batch size (the service's own queries measuring the model at
//! start are no recall), and the first recall after a quiet spell waits behind at most one
//! such call.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::{EmbedError, TextRole};

/// What a model does on the worker thread.
pub trait BatchModel: Send + 'static {
    /// Called once on the worker thread before the first batch (per-thread settings).
    fn on_worker_start(&mut self) {}
    /// One vector per text, in order.
    fn embed_batch(&mut self, role: TextRole, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// One caller's texts, waiting for a batch (the remote provider's batcher queues the same).
pub(crate) struct Job {
    pub(crate) role: TextRole,
    pub(crate) texts: Vec<String>,
    pub(crate) done: oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>,
}

/// Hand each job of a batch its slice of `result`, in order, or the batch's error.
pub(crate) fn deliver(jobs: Vec<Job>, result: Result<Vec<Vec<f32>>, EmbedError>) {
    match result {
        Ok(vectors) => {
            let mut it = vectors.into_iter();
            for job in jobs {
                let mine: Vec<Vec<f32>> = it.by_ref().take(job.texts.len()).collect();
                let _ = job.done.send(Ok(mine));
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.done.send(Err(e.clone()));
            }
        }
    }
}

/// About how long one call of passages may keep a query waiting (the module header).
pub(crate) const PASSAGE_CALL_BUDGET: Duration = Duration::from_millis(20);

/// How long after a recall passage calls stay paced: recalls come in bursts (a question's
/// texts, its recall, the next question of the same conversation).
pub(crate) const PACED_AFTER_RECALL: Duration = Duration::from_secs(600);

/// What a text costs the model, in characters, beyond its own: the prefix and the special
/// tokens every text is given.
const TEXT_OVERHEAD_CHARS: usize = 8;

/// The model's time per character, learned from its calls, and the passage calls it sizes.
struct Pace {
    /// The longest a passage call should take; `None`: calls of `batch_size`, unpaced.
    budget: Option<Duration>,
    /// Seconds per character (overhead included), a moving average; `None` before a call.
    per_char: Option<f64>,
}

/// When a recall was last asked of a worker: set by its callers, read by its thread.
#[derive(Default)]
struct Asked(Mutex<Option<Instant>>);

impl Asked {
    fn now(&self) {
        if let Ok(mut at) = self.0.lock() {
            *at = Some(Instant::now());
        }
    }

    fn last(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|at| *at)
    }
}

impl Pace {
    fn cost(text: &str) -> usize {
        text.chars().count() + TEXT_OVERHEAD_CHARS
    }

    /// How many of `texts` (in order, at least one, at most `max`) fit the budget at `now`:
    /// `max` unless a recall was `asked` within [`PACED_AFTER_RECALL`].
    fn texts_within<'a>(
        &self,
        texts: impl Iterator<Item = &'a str>,
        max: usize,
        asked: Option<Instant>,
        now: Instant,
    ) -> usize {
        let (Some(budget), per_char) = (self.budget, self.per_char) else {
            return max;
        };
        let asked_lately = |at: Instant| now.saturating_duration_since(at) < PACED_AFTER_RECALL;
        if !asked.is_some_and(asked_lately) {
            return max;
        }
        // Nothing measured yet: one text, and the call measures.
        let Some(per_char) = per_char else {
            return 1;
        };
        let mut chars = 0usize;
        let mut n = 0usize;
        for text in texts.take(max) {
            chars += Self::cost(text);
            if n > 0 && chars as f64 * per_char > budget.as_secs_f64() {
                break;
            }
            n += 1;
        }
        n.max(1)
    }

    /// A call of `chars` characters took `took`.
    fn record(&mut self, chars: usize, took: Duration) {
        if chars == 0 {
            return;
        }
        let now = took.as_secs_f64() / chars as f64;
        self.per_char = Some(match self.per_char {
            None => now,
            Some(before) => 0.7 * before + 0.3 * now,
        });
    }
}

/// The sending side: what an [`super::Embedder`] holds.
#[derive(Clone)]
pub struct BatchWorker {
    tx: mpsc::Sender<Job>,
    asked: Arc<Asked>,
}

impl BatchWorker {
    /// Start the thread `name` running `model`, batching up to `batch_size` texts per call.
    /// Passage calls are paced to [`PASSAGE_CALL_BUDGET`].
    pub(crate) fn spawn<M: BatchModel>(
        name: &str,
        model: M,
        batch_size: usize,
    ) -> Result<BatchWorker, EmbedError> {
        Self::spawn_paced(name, model, batch_size, Some(PASSAGE_CALL_BUDGET))
    }

    /// `spawn`, with passage calls paced to `budget` (`None`: calls of `batch_size`).
    pub(crate) fn spawn_paced<M: BatchModel>(
        name: &str,
        model: M,
        batch_size: usize,
        budget: Option<Duration>,
    ) -> Result<BatchWorker, EmbedError> {
        let (tx, rx) = mpsc::channel::<Job>(4096);
        let batch_size = batch_size.max(1);
        let pace = Pace {
            budget,
            per_char: None,
        };
        let asked = Arc::new(Asked::default());
        let seen = asked.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(model, rx, batch_size, pace, &seen))
            .map_err(|e| EmbedError::Model(format!("cannot start embedding thread: {e}")))?;
        Ok(BatchWorker { tx, asked })
    }

    /// A recall is being asked ([`super::Embedder::recall_asked`]): passage calls are paced
    /// for [`PACED_AFTER_RECALL`].
    pub(crate) fn recall_asked(&self) {
        self.asked.now();
    }

    /// Queue `texts` and wait for their vectors.
    pub(crate) async fn embed(
        &self,
        role: TextRole,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (done, rx) = oneshot::channel();
        self.tx
            .send(Job { role, texts, done })
            .await
            .map_err(|_| EmbedError::WorkerGone)?;
        rx.await.map_err(|_| EmbedError::WorkerGone)?
    }
}

fn run<M: BatchModel>(
    mut model: M,
    mut rx: mpsc::Receiver<Job>,
    batch_size: usize,
    mut pace: Pace,
    asked: &Asked,
) {
    model.on_worker_start();
    let mut queue = Waiting::default();
    loop {
        if queue.is_empty() {
            match rx.blocking_recv() {
                Some(job) => queue.push(job),
                None => return,
            }
        }
        while let Ok(job) = rx.try_recv() {
            queue.push(job);
        }
        // Queries first: a recall waits on its query, a remember's passages can wait a call.
        let (role, jobs) = match queue.queries.is_empty() {
            false => (TextRole::Query, &mut queue.queries),
            true => (TextRole::Passage, &mut queue.passages),
        };
        // A query call takes what is queued: a recall waits on each of its texts.
        let size = match role {
            TextRole::Query => batch_size,
            TextRole::Passage => pace.texts_within(
                waiting_texts(jobs),
                batch_size,
                asked.last(),
                Instant::now(),
            ),
        };
        let (chars, took) = one_call(&mut model, role, jobs, size);
        pace.record(chars, took);
    }
}

/// The texts of `jobs` not yet embedded, in order.
fn waiting_texts(jobs: &VecDeque<Started>) -> impl Iterator<Item = &str> {
    jobs.iter()
        .flat_map(|s| s.job.texts[s.vectors.len()..].iter().map(String::as_str))
}

/// Jobs waiting for the model, by role, in arrival order.
#[derive(Default)]
struct Waiting {
    queries: VecDeque<Started>,
    passages: VecDeque<Started>,
}

impl Waiting {
    fn push(&mut self, job: Job) {
        let started = Started {
            job,
            vectors: Vec::new(),
        };
        match started.job.role {
            TextRole::Query => self.queries.push_back(started),
            TextRole::Passage => self.passages.push_back(started),
        }
    }

    fn is_empty(&self) -> bool {
        self.queries.is_empty() && self.passages.is_empty()
    }
}

/// A job and the vectors of its first texts, done by earlier calls.
struct Started {
    job: Job,
    vectors: Vec<Vec<f32>>,
}

/// Run the next (at most) `batch_size` texts of `jobs`, all of one role, as one model call;
/// send every job whose texts are now all done its vectors, or the call's error to every job
/// with a text in it. The call's characters ([`Pace::cost`]) and how long it took.
fn one_call<M: BatchModel>(
    model: &mut M,
    role: TextRole,
    jobs: &mut VecDeque<Started>,
    batch_size: usize,
) -> (usize, Duration) {
    let mut texts: Vec<&str> = Vec::with_capacity(batch_size);
    let mut touched = 0;
    for started in jobs.iter() {
        if texts.len() >= batch_size {
            break;
        }
        let rest = &started.job.texts[started.vectors.len()..];
        let room = batch_size - texts.len();
        texts.extend(rest.iter().take(room).map(String::as_str));
        touched += 1;
    }
    let chars: usize = texts.iter().map(|t| Pace::cost(t)).sum();
    let started = Instant::now();
    let result = model.embed_batch(role, &texts);
    let took = started.elapsed();
    let result = result.and_then(|v| {
        if v.len() == texts.len() {
            Ok(v)
        } else {
            Err(EmbedError::Model(format!(
                "the model returned {} vectors for {} texts",
                v.len(),
                texts.len()
            )))
        }
    });
    match result {
        Ok(vectors) => {
            let mut vectors = vectors.into_iter();
            for started in jobs.iter_mut().take(touched) {
                let missing = started.job.texts.len() - started.vectors.len();
                started.vectors.extend(vectors.by_ref().take(missing));
            }
            while jobs
                .front()
                .is_some_and(|s| s.vectors.len() == s.job.texts.len())
            {
                if let Some(done) = jobs.pop_front() {
                    let _ = done.job.done.send(Ok(done.vectors));
                }
            }
        }
        Err(e) => {
            for failed in jobs.drain(..touched) {
                let _ = failed.job.done.send(Err(e.clone()));
            }
        }
    }
    (chars, took)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records each call's role and size; vector i of a call is [len of text i, role as 0/1].
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<(TextRole, usize)>>>);

    impl BatchModel for Recorder {
        fn embed_batch(
            &mut self,
            role: TextRole,
            texts: &[&str],
        ) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.lock().unwrap().push((role, texts.len()));
            let r = if role == TextRole::Query { 0.0 } else { 1.0 };
            Ok(texts.iter().map(|t| vec![t.len() as f32, r]).collect())
        }
    }

    #[tokio::test]
    async fn every_caller_gets_its_own_vectors_and_roles_never_share_a_call() {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let worker = BatchWorker::spawn("test-embed", Recorder(calls.clone()), 64).unwrap();
        let mut tasks = Vec::new();
        for i in 0..40usize {
            let w = worker.clone();
            tasks.push(tokio::spawn(async move {
                let role = if i % 3 == 0 {
                    TextRole::Query
                } else {
                    TextRole::Passage
                };
                let texts: Vec<String> = (0..=i % 4).map(|k| "x".repeat(i + k)).collect();
                let got = w.embed(role, texts.clone()).await.unwrap();
                let r = if role == TextRole::Query { 0.0 } else { 1.0 };
                let want: Vec<Vec<f32>> = texts.iter().map(|t| vec![t.len() as f32, r]).collect();
                assert_eq!(got, want);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let texts: usize = calls.lock().unwrap().iter().map(|(_, n)| n).sum();
        let expected: usize = (0..40usize).map(|i| i % 4 + 1).sum();
        assert_eq!(texts, expected);
        assert!(worker
            .embed(TextRole::Query, vec![])
            .await
            .unwrap()
            .is_empty());
    }

    /// Records each call's role and size, and waits for a permit before answering it.
    struct Gated {
        calls: std::sync::Arc<std::sync::Mutex<Vec<(TextRole, usize)>>>,
        entered: std::sync::mpsc::Sender<()>,
        permits: std::sync::mpsc::Receiver<()>,
    }

    impl BatchModel for Gated {
        fn embed_batch(
            &mut self,
            role: TextRole,
            texts: &[&str],
        ) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.lock().unwrap().push((role, texts.len()));
            let _ = self.entered.send(());
            self.permits
                .recv()
                .map_err(|_| EmbedError::Model("test over".into()))?;
            Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_query_waits_behind_one_call_of_passages_not_a_whole_bulk_write() {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (permit, permits) = std::sync::mpsc::channel();
        let model = Gated {
            calls: calls.clone(),
            entered: entered_tx,
            permits,
        };
        // Unpaced: calls of the batch size, whatever the permits' timing.
        let worker = BatchWorker::spawn_paced("test-embed-gated", model, 4, None).unwrap();
        let bulk: Vec<String> = (1..=10).map(|n| "p".repeat(n)).collect();
        let w = worker.clone();
        let passages = tokio::spawn({
            let bulk = bulk.clone();
            async move { w.embed(TextRole::Passage, bulk).await }
        });
        // The first call (4 of the 10 passages) is running; the query arrives during it.
        let wait = || {
            tokio::task::block_in_place(|| {
                entered
                    .recv_timeout(std::time::Duration::from_secs(60))
                    .expect("another model call")
            })
        };
        wait();
        let w = worker.clone();
        let query = tokio::spawn(async move { w.embed(TextRole::Query, vec!["q".into()]).await });
        // Wait (by condition) until the query sits in the channel, then let calls finish one
        // at a time.
        let queued = std::time::Instant::now();
        while worker.tx.capacity() == worker.tx.max_capacity() {
            assert!(queued.elapsed() < std::time::Duration::from_secs(60));
            tokio::task::yield_now().await;
        }
        permit.send(()).unwrap();
        wait();
        permit.send(()).unwrap();
        assert_eq!(query.await.unwrap().unwrap(), vec![vec![1.0]]);
        for _ in 0..2 {
            wait();
            permit.send(()).unwrap();
        }
        let got = passages.await.unwrap().unwrap();
        let want: Vec<Vec<f32>> = bulk.iter().map(|t| vec![t.len() as f32]).collect();
        assert_eq!(got, want);
        assert_eq!(
            *calls.lock().unwrap(),
            vec![
                (TextRole::Passage, 4),
                (TextRole::Query, 1),
                (TextRole::Passage, 4),
                (TextRole::Passage, 2)
            ]
        );
    }

    /// Takes (sleeps) 1 ms per byte of its texts, and records each call's size.
    struct Slow(std::sync::Arc<std::sync::Mutex<Vec<usize>>>);

    impl BatchModel for Slow {
        fn embed_batch(
            &mut self,
            _role: TextRole,
            texts: &[&str],
        ) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.lock().unwrap().push(texts.len());
            let bytes: usize = texts.iter().map(|t| t.len()).sum();
            std::thread::sleep(Duration::from_millis(bytes as u64));
            Ok(texts.iter().map(|t| vec![t.len() as f32]).collect())
        }
    }

    #[tokio::test]
    async fn passage_calls_are_sized_to_the_budget_by_what_calls_took() {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let budget = Some(Duration::from_millis(25));
        let worker =
            BatchWorker::spawn_paced("test-embed-slow", Slow(calls.clone()), 32, budget).unwrap();
        // Calls are paced while recalls are asked.
        worker.recall_asked();
        let texts: Vec<String> = (0..12).map(|i| format!("line {i:05}")).collect();
        let got = worker
            .embed(TextRole::Passage, texts.clone())
            .await
            .unwrap();
        assert_eq!(
            got,
            texts
                .iter()
                .map(|t| vec![t.len() as f32])
                .collect::<Vec<_>>()
        );
        let calls = calls.lock().unwrap().clone();
        // A text of 10 bytes (18 with the overhead) takes at least 10 ms, however loaded the
        // machine: two fit 25 ms, three never do. The first call measures, with one.
        assert_eq!(calls.first(), Some(&1), "{calls:?}");
        assert!(calls.iter().all(|&n| n <= 2), "{calls:?}");
        assert_eq!(calls.iter().sum::<usize>(), 12);
    }

    #[tokio::test]
    async fn passage_calls_are_whole_batches_while_no_recall_is_asked() {
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let budget = Some(Duration::from_millis(25));
        let worker =
            BatchWorker::spawn_paced("test-embed-bulk", Slow(calls.clone()), 8, budget).unwrap();
        // A query that is no recall (the service measuring the model at start) paces nothing.
        worker
            .embed(TextRole::Query, vec!["query 0000".into()])
            .await
            .unwrap();
        let texts: Vec<String> = (0..12).map(|i| format!("line {i:05}")).collect();
        worker.embed(TextRole::Passage, texts).await.unwrap();
        // A re-embed, an import: nothing waits on a recall, so no call is cut short.
        assert_eq!(*calls.lock().unwrap(), vec![1, 8, 4]);
    }

    #[test]
    fn calls_are_paced_only_within_a_while_of_a_recall() {
        let texts = ["a", "b", "c"];
        let now = Instant::now();
        let pace = Pace {
            budget: Some(PASSAGE_CALL_BUDGET),
            per_char: Some(1.0),
        };
        // Unpaced: as many as a call holds (what is queued, up to the batch size).
        let within = |asked, at| pace.texts_within(texts.into_iter(), 32, asked, at);
        assert_eq!(within(None, now), 32, "none asked");
        assert_eq!(within(Some(now), now + Duration::from_secs(1)), 1);
        assert_eq!(within(Some(now), now + PACED_AFTER_RECALL), 32);
    }

    #[test]
    fn an_unmeasured_or_unpaced_worker_sizes_calls_as_before() {
        let texts = ["a", "b", "c"];
        let now = Some(Instant::now());
        let at = Instant::now();
        let unpaced = Pace {
            budget: None,
            per_char: None,
        };
        assert_eq!(unpaced.texts_within(texts.into_iter(), 2, now, at), 2);
        let unmeasured = Pace {
            budget: Some(PASSAGE_CALL_BUDGET),
            per_char: None,
        };
        assert_eq!(unmeasured.texts_within(texts.into_iter(), 32, now, at), 1);
        let slow = Pace {
            budget: Some(PASSAGE_CALL_BUDGET),
            per_char: Some(1.0),
        };
        assert_eq!(
            slow.texts_within(texts.into_iter(), 32, now, at),
            1,
            "at least one"
        );
    }

    #[tokio::test]
    async fn a_failed_call_fails_every_job_with_a_text_in_it_and_no_other() {
        struct FailsLong;
        impl BatchModel for FailsLong {
            fn embed_batch(
                &mut self,
                _role: TextRole,
                texts: &[&str],
            ) -> Result<Vec<Vec<f32>>, EmbedError> {
                match texts.iter().any(|t| t.len() > 3) {
                    true => Err(EmbedError::Model("too long".into())),
                    false => Ok(texts.iter().map(|t| vec![t.len() as f32]).collect()),
                }
            }
        }
        let worker = BatchWorker::spawn("test-embed-fails", FailsLong, 2).unwrap();
        let texts = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(worker
            .embed(TextRole::Passage, texts(&["a", "bb", "cccc"]))
            .await
            .is_err());
        assert_eq!(
            worker
                .embed(TextRole::Passage, texts(&["a", "bb", "ccc"]))
                .await
                .unwrap(),
            vec![vec![1.0], vec![2.0], vec![3.0]]
        );
    }
}
