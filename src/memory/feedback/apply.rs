//! Applying a plan: embed first (the step most likely to fail leaves nothing behind), then
//! compare-and-set strengths, insert what is missing, and delete what merges replace.

use std::collections::BTreeSet;

use chrono::Utc;

use super::shared::Shared;
use super::*;
use crate::store::Selection;
use crate::store::{MemoryRecord, StrengthChange, StrengthSet};

pub(super) async fn apply(
    shared: &Shared,
    job: &FeedbackJob,
    plan: &FeedbackPlan,
) -> Result<JobOutcome, MemoryError> {
    let mut refused = plan.refused.clone();
    // Insert-if-missing, by the ids assigned at acceptance: a replay never duplicates.
    let mut ids: Vec<String> = plan.new_memories.iter().map(|m| m.id.clone()).collect();
    for m in &plan.merges {
        ids.push(m.new_id.clone());
        ids.extend(m.delete_ids.iter().cloned());
    }
    // On the latest version: a member another process erased a moment ago must count as gone,
    // or the merge would write its text back.
    shared.store.refresh().await?;
    let existing: BTreeSet<String> = shared
        .store
        .get_by_ids(&ids, None)
        .await?
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut records: Vec<MemoryRecord> = plan
        .new_memories
        .iter()
        .filter(|m| !existing.contains(&m.id))
        .map(|m| new_memory_record(job, m))
        .collect();
    let mut merges: Vec<&MergePlan> = Vec::new();
    for m in &plan.merges {
        if existing.contains(&m.new_id) {
            merges.push(m); // applied before a crash: only the deletes may be left
        } else if m.delete_ids.iter().all(|id| existing.contains(id)) {
            records.push(merged_record(job, m));
            merges.push(m);
        } else {
            // A newer job merged or deleted a member since this plan was made: writing the
            // merged text now would bring back what that job removed.
            refused.push((
                format!("merge[{}]", m.delete_ids.join(",")),
                "superseded: a memory in the group changed since the job was planned".into(),
            ));
        }
    }
    // Embed before writing anything: the step most likely to fail leaves no partial effect.
    let vectors = if records.is_empty() {
        Vec::new()
    } else {
        shared
            .embedder
            .embed(
                crate::embed::TextRole::Passage,
                records.iter().map(|r| r.content.clone()).collect(),
            )
            .await?
    };
    let reinforced = reinforce(shared, plan).await?;
    if !records.is_empty() {
        shared
            .store
            .writer()
            .insert_missing(records.into_iter().zip(vectors).collect())
            .await?;
    }
    for m in &merges {
        shared
            .store
            .writer()
            .delete(Selection::ids(m.delete_ids.iter().cloned()).rows_sql())
            .await?;
    }
    Ok(JobOutcome {
        job_id: job.job_id.clone(),
        state: JobState::Done,
        reinforced,
        created: plan.new_memories.iter().map(|m| m.id.clone()).collect(),
        merged: merges.iter().map(|m| m.new_id.clone()).collect(),
        refused,
        error: None,
        attempts: 1,
        finished_at: Utc::now(),
    })
}

/// Set the planned strengths, only where a row still has the strength the plan saw (or
/// already has the new one): an old plan replayed late never overwrites a newer job's work.
async fn reinforce(shared: &Shared, plan: &FeedbackPlan) -> Result<usize, MemoryError> {
    let changes: Vec<StrengthChange> = plan
        .reinforce
        .iter()
        .map(|(id, new)| StrengthChange {
            id: id.clone(),
            expected: plan.expected_strength.get(id).copied(),
            new: *new,
        })
        .collect();
    Ok(set_strengths(shared, &changes).await? as usize)
}

/// Write strength changes in one commit, however many rows and values: each row gets its own
/// new strength where it still has the expected one. A useful memory was just used, so its
/// decay clock (`last_recalled_at`) restarts too. Returns rows changed.
pub(super) async fn set_strengths(
    shared: &Shared,
    changes: &[StrengthChange],
) -> Result<u64, MemoryError> {
    let set = StrengthSet::new(changes.to_vec(), Utc::now());
    Ok(shared.store.writer().set_strengths(set).await?)
}

pub(super) fn new_memory_record(job: &FeedbackJob, m: &NewMemoryJob) -> MemoryRecord {
    MemoryRecord {
        id: m.id.clone(),
        content: m.content.clone(),
        reasoning: m.reasoning.clone(),
        tags: m.tags.clone(),
        memory_type: m.memory_type.clone(),
        strength: PASSIVE_STRENGTH,
        is_active: false,
        conversation_id: Some(job.conversation_id.clone()),
        created_at: Some(Utc::now()),
        memory_scope: Some(job.scope.clone()),
        scope_source: Some(job.scope_source.clone()),
        expires_at: m.expires_at,
        last_recalled_at: None,
    }
}

fn merged_record(job: &FeedbackJob, m: &MergePlan) -> MemoryRecord {
    MemoryRecord {
        id: m.new_id.clone(),
        content: m.content.clone(),
        reasoning: Some(format!("merged from {} memories", m.delete_ids.len())),
        tags: m.tags.clone(),
        memory_type: m.memory_type.clone(),
        strength: m.strength,
        is_active: m.is_active,
        conversation_id: Some(job.conversation_id.clone()),
        created_at: Some(Utc::now()),
        memory_scope: Some(m.memory_scope.clone()),
        scope_source: Some(m.scope_source.clone()),
        expires_at: m.expires_at,
        last_recalled_at: None,
    }
}
