//! Messages accepted but not embedded yet. Embedding is the slow stage (about 50 passages/s on
//! two cores with e5), so under a burst a message waits seconds to minutes for its vector; it
//! is searchable by keyword from the moment it is accepted, here, and by vector once its row
//! is written. The age of the oldest one is the vector-search lag `/v1/status` and `/metrics`
//! show.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::shared_terms::{QueryTerms, SplitWords};
use crate::store::{MemoryRecord, RowFilter, ScopeSet};

/// Keyword hit on a message waiting for its vector: every term of the question in the text.
pub const ALL_TERMS_SCORE: f32 = 1.0;
/// Keyword hit on a waiting message that holds some of the question's terms.
pub const SOME_TERMS_SCORE: f32 = 0.5;

#[derive(Default)]
pub struct PendingMessages {
    rows: Mutex<HashMap<String, Waiting>>,
}

/// A message waiting for its vector: its row, its words (split once: under a burst every
/// recall reads thousands of waiting messages, and splitting them all again held the lock
/// that each accept needs), and since when.
struct Waiting {
    record: MemoryRecord,
    words: Option<SplitWords>,
    since: Instant,
}

impl PendingMessages {
    /// `record` waits, under the id of the job that writes it.
    pub(crate) fn add(&self, job_id: &str, record: MemoryRecord) {
        let waiting = Waiting {
            words: SplitWords::of(&record),
            record,
            since: Instant::now(),
        };
        if let Ok(mut rows) = self.rows.lock() {
            rows.insert(job_id.to_string(), waiting);
        }
    }

    /// These jobs are finished (written or dropped): the table answers for their messages now.
    pub(crate) fn remove<'a>(&self, job_ids: impl IntoIterator<Item = &'a str>) {
        if let Ok(mut rows) = self.rows.lock() {
            for id in job_ids {
                rows.remove(id);
            }
        }
    }

    /// Whether a message of `conversation_id` is still waiting (a consolidation pass waits
    /// for it, so it never reads half of what was said).
    pub(crate) fn holds_conversation(&self, conversation_id: &str) -> bool {
        self.rows.lock().is_ok_and(|rows| {
            rows.values()
                .any(|w| w.record.conversation_id.as_deref() == Some(conversation_id))
        })
    }

    /// Which of `ids` are messages waiting here in one of `scopes` (a forget by id reaches a
    /// message before its row exists).
    pub(crate) fn ids_within(&self, scopes: &ScopeSet, ids: &[String]) -> HashSet<String> {
        let Ok(rows) = self.rows.lock() else {
            return HashSet::new();
        };
        rows.values()
            .map(|w| &w.record)
            .filter(|r| ids.contains(&r.id))
            .filter(|r| {
                r.memory_scope
                    .as_deref()
                    .is_some_and(|s| scopes.names.iter().any(|n| n == s))
            })
            .map(|r| r.id.clone())
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.rows.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// How long the oldest waiting message has waited for its vector.
    pub(crate) fn lag(&self) -> Duration {
        self.rows
            .lock()
            .ok()
            .and_then(|r| r.values().map(|w| w.since.elapsed()).max())
            .unwrap_or_default()
    }

    /// Waiting messages the filter admits that hold a term of `text`, best first (every term,
    /// then newest), at most `limit`, each with its keyword score.
    pub(crate) fn matching(
        &self,
        rows: &RowFilter,
        text: &str,
        limit: usize,
    ) -> Vec<(MemoryRecord, f32)> {
        let Ok(waiting) = self.rows.lock() else {
            return Vec::new();
        };
        let terms = QueryTerms::of(text);
        let mut hits: Vec<(MemoryRecord, f32)> = waiting
            .values()
            .filter(|w| admitted(rows, &w.record))
            .filter_map(|w| {
                if terms.all_found_in_words(w.words.as_ref()) {
                    Some((w.record.clone(), ALL_TERMS_SCORE))
                } else if terms.found_in_words(w.words.as_ref()) {
                    Some((w.record.clone(), SOME_TERMS_SCORE))
                } else {
                    None
                }
            })
            .collect();
        hits.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| b.0.created_at.cmp(&a.0.created_at))
        });
        hits.truncate(limit);
        hits
    }
}

/// The filter's own rule, as the resident copy applies it: scope, expiry, window and tier.
fn admitted(rows: &RowFilter, r: &MemoryRecord) -> bool {
    rows.admits_scope(r.memory_scope.as_deref())
        && rows.admits_expiry(r.expires_at.map(|t| t.timestamp_micros()))
        && rows.admits_created(r.created_at.map(|t| t.timestamp_micros()))
        && rows.admits_type(&r.memory_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ScopeSet, Tier};

    fn message(id: &str, scope: &str, text: &str) -> MemoryRecord {
        let mut r = MemoryRecord::with_text(text, &[]);
        r.id = id.into();
        r.memory_type = super::super::MESSAGE_TYPE.into();
        r.memory_scope = Some(scope.into());
        r.created_at = Some(chrono::Utc::now());
        r
    }

    #[test]
    fn a_waiting_message_is_found_by_its_words_in_its_own_scope_only() {
        let pending = PendingMessages::default();
        pending.add("a", message("a", "家人", "妈妈对花生过敏，别点沙爹"));
        pending.add("b", message("b", "工作", "妈妈对花生过敏"));
        pending.add("c", message("c", "家人", "今天天气不错"));
        let rows = RowFilter {
            scopes: Some(ScopeSet {
                names: vec!["家人".into(), "public".into()],
                null: false,
            }),
            alive_at: Some(chrono::Utc::now()),
            created: None,
            tier: Some(Tier::Messages),
        };
        let hits = pending.matching(&rows, "花生", 5);
        let ids: Vec<&str> = hits.iter().map(|(r, _)| r.id.as_str()).collect();
        assert_eq!(ids, vec!["a"]);
        assert!(pending
            .matching(&rows.clone().in_tier(Tier::Memories), "花生", 5)
            .is_empty());
        let family = ScopeSet::only("家人");
        let asked = ["a".to_string(), "b".to_string(), "z".to_string()];
        assert_eq!(
            pending.ids_within(&family, &asked),
            HashSet::from(["a".to_string()])
        );
        pending.remove(["a"]);
        assert!(pending.matching(&rows, "花生", 5).is_empty());
        assert_eq!(pending.len(), 2);
    }
}
