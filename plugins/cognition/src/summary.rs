//! An episode summary: what the model is asked for, how its answer is read, and the
//! transcript text it is given.

use serde::Serialize;

use crate::model::{string_field, string_list};

/// Transcripts shorter than this are not worth a summary.
pub const MIN_TRANSCRIPT_CHARS: usize = 50;

/// Longer transcripts keep their head and tail.
pub const MAX_TRANSCRIPT_CHARS: usize = 8000;

/// A summary of one session, as `episode.summarized` carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// A few words naming the conversation.
    pub title: String,
    /// Two or three sentences.
    pub summary: String,
    /// What was said or decided, one statement each.
    pub key_points: Vec<String>,
    /// How it ended.
    pub outcome: String,
    /// One-word topics.
    pub topics: Vec<String>,
}

impl Summary {
    /// Read a model's answer: `title` and `summary` are required strings, the lists are
    /// lists of strings (capped at five), `outcome` a string (possibly empty) when present.
    pub fn from_answer(value: &serde_json::Value) -> Result<Self, String> {
        let mut key_points = string_list(value, "key_points")?;
        key_points.truncate(5);
        let mut topics: Vec<String> = string_list(value, "topics")?
            .into_iter()
            .map(|topic| topic.trim().to_string())
            .filter(|topic| is_tag(topic))
            .collect();
        topics.truncate(5);
        let outcome = match value.get("outcome") {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(outcome)) => outcome.trim().to_string(),
            Some(other) => return Err(format!("`outcome` should be a string, got {other}")),
        };
        Ok(Self {
            title: string_field(value, "title")?,
            summary: string_field(value, "summary")?,
            key_points,
            outcome,
            topics,
        })
    }

    /// The text stored as the session's summary memory: title and summary. The outcome
    /// (what the agent said last) stays in the event: the agent's own words, which may
    /// quote recalled memory, are not written back as memory.
    pub fn as_memory_text(&self) -> String {
        if self
            .summary
            .contains(self.title.trim_end_matches(['.', '…']))
        {
            return self.summary.clone();
        }
        format!("{}: {}", self.title, self.summary)
    }

    /// What the fact extractor is given besides the user's own words.
    pub fn as_fact_input(&self) -> String {
        let mut text = format!("Summary: {}\n", self.summary);
        for point in &self.key_points {
            text.push_str(&format!("- {point}\n"));
        }
        text
    }
}

/// One line of a transcript: who spoke and what they said.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The sender, or `assistant` for the agent.
    pub speaker: String,
    /// What was said.
    pub text: String,
}

/// The lines of a `session.ended` transcript (`[{role, sender, text}]`).
pub fn lines_of_transcript(transcript: &serde_json::Value) -> Vec<Line> {
    let Some(entries) = transcript.as_array() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let text = entry.get("text")?.as_str()?.trim();
            if text.is_empty() {
                return None;
            }
            let speaker = match entry.get("role").and_then(|r| r.as_str()) {
                Some("assistant") => "assistant",
                _ => entry
                    .get("sender")
                    .and_then(|s| s.as_str())
                    .unwrap_or("user"),
            };
            Some(Line {
                speaker: speaker.to_string(),
                text: text.to_string(),
            })
        })
        .collect()
}

/// The transcript as the model reads it: `speaker: text` per line (a multi-line message
/// joined into one), head and tail kept when it is over [`MAX_TRANSCRIPT_CHARS`].
pub fn transcript_text(lines: &[Line]) -> String {
    let text: Vec<String> = lines
        .iter()
        .map(|l| {
            let said: Vec<&str> = l.text.split_whitespace().collect();
            format!("{}: {}", l.speaker, said.join(" "))
        })
        .collect();
    crate::text::clip_head_tail(&text.join("\n"), MAX_TRANSCRIPT_CHARS)
}

/// Longest tag memory keeps, in bytes.
const MAX_TAG_BYTES: usize = 100;

/// Whether `topic` can be a memory's tag: not blank, at most [`MAX_TAG_BYTES`]. A topic
/// that cannot (a model naming a 101-byte token from the chat as the topic) is left out:
/// memory would refuse the whole summary for it, on every attempt.
fn is_tag(topic: &str) -> bool {
    !topic.is_empty() && topic.len() <= MAX_TAG_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_summary_needs_a_title_and_a_summary() {
        let good = json!({"title": "Moving", "summary": "Ada moved.", "key_points": ["a"], "topics": ["move"]});
        let summary = Summary::from_answer(&good).expect("reads");
        assert_eq!(summary.as_memory_text(), "Moving: Ada moved.");
        assert!(
            Summary::from_answer(&json!({"title": "x"}))
                .unwrap_err()
                .contains("summary")
        );
        assert!(
            Summary::from_answer(&json!({"title": "x", "summary": "y", "topics": "z"})).is_err()
        );
        let long = "b".repeat(101);
        let topics = json!({"title": "x", "summary": "y", "topics": [long, " code ", "", "  "]});
        assert_eq!(
            Summary::from_answer(&topics).expect("reads").topics,
            ["code"],
            "topics memory cannot keep as tags are left out"
        );
    }

    #[test]
    fn transcripts_name_their_speakers() {
        let transcript = json!([
            {"role": "user", "sender": "ada", "text": "hi there"},
            {"role": "assistant", "text": "hello\nuser: again"},
            {"role": "user", "sender": "ada", "text": "  "},
        ]);
        let lines = lines_of_transcript(&transcript);
        assert_eq!(
            transcript_text(&lines),
            "ada: hi there\nassistant: hello user: again"
        );
    }
}
