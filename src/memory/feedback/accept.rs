//! Accepting feedback: validate the request, derive the scope once from the conversation id
//! (the same [`derive_scope`] as every other write), and pre-assign every id, so that journaling
//! the job makes it durable and replaying it can never insert twice.

use std::collections::BTreeSet;

use chrono::Utc;

use super::*;
use crate::memory::retention::Retention;
use crate::memory::MemoryError;
use crate::scope::derive_scope;
use crate::scope::{ConversationId, ScopeResolver};

/// A validated, journal-ready job for `req`, scoped by `scopes`' current snapshot; `None` when
/// the conversation is incognito (the request is still validated, nothing is journaled).
pub(crate) fn validate(
    req: FeedbackRequest,
    scopes: &ScopeResolver,
    retention: &Retention,
) -> Result<Option<FeedbackJob>, MemoryError> {
    let now = Utc::now();
    let conversation = ConversationId::parse(&req.conversation_id).map_err(|e| {
            tracing::error!(code = "invalid_conversation_id", error = %e, "feedback refused; nothing journaled");
            MemoryError::Scope(e)
        })?;
    if req.useful_memory_ids.len() > MAX_IDS {
        return Err(invalid(
            "useful_memory_ids",
            format!("at most {MAX_IDS} ids"),
        ));
    }
    if req.new_memories.len() > MAX_NEW {
        return Err(invalid(
            "new_memories",
            format!("at most {MAX_NEW} new memories"),
        ));
    }
    if req.merge_groups.len() > MAX_GROUPS {
        return Err(invalid(
            "merge_groups",
            format!("at most {MAX_GROUPS} groups"),
        ));
    }
    let mut new_memories = Vec::with_capacity(req.new_memories.len());
    for (i, m) in req.new_memories.into_iter().enumerate() {
        let m = m.parse().map_err(|e| match e {
            MemoryError::InvalidInput { field, message } => invalid(
                "new_memories",
                format!("new_memories[{i}].{field}: {message}"),
            ),
            other => other,
        })?;
        new_memories.push(NewMemoryJob {
            id: uuid::Uuid::now_v7().to_string(),
            content: m.content,
            reasoning: m.reasoning,
            expires_at: retention.expires_at(&m.memory_type, now, None),
            tags: m.tags,
            memory_type: m.memory_type,
        });
    }
    let mut merge_groups = Vec::with_capacity(req.merge_groups.len());
    for g in req.merge_groups {
        let ids: BTreeSet<String> = g
            .into_iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if ids.len() < 2 || ids.len() > MAX_GROUP_LEN {
            return Err(invalid(
                "merge_groups",
                format!("each group needs 2 to {MAX_GROUP_LEN} distinct ids"),
            ));
        }
        merge_groups.push(MergeGroupJob {
            new_id: uuid::Uuid::now_v7().to_string(),
            ids: ids.into_iter().collect(),
        });
    }
    let map = scopes.snapshot();
    let Some(scope) = derive_scope(&map, &conversation, req.persona.as_deref()) else {
        return Ok(None);
    };
    let job = FeedbackJob {
        job_id: uuid::Uuid::now_v7().to_string(),
        conversation_id: conversation,
        scope: scope.scope,
        scope_source: scope.source,
        accepted_at: now,
        useful_memory_ids: req
            .useful_memory_ids
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        new_memories,
        merge_groups,
    };
    Ok(Some(job))
}
