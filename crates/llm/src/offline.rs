//! The `offline` provider: deterministic, no network, so the whole agent runs and is
//! testable without a model. It answers from what the prompt gives it: it names what it
//! received and, when the system prompt carries quoted memories (`## Relevant memory`,
//! lines starting with `> `), it cites the one sharing the most words with the message.
//! Asked for JSON, it performs the task the system message names ([`skills`]: summaries,
//! facts, reflections, procedures) or wraps its answer as `{"reply": …}`.

pub mod skills;

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
        let system = request.messages.iter().filter(|m| m.role == "system");
        let mut content = format!("[offline] I received: {last}");
        if let Some(memory) =
            best_match(last, system.clone().flat_map(|m| quoted_lines(&m.content)))
        {
            content.push_str(&format!(" (I remember: {memory})"));
        }
        if request.json {
            let task = system.filter_map(|m| skills::task_named(&m.content)).next();
            content = task
                .and_then(|task| skills::perform(task, last))
                .unwrap_or_else(|| serde_json::json!({ "reply": content }))
                .to_string();
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

/// The quoted lines (`> …`) of a text, without the marker, each with whether it is a fact:
/// the `[kind date]` headers the agent puts above each memory say so and are left out.
fn quoted_lines(text: &str) -> Vec<(bool, &str)> {
    let mut fact = false;
    let mut lines = Vec::new();
    for line in text
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("> "))
        .map(str::trim)
        .filter(|line| !line.is_empty())
    {
        match line.strip_prefix('[') {
            Some(header) => fact = header.starts_with("fact"),
            None => lines.push((fact, line)),
        }
    }
    lines
}

/// How well a quoted memory answers a message: shared words, whether it is a fact, and
/// fewer words of its own (higher is better throughout).
type Rank = (usize, bool, std::cmp::Reverse<usize>);

/// The candidate sharing the most words (of three letters or more) with what `message`
/// says — its lines without their `sender: ` prefix, so a memory is not cited just for
/// naming the speaker —, if any shares one; of equals a fact (distilled knowledge) over
/// the conversations and summaries it came from, then the one with fewest words, then the
/// first.
fn best_match<'a>(
    message: &str,
    candidates: impl Iterator<Item = (bool, &'a str)>,
) -> Option<&'a str> {
    let said: Vec<&str> = message
        .lines()
        .map(|line| line.split_once(": ").map_or(line, |(_, text)| text))
        .collect();
    let wanted = words(&said.join("\n"));
    let mut best: Option<(Rank, &str)> = None;
    for (fact, candidate) in candidates {
        let own = words(candidate);
        let shared = own.intersection(&wanted).count();
        let rank = (shared, fact, std::cmp::Reverse(own.len()));
        if shared > 0 && best.is_none_or(|(top, _)| rank > top) {
            best = Some((rank, candidate));
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
    fn asked_for_json_it_performs_the_named_task_or_wraps_its_reply() {
        let mut asked = request(
            "Extract facts.\ntask: extract-facts",
            "ada: my favourite colour is teal",
        );
        asked.json = true;
        let answer = OfflineProvider.complete(&asked).expect("completes");
        let facts: serde_json::Value = serde_json::from_str(&answer.content).expect("json");
        assert_eq!(
            facts["facts"][0]["content"],
            "The user's favourite colour is teal."
        );
        let mut chat = request("be brief", "hello");
        chat.json = true;
        let answer = OfflineProvider.complete(&chat).expect("completes");
        let reply: serde_json::Value = serde_json::from_str(&answer.content).expect("json");
        assert_eq!(reply["reply"], "[offline] I received: hello");
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
        let tied = "## Relevant memory\n> [reflection 2026-11-21]\n> Tea: green tea\n> [fact 2026-11-21]\n> The user's favourite drink is green tea\n";
        let answer = OfflineProvider
            .complete(&request(tied, "alice: which tea?"))
            .expect("completes");
        assert!(
            answer
                .content
                .ends_with("(I remember: The user's favourite drink is green tea)"),
            "of equals, the fact: {}",
            answer.content
        );
        let unrelated = OfflineProvider
            .complete(&request(system, "alice: hello"))
            .expect("completes");
        assert!(!unrelated.content.contains("I remember"));
    }
}
