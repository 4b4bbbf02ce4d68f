//! MCP server (docs/design.md section 8): the host's LLM tools over stdio (`scopemem mcp`) and
//! streamable HTTP (`/mcp` on `scopemem serve`).
//!
//! The model only ever supplies tool arguments. Who is calling comes from the request's `_meta`,
//! which the MCP client (the chatbot framework, VS Code) fills in and the model cannot see:
//! `_meta.conversation_id`, else `_meta["vscode.conversationId"]`, plus an optional
//! `_meta.persona`. A call without a usable conversation id is answered with a tool error
//! (`isError: true` and a text naming the missing key) rather than a JSON-RPC error, because MCP
//! clients show tool errors to the user and the model but often render protocol errors as an
//! opaque "internal error"; nothing is read or written for such a call.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};

use crate::host::{CallContext, PluginError, PluginHost, ToolSpec};

/// `_meta` key for the conversation id (frameworks, scripts).
pub const META_CONVERSATION_ID: &str = "conversation_id";
/// `_meta` key VS Code's chat sets on every tool call; used when `conversation_id` is absent.
pub const META_VSCODE_CONVERSATION_ID: &str = "vscode.conversationId";
/// `_meta` key for the optional persona (checked first in the scope map, as `persona:<name>`).
pub const META_PERSONA: &str = "persona";

const INSTRUCTIONS: &str = "Long-term memory for this chat. Memories are scoped by the \
conversation: every tools/call must carry the conversation id in the request's _meta \
(`_meta.conversation_id`, or `_meta[\"vscode.conversationId\"]`; optional `_meta.persona`). \
Tool arguments never choose a scope: a conversation only recalls its own scope and `public`.";

/// Why an MCP server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Boxed: rmcp's error is large and this travels up through every `?`.
    #[error("MCP session did not start: {0}")]
    Initialize(Box<rmcp::service::ServerInitializeError>),
    #[error("MCP session task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl From<rmcp::service::ServerInitializeError> for McpError {
    fn from(e: rmcp::service::ServerInitializeError) -> Self {
        McpError::Initialize(Box::new(e))
    }
}

/// A call context could not be taken from `_meta`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error(
        "this tool call has no conversation id: the MCP client must send it in the request's \
         _meta as \"conversation_id\" (or \"vscode.conversationId\"); memories are scoped by \
         conversation, so nothing was read or written"
    )]
    MissingConversationId,
    #[error("_meta.{key} must be a string; nothing was read or written")]
    NotAString { key: &'static str },
}

impl MetaError {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            MetaError::MissingConversationId => "missing_conversation_id",
            MetaError::NotAString { .. } => "invalid_meta",
        }
    }
}

fn meta_str(meta: &JsonObject, key: &'static str) -> Result<Option<String>, MetaError> {
    match meta.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(MetaError::NotAString { key }),
    }
}

/// The caller's context from a tools/call `_meta`. `conversation_id` wins over
/// `vscode.conversationId` when both are present: a framework that sets it on purpose (e.g. to
/// name the group rather than the editor chat) must not be overridden by the editor. Content
/// checks (empty, too long, control characters) stay in the memory layer, the one place that
/// defines a valid conversation id.
pub(crate) fn call_context(meta: &JsonObject) -> Result<CallContext, MetaError> {
    let conversation_id = match meta_str(meta, META_CONVERSATION_ID)? {
        Some(id) => id,
        None => {
            meta_str(meta, META_VSCODE_CONVERSATION_ID)?.ok_or(MetaError::MissingConversationId)?
        }
    };
    Ok(CallContext {
        conversation_id,
        persona: meta_str(meta, META_PERSONA)?,
    })
}

/// A host tool as an MCP tool: same name, description and argument schema.
pub(crate) fn mcp_tool(spec: ToolSpec) -> Tool {
    let schema = match spec.input_schema {
        Value::Object(map) => map,
        // Host schemas are objects; an MCP input schema must be one, so never send anything else.
        _ => JsonObject::from_iter([("type".to_string(), json!("object"))]),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema))
}

