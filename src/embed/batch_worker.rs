//! The one thread a local model runs on, and the batching in front of it.
//!
//! A local model (ONNX through fastembed, or the e5 engine) is CPU work that must not run on
//! the async runtime's threads, and is fastest fed many texts at once. Every caller's texts go
//! through a channel to one dedicated OS thread; that thread drains what is queued (up to the
//! batch size), runs queries and passages as one model call each, and hands every caller its
//! slice. One failed call is the answer of every caller batched into it.

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

/// The sending side: what an [`super::Embedder`] holds.
#[derive(Clone)]
pub struct BatchWorker {
    tx: mpsc::Sender<Job>,
}

impl BatchWorker {
    /// Start the thread `name` running `model`, batching up to `batch_size` texts per call.
    pub fn spawn<M: BatchModel>(
        name: &str,
        model: M,
        batch_size: usize,
    ) -> Result<BatchWorker, EmbedError> {
        let (tx, rx) = mpsc::channel::<Job>(4096);
        let batch_size = batch_size.max(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(model, rx, batch_size))
            .map_err(|e| EmbedError::Model(format!("cannot start embedding thread: {e}")))?;
        Ok(BatchWorker { tx })
    }

    /// Queue `texts` and wait for their vectors.
    pub async fn embed(
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

fn run<M: BatchModel>(mut model: M, mut rx: mpsc::Receiver<Job>, batch_size: usize) {
    model.on_worker_start();
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        let mut total = jobs[0].texts.len();
        while total < batch_size {
            match rx.try_recv() {
                Ok(job) => {
                    total += job.texts.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        // Queries first: a recall waits on its query, a remember's passages can wait a call.
        for role in [TextRole::Query, TextRole::Passage] {
            let (mine, rest): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.role == role);
            jobs = rest;
            if !mine.is_empty() {
                answer(&mut model, role, mine);
            }
        }
    }
}

/// Run `jobs` (all of one role) as one model call and send each job its vectors.
fn answer<M: BatchModel>(model: &mut M, role: TextRole, jobs: Vec<Job>) {
    let texts: Vec<&str> = jobs
        .iter()
        .flat_map(|j| j.texts.iter().map(String::as_str))
        .collect();
    let result = model.embed_batch(role, &texts).and_then(|v| {
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
    deliver(jobs, result);
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
}
