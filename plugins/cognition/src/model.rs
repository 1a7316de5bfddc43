//! Asking the host's model for JSON of a known shape, with one retry when the answer does
//! not have it.

use crate::bindings::cairn::plugin::types::{ChatMessage, CompletionRequest, ResponseFormat};
use crate::text::{excerpt, first_json_object};
use crate::{Error, llm};

/// A model answer that twice did not have the asked-for shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Garbage {
    /// What was wrong with the last answer.
    pub problem: String,
    /// The start of the last answer.
    pub excerpt: String,
}

impl Garbage {
    /// The journal payload recording this failure for `session` (empty for none), said in
    /// the host's log too, where an operator looks first, naming `about`: what the answer
    /// was asked for ("summarising session cli:alice", "sleep phase reflect for user bob").
    pub fn report(&self, session: &str, about: &str) -> serde_json::Value {
        crate::warn(&format!(
            "{about}: the model's answer was unusable twice ({}); nothing of it is saved",
            self.problem
        ));
        let mut report = serde_json::json!({
            "problem": self.problem, "excerpt": self.excerpt, "attempts": 2,
        });
        // A phase of a sleep is about no session: no empty `session_id` then.
        if !session.is_empty() {
            report["session_id"] = session.into();
        }
        report
    }
}

/// Ask the model, in JSON mode, `system` then `input`, and read the answer with `parse`.
///
/// An answer `parse` rejects is asked again once, with the problem named; a second bad
/// answer is `Ok(Err(Garbage))`. Host errors (provider down, rate-limited, budget spent)
/// are `Err`, for the host to retry the event later.
pub fn ask<T>(
    system: &str,
    input: &str,
    max_tokens: u32,
    parse: impl Fn(&serde_json::Value) -> Result<T, String>,
) -> Result<Result<T, Garbage>, Error> {
    let mut messages = vec![
        ChatMessage {
            role: "system".into(),
            content: system.into(),
        },
        ChatMessage {
            role: "user".into(),
            content: input.into(),
        },
    ];
    let mut last = Garbage {
        problem: String::new(),
        excerpt: String::new(),
    };
    for _attempt in 0..2 {
        let answer = llm::complete(&CompletionRequest {
            messages: messages.clone(),
            max_tokens: Some(max_tokens),
            temperature: Some(0.0),
            format: ResponseFormat::Json,
        })?;
        let read = first_json_object(&answer.content)
            .ok_or_else(|| "the answer holds no JSON object".to_string())
            .and_then(|value| parse(&value));
        match read {
            Ok(parsed) => return Ok(Ok(parsed)),
            Err(problem) => {
                last = Garbage {
                    problem: problem.clone(),
                    excerpt: excerpt(&answer.content, 200),
                };
                messages.push(ChatMessage {
                    role: "assistant".into(),
                    content: answer.content,
                });
                messages.push(ChatMessage {
                    role: "user".into(),
                    content: format!(
                        "That answer cannot be used: {problem}. Answer again with only the JSON object of the shape asked for."
                    ),
                });
            }
        }
    }
    // Recorded in the journal and the log by the caller, who knows what it was for.
    Ok(Err(last))
}

/// A string field of a JSON object, or a problem naming it.
pub fn string_field(value: &serde_json::Value, key: &str) -> Result<String, String> {
    match value.get(key) {
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(other) => Err(format!("`{key}` should be a non-empty string, got {other}")),
        None => Err(format!("`{key}` is missing")),
    }
}

/// A list of strings of a JSON object (empty when absent), or a problem naming it.
pub fn string_list(value: &serde_json::Value, key: &str) -> Result<Vec<String>, String> {
    match value.get(key) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(|s| s.trim().to_string())
                    .ok_or_else(|| format!("`{key}` should hold strings, got {item}"))
            })
            .collect(),
        Some(other) => Err(format!("`{key}` should be a list of strings, got {other}")),
    }
}

/// Items that cite numbered inputs: `{<list>: [{content, sources: [n, …]}]}`, as
/// `(content, sources)` with every source checked to be one of `1..=inputs`.
pub fn cited_items(
    value: &serde_json::Value,
    list: &str,
    inputs: usize,
) -> Result<Vec<(String, Vec<usize>)>, String> {
    let items = value
        .get(list)
        .and_then(|v| v.as_array())
        .ok_or_else(|| format!("`{list}` should be a list"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let content = string_field(item, "content").map_err(|p| format!("{list}[{i}]: {p}"))?;
            let sources = item
                .get("sources")
                .and_then(|s| s.as_array())
                .ok_or_else(|| format!("{list}[{i}]: `sources` should be a list of numbers"))?
                .iter()
                .map(|n| {
                    n.as_u64()
                        .map(|n| n as usize)
                        .filter(|n| (1..=inputs).contains(n))
                        .ok_or_else(|| {
                            format!("{list}[{i}]: source {n} is not one of 1..={inputs}")
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((content, sources))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cited_items_check_their_sources() {
        let ok = json!({"procedures": [{"content": "do x", "sources": [1, 2]}]});
        assert_eq!(
            cited_items(&ok, "procedures", 2),
            Ok(vec![("do x".to_string(), vec![1, 2])])
        );
        let out_of_range = json!({"procedures": [{"content": "do x", "sources": [3]}]});
        assert!(cited_items(&out_of_range, "procedures", 2).is_err());
        assert!(cited_items(&json!({}), "procedures", 2).is_err());
    }

    #[test]
    fn fields_name_what_is_wrong() {
        let value = json!({"title": "", "topics": ["a", 1]});
        assert_eq!(
            string_field(&value, "title"),
            Err("`title` should be a non-empty string, got \"\"".into())
        );
        assert!(
            string_list(&value, "topics")
                .unwrap_err()
                .contains("topics")
        );
        assert_eq!(string_list(&value, "key_points"), Ok(vec![]));
    }
}
