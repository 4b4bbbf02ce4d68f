//! The memory plugin: typed requests in, JSON out, over [`MemoryService`].

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::{tools, CallContext, Plugin, PluginError, ToolSpec};
use crate::memory::{MemoryService, RecallRequest, RememberRequest};

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
    serde_json::to_value(v).map_err(|e| PluginError {
        code: "internal",
        message: e.to_string(),
        client_error: false,
    })
}

impl Plugin for MemoryPlugin {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn operations(&self) -> &'static [&'static str] {
        &["remember", "recall", "status"]
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
                    Ok(json!({ "memory": memory }))
                }
                "recall" => {
                    let req: RecallRequest = parse(payload)?;
                    to_json(&self.service.recall(req).await?)
                }
                "status" => to_json(&self.service.status().await?),
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
                    Ok(json!({ "memory": memory }))
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
