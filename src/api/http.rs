//! HTTP JSON API (docs/design.md section 8). Errors are `{"error": {"code", "message"}}` with 4xx for
//! bad input and 5xx for service failures.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::error_text::without_paths;
use super::guard::{protect, Guard};
use super::metrics::{render, track, Metrics};
use crate::host::operation::{self, AfterMessageSent, JobQuery, LlmRequestEvent};
use crate::host::{Fault, PluginError, PluginHost, Reply, Request};
use crate::memory::consolidation::HostAnswer;
use crate::memory::feedback::FeedbackRequest;
use crate::memory::working::MessageEvent;
use crate::memory::{
    BrowseRequest, ForgetRequest, PeopleRequest, PersonRequest, RecallRequest, RememberRequest,
    UpdateRequest,
};

/// A JSON error response.
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": self.code, "message": self.message}}));
        let mut response = (self.status, body).into_response();
        if let Some(secs) = self.retry_after {
            if let Ok(v) = axum::http::HeaderValue::from_str(&secs.to_string()) {
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, v);
            }
        }
        response
    }
}

impl From<PluginError> for ApiError {
    fn from(e: PluginError) -> Self {
        let status = match e.fault {
            Fault::Invalid => StatusCode::BAD_REQUEST,
            Fault::NotFound => StatusCode::NOT_FOUND,
            Fault::Conflict => StatusCode::CONFLICT,
            Fault::Forbidden => StatusCode::FORBIDDEN,
            Fault::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Fault::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(code = e.code, error = %e.message, "request failed");
        }
        ApiError {
            status,
            code: e.code,
            message: without_paths(&e.message),
            retry_after: e.retry_after(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_json",
            message: e.body_text(),
            retry_after: None,
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_query",
            message: e.body_text(),
            retry_after: None,
        }
    }
}

/// A path segment that does not decode (e.g. `%FF`, not UTF-8) is bad input like a bad body:
/// the same JSON error shape, not axum's plain-text rejection.
impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_path",
            message: e.body_text(),
            retry_after: None,
        }
    }
}

#[derive(Clone)]
struct AppState {
    host: Arc<PluginHost>,
    metrics: Arc<Metrics>,
}

impl std::ops::Deref for AppState {
    type Target = PluginHost;
    fn deref(&self) -> &PluginHost {
        &self.host
    }
}

/// Every route, behind the Host and token guard (`guard.rs`; `/healthz` is its only exemption).
pub fn router(host: Arc<PluginHost>) -> Router {
    let metrics = Arc::new(Metrics::default());
    let guard = Arc::new(Guard::for_server(&host.config().server).counting_into(metrics.clone()));
    let mcp = crate::api::mcp::http_service(host.clone());
    let state = AppState {
        host,
        metrics: metrics.clone(),
    };
    let routes = Router::new()
        .route("/v1/remember", post(remember))
        .route("/v1/recall", post(recall))
        .route("/v1/status", get(status))
        .route("/v1/tools", get(list_tools))
        .route("/v1/tools/{name}", post(call_tool))
        .route("/v1/feedback", post(feedback))
        .route("/v1/feedback/{job_id}", get(feedback_status))
        .route("/v1/forget", post(forget))
        .route("/v1/memories/browse", post(browse))
        .route("/v1/memories/update", post(update))
        .route("/v1/people", post(people_list))
        .route("/v1/people/browse", post(people_browse))
        .route("/v1/people/forget", post(people_forget))
        .route("/v1/scope_map", get(scope_map))
        .route("/v1/export", get(export))
        .route("/v1/events/llm_request", post(llm_request))
        .route("/v1/events/after_message_sent", post(after_message_sent))
        .route("/v1/events/message", post(message))
        .route("/v1/consolidation/next", post(consolidation_next))
        .route("/v1/consolidation/answer", post(consolidation_answer))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .nest_service("/mcp", mcp)
        .merge(super::ui::routes())
        .route_layer(axum::middleware::from_fn_with_state(metrics, track))
        .with_state(state);
    // Last, so it wraps every route above and the 404 fallback: add new routes before this line.
    protect(routes, guard)
}

/// An operation's reply with its status: 202 for work accepted for later ([`Reply::queued`]:
/// a feedback job, a chat message), 200 for work done (an incognito conversation's feedback
/// is not queued: nothing was accepted for later).
type Answered = Result<(StatusCode, Json<Reply>), ApiError>;

async fn answer(host: &PluginHost, request: Request) -> Answered {
    let reply = host.dispatch(request).await?;
    let status = match reply.queued() {
        true => StatusCode::ACCEPTED,
        false => StatusCode::OK,
    };
    Ok((status, Json(reply)))
}

async fn feedback(State(host): State<AppState>, Body(req): Body<FeedbackRequest>) -> Answered {
    answer(&host, Request::Feedback(req)).await
}

async fn feedback_status(
    State(host): State<AppState>,
    job_id: Result<axum::extract::Path<String>, PathRejection>,
) -> Answered {
    let axum::extract::Path(job_id) = job_id?;
    answer(&host, Request::FeedbackStatus(JobQuery { job_id })).await
}

async fn forget(State(host): State<AppState>, Body(req): Body<ForgetRequest>) -> Answered {
    answer(&host, Request::Forget(req)).await
}

