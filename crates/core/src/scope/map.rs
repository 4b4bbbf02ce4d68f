//! The conversation → scope map and the single scope-derivation function.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::{Config, ScopeFilterMode, UnmappedPolicy};

use super::{display_truncated, ConversationId, ScopeName, ScopeSource};

/// Prefix of persona keys in the map (`persona:<name>`).
pub const PERSONA_KEY_PREFIX: &str = "persona:";

/// A map entry that was not applied, and why (shown by `scope check` and logged at load).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IgnoredEntry {
    /// The key as written in the config (empty for a map that is not an object).
    pub key: String,
    /// Why the entry was ignored.
    pub reason: String,
    /// The private scope the key's conversation (or persona) uses until the entry is fixed:
    /// a broken entry fails closed, never to `public`. `None` when the key itself is unusable
    /// (it can never match a request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fails_closed_to: Option<String>,
}

/// Counts reported at every (re)load and by `GET /v1/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MapSummary {
    /// Entries applied.
    pub entries: usize,
    /// Entries ignored.
    pub ignored: usize,
    /// Ignored entries whose conversation or persona is confined to its private scope.
    pub failed_closed: usize,
    /// Distinct scopes among applied entries.
    pub distinct_scopes: usize,
    /// Incognito conversations and personas (writes are never stored).
    pub incognito: usize,
    /// When this map was built (RFC 3339 in JSON).
    #[serde(serialize_with = "rfc3339")]
    pub loaded_at: DateTime<Utc>,
    /// sha256 of what the map decides (applied entries, fail-closed and incognito keys,
    /// unmapped policy, filter mode), not of its text: instances sharing a table must show the
    /// same hash, whatever the key order or whitespace of their config files.
    pub content_hash: String,
}

fn rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// The scope a request runs in, and how it was decided (stored as `scope_source`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResolvedScope {
    /// The scope new rows get and recall is filtered by.
    pub scope: ScopeName,
    /// How the scope was decided.
    pub source: ScopeSource,
}

/// An immutable, validated scope map plus the policies that complete it.
///
/// Built once per (re)load and shared through `ScopeResolver`; a request uses one snapshot for
/// both resolution and filtering so a reload cannot mix two maps.
#[derive(Clone, Debug)]
pub struct ScopeMap {
    entries: HashMap<String, ScopeName>,
    /// Keys named by a broken entry: their requests get a private `c_` scope (fail closed).
    failed_closed: HashSet<String>,
    ignored: Vec<IgnoredEntry>,
    /// Conversation ids and `persona:<name>` keys whose writes are never stored.
    incognito: HashSet<String>,
    loaded_at: DateTime<Utc>,
    unmapped: UnmappedPolicy,
    filter: ScopeFilterMode,
}

