//! The host's HTTP server for channel webhooks: `/channels/<plugin-id>/…` is handed to that
//! channel's `handle-webhook` export, and the plugin's answer is sent back as it is. The
//! export runs on the channel's inbound instance (see [`PluginHandle::inbound`]), so a
//! sender is answered while the channel posts a slow reply.
//!
//! The channel sees the path below `/channels/<plugin-id>` (`/` for the bare and the
//! trailing-slash forms). It listens on `http.listen` (127.0.0.1 by default) and starts only when some channel's
//! manifest asks for a webhook. Requests to a channel that asked for none get 404; while the
//! plugin is restarting or quarantined, 503; a plugin fault during the call, 500; an answer
//! whose status is not a final HTTP status (200–599), 502; a body over
//! `http.max_body_bytes`, 413; a request not received and answered within
//! `http.request_timeout_ms`, 408. The host's own answers are JSON, `{"error": "…"}`, as the
//! bundled channels' are.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::plugin::runtime::CallError;
use crate::plugin::supervisor::PluginHandle;
use cairn_vocab::ErrorKind;
use cairn_vocab::channel::{HttpRequest, HttpResponse};

/// HTTP settings (`http:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address the webhook server listens on (default `127.0.0.1:8787`; port 0 picks one).
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes (default 2 MiB); larger ones get 413.
    pub max_body_bytes: usize,
    /// Longest a request may take from its headers to the channel's answer, in ms (default
    /// 30000); a client still sending its body then gets 408 and the connection is closed,
    /// so stalled uploads hold no connection for ever.
    pub request_timeout_ms: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            max_body_bytes: 2 << 20,
            request_timeout_ms: 30_000,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {address} (http.listen): {source}")]
pub struct ListenError {
    /// The address.
    pub address: SocketAddr,
    /// The socket error.
    pub source: std::io::Error,
}

type Channels = std::sync::Arc<BTreeMap<String, PluginHandle>>;

/// Bind the server's socket (before plugins start, so a taken port fails fast).
pub async fn bind(config: &HttpConfig) -> Result<tokio::net::TcpListener, ListenError> {
    tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ListenError {
            address: config.listen,
            source,
        })
}

/// Serve webhooks for `channels` (plugin id → handle) on `listener` until `stop` turns true.
/// Requests go to each channel's inbound instance, so they never wait behind its replies.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: &HttpConfig,
    channels: BTreeMap<String, PluginHandle>,
    mut stop: watch::Receiver<bool>,
) {
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        // `/channels/<id>`, `/channels/<id>/` and `/channels/<id>/<anything>` all reach
        // the channel: whichever form a user pastes into a webhook's settings works.
        .route("/channels/{id}", axum::routing::any(root_request))
        .route("/channels/{id}/", axum::routing::any(root_request))
        .route("/channels/{id}/{*rest}", axum::routing::any(nested_request))
        .fallback(|| async {
            let expected = "no such path: webhooks go to /channels/<channel id>";
            error_json(StatusCode::NOT_FOUND, expected)
        })
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            config.max_body_bytes,
            refuse_declared_oversize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            std::time::Duration::from_millis(config.request_timeout_ms),
            within_deadline,
        ))
        .with_state(std::sync::Arc::new(
            channels
                .into_iter()
                .map(|(id, handle)| (id, handle.inbound()))
                .collect(),
        ));
    let shutdown = async move {
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!("webhook server failed: {e}");
    }
}

async fn root_request(
    State(channels): State<Channels>,
    Path(id): Path<String>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => forward(channels, id, String::new(), method, query, headers, body).await,
        Err(rejection) => refused_body(&rejection),
    }
}

async fn nested_request(
    State(channels): State<Channels>,
    Path((id, rest)): Path<(String, String)>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => forward(channels, id, rest, method, query, headers, body).await,
        Err(rejection) => refused_body(&rejection),
    }
}

/// Answer 408 when reading the request and the channel's answer take longer than
/// `deadline` (`http.request_timeout_ms`).
async fn within_deadline(
    State(deadline): State<std::time::Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => error_json(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request was not received and answered within {} ms (http.request_timeout_ms)",
                deadline.as_millis()
            ),
        ),
    }
}

/// Answer 413 at once to a request whose `Content-Length` is over `max_body_bytes`
/// (`http.max_body_bytes`), rather than waiting for a body it would refuse anyway (a sender
/// declaring a huge body and sending none used to be answered only at the deadline).
async fn refuse_declared_oversize(
    State(max_body_bytes): State<usize>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_body_bytes as u64) {
        return error_json(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body: over http.max_body_bytes",
        );
    }
    next.run(request).await
}

/// The host's own answer: `status` with `{"error": text}`.
fn error_json(status: StatusCode, text: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": text.into() }).to_string();
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    (status, json, body).into_response()
}

/// A body that could not be read: over `http.max_body_bytes` (413), or cut short.
fn refused_body(rejection: &BytesRejection) -> Response {
    let status = rejection.status();
    let text = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "body: over http.max_body_bytes".to_string()
    } else {
        format!("body: {}", rejection.body_text())
    };
    error_json(status, text)
}

/// The channel's answer as the sender gets it. A status HTTP has no room for as a final
/// answer (1xx, or outside 100–599) is the host's 502 and a warning, not the channel's
/// headers and body: hyper would send 600–999 as they are and anything else as a bare 500
/// under the channel's body (until 2026-12-04).
fn answered(channel: &str, answer: HttpResponse) -> Response {
    let final_status = StatusCode::from_u16(answer.status)
        .ok()
        .filter(|status| (200..600).contains(&status.as_u16()));
    let Some(status) = final_status else {
        tracing::warn!(
            channel = %channel,
            status = answer.status,
            "the channel answered a webhook with a status that is not a final HTTP status"
        );
        return error_json(
            StatusCode::BAD_GATEWAY,
            format!(
                "the channel answered with HTTP status {}, not a final status (200–599)",
                answer.status
            ),
        );
    };
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = status;
    for (name, value) in answer.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

async fn forward(
    channels: Channels,
    id: String,
    rest: String,
    method: Method,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(channel) = channels.get(&id) else {
        return error_json(
            StatusCode::NOT_FOUND,
            format!("no channel `{id}` serves webhooks here"),
        );
    };
    let request = HttpRequest {
        method: method.as_str().to_string(),
        path: format!("/{rest}"),
        query: query.unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    };
    match channel
        .call(move |instance| instance.handle_webhook(&request))
        .await
    {
        Ok(answer) => answered(&id, answer),
        Err(CallError::Plugin(error)) if error.kind == ErrorKind::Unavailable => {
            error_json(StatusCode::SERVICE_UNAVAILABLE, error.message)
        }
        // A store the channel called was away: the sender should send it again later.
        Err(CallError::StoreAway { error, .. }) => {
            error_json(StatusCode::SERVICE_UNAVAILABLE, error.message)
        }
        // The state only: the fault behind it is the operator's, not the sender's.
        Err(CallError::NotRunning { plugin, state, .. }) => error_json(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("plugin {plugin} is {state}"),
        ),
        Err(error) => {
            tracing::warn!(channel = %id, "webhook call failed: {error}");
            error_json(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the channel failed to handle the request",
            )
        }
    }
}
