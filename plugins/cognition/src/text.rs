//! Text helpers: word sets and how alike two texts are, clipping long transcripts, and
//! finding the JSON object in what a model wrote.

use std::collections::BTreeSet;

/// The lower-cased words of three letters or more.
pub fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

/// How alike two texts are, 0 to 1: the share of their words they have in common
/// (Jaccard), so a reworded duplicate scores high and a changed value scores low.
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return if a.is_empty() && b.is_empty() {
            1.0
        } else {
            0.0
        };
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// `text` when it has at most `max_chars` characters, else its head and tail (half each)
/// around a marker saying how much was left out.
pub fn clip_head_tail(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let half = max_chars / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!(
        "{head}\n[… {} characters left out …]\n{tail}",
        total - 2 * half
    )
}

/// The first JSON object in `text` (models wrap JSON in prose or code fences), if any.
pub fn first_json_object(text: &str) -> Option<serde_json::Value> {
    text.match_indices('{').find_map(|(start, _)| {
        let mut stream =
            serde_json::Deserializer::from_str(&text[start..]).into_iter::<serde_json::Value>();
        match stream.next() {
            Some(Ok(value)) if value.is_object() => Some(value),
            _ => None,
        }
    })
}

/// At most `limit` characters of `text`, for error reports.
pub fn excerpt(text: &str, limit: usize) -> String {
    let mut out: String = text.chars().take(limit).collect();
    if text.chars().count() > limit {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similar_texts_score_high_and_changed_values_low() {
        assert_eq!(
            similarity("The user lives in Lisbon.", "the user LIVES in lisbon"),
            1.0
        );
        assert!(similarity("The user lives in Lisbon.", "The user lives in Porto.") < 0.85);
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        let text = format!("{}{}", "a".repeat(6000), "é".repeat(6000));
        let clipped = clip_head_tail(&text, 8000);
        assert!(clipped.starts_with(&"a".repeat(4000)));
        assert!(clipped.ends_with(&"é".repeat(4000)));
        assert!(clipped.contains("[… 4000 characters left out …]"));
        assert_eq!(clip_head_tail("short", 8000), "short");
    }

    #[test]
    fn the_json_object_is_found_inside_prose_and_fences() {
        let found = first_json_object("Sure! ```json\n{\"a\": {\"b\": 1}}\n``` Hope it helps {x}");
        assert_eq!(found, Some(serde_json::json!({"a": {"b": 1}})));
        assert_eq!(first_json_object("no json {here"), None);
        assert_eq!(first_json_object("[1, 2]"), None);
    }
}
