//! The `openai` provider: any OpenAI-compatible `POST {base_url}/chat/completions`
//! (OpenAI, Ollama, vLLM, llama.cpp's server). A request asking for JSON is sent with
//! `response_format: {type: json_object}`.

use serde::Deserialize;
use serde_json::json;

use super::http::{Defaults, Target};
use super::{Completion, CompletionRequest, LlmConfig, LlmError, LlmProvider, Usage, check};

/// The base URL when none is configured.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The model when none is configured.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// A chat-completions endpoint.
pub struct OpenAiProvider {
    target: Target,
}

/// Where the API is unless configured.
const DEFAULTS: Defaults = Defaults {
    provider: "openai",
    base_url: DEFAULT_BASE_URL,
    path: "/chat/completions",
    model: DEFAULT_MODEL,
};

impl OpenAiProvider {
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
    choices: Vec<Choice>,
    model: Option<String>,
    usage: Option<Counted>,
}

#[derive(Deserialize)]
struct Choice {
    message: AnswerMessage,
    /// `length` when the answer was cut at `max_tokens`.
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct AnswerMessage {
    content: Option<String>,
}

#[derive(Deserialize)]
struct Counted {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.target.model
    }

    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        check(request)?;
        let mut body = json!({
            "model": self.target.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens.unwrap_or(self.target.max_tokens),
        });
        if let Some(temperature) = request.temperature {
            body["temperature"] = json!(temperature);
        }
        if request.json {
            body["response_format"] = json!({"type": "json_object"});
        }
        let headers: Vec<(&str, String)> = self
            .target
            .api_key
            .iter()
            .map(|key| ("Authorization", format!("Bearer {key}")))
            .collect();
        let text = self.target.endpoint.post(&headers, &body.to_string())?;
        let answer: Answer = serde_json::from_str(&text).map_err(|e| {
            let problem = match crate::http::error_in_answer(&text) {
                Some(said) => format!("an error instead of an answer: {said}"),
                None => format!("not a chat completion ({e})"),
            };
            self.target.endpoint.invalid(problem)
        })?;
        let choice = answer.choices.into_iter().next();
        if choice
            .as_ref()
            .is_some_and(|c| c.finish_reason.as_deref() == Some("length"))
        {
            crate::warn_cut_short(
                self.target.endpoint.label(),
                request.max_tokens.unwrap_or(self.target.max_tokens),
            );
        }
        let content = choice
            .and_then(|choice| choice.message.content)
            .ok_or_else(|| self.target.endpoint.invalid("no choice with a message"))?;
        if content.trim().is_empty() {
            return Err(self.target.endpoint.invalid("an empty message"));
        }
        let usage = answer.usage.map_or_else(Usage::default, |u| Usage {
            input_tokens: u.prompt_tokens.unwrap_or(0),
            output_tokens: u.completion_tokens.unwrap_or(0),
        });
        Ok(Completion {
            content,
            model: answer.model.unwrap_or_else(|| self.target.model.clone()),
            usage,
        })
    }
}
