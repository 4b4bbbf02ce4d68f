//! Applying a plan: embed first (the step most likely to fail leaves nothing behind), then
//! compare-and-set strengths, add each new memory or reinforce the stored copy of its fact
//! (`door::repetition`, as a remember does), insert what merges make, and delete what they
//! replace. Every row is one the door admitted (`door::Admitted`): a new memory in the scope
//! the job was accepted with, a merge only of memories of that scope, into it.

use std::collections::BTreeMap;

use chrono::Utc;

use super::*;
use crate::memory::door::{self, derived_id, Admitted, Refusal};
use crate::store::Selection;
use crate::store::{MemoryRecord, StrengthChange, StrengthSet};

pub(crate) async fn apply(
    writes: &Writes,
    job: &FeedbackJob,
    plan: &FeedbackPlan,
) -> Result<JobOutcome, MemoryError> {
    let mut refused = plan.refused.clone();
    // Each new memory is written under its fact's derived id (so the same fact from another
    // write path or process lands on one row), or under the id assigned at acceptance when its
    // text is no fact. Insert-if-missing by those ids: a replay never duplicates.
    let derived: Vec<Option<String>> = plan
        .new_memories
        .iter()
        .map(|m| derived_id(job.scope.as_str(), &m.content))
        .collect();
    let mut ids: Vec<String> = plan.new_memories.iter().map(|m| m.id.clone()).collect();
    ids.extend(derived.iter().flatten().cloned());
    for m in &plan.merges {
        ids.push(m.new_id.clone());
        ids.extend(m.delete_ids.iter().cloned());
    }
    // On the latest version: a member another process erased a moment ago must count as gone,
    // or the merge would write its text back.
    writes.store.refresh().await?;
    let existing: BTreeMap<String, MemoryRecord> = writes
        .store
        .get_by_ids(&ids, None)
        .await?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    let mut news: Vec<(Admitted, String)> = Vec::new(); // (row, id assigned at acceptance)
    let mut created: Vec<String> = Vec::new();
    for (m, derived) in plan.new_memories.iter().zip(&derived) {
        match written_before(job, m, derived.as_deref(), &existing) {
            Some(id) => created.push(id),
            None => {
                let mut admitted = new_memory_record(job, m);
                admitted.set_id(derived.clone().unwrap_or_else(|| m.id.clone()));
                news.push((admitted, m.id.clone()));
            }
        }
    }
    let (merges, merged_records) = live_merges(job, plan, &existing, &mut refused);
    // Embed before writing anything: the step most likely to fail leaves no partial effect.
    let texts: Vec<String> = news
        .iter()
        .map(|(r, _)| r.record().content.clone())
        .chain(merged_records.iter().map(|r| r.record().content.clone()))
        .collect();
    let mut vectors = if texts.is_empty() {
        Vec::new()
    } else {
        writes
            .embedder
            .embed(crate::embed::TextRole::Passage, texts)
            .await?
    };
    let merged_vectors = vectors.split_off(news.len().min(vectors.len()));
    let reinforced = reinforce(writes, plan).await?;
    let mut deduplicated = Vec::new();
    for ((admitted, accepted_id), vector) in news.into_iter().zip(vectors) {
        let written = writes
            .repetitions
            .add_or_reinforce(admitted, vector, accepted_id)
            .await?;
        match written.deduplicated {
            true => deduplicated.push(written.memory.id),
            false => created.push(written.memory.id),
        }
    }
    if !merged_records.is_empty() {
        let rows = merged_records.into_iter().zip(merged_vectors).collect();
        door::insert_missing(&writes.store, rows).await?;
    }
    // Every merge's members in one commit, after the merged rows exist.
    let members: Vec<String> = merges
        .iter()
        .flat_map(|m| m.delete_ids.iter().cloned())
        .collect();
    if !members.is_empty() {
        writes
            .store
            .writer()
            .delete(Selection::ids(members).rows_sql())
            .await?;
    }
    Ok(JobOutcome {
        job_id: job.job_id.clone(),
        state: JobState::Done,
        reinforced,
        created,
        deduplicated,
        merged: merges.iter().map(|m| m.new_id.clone()).collect(),
        refused,
        error: None,
        attempts: 1,
        finished_at: Utc::now(),
    })
}

