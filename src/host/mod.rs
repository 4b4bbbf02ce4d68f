//! PluginHost: loads plugins from config and routes operations to them. An operation is a
//! typed [`Request`] (`operation.rs`), routed by its [`Operation`]: the HTTP layer parses a
//! body into the request type its route names, and the compiler checks every route and every
//! plugin's `match`. Plugins answer in JSON, the shape the API returns.

pub(crate) mod memory_plugin;
pub(crate) mod operation;
pub mod reply;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::config::{Config, ConfigError};
use crate::embed::{EmbedError, Embedder};
use crate::memory::{MemoryError, MemoryService};
use crate::scope::{watch_config, ConfigWatcher, ScopeMap, ScopeResolver};

pub use memory_plugin::MemoryPlugin;
pub use operation::{AfterMessageSent, JobQuery, LlmRequestEvent, Operation, Reflection, Request};
pub use reply::Reply;
pub(crate) mod tools;

/// A plugin's failure, already shaped for an API error body: a stable `code`, a message, and
/// what kind of failure it is ([`Fault`]), which alone picks the HTTP status.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PluginError {
    pub code: &'static str,
    pub message: String,
    pub fault: Fault,
}

/// What kind of failure a [`PluginError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The caller sent something wrong (400).
    Invalid,
    /// What the request names does not exist, or its conversation cannot see it (404).
    NotFound,
    /// The request contradicts the current state, e.g. a pass already answered (409).
    Conflict,
    /// The conversation may read what it names but not change it (403).
    Forbidden,
    /// Temporarily full or busy, nothing written: retry after this many seconds (503).
    Unavailable { retry_after_secs: u64 },
    /// The service failed (500).
    Internal,
}

impl PluginError {
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        PluginError {
            code,
            message: message.into(),
            fault: Fault::Invalid,
        }
    }

    /// The disk is full: nothing was written and nothing acknowledged before is lost; retry
    /// once space is freed (503 with Retry-After).
    pub(crate) fn disk_full(message: impl Into<String>) -> Self {
        PluginError::unavailable("disk_full", message, 30)
    }

    pub(crate) fn unavailable(
        code: &'static str,
        message: impl Into<String>,
        retry_after: u64,
    ) -> Self {
        PluginError {
            code,
            message: message.into(),
            fault: Fault::Unavailable {
                retry_after_secs: retry_after,
            },
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        PluginError {
            code: "internal",
            message: message.into(),
            fault: Fault::Internal,
        }
    }

    /// The caller's mistake (a 4xx), not the service's.
    pub fn is_client_error(&self) -> bool {
        matches!(
            self.fault,
            Fault::Invalid | Fault::NotFound | Fault::Conflict
        )
    }

    /// Seconds after which to retry, for a temporary failure.
    pub fn retry_after(&self) -> Option<u64> {
        match self.fault {
            Fault::Unavailable { retry_after_secs } => Some(retry_after_secs),
            _ => None,
        }
    }
}

impl From<MemoryError> for PluginError {
    fn from(e: MemoryError) -> Self {
        let message = e.to_string();
        if is_disk_full(&message) {
            return PluginError::disk_full(message);
        }
        if let MemoryError::Store(store) = &e {
            if store.is_vanished_file() {
                // Another process pruned the version this request read, and the retries on
                // the latest version lost the race again: the caller may simply try again.
                tracing::warn!(error = %store, "a read kept meeting pruned files");
                return PluginError::unavailable(
                    "store_busy",
                    "another process is erasing or compacting the table; try again",
                    STORE_BUSY_RETRY_AFTER_SECS,
                );
            }
        }
        if let MemoryError::Embed(embed) = &e {
            // The provider failed: nothing was written, and the caller may try again.
            let secs = embed
                .retry_after()
                .map_or(EMBED_RETRY_AFTER_SECS, |d| d.as_secs().clamp(1, 300));
            return PluginError::unavailable(e.code(), message, secs);
        }
        let fault = match &e {
            MemoryError::NotFound(_) => Fault::NotFound,
            MemoryError::Conflict(_) => Fault::Conflict,
            MemoryError::ReadOnly => Fault::Forbidden,
            e if e.is_client_error() => Fault::Invalid,
            _ => Fault::Internal,
        };
        PluginError {
            code: e.code(),
            message,
            fault,
        }
    }
}

