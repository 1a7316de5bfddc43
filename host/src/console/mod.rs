//! The status console: a small read-only web page (`/`), the snapshot it draws
//! (`/api/snapshot`) and the same figures for Prometheus (`/metrics`), served while the host
//! runs with `cairn run --console ADDR` or `console.listen`.
//!
//! A sampler reads the stores once per `console.sample_ms` into one shared [`Snapshot`]; every
//! request answers from it, so however many people watch, the host does the same work. It
//! listens on loopback unless configured otherwise, and anywhere else only with a token.

mod metrics;
mod snapshot;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

pub use snapshot::{Sampler, Snapshot, Sources};

/// The page: one self-contained file that reads `/api/snapshot` every second.
const PAGE: &str = include_str!("page.html");

/// Console settings (`console:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Address the console listens on, e.g. `127.0.0.1:8790`; none (the default) serves no
    /// console. `cairn run --console ADDR` sets it for one run.
    pub listen: Option<SocketAddr>,
    /// The token every request must carry (`Authorization: Bearer TOKEN` or `?token=TOKEN`):
    /// optional on a loopback address, required on any other.
    pub token: Option<String>,
    /// How often the console reads the host's state, in ms (default 1000).
    pub sample_ms: u64,
    /// How many samples the buffer chart keeps (default 600: ten minutes at one a second).
    pub history: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            listen: None,
            token: None,
            sample_ms: 1000,
            history: 600,
        }
    }
}

/// Why the console cannot start as configured.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Bound beyond loopback with no token.
    #[error(
        "console.listen {0} is not a loopback address: set console.token (or CAIRN_CONSOLE_TOKEN) so only those who have it can read the console"
    )]
    TokenRequired(SocketAddr),
    /// A setting out of range.
    #[error("console.{field}: {expected}")]
    OutOfRange {
        /// The setting.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// The socket could not be bound.
    #[error("cannot listen on {address} (console.listen): {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The socket error.
        source: std::io::Error,
    },
}

impl ConsoleConfig {
    /// Check the settings: a token wherever the address is not loopback, a sample period of
    /// at least 100 ms and at least two samples of history.
    pub fn validate(&self) -> Result<(), ConsoleError> {
        if let Some(address) = self.listen
            && !address.ip().is_loopback()
            && self.token.as_deref().is_none_or(str::is_empty)
        {
            return Err(ConsoleError::TokenRequired(address));
        }
        if self.sample_ms < 100 {
            return Err(ConsoleError::OutOfRange {
                field: "sample_ms",
                expected: "at least 100",
            });
        }
        if self.history < 2 {
            return Err(ConsoleError::OutOfRange {
                field: "history",
                expected: "at least 2",
            });
        }
        Ok(())
    }
}

/// Bind the console's socket (before plugins start, so a taken port fails fast).
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, ConsoleError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ConsoleError::Listen { address, source })
}

/// What every request handler shares.
struct Served {
    latest: watch::Receiver<Arc<Snapshot>>,
    token: Option<String>,
}

/// Serve the console on `listener` from the sampler's snapshots until `stopping` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    token: Option<String>,
    latest: watch::Receiver<Arc<Snapshot>>,
    mut stopping: watch::Receiver<bool>,
) {
    let served = Arc::new(Served {
        latest,
        token: token.filter(|t| !t.is_empty()),
    });
    let app = axum::Router::new()
        .route("/", axum::routing::get(page))
        .route("/api/snapshot", axum::routing::get(snapshot_json))
        .route("/metrics", axum::routing::get(prometheus_text))
        // Every path, not only the console's own: a path it does not serve answers 401
        // without the token, and 404 only with it, so a stranger learns nothing of which
        // paths there are (until 2026-12-02 they got 404 for those; found by an operator's
        // test).
        .layer(middleware::from_fn_with_state(
            served.clone(),
            require_token,
        ))
        .with_state(served);
    let shutdown = async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!("console server failed: {e}");
    }
}

