//! The remember path: validate, derive the scope (the one place, `derive_scope`), embed, and
//! then either add the memory or, when its scope already holds the same fact (`memory::fact`),
//! reinforce that memory instead of adding a second copy.
//!
//! Reinforcing means: strength raised ([`REINFORCE_STEP`] above the higher of the two, at most
//! 100), `last_recalled_at` (the decay clock, "last seen") set to now, tags unioned, and the
//! later of the two expiries kept (no expiry beats any date). The row's text, scope, type and
//! creation time stay.
//!
//! The same fact is found three ways, cheapest first: the row with the fact's derived id in
//! this scope; for rows written before ids were derived, the nearest few vectors of this scope
//! whose text folds to the same; and at commit, the writer's merge on the primary key, which
//! tells a remember that another process inserted the id first.

use std::time::Instant;

use chrono::{DateTime, Utc};

use super::{conversation, invalid, MemoryService, DEFAULT_STRENGTH};
use crate::embed::TextRole;
use crate::memory::fact;
use crate::memory::model::{Memory, RememberRequest, Remembered};
use crate::memory::new_memory::{NewMemory, ValidMemory};
use crate::memory::MemoryError;
use crate::scope::derive_scope;
use crate::store::schema::{COL_EXPIRES_AT, COL_LAST_RECALLED_AT, COL_STRENGTH, COL_TAGS};
use crate::store::{sql_literal, timestamp_literal};
use crate::store::{MemoryRecord, NearestVisible, RowFilter, ScopeSet, SearchRequest, Selection};

/// How much a repetition raises a memory's strength.
pub(crate) const REINFORCE_STEP: i32 = 10;
/// Nearest rows of the scope compared by text, for facts stored before ids were derived.
const SAME_FACT_NEIGHBOURS: usize = 4;
/// Looks for the fact (and compare-and-set reinforcements of it) before a remember settles: a
/// row that keeps changing under concurrent repetitions is answered as it is.
const REINFORCE_ATTEMPTS: usize = 6;

/// What a repetition brings to the memory it reinforces.
struct Repetition<'a> {
    strength: i32,
    tags: &'a [String],
    expires_at: Option<DateTime<Utc>>,
}

impl MemoryService {
    /// Write one memory from the remember tool (active, caller-chosen strength), or reinforce
    /// the memory of its scope that states the same fact. `None` when the conversation is
    /// incognito: the input is still validated, nothing is embedded or stored.
    pub async fn remember(&self, req: RememberRequest) -> Result<Option<Remembered>, MemoryError> {
        let started = Instant::now();
        let conversation = conversation(&req.conversation_id)?;
        let strength = req.strength.unwrap_or(DEFAULT_STRENGTH);
        if !(1..=100).contains(&strength) {
            return Err(invalid("strength", "strength must be between 1 and 100"));
        }
        let ValidMemory {
            content,
            reasoning,
            tags,
            memory_type,
        } = NewMemory {
            content: req.content,
            reasoning: req.reasoning,
            tags: req.tags,
            memory_type: req.memory_type,
        }
        .parse()?;
        let now = Utc::now();
        let explicit = match req.expires_at.as_deref() {
            Some(raw) => Some(crate::memory::retention::parse_expires_at(raw, now)?),
            None => None,
        };
        let expires_at = self
            .settings
            .retention
            .expires_at(&memory_type, now, explicit);

        let map = self.scopes.snapshot();
        let Some(scope) = derive_scope(&map, &conversation, req.persona.as_deref()) else {
            return Ok(None);
        };
        // Concurrent remembers share a commit: the writer waits for announced appends.
        let _coming = self.store.announce_append();
        let vector = self
            .embedder
            .embed(TextRole::Passage, vec![content.clone()])
            .await?
            .pop()
            .ok_or_else(|| MemoryError::Internal("embedder returned no vector".into()))?;
        let folded = fact::fold(&content);
        let id = match folded.is_empty() {
            true => uuid::Uuid::now_v7().to_string(),
            false => fact::fact_id(scope.scope.as_str(), &folded),
        };
        let record = MemoryRecord {
            id,
            content,
            reasoning,
            tags,
            memory_type,
            strength: strength as i32,
            is_active: true,
            conversation_id: Some(conversation.as_str().to_string()),
            created_at: Some(now),
            memory_scope: Some(scope.scope.as_str().to_string()),
            scope_source: Some(scope.source.as_str().to_string()),
            expires_at,
            last_recalled_at: None,
        };
        let outcome = self
            .add_or_reinforce(record, vector, !folded.is_empty())
            .await?;
        self.latency.record(started.elapsed());
        tracing::info!(
            conversation_id = conversation.as_str(),
            memory_scope = scope.scope.as_str(),
            scope_source = scope.source.as_str(),
            deduplicated = outcome.deduplicated,
            ms = started.elapsed().as_millis() as u64,
            "remembered"
        );
        if !outcome.deduplicated {
            if let Err(e) = self.search.maybe_build_index().await {
                tracing::warn!(error = %e, "could not check whether a vector index is due");
            }
        }
        Ok(Some(outcome))
    }