/// `Retry-After` when another process's erase or prune kept pulling files from under a read.
const STORE_BUSY_RETRY_AFTER_SECS: u64 = 1;

/// `Retry-After` for an embedding failure when the provider sent none.
const EMBED_RETRY_AFTER_SECS: u64 = 5;

/// Whether an error message reports a full disk (ENOSPC, or a quota).
pub(crate) fn is_disk_full(message: &str) -> bool {
    message.contains("No space left on device")
        || message.contains("os error 28")
        || message.contains("Disk quota exceeded")
        || message.contains("os error 122")
}

/// A reply as the JSON body it is sent as.
pub(crate) fn json_of(reply: &Reply) -> Result<Value, PluginError> {
    serde_json::to_value(reply).map_err(|e| PluginError::internal(e.to_string()))
}

/// An LLM tool: its name, what it is for, and the JSON Schema of its arguments. Schemas never
/// contain a scope or a conversation id: those come from the request context.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
}

/// Who is calling: taken from the event or request context, never from the model.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct CallContext {
    pub conversation_id: String,
    #[serde(default)]
    pub persona: Option<String>,
}

/// A unit of functionality the host can load. Operations take a typed request and answer a
/// typed [`Reply`].
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    /// The operations this plugin serves.
    fn operations(&self) -> &'static [Operation];
    /// Run `request`, one of [`Self::operations`].
    fn invoke(&self, request: Request) -> BoxFuture<'_, Result<Reply, PluginError>>;
    /// The LLM tools this plugin offers.
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }
    /// Run one of this plugin's tools for the conversation in `ctx`.
    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        ctx: CallContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<Reply, PluginError>> {
        let _ = (ctx, arguments);
        Box::pin(async move {
            Err(PluginError::bad_request(
                "unknown_tool",
                format!("no tool '{name}'"),
            ))
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error("config watcher: {0}")]
    Watch(String),
    #[error("two plugins both serve operation '{0}'")]
    DuplicateOperation(String),
}

/// The loaded plugins plus what keeps them alive (the config watcher).
pub struct PluginHost {
    plugins: Vec<Arc<dyn Plugin>>,
    routes: HashMap<Operation, Arc<dyn Plugin>>,
    tools: HashMap<&'static str, Arc<dyn Plugin>>,
    memory: Arc<MemoryService>,
    config: Config,
    _watcher: Option<ConfigWatcher>,
}

impl PluginHost {
    /// Load config (validated against conf_schema.json), the embedding model, the store and the
    /// memory plugin; watch the config file so scope-map edits apply without a restart.
    pub async fn start(config_path: Option<&Path>) -> Result<PluginHost, HostError> {
        let loaded = Config::load(config_path)?;
        for w in &loaded.warnings {
            tracing::warn!(warning = %w, "config");
        }
        let config = loaded.config;
        let embedder = crate::memory::model_choice::load_embedder(
            &config,
            crate::memory::model_choice::Purpose::Serve,
        )
        .await?;
        Self::start_with(config, config_path.map(Path::to_path_buf), embedder).await
    }

    /// Start with an already-loaded config and embedder (tests share one model this way).
    pub async fn start_with(
        config: Config,
        config_path: Option<PathBuf>,
        embedder: Arc<dyn Embedder>,
    ) -> Result<PluginHost, HostError> {
        let map = ScopeMap::from_config(&config);
        map.log_summary("load");
        let scopes = Arc::new(ScopeResolver::new(map));
        let watcher = match &config_path {
            Some(p) => Some(
                watch_config(p.clone(), scopes.clone(), Duration::from_millis(250))
                    .map_err(|e| HostError::Watch(e.to_string()))?,
            ),
            None => None,
        };
        let memory = Arc::new(MemoryService::open(&config, embedder, scopes).await?);
        let plugin: Arc<dyn Plugin> = Arc::new(MemoryPlugin::new(memory.clone()));
        let mut host = PluginHost {
            plugins: Vec::new(),
            routes: HashMap::new(),
            tools: HashMap::new(),
            memory,
            config,
            _watcher: watcher,
        };
        host.register(plugin)?;
        Ok(host)
    }

    fn register(&mut self, plugin: Arc<dyn Plugin>) -> Result<(), HostError> {
        for op in plugin.operations() {
            if self.routes.insert(*op, plugin.clone()).is_some() {
                return Err(HostError::DuplicateOperation(op.name().to_string()));
            }
        }
        for tool in plugin.tools() {
            if self.tools.insert(tool.name, plugin.clone()).is_some() {
                return Err(HostError::DuplicateOperation(tool.name.to_string()));
            }
        }
        let operations: Vec<&str> = plugin.operations().iter().map(|o| o.name()).collect();
        tracing::info!(plugin = plugin.name(), ?operations, "plugin loaded");
        self.plugins.push(plugin);
        Ok(())
    }

    /// Run `request` on the plugin that serves its operation.
    pub(crate) async fn dispatch(&self, request: Request) -> Result<Reply, PluginError> {
        let operation = request.operation();
        match self.routes.get(&operation) {
            Some(p) => p.invoke(request).await,
            None => Err(PluginError::bad_request(
                "unknown_operation",
                format!("no plugin serves '{}'", operation.name()),
            )),
        }
    }

    /// Run the operation called `operation` with a JSON body ([`Request::parse`]), for callers
    /// that speak names and JSON.
    pub async fn invoke(&self, operation: &str, payload: Value) -> Result<Value, PluginError> {
        json_of(&self.dispatch(Request::parse(operation, payload)?).await?)
    }

    /// Every registered LLM tool.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let mut all: Vec<ToolSpec> = self.plugins.iter().flat_map(|p| p.tools()).collect();
        all.sort_by_key(|t| t.name);
        all
    }

    /// Run a tool for the conversation in `ctx` (HTTP body, MCP `_meta`, framework event).
    pub(crate) async fn run_tool(
        &self,
        name: &str,
        ctx: CallContext,
        arguments: Value,
    ) -> Result<Reply, PluginError> {
        match self.tools.get(name) {
            Some(p) => p.call_tool(name, ctx, arguments).await,
            None => Err(PluginError::bad_request(
                "unknown_tool",
                format!("no tool named '{name}'"),
            )),
        }
    }

    /// [`PluginHost::run_tool`], its reply as JSON (an MCP tool result, a framework's tool).
    pub async fn call_tool(
        &self,
        name: &str,
        ctx: CallContext,
        arguments: Value,
    ) -> Result<Value, PluginError> {
        json_of(&self.run_tool(name, ctx, arguments).await?)
    }

    /// Export, as JSON lines in the `scopemem export` format, what one conversation may read:
    /// the recall predicate of its scope (`GET /v1/export`). Buffered: a conversation's view
    /// is bounded by what it can recall, and a half-sent export would look complete.
    pub(crate) async fn export_visible(
        &self,
        conversation_id: &str,
        persona: Option<&str>,
        vectors: bool,
    ) -> Result<Vec<u8>, PluginError> {
        let visible = self.memory.visible_to(conversation_id, persona)?;
        self.memory.caught_up_with_erasures().await?;
        let embedder = self.memory.embedder();
        let model = embedder.model_info();
        let options = crate::transfer::ExportOptions {
            filter: crate::transfer::ExportFilter {
                visible_to: Some(conversation_id.to_string()),
                ..Default::default()
            },
            vectors,
            visibility: visible.to_sql(),
        };
        let mut out = Vec::new();
        let report = crate::transfer::export(
            self.memory.store(),
            &model,
            &options,
            &mut out,
            &mut |_, _| {},
        )
        .await
        .map_err(|e| PluginError::internal(e.to_string()))?;
        tracing::info!(
            conversation_id,
            memory_scope = visible.memory_scope.as_str(),
            rows = report.rows,
            "exported a conversation's view"
        );
        Ok(out)
    }

    pub fn memory(&self) -> &Arc<MemoryService> {
        &self.memory
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Edits of the config file the watcher refused (unreadable or invalid: the last good map
    /// stays); 0 without a watched file.
    pub fn refused_config_reloads(&self) -> u64 {
        self._watcher.as_ref().map_or(0, |w| {
            w.failure_count().load(std::sync::atomic::Ordering::Acquire)
        })
    }

    /// Start background work (indexes, legacy backfill); call once serving.
    pub fn start_background(&self) {
        self.memory.start_background();
    }

    /// Finish queued writes, then stop.
    pub async fn shutdown(&self) {
        self.memory.shutdown().await;
    }
}