/// Whether a request carries the token, when one is set: as a bearer token, or as the
/// `token` query parameter (how the page passes it on to its own reads).
fn authorised(served: &Served, headers: &HeaderMap, query: Option<&str>) -> bool {
    let Some(token) = &served.token else {
        return true;
    };
    // The scheme is case-insensitive (RFC 7235).
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, given)| given.trim().to_string());
    // As sent, or percent-decoded (a "+" stays a "+": tokens are not form text).
    let in_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("token="))
        .into_iter()
        .flat_map(|raw| {
            let decoded = percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .ok()
                .map(|d| d.into_owned());
            [Some(raw.to_string()), decoded]
        })
        .flatten();
    bearer
        .into_iter()
        .chain(in_query)
        .any(|given| constant_time_eq(given.as_bytes(), token.as_bytes()))
}

/// Compare without stopping at the first difference, so timing tells nothing of the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Answer 401 to a request without the token, when one is set.
async fn require_token(
    State(served): State<Arc<Served>>,
    RawQuery(query): RawQuery,
    request: Request,
    next: Next,
) -> Response {
    if authorised(&served, request.headers(), query.as_deref()) {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "this console needs its token: ?token=… or Authorization: Bearer …\n",
    )
        .into_response()
}

/// A body of `content_type`, or 500 with why it could not be written.
fn answer<E: std::fmt::Display>(content_type: &'static str, body: Result<String, E>) -> Response {
    match body {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, content_type),
                (header::CACHE_CONTROL, "no-store"),
            ],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

async fn snapshot_json(State(served): State<Arc<Served>>) -> Response {
    let snapshot = served.latest.borrow().clone();
    answer("application/json", serde_json::to_string(snapshot.as_ref()))
}

async fn prometheus_text(State(served): State<Arc<Served>>) -> Response {
    let snapshot = served.latest.borrow().clone();
    answer(metrics::CONTENT_TYPE, metrics::render(&snapshot))
}

impl ConsoleConfig {
    /// How often the sampler reads the stores.
    pub fn sample_period(&self) -> Duration {
        Duration::from_millis(self.sample_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_beyond_loopback_needs_a_token() {
        let open = ConsoleConfig {
            listen: Some("0.0.0.0:8790".parse().unwrap()),
            ..ConsoleConfig::default()
        };
        assert!(matches!(
            open.validate(),
            Err(ConsoleError::TokenRequired(_))
        ));
        let with_token = ConsoleConfig {
            token: Some("s3cret".into()),
            ..open
        };
        assert!(with_token.validate().is_ok());
        let loopback = ConsoleConfig {
            listen: Some("127.0.0.1:8790".parse().unwrap()),
            ..ConsoleConfig::default()
        };
        assert!(loopback.validate().is_ok());
    }

    #[test]
    fn the_token_is_taken_from_the_header_or_the_query() {
        let (_, latest) = watch::channel(Arc::new(Snapshot::default()));
        let served = Served {
            latest,
            token: Some("s3cret".into()),
        };
        let mut headers = HeaderMap::new();
        assert!(!authorised(&served, &headers, None));
        assert!(!authorised(&served, &headers, Some("token=wrong")));
        assert!(authorised(&served, &headers, Some("a=1&token=s3cret")));
        headers.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(authorised(&served, &headers, None));
        headers.insert(header::AUTHORIZATION, "bearer s3cret".parse().unwrap());
        assert!(
            authorised(&served, &headers, None),
            "the scheme in any case"
        );

        // A base64 token, as typed in a URL and as the page re-encodes it.
        let served = Served {
            token: Some("abc+def/1=".into()),
            ..served
        };
        let headers = HeaderMap::new();
        assert!(authorised(&served, &headers, Some("token=abc+def/1=")));
        assert!(authorised(
            &served,
            &headers,
            Some("token=abc%2Bdef%2F1%3D")
        ));
        assert!(!authorised(
            &served,
            &headers,
            Some("token=abc%20def%2F1%3D")
        ));
    }
}