/// `{conversation_id, persona?, offset?, limit?}`: what that conversation can see, newest first.
async fn browse(State(host): State<AppState>, Body(req): Body<BrowseRequest>) -> Answered {
    answer(&host, Request::Browse(req)).await
}

/// `POST /v1/people` `{conversation_id}`: the members whose rows that chat may read, with the
/// names they went by and how many rows they said and are about.
async fn people_list(State(host): State<AppState>, Body(req): Body<PeopleRequest>) -> Answered {
    answer(&host, Request::PeopleList(req)).await
}

/// `POST /v1/people/browse` `{conversation_id, sender_id, offset?, limit?}`: what that chat
/// may recall that the member said or that is about them, newest first.
async fn people_browse(State(host): State<AppState>, Body(req): Body<PersonRequest>) -> Answered {
    answer(&host, Request::PeopleBrowse(req)).await
}

/// `POST /v1/people/forget` `{conversation_id, sender_id}`: forget the member everywhere on
/// the chat's platform.
async fn people_forget(State(host): State<AppState>, Body(req): Body<PersonRequest>) -> Answered {
    answer(&host, Request::PeopleForget(req)).await
}

/// `POST /v1/memories/update`: correct a memory the conversation may recall.
async fn update(State(host): State<AppState>, Body(req): Body<UpdateRequest>) -> Answered {
    answer(&host, Request::Update(req)).await
}

/// `GET /v1/export?conversation_id=…[&persona=…][&vectors=true]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportParams {
    conversation_id: String,
    #[serde(default)]
    persona: Option<String>,
    #[serde(default)]
    vectors: bool,
}

async fn export(
    State(host): State<AppState>,
    params: Result<Query<ExportParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(p) = params?;
    let body = host
        .export_visible(&p.conversation_id, p.persona.as_deref(), p.vectors)
        .await?;
    let ndjson = [(
        axum::http::header::CONTENT_TYPE,
        "application/x-ndjson; charset=utf-8",
    )];
    Ok((ndjson, body).into_response())
}

async fn scope_map(State(host): State<AppState>) -> Answered {
    answer(&host, Request::ScopeMap).await
}

async fn llm_request(State(host): State<AppState>, Body(ev): Body<LlmRequestEvent>) -> Answered {
    answer(&host, Request::OnLlmRequest(ev)).await
}

async fn after_message_sent(
    State(host): State<AppState>,
    Body(ev): Body<AfterMessageSent>,
) -> Answered {
    answer(&host, Request::AfterMessageSent(ev)).await
}

async fn message(State(host): State<AppState>, Body(ev): Body<MessageEvent>) -> Answered {
    answer(&host, Request::OnMessage(ev)).await
}

async fn consolidation_next(State(host): State<AppState>) -> Answered {
    answer(&host, Request::ConsolidationNext).await
}

async fn consolidation_answer(
    State(host): State<AppState>,
    Body(answered): Body<HostAnswer>,
) -> Answered {
    answer(&host, Request::ConsolidationAnswer(answered)).await
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let body = render(&state.metrics, &state.host).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        body,
    )
        .into_response()
}

/// A JSON body parsed into the request type `T` its route names. Malformed JSON is
/// `invalid_json` and a body of the wrong shape `invalid_input`, both 400 (axum's own `Json<T>`
/// would answer the second with a plain-text 422).
struct Body<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let Json(payload) = Json::<Value>::from_request(req, state).await?;
        Ok(Body(operation::body(payload)?))
    }
}

async fn remember(State(host): State<AppState>, Body(req): Body<RememberRequest>) -> Answered {
    answer(&host, Request::Remember(req)).await
}

async fn recall(State(host): State<AppState>, Body(req): Body<RecallRequest>) -> Answered {
    answer(&host, Request::Recall(req)).await
}

async fn list_tools(State(host): State<AppState>) -> Json<Value> {
    Json(json!({ "tools": host.tools() }))
}

/// `POST /v1/tools/{name}`: the conversation comes from the body (the framework's event
/// context), the arguments from the model.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCall {
    conversation_id: String,
    #[serde(default)]
    persona: Option<String>,
    #[serde(default)]
    arguments: Value,
}

async fn call_tool(
    State(host): State<AppState>,
    name: Result<axum::extract::Path<String>, PathRejection>,
    Body(call): Body<ToolCall>,
) -> Result<Json<Reply>, ApiError> {
    let axum::extract::Path(name) = name?;
    let ctx = crate::host::CallContext {
        conversation_id: call.conversation_id,
        persona: call.persona,
    };
    Ok(Json(host.run_tool(&name, ctx, call.arguments).await?))
}

async fn status(State(host): State<AppState>) -> Answered {
    answer(&host, Request::Status).await
}

/// Liveness only, for anyone who can reach the port (it is outside the Host and token guard):
/// the process answers. Rows, the store's and the embedder's state and their error texts are
/// for `/v1/status`, behind the guard.
/// Liveness, and whether the other routes need the token (`auth`: `token` or `none`), so the
/// operator page connects by itself to a service without one instead of drawing a 401.
async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let auth = match state.host.config().server.auth_token {
        Some(_) => "token",
        None => "none",
    };
    Json(json!({"status": "ok", "auth": auth}))
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