fn error_result(code: &str, message: &str) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(format!("{code}: {message}"))]);
    result.structured_content = Some(json!({"error": {"code": code, "message": message}}));
    result
}

/// The host's answer as a tool result: the JSON both as text (what every client shows the model)
/// and as structured content (for clients that read it).
pub(crate) fn tool_result(outcome: Result<Value, PluginError>) -> CallToolResult {
    match outcome {
        Ok(value) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
            // MCP structured content is an object; host results always are, but do not promise
            // a shape we did not get.
            if value.is_object() {
                result.structured_content = Some(value);
            }
            result
        }
        Err(e) => error_result(e.code, &crate::api::error_text::without_paths(&e.message)),
    }
}

/// The rmcp handler: a thin adapter from MCP requests to [`PluginHost`] tool calls.
#[derive(Clone)]
pub struct McpServer {
    host: Arc<PluginHost>,
}

impl McpServer {
    pub(crate) fn new(host: Arc<PluginHost>) -> Self {
        McpServer { host }
    }

    fn find_tool(&self, name: &str) -> Option<ToolSpec> {
        self.host.tools().into_iter().find(|t| t.name == name)
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("scopemem", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.host.tools().into_iter().map(mcp_tool).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.find_tool(name).map(mcp_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let started = Instant::now();
        let name: Cow<'static, str> = request.name;
        // MCP says an unknown tool is a protocol error, not a tool result.
        if self.find_tool(&name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("no tool named '{name}'"),
                None,
            ));
        }
        // rmcp moves the wire `_meta` into the request context; read the params copy too so a
        // caller that builds params in-process is served the same way (params win on conflict).
        let mut meta = context.meta.0 .0;
        if let Some(params_meta) = request.meta {
            meta.extend(params_meta.0 .0);
        }
        let ctx = match call_context(&meta) {
            Ok(ctx) => ctx,
            Err(e) => {
                tracing::warn!(tool = %name, code = e.code(), "MCP tool call refused");
                return Ok(error_result(e.code(), &e.to_string()).into());
            }
        };
        let arguments = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let outcome = self.host.call_tool(&name, ctx, arguments).await;
        match &outcome {
            Ok(_) => tracing::debug!(
                tool = %name,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "MCP tool call"
            ),
            Err(e) if e.is_client_error() => {
                tracing::warn!(tool = %name, code = e.code, "MCP tool call rejected")
            }
            Err(e) => {
                tracing::error!(tool = %name, code = e.code, error = %e.message, "MCP tool call failed")
            }
        }
        Ok(tool_result(outcome).into())
    }
}

/// Serve one MCP session over a byte stream pair until the client closes it.
pub async fn serve_io<R, W>(host: Arc<PluginHost>, reader: R, writer: W) -> Result<(), McpError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let running = McpServer::new(host).serve((reader, writer)).await?;
    let reason = running.waiting().await?;
    tracing::info!(reason = ?reason, "MCP session ended");
    Ok(())
}

/// Serve MCP over stdin/stdout (the process is the session); returns when the client disconnects.
/// stdout carries the protocol, so the caller must log to stderr only.
pub async fn serve_stdio(host: Arc<PluginHost>) -> Result<(), McpError> {
    let (reader, writer) = rmcp::transport::stdio_pipes();
    serve_io(host, reader, writer).await
}

