//! The memory plugin: typed requests in ([`Request`], one exhaustive `match`), JSON out, over
//! [`MemoryService`].

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{json, Value};

use super::operation::{AfterMessageSent, LlmRequestEvent, Operation, Request};
use super::{tools, CallContext, Plugin, PluginError, ToolSpec};

use crate::memory::feedback::{AcceptError, FeedbackRequest};
use crate::memory::service::MessageOutcome;
use crate::memory::{injection, MemoryService, RecallMode, RecallRequest};

pub struct MemoryPlugin {
    service: Arc<MemoryService>,
}

impl MemoryPlugin {
    pub fn new(service: Arc<MemoryService>) -> Self {
        MemoryPlugin { service }
    }

    /// Chained recall for the message about to go to the LLM, rendered as the prompt block.
    async fn on_llm_request(&self, ev: LlmRequestEvent) -> Result<Value, PluginError> {
        let r = self
            .service
            .recall(RecallRequest {
                conversation_id: ev.conversation_id,
                persona: ev.persona,
                query: ev.query,
                limit: None,
                search: None,
                mode: RecallMode::Chained,
                entities: ev.entities,
                relevance_gate: Some(self.service.injection_gate()),
                timezone: ev.timezone,
                time_words: None,
                history: ev.history,
            })
            .await?;
        Ok(json!({
            "injection": injection::render(&r.memories, &r.recent_messages),
            "memory_ids": r.memories.iter().map(|m| m.memory.id.as_str()).collect::<Vec<_>>(),
            "recent_message_ids": r.recent_messages.iter().map(|m| m.memory.id.as_str()).collect::<Vec<_>>(),
            "memory_scope": r.memory_scope,
            "migration_mode": r.migration_mode,
        }))
    }

    /// Queue the reflection as feedback; with none, only the conversation id is checked.
    fn after_message_sent(&self, ev: AfterMessageSent) -> Result<Value, PluginError> {
        match ev.reflection {
            None => {
                // Still validate the conversation id: every event needs one.
                crate::scope::ConversationId::parse(&ev.conversation_id)
                    .map_err(|e| PluginError::from(crate::memory::MemoryError::Scope(e)))?;
                Ok(json!({ "job_id": null, "stored": false }))
            }
            Some(r) => accept(
                &self.service,
                FeedbackRequest {
                    conversation_id: ev.conversation_id,
                    persona: ev.persona,
                    useful_memory_ids: r.useful_memory_ids,
                    new_memories: r.new_memories,
                    merge_groups: r.merge_groups,
                },
            ),
        }
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value, PluginError> {
    serde_json::to_value(v).map_err(|e| PluginError::internal(e.to_string()))
}

/// `{"memory", "stored", "deduplicated"}`: an incognito conversation gets `{"memory": null,
/// "stored": false}`; a fact the scope already held names that memory, with `deduplicated`.
fn remembered(outcome: Option<crate::memory::Remembered>) -> Value {
    match outcome {
        None => json!({ "stored": false, "memory": null, "deduplicated": false }),
        Some(r) => json!({ "stored": true, "memory": r.memory, "deduplicated": r.deduplicated }),
    }
}

/// `{"accepted": true, "id", "memory_scope"}` (202), or `{"accepted": false, "reason"}` for an
/// incognito chat or a working memory turned off.
fn accept_message(
    service: &MemoryService,
    ev: crate::memory::working::MessageEvent,
) -> Result<Value, PluginError> {
    match service.accept_message(ev) {
        Ok(MessageOutcome::Accepted { id, memory_scope }) => {
            Ok(json!({ "accepted": true, "id": id, "memory_scope": memory_scope }))
        }
        Ok(MessageOutcome::NotStored(reason)) => Ok(json!({ "accepted": false, "reason": reason })),
        Err(e) => Err(accept_error(e)),
    }
}

fn accept_error(e: AcceptError) -> PluginError {
    match e {
        AcceptError::Invalid(e) => e.into(),
        e @ (AcceptError::QueueFull(_) | AcceptError::MessagesFull(_)) => {
            PluginError::unavailable("queue_full", e.to_string(), 1)
        }
        AcceptError::Journal(e) if super::is_disk_full(&e) => PluginError::disk_full(e),
        AcceptError::Journal(e) => PluginError::internal(e),
    }
}

fn accept(service: &MemoryService, req: FeedbackRequest) -> Result<Value, PluginError> {
    match service.feedback().accept(req) {
        Ok(job_id) => Ok(json!({ "job_id": job_id, "stored": job_id.is_some() })),
        Err(e) => Err(accept_error(e)),
    }
}

impl Plugin for MemoryPlugin {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn operations(&self) -> &'static [Operation] {
        Operation::ALL
    }

    fn invoke(&self, request: Request) -> BoxFuture<'_, Result<Value, PluginError>> {
        Box::pin(async move {
            match request {
                Request::Remember(req) => Ok(remembered(self.service.remember(req).await?)),
                Request::Recall(req) => to_json(&self.service.recall(req).await?),
                Request::Status => to_json(&self.service.status().await?),
                Request::Browse(req) => to_json(&self.service.browse(req).await?),
                Request::Update(req) => to_json(&self.service.update(req).await?),
                Request::ScopeMap => to_json(&self.service.scope_map()),
                Request::Feedback(req) => accept(&self.service, req),
                Request::FeedbackStatus(q) => match self.service.feedback().outcome(&q.job_id) {
                    Some(o) => to_json(&json!({"state": o.state, "outcome": o})),
                    None => Ok(json!({"state": "pending_or_unknown", "job_id": q.job_id})),
                },
                Request::Forget(req) => to_json(&self.service.forget(req).await?),
                Request::OnLlmRequest(ev) => self.on_llm_request(ev).await,
                Request::AfterMessageSent(ev) => self.after_message_sent(ev),
                Request::OnMessage(ev) => accept_message(&self.service, ev),
                Request::ConsolidationNext => {
                    to_json(&json!({"pass": self.service.next_host_pass().await?}))
                }
                Request::ConsolidationAnswer(answer) => {
                    to_json(&self.service.answer_host_pass(answer).await?)
                }
            }
        })
    }

    fn tools(&self) -> Vec<ToolSpec> {
        tools::specs()
    }

    fn call_tool<'a>(
        &'a self,
        name: &'a str,
        ctx: CallContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<Value, PluginError>> {
        Box::pin(async move {
            match name {
                tools::REMEMBER => {
                    let memory = self
                        .service
                        .remember(tools::remember_request(ctx, arguments)?)
                        .await?;
                    Ok(remembered(memory))
                }
                tools::UPDATE => match tools::update_request(ctx, arguments)? {
                    tools::UpdateCall::Correct(req) => to_json(&self.service.update(req).await?),
                    tools::UpdateCall::Delete(req) => {
                        let outcome = self.service.forget(req).await?;
                        if outcome.deleted == 0 {
                            return Err(crate::memory::MemoryError::NotFound("memory_id").into());
                        }
                        to_json(&outcome)
                    }
                },
                tools::RECALL => to_json(
                    &self
                        .service
                        .recall(tools::recall_request(ctx, arguments)?)
                        .await?,
                ),
                other => Err(PluginError::bad_request(
                    "unknown_tool",
                    format!("no tool named '{other}'"),
                )),
            }
        })
    }
}
