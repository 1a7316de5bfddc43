//! Language-model providers behind one trait, [`LlmProvider`], chosen by [`LlmConfig`]
//! (`agent.llm` in `cairn.yaml`):
//!
//! - [`offline`]: deterministic and network-free, so `cairn run` and every test work
//!   anywhere; it answers from what the prompt gives it.
//! - [`openai`]: any OpenAI-compatible `/chat/completions` endpoint (OpenAI, Ollama, vLLM,
//!   llama.cpp's server), with JSON mode when a request asks for it.
//! - [`anthropic`]: the Messages API.
//!
//! The HTTP providers share [`http`]: one agent with a timeout, retries with capped
//! exponential backoff on 429 and 5xx answers and dropped connections (honouring
//! `retry-after`), and every failure a typed [`LlmError`] with an [`ErrorKind`].

#![deny(missing_docs)]

pub mod anthropic;
pub mod cache;
pub mod http;
pub mod offline;
pub mod openai;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use cairn_vocab::ErrorKind;
pub use cairn_vocab::llm::{ChatMessage, Completion, CompletionRequest, Usage};

/// Why a completion failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The request was malformed (no messages, say); nothing was sent.
    #[error("invalid completion request: {0}")]
    InvalidRequest(String),
    /// The provider could not be reached, dropped the connection or kept failing (5xx).
    #[error("{provider} is unavailable: {message}")]
    Unavailable {
        /// The provider and endpoint.
        provider: String,
        /// What happened on the last attempt.
        message: String,
    },
    /// The provider kept answering 429 after every retry.
    #[error(
        "{provider} is rate-limiting{}",
        .retry_after_ms.map(|ms| format!(" (it asked to wait {ms} ms)")).unwrap_or_default()
    )]
    RateLimited {
        /// The provider and endpoint.
        provider: String,
        /// The wait it asked for last, if it said.
        retry_after_ms: Option<u64>,
    },
    /// No answer within the configured timeout, on every attempt.
    #[error("{provider} did not answer within {timeout_ms} ms")]
    Timeout {
        /// The provider and endpoint.
        provider: String,
        /// The timeout of one attempt.
        timeout_ms: u64,
    },
    /// The provider refused the request (a bad key, an unknown model, a bad request).
    #[error("{provider} refused the request: HTTP {status}: {message}")]
    Refused {
        /// The provider and endpoint.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// An excerpt of the answer.
        message: String,
    },
    /// The provider kept failing one request as if it were down (5xx, no answer in time)
    /// while it answered another one: the failure is that request's own — a proxy or a
    /// model server refusing its content — not an outage, and waiting for it would hold
    /// back every later batch.
    #[error("{provider} keeps failing this request while it answers others: {last}")]
    FailsAlone {
        /// The provider.
        provider: String,
        /// The request's last failure.
        last: String,
    },
    /// The answer was not what the API promises (malformed JSON, no text).
    #[error("{provider} answered with something unexpected: {message}")]
    InvalidResponse {
        /// The provider and endpoint.
        provider: String,
        /// What was wrong.
        message: String,
    },
}

/// Say in the log that `provider` cut its answer at `max_tokens`: the answer is delivered
/// as it came, but a reader of the log learns why it may end mid-sentence.
pub(crate) fn warn_cut_short(provider: &str, max_tokens: u32) {
    tracing::warn!(
        provider,
        max_tokens,
        "the model's answer was cut at max_tokens ({max_tokens}; agent.llm.max_tokens for the agent)"
    );
}

impl LlmError {
    /// What kind of failure this is, as callers across the plugin boundary see it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LlmError::InvalidRequest(_) => ErrorKind::InvalidInput,
            LlmError::Unavailable { .. }
            | LlmError::RateLimited { .. }
            | LlmError::Timeout { .. } => ErrorKind::Unavailable,
            LlmError::Refused {
                status: 401 | 403, ..
            } => ErrorKind::Denied,
            LlmError::Refused { .. }
            | LlmError::InvalidResponse { .. }
            | LlmError::FailsAlone { .. } => ErrorKind::Internal,
        }
    }

    /// Whether trying again later may succeed (the provider was down, slow or busy).
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Unavailable
    }

    /// Whether this transient failure may be the request's own rather than the provider's
    /// state: a server error or no answer in time may come of what was asked, while a rate
    /// limit (which may count a large request's tokens) says only to wait.
    pub fn may_be_the_requests_own(&self) -> bool {
        matches!(
            self,
            LlmError::Unavailable { .. } | LlmError::Timeout { .. }
        )
    }
}

