//! The payload of `agent.response`: the reply as journaled, cut to what the journal takes.
//!
//! The event is how a retried batch learns that an earlier attempt answered it (see
//! [`super::Agent`]): a reply too long for `journal.max_payload_bytes` must still be
//! journaled, or a host killed after delivering it would ask the model again and answer
//! twice.

use serde_json::{Value, json};

/// Room kept for the cut's marker and the escapes JSON may add to the text.
const MARGIN: usize = 256;

/// The `agent.response` payload for `reply` (`{"text", "model"}`), at most `max_bytes`
/// serialised: whole when it fits, else its text cut at a character boundary and ended
/// with `… [N bytes more not journaled]`, with `text_bytes` saying how long it was.
pub fn payload(batch: &Value, reply: &Value, max_bytes: usize) -> Value {
    let whole = with_reply(batch, reply.clone());
    let over = whole.to_string().len().saturating_sub(max_bytes);
    let Some(text) = reply.get("text").and_then(Value::as_str) else {
        return whole;
    };
    if over == 0 {
        return whole;
    }
    let mut keep = text.len().saturating_sub(over + MARGIN);
    loop {
        let cut_at = (0..=keep)
            .rev()
            .find(|&at| text.is_char_boundary(at))
            .unwrap_or(0);
        let mut cut = reply.clone();
        cut["text"] = format!(
            "{}… [{} bytes more not journaled]",
            &text[..cut_at],
            text.len() - cut_at
        )
        .into();
        cut["text_bytes"] = text.len().into();
        let payload = with_reply(batch, cut);
        let size = payload.to_string().len();
        if size <= max_bytes || cut_at == 0 {
            return payload;
        }
        // Escaped characters took more room than their bytes: cut further.
        keep = cut_at.saturating_sub(size - max_bytes);
    }
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
