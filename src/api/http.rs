//! HTTP JSON API (DESIGN.md section 8). Errors are `{"error": {"code", "message"}}` with 4xx for
//! bad input and 5xx for service failures.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::host::{PluginError, PluginHost};

/// A JSON error response.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": {"code": self.code, "message": self.message}})),
        )
            .into_response()
    }
}

impl From<PluginError> for ApiError {
    fn from(e: PluginError) -> Self {
        let status = if e.client_error {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        if !e.client_error {
            tracing::error!(code = e.code, error = %e.message, "request failed");
        }
        ApiError {
            status,
            code: e.code,
            message: e.message,
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_json",
            message: e.body_text(),
        }
    }
}

type AppState = Arc<PluginHost>;

pub fn router(host: Arc<PluginHost>) -> Router {
    Router::new()
        .route("/v1/remember", post(remember))
        .route("/v1/recall", post(recall))
        .route("/v1/status", get(status))
        .route("/v1/tools", get(list_tools))
        .route("/v1/tools/{name}", post(call_tool))
        .route("/healthz", get(healthz))
        .nest_service("/mcp", crate::api::mcp::http_service(host.clone()))
        .with_state(host)
}

async fn call(
    host: &PluginHost,
    op: &str,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(payload) = body?;
    Ok(Json(host.invoke(op, payload).await?))
}

async fn remember(
    State(host): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    call(&host, "remember", body).await
}

async fn recall(
    State(host): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    call(&host, "recall", body).await
}

async fn list_tools(State(host): State<AppState>) -> Json<Value> {
    Json(json!({ "tools": host.tools() }))
}

/// `{conversation_id, persona?, arguments}`: the conversation comes from the body (the
/// framework's event context), the arguments from the model.
async fn call_tool(
    State(host): State<AppState>,
    axum::extract::Path(name): axum::extract::Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(mut body) = body?;
    let arguments = body
        .get_mut("arguments")
        .map(Value::take)
        .unwrap_or(Value::Null);
    if let Some(obj) = body.as_object() {
        if let Some(k) = obj
            .keys()
            .find(|k| !matches!(k.as_str(), "conversation_id" | "persona" | "arguments"))
        {
            return Err(
                PluginError::bad_request("invalid_input", format!("unknown field '{k}'")).into(),
            );
        }
    }
    let ctx: crate::host::CallContext = serde_json::from_value(body)
        .map_err(|e| PluginError::bad_request("invalid_input", e.to_string()))?;
    Ok(Json(host.call_tool(&name, ctx, arguments).await?))
}

async fn status(State(host): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(host.invoke("status", Value::Null).await?))
}

async fn healthz(State(host): State<AppState>) -> Response {
    match host.memory().store().count(None).await {
        Ok(rows) => Json(json!({"status": "ok", "rows": rows, "plugins": host.plugin_names()}))
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "unavailable", "store": e.to_string()})),
        )
            .into_response(),
    }
}

/// Serve on `listener` until `shutdown` resolves, then let in-flight requests finish.
pub async fn serve(
    host: Arc<PluginHost>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "serving HTTP");
    axum::serve(listener, router(host))
        .with_graceful_shutdown(shutdown)
        .await
}
