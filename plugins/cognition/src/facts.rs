//! Fact candidates: how the model's answer is read and which candidates are kept.

use crate::model::string_field;
use crate::text::similarity;

/// Most facts kept from one session.
pub const MAX_FACTS: usize = 5;

/// A fact the model proposed.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// One self-contained sentence.
    pub content: String,
    /// What it is about (`user`), when the model said.
    pub subject: Option<String>,
    /// The single-valued attribute it states, so a newer value supersedes an older one.
    pub predicate: Option<String>,
    /// How sure the model is, 0 to 1.
    pub confidence: f64,
}

/// Read a model's `{facts: [{content, subject, predicate, confidence}]}`. One malformed
/// item rejects the whole answer: facts are saved all or none.
pub fn candidates_from_answer(value: &serde_json::Value) -> Result<Vec<Candidate>, String> {
    let items = value
        .get("facts")
        .and_then(|f| f.as_array())
        .ok_or("`facts` should be a list")?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let optional = |key: &str| -> Result<Option<String>, String> {
                match item.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(s)) if s.trim().is_empty() => Ok(None),
                    Some(serde_json::Value::String(s)) => Ok(Some(s.trim().to_string())),
                    Some(other) => Err(format!(
                        "facts[{i}]: `{key}` should be a string, got {other}"
                    )),
                }
            };
            let confidence = item
                .get("confidence")
                .and_then(|c| c.as_f64())
                .filter(|c| (0.0..=1.0).contains(c))
                .ok_or_else(|| {
                    format!("facts[{i}]: `confidence` should be a number from 0 to 1")
                })?;
            Ok(Candidate {
                content: string_field(item, "content").map_err(|p| format!("facts[{i}]: {p}"))?,
                subject: optional("subject")?.map(|s| normalise_subject(&s)),
                predicate: optional("predicate")?.map(|p| normalise_predicate(&p)),
                confidence,
            })
        })
        .collect()
}

/// A predicate as snake_case words, so `Lives In` and `lives_in` are the same attribute.
fn normalise_predicate(predicate: &str) -> String {
    predicate
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("_")
}

/// A subject as lower-case words without a leading article, so `User`, `user` and `the
/// user` are one subject and a later fact about it supersedes the earlier.
fn normalise_subject(subject: &str) -> String {
    let words: Vec<String> = subject
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    let words = match words.first().map(String::as_str) {
        Some("the" | "a" | "an") if words.len() > 1 => &words[1..],
        _ => &words[..],
    };
    words.join(" ")
}

/// What [`select`] kept and why it left the others out.
#[derive(Debug, Default, PartialEq)]
pub struct Selection {
    /// Facts to save, most confident first.
    pub kept: Vec<Candidate>,
    /// Left out for confidence under the threshold.
    pub unsure: usize,
    /// Left out as near-duplicates of a known fact or of one kept before.
    pub duplicates: usize,
}

/// The candidates worth saving: confidence at least `min_confidence`, not more than
/// `max_similarity` alike to an `existing` fact or to each other, at most [`MAX_FACTS`].
pub fn select(
    mut candidates: Vec<Candidate>,
    existing: &[String],
    min_confidence: f64,
    max_similarity: f64,
) -> Selection {
    candidates.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    let mut selection = Selection::default();
    for candidate in candidates {
        if candidate.confidence < min_confidence {
            selection.unsure += 1;
            continue;
        }
        let known = existing
            .iter()
            .chain(selection.kept.iter().map(|k| &k.content))
            .any(|other| similarity(other, &candidate.content) > max_similarity);
        if known {
            selection.duplicates += 1;
        } else if selection.kept.len() < MAX_FACTS {
            selection.kept.push(candidate);
        }
    }
    selection
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn candidate(content: &str, confidence: f64) -> Candidate {
        Candidate {
            content: content.into(),
            subject: None,
            predicate: None,
            confidence,
        }
    }

    #[test]
    fn answers_are_read_all_or_nothing() {
        let answer = json!({"facts": [
            {"content": "The user lives in Lisbon.", "subject": "user", "predicate": "Lives In", "confidence": 0.9},
            {"content": "The user likes tea.", "predicate": null, "confidence": 0.7},
        ]});
        let read = candidates_from_answer(&answer).expect("reads");
        assert_eq!(read[0].predicate.as_deref(), Some("lives_in"));
        assert_eq!(read[0].subject.as_deref(), Some("user"));
        assert_eq!(read[1].subject, None);
        let one_bad = json!({"facts": [{"content": "x", "confidence": 0.9}, {"content": "y"}]});
        assert!(
            candidates_from_answer(&one_bad)
                .unwrap_err()
                .contains("facts[1]")
        );
    }

    #[test]
    fn a_subject_is_one_however_the_model_spells_it() {
        for spelled in ["User", "user", "the user", "The User.", "  the   USER "] {
            assert_eq!(normalise_subject(spelled), "user", "{spelled:?}");
        }
        assert_eq!(normalise_subject("the user's sister"), "user's sister");
        assert_eq!(normalise_subject("The"), "the", "an article alone stays");
    }

    #[test]
    fn unsure_and_duplicate_facts_are_left_out() {
        let existing = vec!["The user lives in Lisbon.".to_string()];
        let selection = select(
            vec![
                candidate("the user lives in Lisbon", 0.9),
                candidate("The user likes tea.", 0.5),
                candidate("The user works at a bakery.", 0.8),
                candidate("The user works at the bakery.", 0.7),
                candidate("The user lives in Porto.", 0.85),
            ],
            &existing,
            0.6,
            0.85,
        );
        let kept: Vec<&str> = selection.kept.iter().map(|c| c.content.as_str()).collect();
        assert_eq!(
            kept,
            ["The user lives in Porto.", "The user works at a bakery."]
        );
        assert_eq!((selection.unsure, selection.duplicates), (1, 2));
    }
}