/// The streamable HTTP endpoint, for `router.nest_service("/mcp", http_service(host))`.
///
/// Stateless with plain JSON responses: every call carries its conversation in `_meta`, so a
/// session adds nothing, and no long-lived SSE stream can hold up the graceful shutdown of
/// `serve` or pile up per-session state. rmcp's own `Host` check (against DNS rebinding) stays on
/// as a second line behind `api::guard`, with the same names: its loopback defaults plus
/// `server.allowed_hosts` (else a configured name would pass the guard and fail here).
pub(crate) fn http_service(
    host: Arc<PluginHost>,
) -> StreamableHttpService<McpServer, NeverSessionManager> {
    let defaults = StreamableHttpServerConfig::default();
    let allowed_hosts: Vec<String> = defaults
        .allowed_hosts
        .iter()
        .cloned()
        .chain(host.config().server.allowed_hosts.iter().cloned())
        .collect();
    let server = McpServer::new(host);
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        defaults
            .with_allowed_hosts(allowed_hosts)
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => panic!("test meta must be an object"),
        }
    }

    #[test]
    fn conversation_id_from_either_key() {
        let c = call_context(&meta(json!({"conversation_id": "g:1"}))).unwrap();
        assert_eq!(c.conversation_id, "g:1");
        assert_eq!(c.persona, None);
        let c = call_context(&meta(
            json!({"vscode.conversationId": "vs-42", "persona": "Alice"}),
        ))
        .unwrap();
        assert_eq!(c.conversation_id, "vs-42");
        assert_eq!(c.persona.as_deref(), Some("Alice"));
        // The explicit key wins over the editor's.
        let c = call_context(&meta(
            json!({"conversation_id": "g:1", "vscode.conversationId": "vs-42"}),
        ))
        .unwrap();
        assert_eq!(c.conversation_id, "g:1");
    }

    #[test]
    fn missing_or_mistyped_conversation_id_is_refused() {
        for m in [
            json!({}),
            json!({"progressToken": 3}),
            json!({"conversation_id": null}),
            json!({"conversationId": "g:1"}),
            json!({"vscode": {"conversationId": "nested is not the key"}}),
        ] {
            assert_eq!(
                call_context(&meta(m.clone())).err(),
                Some(MetaError::MissingConversationId),
                "{m}"
            );
        }
        assert_eq!(
            call_context(&meta(json!({"conversation_id": 12345}))).err(),
            Some(MetaError::NotAString {
                key: "conversation_id"
            })
        );
        assert_eq!(
            call_context(&meta(json!({"vscode.conversationId": ["a"]}))).err(),
            Some(MetaError::NotAString {
                key: "vscode.conversationId"
            })
        );
        assert_eq!(
            call_context(&meta(json!({"conversation_id": "g:1", "persona": 1}))).err(),
            Some(MetaError::NotAString { key: "persona" })
        );
        let text = MetaError::MissingConversationId.to_string();
        assert!(text.contains("conversation_id") && text.contains("vscode.conversationId"));
    }

    #[test]
    fn results_carry_json_text_and_structured_content() {
        let ok = tool_result(Ok(json!({"memory": {"id": "m1"}})));
        assert_eq!(ok.is_error, Some(false));
        let text = &ok.content[0].as_text().unwrap().text;
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"memory": {"id": "m1"}})
        );
        assert_eq!(ok.structured_content, Some(json!({"memory": {"id": "m1"}})));

        let err = tool_result(Err(PluginError::bad_request(
            "invalid_conversation_id",
            "conversation id is empty",
        )));
        assert_eq!(err.is_error, Some(true));
        assert!(err.content[0]
            .as_text()
            .unwrap()
            .text
            .starts_with("invalid_conversation_id: "));
        assert_eq!(
            err.structured_content.unwrap()["error"]["code"],
            "invalid_conversation_id"
        );
    }

    #[test]
    fn host_tools_map_one_to_one() {
        for spec in crate::host::tools::specs() {
            let schema = spec.input_schema.clone();
            let tool = mcp_tool(spec.clone());
            assert_eq!(tool.name, spec.name);
            assert_eq!(tool.description.as_deref(), Some(spec.description));
            assert_eq!(Value::Object((*tool.input_schema).clone()), schema);
        }
    }
}