impl ScopeMap {
    /// Builds a map from the config's `conversation_scope_map`. Never fails: bad entries are
    /// ignored with a warning naming the key (docs/design.md rule 4) and the rest apply. The filter mode
    /// is `enforce`; see [`ScopeMap::from_config`] / [`ScopeMap::with_filter_mode`].
    pub fn build(map: &Value, unmapped: UnmappedPolicy) -> ScopeMap {
        let mut entries: HashMap<String, ScopeName> = HashMap::new();
        let mut failed_closed: HashSet<String> = HashSet::new();
        let mut ignored = Vec::new();
        match map {
            Value::Object(obj) => {
                for (raw_key, value) in obj {
                    let key = match check_key(raw_key) {
                        Ok(key) => key,
                        Err(reason) => {
                            ignored.push(ignore(raw_key, reason, None));
                            continue;
                        }
                    };
                    let scope = match check_value(value) {
                        Ok(scope) => scope,
                        Err(reason) => {
                            entries.remove(&key);
                            let private = private_scope(&key);
                            failed_closed.insert(key);
                            ignored.push(ignore(raw_key, reason, Some(private)));
                            continue;
                        }
                    };
                    if failed_closed.contains(&key) {
                        let reason = "another entry for the same key after trimming is invalid";
                        let private = private_scope(&key);
                        ignored.push(ignore(raw_key, reason.into(), Some(private)));
                        continue;
                    }
                    match entries.entry(key) {
                        Entry::Vacant(slot) => {
                            slot.insert(scope);
                        }
                        Entry::Occupied(first) if *first.get() == scope => ignored.push(ignore(
                            raw_key,
                            format!("duplicate of key {:?} after trimming", first.key()),
                            None,
                        )),
                        Entry::Occupied(first) => {
                            // Two scopes for one conversation: neither can be trusted.
                            let (key, _) = first.remove_entry();
                            let private = private_scope(&key);
                            let reason = format!(
                                "key {key:?} is mapped to two different scopes after trimming"
                            );
                            failed_closed.insert(key);
                            ignored.push(ignore(raw_key, reason, Some(private)));
                        }
                    }
                }
            }
            other => ignored.push(ignore(
                "",
                format!(
                    "conversation_scope_map is not a JSON object (got {}); no entries applied",
                    json_type(other)
                ),
                None,
            )),
        }
        ScopeMap {
            entries,
            failed_closed,
            ignored,
            incognito: HashSet::new(),
            loaded_at: Utc::now(),
            unmapped,
            filter: ScopeFilterMode::Enforce,
        }
    }

    /// Builds the map with the config's map, unmapped policy and filter switch.
    pub fn from_config(config: &Config) -> ScopeMap {
        ScopeMap::build(&config.conversation_scope_map, config.unmapped_scope)
            .with_filter_mode(config.scope_filter)
            .with_incognito(&config.incognito)
    }

    /// Marks conversations and personas incognito. Keys are checked like map keys; an unusable
    /// key is ignored with its reason (it could never match a request, so it hides nothing).
    pub fn with_incognito(mut self, keys: &[String]) -> ScopeMap {
        for raw_key in keys {
            match check_key(raw_key) {
                Ok(key) => {
                    self.incognito.insert(key);
                }
                Err(reason) => {
                    self.ignored
                        .push(ignore(raw_key, format!("incognito entry: {reason}"), None))
                }
            }
        }
        self
    }

    /// Whether writes from this conversation (or, when given, this persona) must store nothing.
    pub(crate) fn is_incognito(
        &self,
        conversation: &ConversationId,
        persona: Option<&str>,
    ) -> bool {
        let persona = persona.map(str::trim).filter(|p| !p.is_empty());
        persona.is_some_and(|name| {
            self.incognito
                .contains(&format!("{PERSONA_KEY_PREFIX}{name}"))
        }) || self.incognito.contains(conversation.as_str())
    }

    /// Incognito keys as loaded (trimmed), sorted for display.
    pub(crate) fn incognito_keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.incognito.iter().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    /// Sets the `scope_filter` switch carried by this snapshot, so a reload can flip it too.
    pub(crate) fn with_filter_mode(mut self, filter: ScopeFilterMode) -> ScopeMap {
        self.filter = filter;
        self
    }

    /// The `scope_filter` switch of this snapshot.
    pub fn filter_mode(&self) -> ScopeFilterMode {
        self.filter
    }

    /// Applied entries: trimmed key → scope.
    pub(crate) fn entries(&self) -> &HashMap<String, ScopeName> {
        &self.entries
    }

    /// Entries that were not applied.
    pub fn ignored(&self) -> &[IgnoredEntry] {
        &self.ignored
    }

    /// The unmapped policy.
    pub(crate) fn unmapped(&self) -> UnmappedPolicy {
        self.unmapped
    }

