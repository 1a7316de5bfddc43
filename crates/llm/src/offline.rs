//! The `offline` provider: deterministic, no network, so the whole agent runs and is
//! testable without a model. It answers from what the prompt gives it: it names what it
//! received and, when the system prompt carries quoted memories (`## Relevant memory`,
//! lines starting with `> `), it cites the one sharing the most words with the message.

use std::collections::BTreeSet;

use super::{Completion, CompletionRequest, LlmError, LlmProvider, Usage, check};

/// The model name the offline provider reports.
pub const MODEL: &str = "offline-echo-1";

/// A deterministic provider that needs no network.
pub struct OfflineProvider;

impl LlmProvider for OfflineProvider {
    fn name(&self) -> &str {
        "offline"
    }

    fn model(&self) -> &str {
        MODEL
    }

    fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        check(request)?;
        let last = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.content.as_str())
            .unwrap_or_default();
        let mut content = format!("[offline] I received: {last}");
        let quoted = request
            .messages
            .iter()
            .filter(|m| m.role == "system")
            .flat_map(|m| quoted_lines(&m.content));
        if let Some(memory) = best_match(last, quoted) {
            content.push_str(&format!(" (I remember: {memory})"));
        }
        let input_tokens = request
            .messages
            .iter()
            .map(|m| words(&m.content).len() as u64)
            .sum();
        Ok(Completion {
            usage: Usage {
                input_tokens,
                output_tokens: words(&content).len() as u64,
            },
            content,
            model: MODEL.into(),
        })
    }
}

/// The quoted lines (`> …`) of a text, without the marker and without the `[kind date]`
/// headers the agent puts above each memory.
fn quoted_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter_map(|line| line.trim_start().strip_prefix("> "))
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('['))
}

/// The candidate sharing the most words (of three letters or more) with what `message`
/// says — its lines without their `sender: ` prefix, so a memory is not cited just for
/// naming the speaker —, if any shares one; the first of equals.
fn best_match<'a>(message: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let said: Vec<&str> = message
        .lines()
        .map(|line| line.split_once(": ").map_or(line, |(_, text)| text))
        .collect();
    let wanted = words(&said.join("\n"));
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let shared = words(candidate).intersection(&wanted).count();
        if shared > 0 && best.is_none_or(|(most, _)| shared > most) {
            best = Some((shared, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// The lower-cased words of three letters or more.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChatMessage;

    fn request(system: &str, user: &str) -> CompletionRequest {
        CompletionRequest {
            messages: vec![
                ChatMessage::new("system", system),
                ChatMessage::new("user", user),
            ],
            ..CompletionRequest::default()
        }
    }

    #[test]
    fn it_is_deterministic_and_names_its_input() {
        let asked = request("be brief", "2 messages from ada: \"hi\" \"there\"");
        let first = OfflineProvider.complete(&asked).expect("completes");
        assert_eq!(first, OfflineProvider.complete(&asked).expect("again"));
        assert_eq!(
            first.content,
            "[offline] I received: 2 messages from ada: \"hi\" \"there\""
        );
        assert!(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);
        assert!(matches!(
            OfflineProvider.complete(&CompletionRequest::default()),
            Err(LlmError::InvalidRequest(_))
        ));
    }

    #[test]
    fn it_answers_from_the_memory_the_prompt_quotes() {
        let system = "You are helpful.\n\n## Relevant memory\n> [fact 2026-11-20]\n> Alice drinks green tea\n> [episode 2026-11-21]\n> The boat is moored at pier seven\n";
        let answer = OfflineProvider
            .complete(&request(system, "alice: where is the boat?"))
            .expect("completes");
        assert!(
            answer
                .content
                .ends_with("(I remember: The boat is moored at pier seven)"),
            "{}",
            answer.content
        );
        let unrelated = OfflineProvider
            .complete(&request(system, "alice: hello"))
            .expect("completes");
        assert!(!unrelated.content.contains("I remember"));
    }
}
