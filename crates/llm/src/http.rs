//! What the HTTP providers share: one agent with a per-attempt timeout, and a POST that is
//! retried with capped exponential backoff when the answer is 429, 408, 409 or 5xx, the connection
//! drops or the attempt times out — waiting what `retry-after` asks, within the cap.

use std::time::Duration;

use super::{LlmConfig, LlmError};

/// An HTTP endpoint of a provider with its retry policy.
pub struct Endpoint {
    /// `<provider> (<url>)`, for errors and logs.
    label: String,
    url: String,
    agent: ureq::Agent,
    timeout_ms: u64,
    max_retries: u32,
    backoff_initial: Duration,
    backoff_max: Duration,
}

/// What one attempt came to.
enum Attempt {
    /// A 2xx answer's body.
    Answered(String),
    /// Worth another try after the given wait (or the policy's backoff).
    Retry(LlmError, Option<Duration>),
    /// Final.
    Failed(LlmError),
}

impl Endpoint {
    /// `url` of provider `provider`, with the timeout and retry settings of `config`.
    pub fn new(provider: &str, url: String, config: &LlmConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(config.timeout_ms.max(1))))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            label: format!("{provider} ({})", shown_url(&url)),
            url,
            agent,
            timeout_ms: config.timeout_ms,
            max_retries: config.max_retries,
            backoff_initial: Duration::from_millis(config.backoff_initial_ms),
            backoff_max: Duration::from_millis(config.backoff_max_ms),
        }
    }

    /// `<provider> (<url>)`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// An error about the answer's content.
    pub fn invalid(&self, message: impl Into<String>) -> LlmError {
        LlmError::InvalidResponse {
            provider: self.label.clone(),
            message: message.into(),
        }
    }

    /// POST `body` as JSON with `headers`; the body of the first 2xx answer.
    pub fn post(&self, headers: &[(&str, String)], body: &str) -> Result<String, LlmError> {
        let mut retries = 0;
        loop {
            let (error, asked_wait) = match self.attempt(headers, body) {
                Attempt::Answered(text) => return Ok(text),
                Attempt::Failed(error) => return Err(error),
                Attempt::Retry(error, wait) => (error, wait),
            };
            if retries >= self.max_retries {
                return Err(error);
            }
            let backoff = crate::backoff(self.backoff_initial, self.backoff_max, retries);
            let wait = asked_wait.map_or(backoff, |asked| asked.min(self.backoff_max));
            retries += 1;
            let why = waited_because(asked_wait, self.backoff_max);
            tracing::warn!(provider = %self.label, retry = retries, wait_ms = wait.as_millis() as u64, "{error}; retrying{why}");
            std::thread::sleep(wait);
        }
    }

    fn attempt(&self, headers: &[(&str, String)], body: &str) -> Attempt {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut response = match request.send(body) {
            Ok(response) => response,
            // The request could not even be made (a header value it cannot send): no
            // retry or wait mends that.
            Err(ureq::Error::Http(error)) => {
                return Attempt::Failed(LlmError::InvalidRequest(format!(
                    "{}: cannot make the request: {error}",
                    self.label
                )));
            }
            Err(error) => return Attempt::Retry(self.transport(error), None),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        let bytes = match response.body_mut().read_to_vec() {
            Ok(bytes) => bytes,
            Err(ureq::Error::BodyExceedsLimit(limit)) => {
                return Attempt::Failed(
                    self.invalid(format!("an answer longer than {limit} bytes")),
                );
            }
            Err(error) => return Attempt::Retry(self.transport(error), None),
        };
        // An answer that is not UTF-8 is malformed, not an outage: asked again it would come
        // back the same, and every later batch would wait behind it.
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) if (200..=299).contains(&status) => {
                return Attempt::Failed(self.invalid(format!(
                    "an answer that is not UTF-8 text (byte {} of {})",
                    e.utf8_error().valid_up_to(),
                    e.as_bytes().len()
                )));
            }
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        // A provider may quote the key it was sent (`Incorrect API key provided: sk-…`):
        // never kept, logged or delivered.
        let text = without_secrets(text, headers);
        match status {
            200..=299 => Attempt::Answered(text),
            429 => Attempt::Retry(
                LlmError::RateLimited {
                    provider: self.label.clone(),
                    retry_after_ms: retry_after
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                },
                retry_after,
            ),
            // A request timeout (408) and a conflict (409, answered by some gateways while
            // another request holds the same resource) pass like a server error.
            408 | 409 | 500..=599 => Attempt::Retry(
                LlmError::Unavailable {
                    provider: self.label.clone(),
                    message: format!("HTTP {status}: {}", excerpt(&text)),
                },
                retry_after,
            ),
            404 => Attempt::Failed(LlmError::Refused {
                provider: self.label.clone(),
                status,
                message: format!(
                    "{} (no such path: is agent.llm.base_url right? the API's paths start \
                     after it, e.g. https://api.openai.com/v1)",
                    excerpt(&text)
                ),
            }),
            _ => Attempt::Failed(LlmError::Refused {
                provider: self.label.clone(),
                status,
                message: excerpt(&text),
            }),
        }
    }

    /// A failure to send or to read the answer: a timeout, or the provider unreachable.
    fn transport(&self, error: ureq::Error) -> LlmError {
        match error {
            ureq::Error::Timeout(_) => LlmError::Timeout {
                provider: self.label.clone(),
                timeout_ms: self.timeout_ms,
            },
            other => LlmError::Unavailable {
                provider: self.label.clone(),
                message: other.to_string(),
            },
        }
    }
}