/// A language-model provider. Calls block (HTTP); async callers run them on the blocking
/// pool.
pub trait LlmProvider: Send + Sync {
    /// The provider's name as configured (`offline`, `openai`, `anthropic`).
    fn name(&self) -> &str;
    /// The model it asks, as configured.
    fn model(&self) -> &str;
    /// Complete a chat.
    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError>;
}

/// The known providers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Deterministic, no network.
    #[default]
    Offline,
    /// An OpenAI-compatible chat-completions endpoint.
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
}

/// Which provider answers and how it is reached (`agent.llm` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// `offline` (default), `openai` or `anthropic`.
    pub provider: ProviderKind,
    /// The API's base URL; empty means the provider's own (`https://api.openai.com/v1`,
    /// `https://api.anthropic.com`). Ollama: `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// The model to ask; empty means `gpt-4o-mini` or `claude-3-5-haiku-latest`.
    pub model: String,
    /// The environment variable holding the API key (read at start; empty sends none).
    pub api_key_env: String,
    /// Longest wait for one attempt's answer, in ms (default 60000).
    pub timeout_ms: u64,
    /// Attempts after the first on 429, 5xx, a dropped connection or a timeout (default 3).
    pub max_retries: u32,
    /// The first backoff, doubled per retry, in ms (default 500).
    pub backoff_initial_ms: u64,
    /// The longest backoff, `retry-after` included, in ms (default 20000).
    pub backoff_max_ms: u64,
    /// The longest wait, in ms, before the agent asks again a provider that stayed
    /// unavailable through every retry (default 300000). The agent's turn waits an outage
    /// out, its messages kept in the buffer, instead of failing: the waits start at
    /// `backoff_max_ms` and double up to this.
    pub outage_wait_max_ms: u64,
    /// Tokens a completion may generate when the request does not say (default 1024).
    pub max_tokens: u32,
    /// The optional response cache.
    pub cache: cache::CacheConfig,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            provider: ProviderKind::Offline,
            base_url: String::new(),
            model: String::new(),
            api_key_env: String::new(),
            timeout_ms: 60_000,
            max_retries: 3,
            backoff_initial_ms: 500,
            backoff_max_ms: 20_000,
            outage_wait_max_ms: 300_000,
            max_tokens: 1024,
            cache: cache::CacheConfig::default(),
        }
    }
}

impl LlmConfig {
    /// Check the settings; the error names the field and what was expected.
    pub fn validate(&self) -> Result<(), String> {
        if !self.base_url.is_empty() {
            check_base_url(&self.base_url)
                .map_err(|problem| format!("agent.llm.base_url: {problem}"))?;
        }
        let variable_name = |name: &str| {
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        };
        if !variable_name(&self.api_key_env) {
            return Err(format!(
                "agent.llm.api_key_env: {} is not an environment variable's name: expected \
                 letters, digits and `_` (the name of the variable holding the key, not the key)",
                shown_briefly(&self.api_key_env)
            ));
        }
        if self.timeout_ms == 0 {
            return Err("agent.llm.timeout_ms: expected at least 1".into());
        }
        if self.max_retries > 10 {
            return Err("agent.llm.max_retries: expected at most 10".into());
        }
        if self.backoff_initial_ms > self.backoff_max_ms {
            return Err(
                "agent.llm.backoff_initial_ms: expected at most agent.llm.backoff_max_ms".into(),
            );
        }
        if self.outage_wait_max_ms < self.backoff_max_ms.max(1) {
            return Err(
                "agent.llm.outage_wait_max_ms: expected at least agent.llm.backoff_max_ms (and 1)"
                    .into(),
            );
        }
        if self.max_tokens == 0 {
            return Err("agent.llm.max_tokens: expected at least 1".into());
        }
        if self.cache.ttl_secs == 0 || self.cache.max_entries == 0 {
            return Err("agent.llm.cache.ttl_secs / max_entries: expected at least 1".into());
        }
        Ok(())
    }

