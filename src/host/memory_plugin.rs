//! The memory plugin: typed requests in ([`Request`], one exhaustive `match`), typed replies
//! out ([`Reply`]), over [`MemoryService`].

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::operation::{AfterMessageSent, LlmRequestEvent, Operation, Request};
use super::reply::{FeedbackQueued, FeedbackState, Injection, NextPass, Reply};
use super::{tools, CallContext, Plugin, PluginError, ToolSpec};

use crate::memory::feedback::FeedbackRequest;
use crate::memory::intake::AcceptError;
use crate::memory::recall::injection;
use crate::memory::{MemoryService, RecallMode, RecallRequest};

pub struct MemoryPlugin {
    service: Arc<MemoryService>,
}

impl MemoryPlugin {
    pub(crate) fn new(service: Arc<MemoryService>) -> Self {
        MemoryPlugin { service }
    }

    /// Chained recall for the message about to go to the LLM, rendered as the prompt block.
    async fn on_llm_request(&self, ev: LlmRequestEvent) -> Result<Injection, PluginError> {
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
                for_prompt: true,
                counted: !ev.preview,
                sender_id: ev.sender_id,
            })
            .await?;
        Ok(Injection {
            injection: injection::render(&r.memories, &r.recent_messages),
            memory_ids: r.memories.iter().map(|m| m.memory.id.clone()).collect(),
            recent_message_ids: r
                .recent_messages
                .iter()
                .map(|m| m.memory.id.clone())
                .collect(),
            memory_scope: r.memory_scope,
            migration_mode: r.migration_mode,
        })
    }

    /// Queue the reflection as feedback; with none, only the conversation id is checked.
    fn after_message_sent(&self, ev: AfterMessageSent) -> Result<FeedbackQueued, PluginError> {
        match ev.reflection {
            None => {
                // Still validate the conversation id: every event needs one.
                crate::scope::ConversationId::parse(&ev.conversation_id)
                    .map_err(|e| PluginError::from(crate::memory::MemoryError::Scope(e)))?;
                Ok(FeedbackQueued::of(None))
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

fn accept(service: &MemoryService, req: FeedbackRequest) -> Result<FeedbackQueued, PluginError> {
    let job_id = service.feedback().accept(req).map_err(accept_error)?;
    Ok(FeedbackQueued::of(job_id))
}

impl Plugin for MemoryPlugin {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn operations(&self) -> &'static [Operation] {
        Operation::ALL
    }

    fn invoke(&self, request: Request) -> BoxFuture<'_, Result<Reply, PluginError>> {
        Box::pin(async move {
            let service = &self.service;
            Ok(match request {
                Request::Remember(req) => Reply::Remembered(service.remember(req).await?.into()),
                Request::Recall(req) => Reply::Recalled(Box::new(service.recall(req).await?)),
                Request::Status => Reply::Status(Box::new(service.status().await?)),
                Request::Browse(req) => Reply::Browsed(service.browse(req).await?),
                Request::PeopleList(req) => Reply::People(service.people_of(req).await?),
                Request::PeopleBrowse(req) => Reply::Browsed(service.browse_person(req).await?),
                Request::PeopleForget(req) => Reply::Forgot(service.forget_person(req).await?),
                Request::Update(req) => Reply::Updated(service.update(req).await?),
                Request::ScopeMap => Reply::ScopeMap(service.scope_map()),
                Request::Feedback(req) => Reply::Feedback(accept(service, req)?),
                Request::FeedbackStatus(q) => {
                    let outcome = service.feedback().outcome(&q.job_id);
                    Reply::FeedbackState(FeedbackState::of(q.job_id, outcome))
                }
                Request::Forget(req) => Reply::Forgot(service.forget(req).await?),
                Request::OnLlmRequest(ev) => Reply::Injection(self.on_llm_request(ev).await?),
                Request::AfterMessageSent(ev) => Reply::Feedback(self.after_message_sent(ev)?),
                Request::OnMessage(ev) => {
                    Reply::Message(service.accept_message(ev).map_err(accept_error)?.into())
                }
                Request::ConsolidationNext => Reply::ConsolidationPass(NextPass {
                    pass: service.next_host_pass().await?,
                }),
                Request::ConsolidationAnswer(answer) => {
                    Reply::ConsolidationAnswered(service.answer_host_pass(answer).await?)
                }
            })
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
    ) -> BoxFuture<'a, Result<Reply, PluginError>> {
        Box::pin(async move {
            let service = &self.service;
            match name {
                tools::REMEMBER => {
                    let req = tools::remember_request(ctx, arguments)?;
                    Ok(Reply::Remembered(service.remember(req).await?.into()))
                }
                tools::UPDATE => match tools::update_request(ctx, arguments)? {
                    tools::UpdateCall::Correct(req) => {
                        Ok(Reply::Updated(service.update(req).await?))
                    }
                    tools::UpdateCall::Delete(req) => {
                        let outcome = service.forget(req).await?;
                        if outcome.deleted == 0 {
                            return Err(crate::memory::MemoryError::NotFound("memory_id").into());
                        }
                        Ok(Reply::Forgot(outcome))
                    }
                },
                tools::RECALL => {
                    let req = tools::recall_request(ctx, arguments)?;
                    Ok(Reply::Recalled(Box::new(service.recall(req).await?)))
                }
                other => Err(PluginError::bad_request(
                    "unknown_tool",
                    format!("no tool named '{other}'"),
                )),
            }
        })
    }
}
