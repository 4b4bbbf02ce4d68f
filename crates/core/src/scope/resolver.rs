//! The current scope map, swappable without locks.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::ScopeMap;

/// Holds the current [`ScopeMap`]; readers never block and a reload is one atomic swap.
#[derive(Debug)]
pub struct ScopeResolver {
    current: ArcSwap<ScopeMap>,
}

impl ScopeResolver {
    /// Starts with `map`.
    pub fn new(map: ScopeMap) -> ScopeResolver {
        ScopeResolver {
            current: ArcSwap::from_pointee(map),
        }
    }

    /// The current map. Load it once per request and use it for both resolve and filter.
    pub fn snapshot(&self) -> Arc<ScopeMap> {
        self.current.load_full()
    }

    /// Atomically installs `map` and returns the previous one.
    pub fn replace(&self, map: ScopeMap) -> Arc<ScopeMap> {
        self.current.swap(Arc::new(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UnmappedPolicy;
    use crate::scope::ConversationId;
    use serde_json::json;

    #[test]
    fn snapshot_survives_replace() {
        let r = ScopeResolver::new(ScopeMap::build(
            &json!({"a": "one"}),
            UnmappedPolicy::Public,
        ));
        let before = r.snapshot();
        let old = r.replace(ScopeMap::build(
            &json!({"a": "two"}),
            UnmappedPolicy::Public,
        ));
        let id = ConversationId::parse("a").unwrap();
        assert_eq!(before.resolve(&id, None).scope.as_str(), "one");
        assert_eq!(old.resolve(&id, None).scope.as_str(), "one");
        assert_eq!(r.snapshot().resolve(&id, None).scope.as_str(), "two");
    }
}
