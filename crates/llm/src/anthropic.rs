//! The `anthropic` provider: `POST {base_url}/v1/messages`. System messages become the
//! `system` field; the others alternate as `user` and `assistant` messages.

use serde::Deserialize;
use serde_json::json;

use super::http::{Defaults, Target};
use super::{Completion, CompletionRequest, LlmConfig, LlmError, LlmProvider, Usage, check};

/// The base URL when none is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The model when none is configured.
pub const DEFAULT_MODEL: &str = "claude-3-5-haiku-latest";
/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";

/// A Messages API endpoint.
pub struct AnthropicProvider {
    target: Target,
}

/// Where the API is unless configured.
const DEFAULTS: Defaults = Defaults {
    provider: "anthropic",
    base_url: DEFAULT_BASE_URL,
    path: "/v1/messages",
    model: DEFAULT_MODEL,
};

impl AnthropicProvider {
    /// A client for the endpoint in `config`; the API key is read from its variable now.
    pub fn new(config: &LlmConfig) -> Self {
        Self::with_key(config, config.api_key())
    }

    /// A client for the endpoint in `config` sending `api_key`.
    pub fn with_key(config: &LlmConfig, api_key: Option<String>) -> Self {
        Self {
            target: Target::new(&DEFAULTS, config, api_key),
        }
    }
}

#[derive(Deserialize)]
struct Answer {
    content: Vec<Block>,
    model: Option<String>,
    usage: Option<Counted>,
    /// `max_tokens` when the answer was cut there.
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

#[derive(Deserialize)]
struct Counted {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.target.model
    }

    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        check(request)?;
        let mut system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
            .collect();
        if request.json {
            system.push("Answer with one JSON object and nothing else.");
        }
        let messages: Vec<_> = request
            .messages
            .iter()
            .filter(|m| m.role != "system")
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        let mut body = json!({
            "model": self.target.model,
            "max_tokens": request.max_tokens.unwrap_or(self.target.max_tokens),
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        let mut headers = vec![("anthropic-version", API_VERSION.to_string())];
        if let Some(key) = &self.target.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        let text = self.target.endpoint.post(&headers, &body.to_string())?;
        let answer: Answer = serde_json::from_str(&text).map_err(|e| {
            let problem = match crate::http::error_in_answer(&text) {
                Some(said) => format!("an error instead of an answer: {said}"),
                None => format!("not a Messages answer ({e})"),
            };
            self.target.endpoint.invalid(problem)
        })?;
        if answer.stop_reason.as_deref() == Some("max_tokens") {
            crate::warn_cut_short(
                self.target.endpoint.label(),
                request.max_tokens.unwrap_or(self.target.max_tokens),
            );
        }
        let content: String = answer
            .content
            .into_iter()
            .filter(|block| block.kind == "text")
            .filter_map(|block| block.text)
            .collect();
        if content.trim().is_empty() {
            return Err(self.target.endpoint.invalid("no text block with text"));
        }
        let usage = answer.usage.map_or_else(Usage::default, |u| Usage {
            input_tokens: u.input_tokens.unwrap_or(0),
            output_tokens: u.output_tokens.unwrap_or(0),
        });
        Ok(Completion {
            content,
            model: answer.model.unwrap_or_else(|| self.target.model.clone()),
            usage,
        })
    }
}
