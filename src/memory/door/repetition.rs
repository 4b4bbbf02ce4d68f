//! A repeated fact: find the row of a scope that already states it (`memory::fact`), and
//! reinforce that row instead of adding a second copy. Every path that adds memories from
//! text goes through here with a row the door admitted (the remember tool, a reflection's new
//! memories, the rules and the LLM pass), so a fact said twice is one row whichever way it came.
//!
//! Reinforcing means: strength raised ([`REINFORCE_STEP`] above the higher of the two, at most
//! 100), `last_recalled_at` (the decay clock, "last seen") set to now, tags unioned, and the
//! later of the two expiries kept (no expiry beats any date). The row's text, scope, type and
//! creation time stay.
//!
//! The same fact is found three ways, cheapest first: the nearest few vectors of the scope
//! whose text folds to the same (the resident copy, no table query; this also finds rows
//! written before ids were derived); at commit, the writer's merge on the primary key, which
//! tells a write that the table holds the fact's derived id already (another process wrote it
//! a moment ago, or a far wording); and then that row, read by id on the latest version.
//! A new fact, the common case, so costs one neighbour search before its commit: with a table
//! query before every commit, 16 clients remembered 50 memories/s with MiniLM where plain
//! appends had made 131 (release, `make bench-embedding`).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::Admitted;
use crate::memory::fact;
use crate::memory::model::{Memory, Remembered};
use crate::memory::MemoryError;
use crate::migrate::reembed::ReembedHandle;
use crate::store::schema::{COL_EXPIRES_AT, COL_LAST_RECALLED_AT, COL_STRENGTH, COL_TAGS};
use crate::store::Store;
use crate::store::{sql_literal, timestamp_literal};
use crate::store::{
    MemoryRecord, NearestVisible, RowFilter, ScopeSet, SearchRequest, Selection, Tier,
};

/// How much a repetition raises a memory's strength.
pub(crate) const REINFORCE_STEP: i32 = 10;
/// Nearest rows of the scope compared by text, for facts stored before ids were derived.
const SAME_FACT_NEIGHBOURS: usize = 4;
/// Looks for the fact (and compare-and-set reinforcements of it) before a write settles: a
/// row that keeps changing under concurrent repetitions is answered as it is.
const REINFORCE_ATTEMPTS: usize = 6;

/// Finds and reinforces the stored copy of a fact.
#[derive(Clone)]
pub(crate) struct Repetitions {
    store: Store,
    vectors: Arc<dyn NearestVisible>,
    reembed: Arc<ReembedHandle>,
}

/// What a repetition brings to the memory it reinforces.
struct Repetition<'a> {
    strength: i32,
    tags: &'a [String],
    expires_at: Option<DateTime<Utc>>,
}

/// The id a memory of `scope` with `content` is written under: the fact's derived id, or
/// `None` when the text folds to nothing (only punctuation), which is never a fact.
pub(crate) fn derived_id(scope: &str, content: &str) -> Option<String> {
    let folded = fact::fold(content);
    (!folded.is_empty()).then(|| fact::fact_id(scope, &folded))
}

impl Repetitions {
    pub(crate) fn new(
        store: Store,
        vectors: Arc<dyn NearestVisible>,
        reembed: Arc<ReembedHandle>,
    ) -> Repetitions {
        Repetitions {
            store,
            vectors,
            reembed,
        }
    }

