//! Language-model providers behind one trait. `offline` is deterministic and needs no
//! network, so `cairn run` works anywhere; real providers live behind the same trait.

use serde::{Deserialize, Serialize};

/// One message of a chat prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A completion request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompletionRequest {
    /// The conversation so far, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// Upper bound on generated tokens.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

/// A completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Completion {
    /// The generated text.
    pub content: String,
    /// The model that produced it.
    pub model: String,
}

/// Why a completion failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The request was malformed (e.g. no messages).
    #[error("invalid completion request: {0}")]
    InvalidRequest(String),
    /// The provider could not be reached or answered with an error.
    #[error("LLM provider failed: {0}")]
    Provider(String),
}

/// A language-model provider. Implementations may block (they run off the async threads).
pub trait LlmProvider: Send + Sync {
    /// The provider's name as configured (`offline`, ...).
    fn name(&self) -> &str;
    /// Complete a chat.
    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError>;
}

/// Which provider answers (`agent.llm` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// The provider; `offline` is the only one in this release.
    pub provider: ProviderKind,
}

/// The known providers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Deterministic, no network.
    #[default]
    Offline,
}

/// Build the configured provider.
pub fn provider(config: &LlmConfig) -> Box<dyn LlmProvider> {
    match config.provider {
        ProviderKind::Offline => Box::new(OfflineProvider),
    }
}

/// A deterministic provider that needs no network: its reply names what it received.
pub struct OfflineProvider;

impl LlmProvider for OfflineProvider {
    fn name(&self) -> &str {
        "offline"
    }

    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let user: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == "user")
            .map(|m| m.content.as_str())
            .collect();
        let Some(last) = user.last() else {
            return Err(LlmError::InvalidRequest("no user message to answer".into()));
        };
        Ok(Completion {
            content: format!("[offline] I received: {last}"),
            model: "offline-echo-1".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offline_provider_is_deterministic_and_names_its_input() {
        let request = CompletionRequest {
            messages: vec![
                ChatMessage {
                    role: "system".into(),
                    content: "be brief".into(),
                },
                ChatMessage {
                    role: "user".into(),
                    content: "2 messages from ada: \"hi\" \"there\"".into(),
                },
            ],
            ..CompletionRequest::default()
        };
        let first = OfflineProvider.complete(&request).expect("completes");
        assert_eq!(
            first,
            OfflineProvider.complete(&request).expect("completes")
        );
        assert_eq!(
            first.content,
            "[offline] I received: 2 messages from ada: \"hi\" \"there\""
        );
        assert!(
            OfflineProvider
                .complete(&CompletionRequest::default())
                .is_err()
        );
    }
}