    /// Counts for logs and status.
    pub fn summary(&self) -> MapSummary {
        let distinct: HashSet<&ScopeName> = self.entries.values().collect();
        MapSummary {
            entries: self.entries.len(),
            ignored: self.ignored.len(),
            failed_closed: self.failed_closed.len(),
            distinct_scopes: distinct.len(),
            incognito: self.incognito.len(),
            loaded_at: self.loaded_at,
            content_hash: self.content_hash(),
        }
    }

    fn content_hash(&self) -> String {
        let entries: std::collections::BTreeMap<&str, &str> = self
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        fn sorted(set: &HashSet<String>) -> Vec<&str> {
            let mut v: Vec<&str> = set.iter().map(String::as_str).collect();
            v.sort_unstable();
            v
        }
        let canonical = serde_json::json!({
            "entries": entries,
            "failed_closed": sorted(&self.failed_closed),
            "incognito": sorted(&self.incognito),
            "unmapped": self.unmapped.to_string(),
            "filter": self.filter.to_string(),
        });
        let digest = Sha256::digest(canonical.to_string().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Logs the summary at info (`event` is e.g. `startup` or `reload`), and warns while the
    /// rollback switch disables scope isolation (docs/design.md rule 10).
    pub fn log_summary(&self, event: &str) {
        let s = self.summary();
        tracing::info!(
            event,
            entries_applied = s.entries,
            entries_ignored = s.ignored,
            entries_failed_closed = s.failed_closed,
            distinct_scopes = s.distinct_scopes,
            incognito = s.incognito,
            unmapped_scope = %self.unmapped,
            scope_filter = %self.filter,
            "scope map loaded"
        );
        if self.filter == ScopeFilterMode::Disabled {
            tracing::warn!(
                event,
                "scope_filter is disabled: recall returns memories from all scopes"
            );
        }
    }

    /// The one scope-derivation function (docs/design.md rules 2, 3, 6): persona key, then conversation
    /// key, then the unmapped policy.
    pub fn resolve(&self, conversation: &ConversationId, persona: Option<&str>) -> ResolvedScope {
        let persona = persona.map(str::trim).filter(|p| !p.is_empty());
        if let Some(name) = persona {
            let key = format!("{PERSONA_KEY_PREFIX}{name}");
            if let Some(scope) = self.mapped(&key) {
                return ResolvedScope {
                    scope,
                    source: ScopeSource::Persona,
                };
            }
        }
        if let Some(scope) = self.mapped(conversation.as_str()) {
            return ResolvedScope {
                scope,
                source: ScopeSource::Conversation,
            };
        }
        let scope = match self.unmapped {
            UnmappedPolicy::Public => ScopeName::public(),
            UnmappedPolicy::Conversation => private_scope(conversation.as_str()),
        };
        ResolvedScope {
            scope,
            source: ScopeSource::Unmapped,
        }
    }

    /// The scope a conversation's own chat lives in (docs/design.md rule 11): the working
    /// memory's messages and the facts consolidated from them. A mapped conversation's chat is
    /// shared within its scope, as its memories are; an unmapped one's stays in that
    /// conversation (its private scope), whatever `unmapped_scope` says: raw words said in a
    /// private chat must never reach another chat because nobody mapped it. Messages carry no
    /// persona, so only the conversation's own entry counts.
    pub fn resolve_chat(&self, conversation: &ConversationId) -> ResolvedScope {
        if let Some(scope) = self.mapped(conversation.as_str()) {
            return ResolvedScope {
                scope,
                source: ScopeSource::Conversation,
            };
        }
        ResolvedScope {
            scope: private_scope(conversation.as_str()),
            source: ScopeSource::Unmapped,
        }
    }

    /// The scope a map key decides: its entry, or its private scope when its entry is broken.
    fn mapped(&self, key: &str) -> Option<ScopeName> {
        if let Some(scope) = self.entries.get(key) {
            return Some(scope.clone());
        }
        self.failed_closed.contains(key).then(|| private_scope(key))
    }
}

/// `c_` + the first 16 lowercase hex chars of sha256(key): the private scope of an unmapped
/// conversation (key = conversation id) and of a broken map entry (key = its trimmed key, e.g.
/// `persona:Alice`).
fn private_scope(key: &str) -> ScopeName {
    let digest = Sha256::digest(key.as_bytes());
    let mut name = String::with_capacity(18);
    name.push_str("c_");
    for byte in digest.iter().take(8) {
        // Writing to a String cannot fail.
        let _ = write!(name, "{byte:02x}");
    }
    ScopeName::from_trusted(name)
}

/// An ignored entry, logged with the key (truncated) and, if it fails closed, its scope.
fn ignore(key: &str, reason: String, fails_closed_to: Option<ScopeName>) -> IgnoredEntry {
    let fails_closed_to = fails_closed_to.map(|s| s.as_str().to_owned());
    match &fails_closed_to {
        Some(private) => tracing::warn!(
            key = %display_truncated(key, 128),
            reason = %reason,
            memory_scope = %private,
            "ignoring conversation_scope_map entry; until it is fixed this conversation uses its \
             private scope, never public"
        ),
        None => tracing::warn!(
            key = %display_truncated(key, 128),
            reason = %reason,
            "ignoring conversation_scope_map entry"
        ),
    }
    IgnoredEntry {
        key: key.to_owned(),
        reason,
        fails_closed_to,
    }
}

/// Validates and normalises a key (a conversation id, or `persona:<name>` with the name trimmed).
fn check_key(raw_key: &str) -> Result<String, String> {
    let key = ConversationId::parse(raw_key)
        .map_err(|e| format!("key is not a valid conversation id: {e}"))?;
    match key.as_str().strip_prefix(PERSONA_KEY_PREFIX) {
        Some(name) if name.trim().is_empty() => Err("persona key has an empty name".to_owned()),
        Some(name) => Ok(format!("{PERSONA_KEY_PREFIX}{}", name.trim())),
        None => Ok(key.as_str().to_owned()),
    }
}

/// Validates a value: a valid scope name.
fn check_value(value: &Value) -> Result<ScopeName, String> {
    let Value::String(scope) = value else {
        return Err(format!(
            "value must be a scope name string, got {}",
            json_type(value)
        ));
    };
    ScopeName::parse(scope).map_err(|e| e.to_string())
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    fn conv(s: &str) -> ConversationId {
        ConversationId::parse(s).unwrap()
    }

    fn scope(s: &str) -> ScopeName {
        ScopeName::parse(s).unwrap()
    }

    fn sample() -> Value {
        json!({
            "default:GroupMessage:12345": "家人",
            "default:GroupMessage:999": "work",
            "persona:Alice": "恋爱",
            "default:FriendMessage:1": "public"
        })
    }

    #[test]
    fn the_content_hash_follows_what_the_map_decides_not_its_text() {
        let a = ScopeMap::build(
            &serde_json::from_str(r#"{"g:1": "家人", "g:2": "work"}"#).unwrap(),
            UnmappedPolicy::Public,
        );
        let b = ScopeMap::build(
            &serde_json::from_str(r#"{ "g:2" : "work",  "g:1": "家人" }"#).unwrap(),
            UnmappedPolicy::Public,
        );
        let c = ScopeMap::build(
            &serde_json::from_str(r#"{"g:1": "家人", "g:2": "work2"}"#).unwrap(),
            UnmappedPolicy::Public,
        );
        let d = ScopeMap::build(
            &serde_json::from_str(r#"{"g:1": "家人", "g:2": "work"}"#).unwrap(),
            UnmappedPolicy::Conversation,
        );
        let h = |m: &ScopeMap| m.summary().content_hash;
        assert_eq!(h(&a).len(), 64);
        assert_eq!(h(&a), h(&b));
        assert_ne!(h(&a), h(&c));
        assert_ne!(h(&a), h(&d));
    }

    #[test]
    fn persona_beats_conversation() {
        let m = ScopeMap::build(&sample(), UnmappedPolicy::Public);
        let r = m.resolve(&conv("default:GroupMessage:12345"), Some("Alice"));
        assert_eq!(r.scope, scope("恋爱"));
        assert_eq!(r.source, ScopeSource::Persona);
        // Persona names are trimmed; an unknown persona falls through to the conversation.
        let r = m.resolve(&conv("default:GroupMessage:12345"), Some("  Alice "));
        assert_eq!(r.source, ScopeSource::Persona);
        let r = m.resolve(&conv("default:GroupMessage:12345"), Some("Bob"));
        assert_eq!(
            (r.scope, r.source),
            (scope("家人"), ScopeSource::Conversation)
        );
        let r = m.resolve(&conv("default:GroupMessage:12345"), Some("  "));
        assert_eq!(r.source, ScopeSource::Conversation);
    }

    #[test]
    fn conversation_beats_unmapped() {
        let m = ScopeMap::build(&sample(), UnmappedPolicy::Conversation);
        let r = m.resolve(&conv("  default:GroupMessage:999 "), None);
        assert_eq!(
            (r.scope, r.source),
            (scope("work"), ScopeSource::Conversation)
        );
        let r = m.resolve(&conv("default:FriendMessage:1"), None);
        assert!(r.scope.is_public());
        assert_eq!(r.source, ScopeSource::Conversation);
    }

    #[test]
    fn unmapped_public_policy() {
        let m = ScopeMap::build(&sample(), UnmappedPolicy::Public);
        let r = m.resolve(&conv("default:FriendMessage:777"), Some("Bob"));
        assert_eq!(r.scope, ScopeName::public());
        assert_eq!(r.source, ScopeSource::Unmapped);
    }

    #[test]
    fn an_unmapped_chat_stays_in_its_conversation_whatever_the_policy() {
        for policy in [UnmappedPolicy::Public, UnmappedPolicy::Conversation] {
            let m = ScopeMap::build(&sample(), policy);
            let private = conv("default:FriendMessage:777");
            let chat = m.resolve_chat(&private);
            assert_eq!(chat.source, ScopeSource::Unmapped);
            assert!(chat.scope.as_str().starts_with("c_"), "{chat:?}");
            assert_ne!(
                chat.scope,
                m.resolve_chat(&conv("default:FriendMessage:778")).scope
            );
            // Under the conversation policy the chat and the memories share the private scope.
            if policy == UnmappedPolicy::Conversation {
                assert_eq!(chat.scope, m.resolve(&private, None).scope);
            }
            // A mapped conversation's chat is shared within its scope, an explicit `public`
            // included; a persona entry plays no part (messages carry none).
            let family = m.resolve_chat(&conv("default:GroupMessage:12345"));
            assert_eq!(
                (family.scope, family.source),
                (scope("家人"), ScopeSource::Conversation)
            );
            assert!(m
                .resolve_chat(&conv("default:FriendMessage:1"))
                .scope
                .is_public());
        }
    }

    #[test]
    fn unmapped_conversation_policy_is_private_hash() {
        let m = ScopeMap::build(&sample(), UnmappedPolicy::Conversation);
        let a = m.resolve(&conv("default:FriendMessage:777"), None);
        let a2 = m.resolve(&conv("default:FriendMessage:777"), None);
        let b = m.resolve(&conv("default:FriendMessage:778"), None);
        assert_eq!(a.source, ScopeSource::Unmapped);
        assert_eq!(a, a2);
        assert_ne!(a.scope, b.scope);
        let s = a.scope.as_str();
        assert_eq!(s.len(), 18);
        assert!(s.starts_with("c_"));
        assert!(s[2..]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
        // Known vector: sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(
            m.resolve(&conv("abc"), None).scope.as_str(),
            "c_ba7816bf8f01cfea"
        );
        assert!(ScopeName::parse(s).is_ok());
    }

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn invalid_entries_ignored_with_warning_rest_applied() {
        let map = json!({
            "good": "家人",
            "g2": "work",
            "bad_quote": "x'--",
            "bad_space": "has space",
            "bad_type": 7,
            "": "empty_key",
            "persona:": "p",
            "bad\u{0}key": "ok"
        });
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        crate::test_logs::log_capture_baseline();
        let m = tracing::subscriber::with_default(subscriber, || {
            let m = ScopeMap::build(&map, UnmappedPolicy::Public);
            m.log_summary("startup");
            m
        });
        assert_eq!(m.ignored().len(), 6, "{:?}", m.ignored());
        assert_eq!(m.entries().len(), 2);
        let s = m.summary();
        assert_eq!((s.entries, s.ignored, s.distinct_scopes), (2, 6, 2));
        // Bad values fail closed; unusable keys cannot match a request, so they cannot.
        assert_eq!(s.failed_closed, 3);
        for k in ["bad_quote", "bad_space", "bad_type"] {
            assert!(!m.resolve(&conv(k), None).scope.is_public(), "{k}");
        }
        assert_eq!(
            m.resolve(&conv("good"), None).scope,
            scope("家人"),
            "valid entries still apply"
        );
        let ignored_keys: Vec<&str> = m.ignored().iter().map(|e| e.key.as_str()).collect();
        for k in ["bad_quote", "bad_space", "bad_type", "", "persona:"] {
            assert!(
                ignored_keys.contains(&k),
                "{k} missing from {ignored_keys:?}"
            );
        }
        let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(logs.contains("WARN"), "{logs}");
        assert!(logs.contains("key=\"bad_quote\""), "{logs}");
        assert!(logs.contains("key=\"bad_type\""), "{logs}");
        assert!(logs.contains("entries_applied=2"), "{logs}");
        assert!(logs.contains("entries_ignored=6"), "{logs}");
        assert!(logs.contains("entries_failed_closed=3"), "{logs}");
        assert!(logs.contains("never public"), "{logs}");
        assert!(logs.contains("distinct_scopes=2"), "{logs}");
    }

    #[test]
    fn keys_are_trimmed_and_duplicates_ignored() {
        let m = ScopeMap::build(
            &json!({" a ": "one", "a": "one", " persona: Al ": "p"}),
            UnmappedPolicy::Public,
        );
        assert_eq!(m.entries().len(), 2);
        assert_eq!(m.ignored().len(), 1);
        assert_eq!(
            m.ignored()[0].fails_closed_to,
            None,
            "same scope: no conflict"
        );
        assert_eq!(m.resolve(&conv("a"), None).scope, scope("one"));
        assert_eq!(
            m.resolve(&conv("x"), Some("Al")).source,
            ScopeSource::Persona
        );
    }

    #[test]
    fn typo_in_a_scope_fails_closed_not_public() {
        let family = "default:GroupMessage:12345";
        let m = ScopeMap::build(
            &json!({family: "家 人", "default:GroupMessage:999": "work"}),
            UnmappedPolicy::Public,
        );
        let r = m.resolve(&conv(family), None);
        assert!(
            !r.scope.is_public(),
            "a broken entry must never write public"
        );
        assert_eq!(r.scope, private_scope(family));
        assert_eq!(r.source, ScopeSource::Conversation);
        // The same private scope an unmapped-conversation policy would give it.
        let per_chat = ScopeMap::build(&json!({}), UnmappedPolicy::Conversation);
        assert_eq!(r.scope, per_chat.resolve(&conv(family), None).scope);
        let ignored = &m.ignored()[0];
        assert_eq!(ignored.key, family);
        assert_eq!(ignored.fails_closed_to.as_deref(), Some(r.scope.as_str()));
        assert_eq!(m.summary().failed_closed, 1);
        // Other entries still apply; unrelated unmapped chats still use public.
        assert_eq!(
            m.resolve(&conv("default:GroupMessage:999"), None).scope,
            scope("work")
        );
        assert!(m.resolve(&conv("other"), None).scope.is_public());
    }

    #[test]
    fn broken_persona_entry_fails_closed() {
        let m = ScopeMap::build(
            &json!({"persona:Alice": 7, "g": "家人"}),
            UnmappedPolicy::Public,
        );
        let r = m.resolve(&conv("g"), Some(" Alice "));
        assert_eq!(r.source, ScopeSource::Persona);
        assert_eq!(r.scope, private_scope("persona:Alice"));
        assert!(r.scope.as_str().starts_with("c_"));
        // Without the persona the conversation's own entry applies.
        assert_eq!(m.resolve(&conv("g"), None).scope, scope("家人"));
    }

    #[test]
    fn two_scopes_for_one_key_fail_closed_whatever_the_order() {
        for map in [
            json!({" a ": "one", "a": "two"}),
            json!({"a": "two", " a ": "one"}),
            json!({"a ": "bad scope", " a": "one"}),
        ] {
            let m = ScopeMap::build(&map, UnmappedPolicy::Public);
            let r = m.resolve(&conv("a"), None);
            assert_eq!(r.scope, private_scope("a"), "{map}");
            assert!(m.entries().is_empty(), "{map}");
            assert!(m.ignored().iter().any(|i| i.fails_closed_to.is_some()));
        }
    }

    #[test]
    fn non_object_map_is_empty_with_one_ignored() {
        for v in [json!("x"), json!([1]), json!(null)] {
            let m = ScopeMap::build(&v, UnmappedPolicy::Public);
            assert!(m.entries().is_empty());
            assert_eq!(m.ignored().len(), 1);
        }
    }

    #[test]
    fn from_config_carries_policies_and_summary_serializes() {
        let c = Config::from_json_str(
            r#"{"conversation_scope_map": "{\"a\": \"x\", \"b\": \"x\"}",
                "unmapped_scope": "conversation", "scope_filter": "disabled"}"#,
        )
        .unwrap()
        .config;
        let m = ScopeMap::from_config(&c);
        assert_eq!(m.unmapped(), UnmappedPolicy::Conversation);
        assert_eq!(m.filter_mode(), ScopeFilterMode::Disabled);
        let s = serde_json::to_value(m.summary()).unwrap();
        assert_eq!(s["entries"], 2);
        assert_eq!(s["distinct_scopes"], 1);
        assert!(s["loaded_at"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn incognito_matches_conversation_or_persona_and_reports_bad_keys() {
        let c = Config::from_json_str(
            r#"{"conversation_scope_map": {"default:GroupMessage:12345": "家人"},
                "incognito": [" default:FriendMessage:7 ", "persona:Ghost", "persona: "]}"#,
        )
        .unwrap()
        .config;
        let m = ScopeMap::from_config(&c);
        assert!(m.is_incognito(&conv("default:FriendMessage:7"), None));
        assert!(m.is_incognito(&conv("default:GroupMessage:12345"), Some(" Ghost ")));
        assert!(!m.is_incognito(&conv("default:GroupMessage:12345"), None));
        assert!(!m.is_incognito(&conv("default:GroupMessage:12345"), Some("Alice")));
        // An incognito persona does not make its conversation incognito for other personas.
        assert!(!m.is_incognito(&conv("default:FriendMessage:8"), Some("")));
        assert_eq!(m.summary().incognito, 2);
        assert_eq!(
            m.incognito_keys(),
            ["default:FriendMessage:7", "persona:Ghost"]
        );
        assert_eq!(m.ignored().len(), 1);
        assert!(m.ignored()[0].reason.starts_with("incognito entry"));
        // Recall still resolves the scope as usual.
        assert_eq!(
            m.resolve(&conv("default:FriendMessage:7"), None).scope,
            ScopeName::public()
        );
    }
}