    /// Why the host cannot ask the provider as configured, before it starts: the variable
    /// `api_key_env` names is unset, or a provider that needs a key has none named (OpenAI's
    /// and Anthropic's own APIs; a local OpenAI-compatible server may need none).
    pub fn key_problem(&self) -> Option<String> {
        let (name, own_api) = match self.provider {
            ProviderKind::Offline => return None,
            ProviderKind::Openai => ("openai", openai::DEFAULT_BASE_URL),
            ProviderKind::Anthropic => ("anthropic", anthropic::DEFAULT_BASE_URL),
        };
        if !self.api_key_env.is_empty() {
            return match self.api_key() {
                None => Some(format!(
                    "agent.llm.api_key_env (CAIRN_AGENT_LLM_API_KEY_ENV or the config file): the environment variable {} is not set or is empty: expected the {name} API key in it",
                    shown_briefly(&self.api_key_env)
                )),
                Some(key) if key.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                    Some(format!(
                        "agent.llm.api_key_env (CAIRN_AGENT_LLM_API_KEY_ENV or the config file): the key in `{}` holds a space, a line break or \
                         another control character inside it: expected the key alone",
                        self.api_key_env
                    ))
                }
                Some(_) => None,
            };
        }
        let url = if self.base_url.is_empty() {
            own_api
        } else {
            self.base_url.as_str()
        };
        let host_of = |url: &str| {
            url.split("://")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .map(str::to_string)
        };
        (host_of(url) == host_of(own_api)).then(|| {
            format!(
                "agent.llm.api_key_env: {name} at {url} needs an API key: expected the name of the environment variable holding it (CAIRN_AGENT_LLM_API_KEY_ENV)"
            )
        })
    }

    /// The longest one completion can take, in ms, when every attempt times out: each
    /// attempt's `timeout_ms` and the backoffs between them (none for `offline`). A
    /// plugin's call that asks the model must be allowed this long.
    pub fn longest_call_ms(&self) -> u64 {
        if self.provider == ProviderKind::Offline {
            return 0;
        }
        let (initial, max) = (
            Duration::from_millis(self.backoff_initial_ms),
            Duration::from_millis(self.backoff_max_ms),
        );
        let backoffs: u64 = (0..self.max_retries)
            .map(|retry| backoff(initial, max, retry).as_millis() as u64)
            .sum();
        self.timeout_ms
            .saturating_mul(u64::from(self.max_retries) + 1)
            .saturating_add(backoffs)
    }

    /// The API key from `api_key_env`, when set and not empty, without the white space
    /// around it (the line break an env file or a secrets mount leaves at its end).
    pub fn api_key(&self) -> Option<String> {
        if self.api_key_env.is_empty() {
            return None;
        }
        std::env::var(&self.api_key_env)
            .ok()
            .map(|key| key.trim().to_string())
            .filter(|key| !key.is_empty())
    }
}

/// The wait before retry `retry` (0 for the first): `initial`, doubled at each retry, at
/// most `max` — the one backoff both the retries and [`LlmConfig::longest_call_ms`] use.
pub(crate) fn backoff(initial: Duration, max: Duration, retry: u32) -> Duration {
    initial.saturating_mul(1 << retry.min(16)).min(max)
}