/// What a retry's log line says of its wait: what the provider's `retry-after` asked, and
/// when that was more than `backoff_max_ms` allows, that it was cut to it.
fn waited_because(asked: Option<Duration>, cap: Duration) -> String {
    match asked {
        None => String::new(),
        Some(asked) if asked > cap => format!(
            " after the {} ms it asked for (retry-after), cut to agent.llm.backoff_max_ms",
            asked.as_millis()
        ),
        Some(asked) => format!(
            " after the {} ms it asked for (retry-after)",
            asked.as_millis()
        ),
    }
}

/// How long a `retry-after` header asks to wait: seconds, or an HTTP date (none for a
/// date already past, or a value of neither form).
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        // Past what a Duration holds is "a very long time" (the caller caps every wait).
        return (secs.is_finite() && secs >= 0.0)
            .then(|| Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    at.duration_since(std::time::SystemTime::now()).ok()
}

/// The error a provider put in a 2xx answer instead of a completion (`{"error": {"message":
/// "The model is overloaded"}}`), to name instead of the shape the answer lacked.
pub(crate) fn error_in_answer(text: &str) -> Option<String> {
    let answer: serde_json::Value = serde_json::from_str(text).ok()?;
    let error = answer.get("error")?;
    let message = error
        .get("message")
        .and_then(serde_json::Value::as_str)
        .or_else(|| error.as_str())?;
    Some(excerpt(message))
}

/// Headers whose values are credentials.
const SECRET_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// `text` with every credential the request sent (a key, a bearer token) as `***`.
fn without_secrets(mut text: String, headers: &[(&str, String)]) -> String {
    for (name, value) in headers {
        if !SECRET_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            continue;
        }
        let value = value.trim();
        let secret = value
            .split_once(' ')
            .map_or(value, |(_, token)| token.trim());
        // A few characters could be anything: only a real key is looked for.
        if secret.len() >= 8 && text.contains(secret) {
            text = text.replace(secret, "***");
        }
    }
    text
}

/// `url` as logs and errors show it: a password in it as `***`.
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_string(),
        // Not a URL the host would ask: show no more than its scheme and where a password
        // would start.
        Err(_) => match url.split_once('@') {
            Some((_, after)) => format!("***@{after}"),
            None => url.to_string(),
        },
    }
}

/// The start of an answer, for an error message.
fn excerpt(text: &str) -> String {
    text.chars().take(300).collect()
}

/// What an HTTP provider is configured with: its endpoint, model, key and token cap.
pub struct Target {
    /// The endpoint with its retry policy.
    pub endpoint: Endpoint,
    /// The model asked.
    pub model: String,
    /// The API key sent, if any.
    pub api_key: Option<String>,
    /// Tokens a completion may generate when the request does not say.
    pub max_tokens: u32,
}

/// Where a provider's API is and what it asks when the configuration does not say.
pub struct Defaults {
    /// The provider's name.
    pub provider: &'static str,
    /// Its base URL.
    pub base_url: &'static str,
    /// The path of its completion endpoint below the base URL.
    pub path: &'static str,
    /// Its model.
    pub model: &'static str,
}

impl Target {
    /// The target `config` describes, the provider's `defaults` filling what it leaves
    /// empty, sending `api_key`.
    pub fn new(defaults: &Defaults, config: &LlmConfig, api_key: Option<String>) -> Self {
        let base = if config.base_url.is_empty() {
            defaults.base_url
        } else {
            config.base_url.trim_end_matches('/')
        };
        let url = format!("{base}{}", defaults.path);
        Self {
            endpoint: Endpoint::new(defaults.provider, url, config),
            model: if config.model.is_empty() {
                defaults.model.to_string()
            } else {
                config.model.clone()
            },
            api_key,
            max_tokens: config.max_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_says_what_wait_the_provider_asked_and_whether_it_was_cut() {
        let cap = Duration::from_secs(10);
        assert_eq!(waited_because(None, cap), "");
        assert_eq!(
            waited_because(Some(Duration::from_secs(1)), cap),
            " after the 1000 ms it asked for (retry-after)"
        );
        assert_eq!(
            waited_because(Some(Duration::from_secs(100)), cap),
            " after the 100000 ms it asked for (retry-after), cut to agent.llm.backoff_max_ms"
        );
    }
}
