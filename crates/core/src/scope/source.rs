//! How a row's scope was decided (the `scope_source` column, docs/design.md rule 6).

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a scope was decided; stored per row so audits and a backfill revert can tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopeSource {
    /// The conversation id is a key of the map.
    Conversation,
    /// A `persona:<name>` key of the map.
    Persona,
    /// Not in the map; the unmapped policy decided.
    Unmapped,
    /// Filled in for a legacy row by the backfill (revertible).
    Backfill,
}

impl ScopeSource {
    /// Column spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ScopeSource::Conversation => "conversation",
            ScopeSource::Persona => "persona",
            ScopeSource::Unmapped => "unmapped",
            ScopeSource::Backfill => "backfill",
        }
    }

    /// Parses the column spelling; `None` for anything else (e.g. a value written by a newer
    /// version).
    pub fn parse(value: &str) -> Option<ScopeSource> {
        match value {
            "conversation" => Some(ScopeSource::Conversation),
            "persona" => Some(ScopeSource::Persona),
            "unmapped" => Some(ScopeSource::Unmapped),
            "backfill" => Some(ScopeSource::Backfill),
            _ => None,
        }
    }
}

impl fmt::Display for ScopeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in [
            ScopeSource::Conversation,
            ScopeSource::Persona,
            ScopeSource::Unmapped,
            ScopeSource::Backfill,
        ] {
            assert_eq!(ScopeSource::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.as_str())
            );
        }
        assert_eq!(ScopeSource::Backfill.as_str(), "backfill");
        assert_eq!(ScopeSource::parse("Persona"), None);
    }
}