/// The merges of `plan` still to apply, with the merged rows to write (none for a merge whose
/// row an earlier attempt already wrote: only its deletes may be left). A merge whose member a
/// newer job merged or deleted since the plan was made is refused: writing its text now would
/// bring back what that job removed.
fn live_merges<'p>(
    job: &FeedbackJob,
    plan: &'p FeedbackPlan,
    existing: &BTreeMap<String, MemoryRecord>,
    refused: &mut Vec<(String, String)>,
) -> (Vec<&'p MergePlan>, Vec<Admitted>) {
    let mut merged_records = Vec::new();
    let mut merges: Vec<&MergePlan> = Vec::new();
    for m in &plan.merges {
        if existing.contains_key(&m.new_id) {
            merges.push(m);
        } else if m.delete_ids.iter().all(|id| existing.contains_key(id)) {
            match merged_record(job, m) {
                Ok(admitted) => {
                    merged_records.push(admitted);
                    merges.push(m);
                }
                Err(why) => refused.push((
                    format!("merge[{}]", m.delete_ids.join(",")),
                    why.as_str().to_string(),
                )),
            }
        } else {
            refused.push((
                format!("merge[{}]", m.delete_ids.join(",")),
                "superseded: a memory in the group changed since the job was planned".into(),
            ));
        }
    }
    (merges, merged_records)
}

/// The id under which an earlier attempt of this job already wrote new memory `m`, if one did:
/// the row under the id assigned at acceptance, or the row under the fact's id that this
/// conversation wrote since the job was accepted with the same fact (an earlier attempt, or
/// a write racing it; either way the fact is stored and reinforcing it again would count the
/// job twice).
fn written_before(
    job: &FeedbackJob,
    m: &NewMemoryJob,
    derived: Option<&str>,
    existing: &BTreeMap<String, MemoryRecord>,
) -> Option<String> {
    if existing.contains_key(&m.id) {
        return Some(m.id.clone());
    }
    let row = existing.get(derived?)?;
    let ours = row.conversation_id.as_deref() == Some(job.conversation_id.as_str())
        && row.created_at.is_some_and(|t| t >= job.accepted_at)
        && crate::memory::fact::same_fact(&row.content, &m.content);
    ours.then(|| row.id.clone())
}

/// Set the planned strengths, only where a row still has the strength the plan saw (or
/// already has the new one): an old plan replayed late never overwrites a newer job's work.
async fn reinforce(writes: &Writes, plan: &FeedbackPlan) -> Result<usize, MemoryError> {
    let changes: Vec<StrengthChange> = plan
        .reinforce
        .iter()
        .map(|(id, new)| StrengthChange {
            id: id.clone(),
            expected: plan.expected_strength.get(id).copied(),
            new: *new,
        })
        .collect();
    Ok(set_strengths(writes, &changes).await? as usize)
}

/// Write strength changes in one commit, however many rows and values: each row gets its own
/// new strength where it still has the expected one. A useful memory was just used, so its
/// decay clock (`last_recalled_at`) restarts too. Returns rows changed.
pub(crate) async fn set_strengths(
    writes: &Writes,
    changes: &[StrengthChange],
) -> Result<u64, MemoryError> {
    let set = StrengthSet::new(changes.to_vec(), Utc::now());
    Ok(writes.store.writer().set_strengths(set).await?)
}

/// A new memory of `job`, in the scope the job was accepted with.
pub(crate) fn new_memory_record(job: &FeedbackJob, m: &NewMemoryJob) -> Admitted {
    let draft = MemoryRecord {
        id: m.id.clone(),
        content: m.content.clone(),
        reasoning: m.reasoning.clone(),
        tags: m.tags.clone(),
        memory_type: m.memory_type.clone(),
        strength: PASSIVE_STRENGTH,
        is_active: false,
        conversation_id: Some(job.conversation_id.as_str().to_string()),
        created_at: Some(Utc::now()),
        memory_scope: Some(job.scope.as_str().to_string()),
        scope_source: Some(job.scope_source.as_str().to_string()),
        expires_at: m.expires_at,
        last_recalled_at: None,
        speaker_id: None,
        speaker_name: None,
        source_ids: vec![],
        about_ids: vec![],
        source_conversations: vec![],
    };
    Admitted::reflected(&job.conversation_id, &job.scope, job.scope_source, draft)
}

/// The memory merge `m` of `job` makes, when its plan merges into the job's own scope (a plan
/// journaled by an older release may not: it is refused).
pub(crate) fn merged_record(job: &FeedbackJob, m: &MergePlan) -> Result<Admitted, Refusal> {
    let draft = MemoryRecord {
        id: m.new_id.clone(),
        content: m.content.clone(),
        reasoning: Some(format!("merged from {} memories", m.delete_ids.len())),
        tags: m.tags.clone(),
        memory_type: m.memory_type.clone(),
        strength: m.strength,
        is_active: m.is_active,
        conversation_id: Some(job.conversation_id.as_str().to_string()),
        created_at: Some(Utc::now()),
        memory_scope: Some(m.memory_scope.clone()),
        scope_source: Some(m.scope_source.clone()),
        expires_at: m.expires_at,
        last_recalled_at: None,
        speaker_id: None,
        speaker_name: None,
        source_ids: vec![],
        about_ids: vec![],
        source_conversations: m.source_conversations.clone(),
    };
    Admitted::merged(&job.conversation_id, &job.scope, job.scope_source, draft)
}
