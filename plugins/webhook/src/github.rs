//! Replies as GitHub comments: `POST {api}/repos/{owner}/{repo}/issues/{number}/comments`
//! through `wasi:http/outgoing-handler`, which the host allows only to the manifest's
//! `capabilities.http` destinations.

use serde_json::{Value, json};
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

/// Ends every comment this channel posts (invisible on GitHub), so the `issue_comment`
/// GitHub sends about it is told from a person's.
pub const OWN_MARK: &str = "<!-- posted by cairn -->";

/// Whether a comment's body is one this channel posted.
pub fn is_own_comment(body: &str) -> bool {
    body.trim_end().ends_with(OWN_MARK)
}

/// Where and as whom replies are posted.
pub struct Poster {
    /// `https` or plain `http` (a local stand-in for the API).
    pub https: bool,
    /// `host[:port]` of the API.
    pub authority: String,
    /// The path prefix of the API (empty for api.github.com, `/api/v3` for GitHub Enterprise).
    pub prefix: String,
    /// The token sent as `Authorization: Bearer`.
    pub token: String,
}

impl Poster {
    /// A poster for `api_base` (`https://api.github.com`, `http://127.0.0.1:8080/api/v3`).
    pub fn new(api_base: &str, token: String) -> Result<Self, String> {
        let (https, rest) = match api_base.split_once("://") {
            Some(("https", rest)) => (true, rest),
            Some(("http", rest)) => (false, rest),
            _ => {
                return Err(format!(
                    "config.api_base: `{api_base}` is not an http(s) URL"
                ));
            }
        };
        let (authority, prefix) = match rest.find('/') {
            Some(slash) => (&rest[..slash], rest[slash..].trim_end_matches('/')),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(format!("config.api_base: `{api_base}` names no host"));
        }
        Ok(Self {
            https,
            authority: authority.into(),
            prefix: prefix.into(),
            token,
        })
    }

    /// Post `text` as a comment on `owner/repo#number`; the new comment's URL.
    pub fn comment(&self, conversation: &str, text: &str) -> Result<String, String> {
        let (repository, number) = conversation
            .rsplit_once('#')
            .filter(|(repo, number)| repo.contains('/') && number.parse::<u64>().is_ok())
            .ok_or_else(|| format!("{conversation} is not an issue or pull request"))?;
        let path = format!(
            "{}/repos/{repository}/issues/{number}/comments",
            self.prefix
        );
        let body = json!({ "body": format!("{text}\n\n{OWN_MARK}") }).to_string();
        let (status, answer) = self.post(&path, body.as_bytes())?;
        let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        if status != 201 {
            let detail = answer.get("message").and_then(Value::as_str).unwrap_or("");
            return Err(format!("GitHub answered {status} {detail}"));
        }
        Ok(answer
            .get("html_url")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string())
    }

    /// POST a JSON body; the status and the response body.
    fn post(&self, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        let headers = Fields::from_list(&[
            (
                "authorization".into(),
                format!("Bearer {}", self.token).into_bytes(),
            ),
            ("accept".into(), b"application/vnd.github+json".to_vec()),
            ("content-type".into(), b"application/json".to_vec()),
            ("content-length".into(), body.len().to_string().into_bytes()),
            ("user-agent".into(), b"cairn-webhook".to_vec()),
            ("x-github-api-version".into(), b"2022-11-28".to_vec()),
        ])
        .map_err(|e| format!("headers: {e:?}"))?;
        let request = OutgoingRequest::new(headers);
        let scheme = if self.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let refused = |what: &str| format!("the request's {what} was refused");
        request
            .set_method(&Method::Post)
            .map_err(|()| refused("method"))?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| refused("scheme"))?;
        request
            .set_authority(Some(&self.authority))
            .map_err(|()| refused("authority"))?;
        request
            .set_path_with_query(Some(path))
            .map_err(|()| refused("path"))?;
        let outgoing = request.body().map_err(|()| refused("body"))?;
        let pending = outgoing_handler::handle(request, None).map_err(|e| describe(&e))?;
        // A refused request fails its body stream too: the response future names why.
        let sent = write_body(&outgoing, body);
        let finished = OutgoingBody::finish(outgoing, None).map_err(|e| describe(&e));
        pending.subscribe().block();
        let response = match pending.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(error))) => return Err(describe(&error)),
            Some(Err(())) | None => return Err("no response".into()),
        };
        sent?;
        finished?;
        let status = response.status();
        let incoming = response
            .consume()
            .map_err(|()| "the response has no body".to_string())?;
        let mut answer = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| "the response body is gone".to_string())?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(bytes) => answer.extend_from_slice(&bytes),
                    Err(StreamError::Closed) => break,
                    Err(StreamError::LastOperationFailed(e)) => {
                        return Err(format!("reading the response: {}", e.to_debug_string()));
                    }
                }
            }
        }
        Ok((status, answer))
    }
}

/// Write a request body in the chunks a WASI stream takes.
fn write_body(outgoing: &OutgoingBody, body: &[u8]) -> Result<(), String> {
    let stream = outgoing
        .write()
        .map_err(|()| "the request body was refused".to_string())?;
    for chunk in body.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| format!("sending: {e:?}"))?;
    }
    Ok(())
}

/// A WASI HTTP error as a reader needs it.
fn describe(error: &ErrorCode) -> String {
    match error {
        ErrorCode::HttpRequestDenied => {
            "the host denied the request: the API is not in the manifest's capabilities.http".into()
        }
        ErrorCode::HttpResponseBodySize(_) => {
            "the response is over limits.http_response_bytes".into()
        }
        ErrorCode::ConnectionTimeout | ErrorCode::ConnectionReadTimeout => {
            "the API did not answer within limits.http_timeout_ms".into()
        }
        other => format!("{other:?}"),
    }
}
