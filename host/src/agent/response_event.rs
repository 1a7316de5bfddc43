//! The payload of `agent.response`: the reply as journaled, cut to what the journal takes.
//!
//! The event is how a retried batch learns that an earlier attempt answered it (see
//! [`super::Agent`]): a reply too long for `journal.max_payload_bytes` must still be
//! journaled, or a host killed after delivering it would ask the model again and answer
//! twice.

use serde_json::{Value, json};

/// The `agent.response` payload for `reply` (`{"text", "model"}`), at most `max_bytes`
/// serialised: whole when it fits, else its text cut at a character boundary — the longest
/// start that fits, found by halving — and ended with `… [N bytes more not journaled]`,
/// with `text_bytes` saying how long it was.
pub fn payload(batch: &Value, reply: &Value, max_bytes: usize) -> Value {
    let whole = with_reply(batch, reply.clone());
    let text = match reply.get("text").and_then(Value::as_str) {
        Some(text) if whole.to_string().len() > max_bytes => text,
        _ => return whole,
    };
    let cut = |at: usize| {
        let mut cut = reply.clone();
        cut["text"] = format!(
            "{}… [{} bytes more not journaled]",
            &text[..at],
            text.len() - at
        )
        .into();
        cut["text_bytes"] = text.len().into();
        with_reply(batch, cut)
    };
    // The longest start of the text whose payload fits: `fits` always does (0 bytes kept
    // fits any limit a journal can have), `over` never does.
    let (mut fits, mut over) = (0, text.len());
    while over - fits > 1 {
        let middle = boundary_at_or_before(text, fits + (over - fits) / 2);
        if middle <= fits {
            break;
        }
        if cut(middle).to_string().len() <= max_bytes {
            fits = middle;
        } else {
            over = middle;
        }
    }
    cut(fits)
}

/// The last character boundary of `text` at or before `at`.
fn boundary_at_or_before(text: &str, at: usize) -> usize {
    (0..=at)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// `batch` (the batch's id, channel and conversation) with `reply` under `reply`.
fn with_reply(batch: &Value, reply: Value) -> Value {
    let mut payload = batch.clone();
    payload["reply"] = reply;
    payload
}

/// The batch fields of an `agent.response` payload.
pub fn batch_fields(batch_id: i64, channel: &str, conversation: &str) -> Value {
    json!({"batch_id": batch_id, "channel": channel, "conversation": conversation})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_too_long_for_the_journal_is_cut_to_fit_and_says_so() {
        let batch = batch_fields(7, "cli", "cli");
        let short = json!({"text": "hello", "model": "m"});
        assert_eq!(
            payload(&batch, &short, 1000)["reply"],
            short,
            "whole when it fits"
        );

        for text in ["x".repeat(5000), "\"é\n".repeat(2000), "🙂".repeat(1500)] {
            let reply = json!({"text": text, "model": "m"});
            let fitted = payload(&batch, &reply, 2000);
            let size = fitted.to_string().len();
            assert!(size <= 2000, "{size} bytes");
            assert!(size > 1000, "cut no more than needed: {size} bytes");
            assert_eq!(fitted["batch_id"], 7);
            assert_eq!(fitted["reply"]["model"], "m");
            assert_eq!(fitted["reply"]["text_bytes"], text.len());
            let kept = fitted["reply"]["text"].as_str().expect("text");
            let (start, marker) = kept.split_once("… [").expect("a marker");
            assert!(text.starts_with(start), "the text's start is kept");
            assert_eq!(
                marker,
                format!("{} bytes more not journaled]", text.len() - start.len())
            );
        }
    }
}
