//! The memory plugin: typed requests in, JSON out, over [`MemoryService`].

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::{tools, CallContext, Plugin, PluginError, ToolSpec};
use serde::Deserialize;

use crate::memory::feedback::{AcceptError, FeedbackRequest};
use crate::memory::{
    injection, BrowseRequest, ForgetRequest, MemoryService, RecallMode, RecallRequest,
    RememberRequest,
};

pub struct MemoryPlugin {
    service: Arc<MemoryService>,
}

impl MemoryPlugin {
    pub fn new(service: Arc<MemoryService>) -> Self {
        MemoryPlugin { service }
    }
}

fn parse<T: DeserializeOwned>(payload: Value) -> Result<T, PluginError> {
    serde_json::from_value(payload)
        .map_err(|e| PluginError::bad_request("invalid_input", e.to_string()))
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<Value, PluginError> {
    serde_json::to_value(v).map_err(|e| PluginError::internal(e.to_string()))
}

/// `{"memory", "stored"}`: an incognito conversation gets `{"memory": null, "stored": false}`.
fn remembered(memory: Option<crate::memory::Memory>) -> Value {
    json!({ "stored": memory.is_some(), "memory": memory })
}

fn accept(service: &MemoryService, req: FeedbackRequest) -> Result<Value, PluginError> {
    match service.feedback().accept(req) {
        Ok(job_id) => Ok(json!({ "job_id": job_id, "stored": job_id.is_some() })),
        Err(AcceptError::Invalid(e)) => Err(e.into()),
        Err(e @ AcceptError::QueueFull(_)) => {
            Err(PluginError::unavailable("queue_full", e.to_string(), 1))
        }
        Err(AcceptError::Journal(e)) if super::is_disk_full(&e) => Err(PluginError::disk_full(e)),
        Err(AcceptError::Journal(e)) => Err(PluginError::internal(e)),
    }
}

/// `on_llm_request`: what the framework sends before an LLM call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmRequestEvent {
    conversation_id: String,
    #[serde(default)]
    persona: Option<String>,
    query: String,
    #[serde(default)]
    entities: Vec<String>,
}

/// The reflection result: the feedback body without conversation or persona, which come
/// from the event itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reflection {
    #[serde(default)]
    useful_memory_ids: Vec<String>,
    #[serde(default)]
    new_memories: Vec<crate::memory::feedback::NewMemory>,
    #[serde(default)]
    merge_groups: Vec<Vec<String>>,
}

/// `after_message_sent`. The user message and bot reply are accepted for framework
/// compatibility but never stored: only the reflection result becomes memory.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AfterMessageSent {
    conversation_id: String,
    #[serde(default)]
    persona: Option<String>,
    #[serde(default)]
    user_message: String,
    #[serde(default)]
    bot_reply: String,
    #[serde(default)]
    recalled_memory_ids: Vec<String>,
    #[serde(default)]
    reflection: Option<Reflection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobQuery {
    job_id: String,
}

impl Plugin for MemoryPlugin {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn operations(&self) -> &'static [&'static str] {
        &[
            "remember",
            "recall",
            "status",
            "feedback",
            "feedback_status",
            "forget",
            "on_llm_request",
            "after_message_sent",
            "browse",
            "scope_map",
        ]
    }

    fn invoke<'a>(
        &'a self,
        operation: &'a str,
        payload: Value,
    ) -> BoxFuture<'a, Result<Value, PluginError>> {
        Box::pin(async move {
            match operation {
                "remember" => {
                    let req: RememberRequest = parse(payload)?;
                    let memory = self.service.remember(req).await?;
                    Ok(remembered(memory))
                }
                "recall" => {
                    let req: RecallRequest = parse(payload)?;
                    to_json(&self.service.recall(req).await?)
                }
                "status" => to_json(&self.service.status().await?),
                "browse" => {
                    let req: BrowseRequest = parse(payload)?;
                    to_json(&self.service.browse(req).await?)
                }
                "scope_map" => to_json(&self.service.scope_map()),
                "feedback" => accept(&self.service, parse(payload)?),
                "feedback_status" => {
                    let q: JobQuery = parse(payload)?;
                    match self.service.feedback().outcome(&q.job_id) {
                        Some(o) => to_json(&json!({"state": o.state, "outcome": o})),
                        None => Ok(json!({"state": "pending_or_unknown", "job_id": q.job_id})),
                    }
                }
                "forget" => {
                    let req: ForgetRequest = parse(payload)?;
                    to_json(&self.service.forget(req).await?)
                }
                "on_llm_request" => {
                    let ev: LlmRequestEvent = parse(payload)?;
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
                            relevance_gate: None,
                        })
                        .await?;
                    Ok(json!({
                        "injection": injection::render(&r.memories),
                        "memory_ids": r.memories.iter().map(|m| m.memory.id.as_str()).collect::<Vec<_>>(),
                        "memory_scope": r.memory_scope,
                        "migration_mode": r.migration_mode,
                    }))
                }
                "after_message_sent" => {
                    let ev: AfterMessageSent = parse(payload)?;
                    match ev.reflection {
                        None => {
                            // Still validate the conversation id: every event needs one.
                            crate::scope::ConversationId::parse(&ev.conversation_id).map_err(
                                |e| PluginError::from(crate::memory::MemoryError::Scope(e)),
                            )?;
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
                other => Err(PluginError::bad_request(
                    "unknown_operation",
                    format!("memory has no '{other}'"),
                )),
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
