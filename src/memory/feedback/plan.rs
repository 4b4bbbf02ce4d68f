//! Planning a job: check every id against what the conversation may see, and decide the exact
//! changes as absolute values (journaled, so a replay makes the same ones).

use std::collections::{BTreeSet, HashMap};

use super::*;
use crate::memory::door;
use crate::memory::redact::redact;
use crate::store::MemoryRecord;

/// Visible to the job's conversation: its own scope, public, and NULL while in migration mode.
/// What recall would show the job's conversation: its scope or public (or a legacy NULL row
/// while migration mode is on), and not expired.
fn visible(job: &FeedbackJob, r: &MemoryRecord, null_visible: bool) -> bool {
    if r.expires_at.is_some_and(|t| t <= chrono::Utc::now()) {
        return false;
    }
    match r.memory_scope.as_deref() {
        Some(s) => s == job.scope.as_str() || s == "public",
        None => null_visible,
    }
}

/// The ids a job's plan reads.
pub(crate) fn ids_read(job: &FeedbackJob) -> BTreeSet<String> {
    let mut wanted: BTreeSet<String> = job.useful_memory_ids.iter().cloned().collect();
    for g in &job.merge_groups {
        wanted.extend(g.ids.iter().cloned());
    }
    wanted
}

pub(crate) async fn make_plan(
    writes: &Writes,
    job: &FeedbackJob,
) -> Result<FeedbackPlan, MemoryError> {
    let wanted = ids_read(job);
    writes.store.refresh().await?;
    let rows = writes
        .store
        .get_by_ids(&wanted.into_iter().collect::<Vec<_>>(), None)
        .await?;
    let by_id: HashMap<String, MemoryRecord> =
        rows.into_iter().map(|r| (r.id.clone(), r)).collect();
    Ok(plan_from(job, &by_id, writes.gate.is_on()))
}

/// Plan a job against the rows it reads (`by_id`: the table as it stands, or as the earlier
/// jobs of a batch leave it).
pub(crate) fn plan_from(
    job: &FeedbackJob,
    by_id: &HashMap<String, MemoryRecord>,
    null_visible: bool,
) -> FeedbackPlan {
    let mut plan = FeedbackPlan {
        new_memories: job.new_memories.clone(),
        ..FeedbackPlan::default()
    };
    let mut merged_away: BTreeSet<&str> = BTreeSet::new();

    for g in &job.merge_groups {
        match plan_merge(job, g, by_id, null_visible) {
            Ok(merge) => {
                plan.merges.push(merge);
                merged_away.extend(g.ids.iter().map(String::as_str));
            }
            Err(refused) => plan.refused.push(refused),
        }
    }
    plan_reinforce(job, by_id, null_visible, &merged_away, &mut plan);
    plan
}

/// Merge stage: the merged memory replacing group `g`, or `(label, why)` when the group is
/// refused: a member missing or invisible, or one the conversation may read but not change (a
/// `public` memory from a mapped chat, another scope's: `door::may_merge`). A merge deletes its
/// members, so a conversation merges only memories of the scope its own new memories go to,
/// into that scope.
fn plan_merge(
    job: &FeedbackJob,
    g: &MergeGroupJob,
    by_id: &HashMap<String, MemoryRecord>,
    null_visible: bool,
) -> Result<MergePlan, (String, String)> {
    let label = format!("merge[{}]", g.ids.join(","));
    let members: Vec<&MemoryRecord> = g
        .ids
        .iter()
        .filter_map(|id| by_id.get(id.as_str()))
        .collect();
    if members.len() != g.ids.len() || members.iter().any(|r| !visible(job, r, null_visible)) {
        return Err((
            label,
            "a memory in the group does not exist or is not visible to this conversation".into(),
        ));
    }
    let scopes: Vec<Option<&str>> = members.iter().map(|r| r.memory_scope.as_deref()).collect();
    let null_writable = null_visible && job.scope.is_public();
    if door::may_merge(job.scope.as_str(), &scopes, null_writable).is_err() {
        return Err((
            label,
            "a memory in the group belongs to a scope this conversation may read but not change"
                .into(),
        ));
    }
    let tags = merged_tags(&members);
    let strongest = members.iter().max_by_key(|r| r.strength).copied();
    let mut source_conversations: Vec<String> = Vec::new();
    for r in &members {
        let own = r.conversation_id.iter().chain(&r.source_conversations);
        for c in own {
            if c != job.conversation_id.as_str() && !source_conversations.contains(c) {
                source_conversations.push(c.clone());
            }
        }
    }
    Ok(MergePlan {
        new_id: g.new_id.clone(),
        content: merged_content(&members),
        tags,
        memory_type: strongest
            .map(|r| r.memory_type.clone())
            .unwrap_or_else(|| "knowledge".into()),
        strength: members
            .iter()
            .map(|r| r.strength)
            .max()
            .unwrap_or(PASSIVE_STRENGTH)
            .clamp(1, 100),
        is_active: members.iter().any(|r| r.is_active),
        memory_scope: job.scope.as_str().to_string(),
        scope_source: job.scope_source.as_str().to_string(),
        delete_ids: g.ids.clone(),
        expires_at: members
            .iter()
            .map(|r| r.expires_at)
            .collect::<Option<Vec<_>>>()
            .and_then(|all| all.into_iter().max()),
        source_conversations,
    })
}

/// The members' distinct contents joined, redacted: legacy rows (written before redaction, or
/// by another program) may hold personal data in clear, and a merge is a new write.
fn merged_content(members: &[&MemoryRecord]) -> String {
    let mut contents: Vec<&str> = Vec::new();
    for r in members {
        if !contents.contains(&r.content.as_str()) {
            contents.push(&r.content);
        }
    }
    redact(&contents.join("; "))
}

/// The members' distinct tags, redacted like any new write, at most 32.
fn merged_tags(members: &[&MemoryRecord]) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    for r in members {
        for t in r.tags.iter().map(|t| redact(t)) {
            if !tags.contains(&t) && tags.len() < 32 {
                tags.push(t);
            }
        }
    }
    tags
}

/// Reinforce stage: raise every useful memory the conversation sees and no merge replaced;
/// refuse the ones it does not see.
fn plan_reinforce(
    job: &FeedbackJob,
    by_id: &HashMap<String, MemoryRecord>,
    null_visible: bool,
    merged_away: &BTreeSet<&str>,
    plan: &mut FeedbackPlan,
) {
    for id in &job.useful_memory_ids {
        match by_id.get(id.as_str()) {
            Some(r) if visible(job, r, null_visible) => {
                if !merged_away.contains(id.as_str()) {
                    plan.reinforce
                        .push((id.clone(), (r.strength + REINFORCE).min(100)));
                    plan.expected_strength.insert(id.clone(), r.strength);
                }
            }
            _ => plan.refused.push((
                id.clone(),
                "does not exist or is not visible to this conversation".into(),
            )),
        }
    }
}