    /// Reinforce the memory of `record`'s scope that states the same fact, or add `record`.
    /// `record.id` is the fact's derived id ([`derived_id`]) when there is one; `fallback_id`
    /// is used instead when that id turns out to hold another text (it was corrected), or
    /// when the text is no fact.
    pub(crate) async fn add_or_reinforce(
        &self,
        admitted: Admitted,
        vector: Vec<f32>,
        fallback_id: String,
    ) -> Result<Remembered, MemoryError> {
        tracing::debug!(writer = admitted.writer().as_str(), "adding a memory");
        let mut record = admitted.into_record();
        let scope = record.memory_scope.clone().unwrap_or_default();
        let is_fact = derived_id(&scope, &record.content).as_deref() == Some(record.id.as_str());
        let repetition = Repetition {
            strength: record.strength,
            tags: &record.tags,
            expires_at: record.expires_at,
        };
        // The fact's row, when every reinforcement of it lost a race to another one.
        let mut unreinforced: Option<MemoryRecord> = None;
        let mut id_taken = false;
        for attempt in 0..REINFORCE_ATTEMPTS {
            if !is_fact {
                break;
            }
            // The first look is the resident neighbours only: the commit's merge on the id
            // catches a copy they miss (one another process just wrote, or a far wording),
            // and the next look reads it by id on the latest version. So a remember of a new
            // fact, the common case, costs no table query before its commit.
            let found = if attempt == 0 && self.reembed.vectors_current() {
                self.nearby(&scope, &record, &vector).await?
            } else {
                self.store.refresh().await?;
                self.find(&scope, &record, &vector).await?
            };
            match found {
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
                // apart from inserts): writes then append plainly, and only two processes
                // writing one fact in the same instant of a re-embed can leave two rows.
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
        if !is_fact || id_taken {
            record.id = fallback_id;
        }
        self.store.append(vec![(record.clone(), vector)]).await?;
        Ok(Remembered {
            memory: record.into(),
            deduplicated: false,
        })
    }

    /// [`Self::add_or_reinforce`] for many records (a feedback batch), with one commit for
    /// every fact whose copy is not stored yet instead of one per record. `rows` are
    /// `(admitted row, vector, fallback id)`; the answer is in their order.
    pub(crate) async fn add_or_reinforce_all(
        &self,
        rows: Vec<(Admitted, Vec<f32>, String)>,
    ) -> Result<Vec<Remembered>, MemoryError> {
        let mut done: Vec<Option<Remembered>> = vec![None; rows.len()];
        if self.reembed.vectors_current() {
            self.store.refresh().await?;
            // Facts no copy of is stored, each id once (a later repetition within the batch
            // reinforces the first below).
            let mut fresh: Vec<usize> = Vec::new();
            let mut ids = std::collections::HashSet::new();
            for (i, (admitted, vector, _)) in rows.iter().enumerate() {
                let record = admitted.record();
                let scope = record.memory_scope.as_deref().unwrap_or_default();
                let is_fact = derived_id(scope, &record.content).as_deref() == Some(&record.id);
                if is_fact
                    && !ids.contains(&record.id)
                    && self.find(scope, record, vector).await?.is_none()
                {
                    ids.insert(record.id.clone());
                    fresh.push(i);
                }
            }
            let batch = fresh
                .iter()
                .map(|&i| (rows[i].0.record().clone(), rows[i].1.clone()))
                .collect();
            let present = self.store.writer().append_once(batch).await?;
            for i in fresh {
                if !present.contains(&rows[i].0.record().id) {
                    done[i] = Some(Remembered {
                        memory: rows[i].0.record().clone().into(),
                        deduplicated: false,
                    });
                }
            }
        }
        // The rest one by one: a copy was found, another process wrote the id first, the text
        // is no fact, or a re-embed is under way.
        let mut answers = Vec::with_capacity(rows.len());
        for ((admitted, vector, fallback), done) in rows.into_iter().zip(done) {
            answers.push(match done {
                Some(written) => written,
                None => self.add_or_reinforce(admitted, vector, fallback).await?,
            });
        }
        Ok(answers)
    }

    /// The unexpired memory of `scope` (that scope only: never `public` for a private scope,
    /// never legacy NULL rows) whose text is the same fact as `record`'s, on the version the
    /// caller last refreshed to.
    pub(crate) async fn find(
        &self,
        scope: &str,
        record: &MemoryRecord,
        vector: &[f32],
    ) -> Result<Option<MemoryRecord>, MemoryError> {
        let visible = own_rows(scope).to_sql();
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
        self.nearby(scope, record, vector).await
    }

    /// The memory of `scope` among the nearest few vectors to `vector` whose text is the same
    /// fact as `record`'s (only while the table's vectors are the current model's).
    async fn nearby(
        &self,
        scope: &str,
        record: &MemoryRecord,
        vector: &[f32],
    ) -> Result<Option<MemoryRecord>, MemoryError> {
        let own = own_rows(scope);
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

/// The unexpired rows of `scope` alone: never `public` for a private scope, never legacy NULL
/// rows. A fact is looked for only there.
fn own_rows(scope: &str) -> RowFilter {
    RowFilter {
        scopes: Some(ScopeSet::only(scope)),
        alive_at: Some(Utc::now()),
        created: None,
        tier: Some(Tier::Memories),
    }
}

/// A `List<Utf8>` literal for an update: `make_array('a', 'b')` (never empty: an empty union
/// leaves the column alone).
fn tags_literal(tags: &[String]) -> String {
    let items: Vec<String> = tags.iter().map(|t| sql_literal(t)).collect();
    format!("make_array({})", items.join(", "))
}