/// Why `base_url` cannot be asked: not an http(s) URL with a host (and a port that is one).
/// The URL is shown with any password as `***`.
fn check_base_url(base_url: &str) -> Result<(), String> {
    let shown = http::shown_url(base_url);
    let url = url::Url::parse(base_url)
        .map_err(|e| format!("`{shown}` is not a URL ({e}): expected http://HOST[:PORT]/PATH"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{shown}` is not an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "`{shown}` names no host: expected http://HOST[:PORT]/PATH"
        ));
    }
    Ok(())
}

/// A variable's name as a message shows it: in full when it looks like one (short, or
/// words of capitals joined by `_`, as `OPENAI_API_KEY`), else its start and length, as
/// what was set may be a key pasted in the wrong place.
pub fn shown_briefly(value: &str) -> String {
    const SHOWN_IN_FULL: usize = 12;
    let like_a_name = value.contains('_')
        && value
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if value.chars().count() <= SHOWN_IN_FULL || like_a_name {
        format!("`{value}`")
    } else {
        let start: String = value.chars().take(4).collect();
        format!("`{start}…` ({} characters)", value.chars().count())
    }
}

/// Build the configured provider.
pub fn provider(config: &LlmConfig) -> Box<dyn LlmProvider> {
    match config.provider {
        ProviderKind::Offline => Box::new(offline::OfflineProvider),
        ProviderKind::Openai => Box::new(openai::OpenAiProvider::new(config)),
        ProviderKind::Anthropic => Box::new(anthropic::AnthropicProvider::new(config)),
    }
}

/// Refuse a request without a user message to answer (nothing is sent).
fn check(request: &CompletionRequest) -> Result<(), LlmError> {
    if request.messages.iter().all(|m| m.role != "user") {
        return Err(LlmError::InvalidRequest("no user message to answer".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_base_url(base_url: &str) -> LlmConfig {
        LlmConfig {
            provider: ProviderKind::Openai,
            base_url: base_url.into(),
            ..LlmConfig::default()
        }
    }

    #[test]
    fn a_base_url_with_no_host_or_an_impossible_port_is_refused_without_its_password() {
        for (url, expected) in [
            ("http://", "is not a URL"),
            (
                "http://127.0.0.1:99999/v1",
                "is not a URL (invalid port number)",
            ),
            ("ftp://example.com", "is not an http:// or https:// URL"),
            ("not-a-url", "is not a URL"),
        ] {
            let problem = with_base_url(url).validate().expect_err(url);
            assert!(problem.contains(expected), "{url}: {problem}");
        }
        let problem = with_base_url("ftp://ann:hunter2@example.com")
            .validate()
            .expect_err("ftp");
        assert!(
            problem.contains("ftp://ann:***@example.com") && !problem.contains("hunter2"),
            "{problem}"
        );
        assert!(
            with_base_url("http://127.0.0.1:11434/v1")
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn a_key_pasted_into_api_key_env_is_not_echoed_whole() {
        let config = LlmConfig {
            api_key_env: "sk-proj-LEAKVALUE1234567890".into(),
            ..LlmConfig::default()
        };
        let problem = config.validate().expect_err("a key, not a name");
        assert!(
            problem.contains("`sk-p…` (27 characters)") && !problem.contains("LEAKVALUE"),
            "{problem}"
        );
        let typo = LlmConfig {
            api_key_env: "MY-KEY".into(),
            ..LlmConfig::default()
        };
        assert!(typo.validate().expect_err("a hyphen").contains("`MY-KEY`"));
        // A key that happens to be a valid name is not echoed whole when unset either.
        let aws_like = LlmConfig {
            provider: ProviderKind::Openai,
            api_key_env: "AKIAIOSFODNN7EXAMPLEwJalrXUtnFEMIK7MDENG".into(),
            ..LlmConfig::default()
        };
        let problem = aws_like.key_problem().expect("unset");
        assert!(
            problem.contains("`AKIA…` (40 characters)") && !problem.contains("EXAMPLE"),
            "{problem}"
        );
        assert_eq!(shown_briefly("OPENAI_API_KEY"), "`OPENAI_API_KEY`");
    }

    #[test]
    fn the_longest_call_is_every_attempt_timed_out_and_the_backoffs_between() {
        let config = LlmConfig {
            provider: ProviderKind::Openai,
            timeout_ms: 1_000,
            max_retries: 3,
            backoff_initial_ms: 500,
            backoff_max_ms: 1_500,
            ..LlmConfig::default()
        };
        assert_eq!(config.longest_call_ms(), 4 * 1_000 + 500 + 1_000 + 1_500);
        assert_eq!(LlmConfig::default().longest_call_ms(), 0, "offline");
    }

    #[test]
    fn a_password_in_the_endpoint_is_shown_as_stars() {
        assert_eq!(
            http::shown_url("http://user:hunter2@127.0.0.1:18931/v1/chat/completions"),
            "http://user:***@127.0.0.1:18931/v1/chat/completions"
        );
        assert_eq!(
            http::shown_url("https://api.openai.com/v1"),
            "https://api.openai.com/v1"
        );
    }

    #[test]
    fn the_key_is_read_without_the_line_break_a_secrets_file_leaves() {
        let name = "CAIRN_TEST_LLM_KEY_WITH_NEWLINE";
        // SAFETY: this test alone sets and reads this variable.
        unsafe { std::env::set_var(name, "sk-abc\n") };
        let config = LlmConfig {
            provider: ProviderKind::Openai,
            api_key_env: name.into(),
            ..LlmConfig::default()
        };
        assert_eq!(config.api_key().as_deref(), Some("sk-abc"));
        assert_eq!(config.key_problem(), None);
        unsafe { std::env::set_var(name, "sk-abc\ndef") };
        let problem = config.key_problem().expect("a break inside");
        assert!(problem.contains("a line break"), "{problem}");
    }
}