    /// Reinforce the memory of `record`'s scope that states the same fact, or add `record`.
    async fn add_or_reinforce(
        &self,
        record: MemoryRecord,
        vector: Vec<f32>,
        is_fact: bool,
    ) -> Result<Remembered, MemoryError> {
        let repetition = Repetition {
            strength: record.strength,
            tags: &record.tags,
            expires_at: record.expires_at,
        };
        let scope = record.memory_scope.clone().unwrap_or_default();
        // The fact's row, when every reinforcement of it lost a race to another one.
        let mut unreinforced: Option<MemoryRecord> = None;
        let mut id_taken = false;
        for _ in 0..REINFORCE_ATTEMPTS {
            if !is_fact {
                break;
            }
            match self.same_fact(&scope, &record, &vector).await? {
                Some(existing) => match self
                    .reinforce(&scope, existing.clone(), &repetition)
                    .await?
                {
                    Some(memory) => {
                        return Ok(Remembered {
                            memory,
                            deduplicated: true,
                        })
                    }
                    None => unreinforced = Some(existing), // changed meanwhile: look again
                },
                // The id is held by a row that is no longer this fact (it was corrected).
                None if id_taken => break,
                // While a re-embed stages vectors, a merge would lose every commit race to its
                // batches (their transactions name no inserted keys, so Lance cannot tell them
                // apart from inserts): remembers then append plainly, and only two processes
                // remembering one fact in the same instant of a re-embed can leave two rows.
                None if !self.reembed.vectors_current() => break,
                None => {
                    let present = self
                        .store
                        .writer()
                        .append_once(vec![(record.clone(), vector.clone())])
                        .await?;
                    if present.is_empty() {
                        return Ok(Remembered {
                            memory: record.into(),
                            deduplicated: false,
                        });
                    }
                    // Another process inserted this id first: the next look reads its row.
                    id_taken = true;
                }
            }
        }
        if let Some(existing) = unreinforced {
            tracing::debug!("a repeated fact's reinforcement kept losing races; left as it is");
            return Ok(Remembered {
                memory: existing.into(),
                deduplicated: true,
            });
        }
        // No fact to fold into (only punctuation), a re-embed under way, or the row under this
        // fact's id now holds another text (it was corrected): a row of its own.
        let mut record = record;
        if is_fact && id_taken {
            record.id = uuid::Uuid::now_v7().to_string();
        }
        self.store.append(vec![(record.clone(), vector)]).await?;
        Ok(Remembered {
            memory: record.into(),
            deduplicated: false,
        })
    }

    /// The unexpired memory of `scope` (that scope only: never `public` for a private scope,
    /// never legacy NULL rows) whose text is the same fact as `record`'s.
    async fn same_fact(
        &self,
        scope: &str,
        record: &MemoryRecord,
        vector: &[f32],
    ) -> Result<Option<MemoryRecord>, MemoryError> {
        let now = Utc::now();
        let own = RowFilter {
            scopes: Some(ScopeSet::only(scope)),
            alive_at: Some(now),
            created: None,
        };
        let visible = own.to_sql();
        self.store.refresh().await?;
        let by_id = self
            .store
            .get_by_ids(std::slice::from_ref(&record.id), visible.as_deref())
            .await?;
        if let Some(found) = by_id
            .into_iter()
            .find(|r| fact::same_fact(&r.content, &record.content))
        {
            return Ok(Some(found));
        }
        // While a re-embed runs the table's vectors are another model's: nothing to compare.
        if !self.reembed.vectors_current() {
            return Ok(None);
        }
        let hits = self
            .vectors
            .nearest(&SearchRequest {
                vector: vector.to_vec(),
                rows: own,
                k: SAME_FACT_NEIGHBOURS,
                rescale: None,
            })
            .await?;
        Ok(hits
            .into_iter()
            .map(|h| h.record)
            .find(|r| fact::same_fact(&r.content, &record.content)))
    }

    /// Fold a repetition into `existing`, compare-and-set on its strength and expiry. `None`
    /// when the row changed or went away meanwhile (the caller looks again).
    async fn reinforce(
        &self,
        scope: &str,
        existing: MemoryRecord,
        repetition: &Repetition<'_>,
    ) -> Result<Option<Memory>, MemoryError> {
        let now = Utc::now();
        let strength = (existing.strength.max(repetition.strength) + REINFORCE_STEP).min(100);
        let mut tags = existing.tags.clone();
        for tag in repetition.tags {
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
        let expires_at = match (existing.expires_at, repetition.expires_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        let unchanged = format!(
            "{COL_STRENGTH} = {} AND {}",
            existing.strength,
            match existing.expires_at {
                Some(t) => format!("{COL_EXPIRES_AT} = {}", timestamp_literal(t)),
                None => format!("{COL_EXPIRES_AT} IS NULL"),
            }
        );
        let rows = Selection::ids([existing.id.clone()])
            .within(ScopeSet::only(scope))
            .and_sql(&unchanged);
        let mut columns = vec![
            (COL_STRENGTH.to_string(), strength.to_string()),
            (COL_LAST_RECALLED_AT.to_string(), timestamp_literal(now)),
        ];
        if expires_at != existing.expires_at {
            let value = match expires_at {
                Some(t) => timestamp_literal(t),
                None => "CAST(NULL AS TIMESTAMP)".to_string(),
            };
            columns.push((COL_EXPIRES_AT.to_string(), value));
        }
        if tags != existing.tags {
            columns.push((COL_TAGS.to_string(), tags_literal(&tags)));
        }
        let changed = self.store.writer().update(rows, columns).await?;
        if changed == 0 {
            return Ok(None);
        }
        let mut memory: Memory = existing.into();
        memory.strength = strength;
        memory.tags = tags;
        memory.expires_at =
            expires_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
        Ok(Some(memory))
    }
}

/// A `List<Utf8>` literal for an update: `make_array('a', 'b')` (never empty: an empty union
/// leaves the column alone).
fn tags_literal(tags: &[String]) -> String {
    let items: Vec<String> = tags.iter().map(|t| sql_literal(t)).collect();
    format!("make_array({})", items.join(", "))
}
