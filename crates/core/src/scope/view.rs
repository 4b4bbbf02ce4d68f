//! The loaded scope map as the operator sees it (`GET /v1/scope_map`, the operator page).

use serde::Serialize;

use super::{IgnoredEntry, MapSummary, ScopeMap};

/// One applied entry: a conversation id or `persona:<name>` key and its scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapEntry {
    pub key: String,
    pub scope: String,
}

/// The map as loaded: applied entries (sorted by key), ignored entries with the reason and the
/// private scope they fail closed to, the unmapped policy and the rollback switch.
#[derive(Debug, Clone, Serialize)]
pub struct MapView {
    pub entries: Vec<MapEntry>,
    pub ignored: Vec<IgnoredEntry>,
    /// Incognito conversation ids and `persona:<name>` keys (their writes are never stored).
    pub incognito: Vec<String>,
    pub unmapped_scope: &'static str,
    pub scope_filter: &'static str,
    pub summary: MapSummary,
}

impl ScopeMap {
    /// What this snapshot applies, for display. Read-only: nothing here changes resolution.
    pub fn view(&self) -> MapView {
        let mut entries: Vec<MapEntry> = self
            .entries()
            .iter()
            .map(|(key, scope)| MapEntry {
                key: key.clone(),
                scope: scope.as_str().to_string(),
            })
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        MapView {
            entries,
            ignored: self.ignored().to_vec(),
            incognito: self
                .incognito_keys()
                .into_iter()
                .map(String::from)
                .collect(),
            unmapped_scope: self.unmapped().as_str(),
            scope_filter: self.filter_mode().as_str(),
            summary: self.summary(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::UnmappedPolicy;
    use crate::scope::ScopeMap;
    use serde_json::json;

    #[test]
    fn view_lists_entries_sorted_and_ignored_with_reason() {
        let map = ScopeMap::build(
            &json!({"b": "工作", "a": "家人", "bad": "家 人"}),
            UnmappedPolicy::Conversation,
        );
        let v = map.view();
        let keys: Vec<(&str, &str)> = v
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.scope.as_str()))
            .collect();
        assert_eq!(keys, [("a", "家人"), ("b", "工作")]);
        assert_eq!(v.ignored.len(), 1);
        assert_eq!(v.ignored[0].key, "bad");
        assert!(!v.ignored[0].reason.is_empty());
        assert!(v.ignored[0]
            .fails_closed_to
            .as_deref()
            .is_some_and(|s| s.starts_with("c_")));
        assert_eq!(v.unmapped_scope, "conversation");
        assert_eq!(v.scope_filter, "enforce");
        assert_eq!(v.summary.entries, 2);
    }
}
