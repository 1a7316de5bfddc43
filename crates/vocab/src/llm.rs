//! Completion requests and answers, as the agent, plugins (`llm.complete`) and the
//! providers speak them.

use serde::{Deserialize, Serialize};

/// One message of a chat prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role` saying `content`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// A completion request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// The conversation so far; system messages first.
    pub messages: Vec<ChatMessage>,
    /// Upper bound on generated tokens; none lets the configuration decide.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Ask for a JSON object as the answer (the provider's JSON mode where it has one).
    #[serde(default)]
    pub json: bool,
}

/// Tokens a completion used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

/// A completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// The generated text.
    pub content: String,
    /// The model that produced it, as the provider names it.
    pub model: String,
    /// Tokens used.
    pub usage: Usage,
}
