//! The real model behind a switch the test holds: every call the test's rule picks fails with
//! the error it names, every other call goes to the model. One wrapper for the tests that need
//! a provider that fails (feedback retries, a provider that is down, a message that waits for
//! its vector), so none of them repeats the `Embedder` delegation.

use std::sync::Arc;

use futures::future::BoxFuture;
use scopemem::embed::{EmbedError, Embedder, TextRole};

/// Which calls fail, and how: `None` lets the call through.
pub type FailRule = dyn Fn(TextRole, &[String]) -> Option<EmbedError> + Send + Sync;

pub struct Failing {
    pub real: Arc<dyn Embedder>,
    pub rule: Box<FailRule>,
}

impl Failing {
    pub fn new(
        real: Arc<dyn Embedder>,
        rule: impl Fn(TextRole, &[String]) -> Option<EmbedError> + Send + Sync + 'static,
    ) -> Failing {
        Failing {
            real,
            rule: Box::new(rule),
        }
    }
}

impl Embedder for Failing {
    fn model_id(&self) -> &str {
        self.real.model_id()
    }
    fn dimension(&self) -> usize {
        self.real.dimension()
    }
    fn embed(
        &self,
        role: TextRole,
        texts: Vec<String>,
    ) -> BoxFuture<'_, Result<Vec<Vec<f32>>, EmbedError>> {
        match (self.rule)(role, &texts) {
            Some(e) => Box::pin(async { Err(e) }),
            None => self.real.embed(role, texts),
        }
    }
}
