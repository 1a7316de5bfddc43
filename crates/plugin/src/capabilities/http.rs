//! `wasi:http/outgoing-handler` for plugins: every request is checked, when it is sent,
//! against the manifest's `capabilities.http`; a refused one fails with the typed WASI
//! error `HTTP-request-denied` and a host log line naming the destination and the field.
//! Granted requests run with the plugin's `limits.http_timeout_ms` (connect, first byte,
//! between bytes) and their response bodies stop at `limits.http_response_bytes`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, HOST};
use http::uri::Scheme;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks, default_send_request,
};

use crate::manifest::{HttpDestination, Manifest};

/// A future the WASI HTTP implementation drives alongside a response (the connection).
type IoFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;

/// What a response future resolves to.
type SendResult = Result<(http::Response<WasiBody>, IoFuture), HttpError>;

/// The outbound HTTP policy of one plugin, shared by its stores.
#[derive(Debug)]
pub struct Egress {
    plugin: Arc<str>,
    allowed: Vec<HttpDestination>,
    timeout: Duration,
    max_response_bytes: u64,
}

impl Egress {
    /// The policy a manifest grants (entries were validated when it loaded).
    pub fn from_manifest(manifest: &Manifest) -> Self {
        Self {
            plugin: manifest.id.as_str().into(),
            allowed: manifest
                .capabilities
                .http
                .iter()
                .filter_map(|entry| HttpDestination::parse(entry))
                .collect(),
            timeout: Duration::from_millis(manifest.limits.http_timeout_ms),
            max_response_bytes: manifest.limits.http_response_bytes,
        }
    }

    /// Whether a request to `uri` may be sent; the reason when not.
    fn check(&self, uri: &http::Uri) -> Result<(), String> {
        let https = uri.scheme() == Some(&Scheme::HTTPS);
        let Some(authority) = uri.authority() else {
            return Err("the request names no host".into());
        };
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let scheme = if https { "https" } else { "http" };
        if self
            .allowed
            .iter()
            .any(|grant| grant.allows(https, authority.host(), port))
        {
            Ok(())
        } else {
            Err(format!(
                "{scheme}://{}:{port} is not in capabilities.http",
                authority.host()
            ))
        }
    }
}

/// The store-side hooks: the plugin's [`Egress`] policy.
#[derive(Debug, Clone)]
pub struct EgressHooks(pub Arc<Egress>);

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _io: IoFuture,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let egress = self.0.clone();
        Box::new(async move {
            if let Err(reason) = egress.check(request.uri()) {
                tracing::warn!(plugin = %egress.plugin, "outgoing HTTP request denied: {reason}");
                return Err(HttpError::HttpRequestDenied);
            }
            // The guest may not set Host (a forbidden header); the URI's authority is it.
            if let Some(authority) = request.uri().authority() {
                let value = http::HeaderValue::from_str(authority.as_str())
                    .map_err(|_| HttpError::HttpRequestUriInvalid)?;
                request.headers_mut().entry(HOST).or_insert(value);
            }
            let options = RequestOptions {
                connect_timeout: Some(egress.timeout),
                first_byte_timeout: Some(egress.timeout),
                between_bytes_timeout: Some(egress.timeout),
            };
            let (response, io) = default_send_request(request, Some(options)).await?;
            let declared = response
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if let Some(length) = declared.filter(|n| *n > egress.max_response_bytes) {
                tracing::warn!(plugin = %egress.plugin, length, limit = egress.max_response_bytes, "outgoing HTTP response over limits.http_response_bytes");
                return Err(HttpError::HttpResponseBodySize(Some(length)));
            }
            let limit = egress.max_response_bytes;
            let response = response.map(|body| {
                CappedBody {
                    inner: body.boxed_unsync(),
                    seen: 0,
                    limit,
                }
                .boxed_unsync()
            });
            Ok((response, Box::new(io) as IoFuture))
        })
    }
}

/// A response body that fails once more than `limit` bytes have come through (for
/// responses that declare no length, or lie about it).
struct CappedBody {
    inner: WasiBody,
    seen: u64,
    limit: u64,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        if self.seen > self.limit {
            return Poll::Ready(None);
        }
        let polled = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.seen += data.len() as u64;
            if self.seen > self.limit {
                return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(self.limit)))));
            }
        }
        Poll::Ready(polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(entries: &[&str]) -> Egress {
        Egress {
            plugin: "p".into(),
            allowed: entries
                .iter()
                .filter_map(|e| HttpDestination::parse(e))
                .collect(),
            timeout: Duration::from_secs(1),
            max_response_bytes: 10,
        }
    }

    #[test]
    fn only_granted_destinations_pass_and_a_refusal_names_the_field() {
        let policy = egress(&["api.github.com", "http://127.0.0.1:8080"]);
        let uri = |text: &str| text.parse::<http::Uri>().expect("uri");
        assert!(policy.check(&uri("https://api.github.com/repos")).is_ok());
        assert!(policy.check(&uri("http://127.0.0.1:8080/x")).is_ok());
        let refused = policy
            .check(&uri("http://api.github.com/repos"))
            .expect_err("clear text refused");
        assert_eq!(
            refused,
            "http://api.github.com:80 is not in capabilities.http"
        );
        assert!(policy.check(&uri("https://evil.example/")).is_err());
        assert!(egress(&[]).check(&uri("https://api.github.com/")).is_err());
    }

    #[test]
    fn a_body_over_the_limit_fails_even_without_a_declared_length() {
        let body = |bytes: usize, limit: u64| CappedBody {
            inner: http_body_util::Full::new(Bytes::from(vec![b'x'; bytes]))
                .map_err(|never| match never {})
                .boxed_unsync(),
            seen: 0,
            limit,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let collected = runtime.block_on(body(50, 10).collect());
        assert!(matches!(
            collected,
            Err(HttpError::HttpResponseBodySize(Some(10)))
        ));
        let collected = runtime
            .block_on(body(10, 10).collect())
            .expect("at the limit");
        assert_eq!(collected.to_bytes().len(), 10);
    }
}
