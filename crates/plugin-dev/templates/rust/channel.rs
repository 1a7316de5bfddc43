//! The `{{id}}` channel: `POST /channels/{{id}}/<conversation>` with a text body (header
//! `x-sender` names who sent it) puts a message into Cairn's buffer; replies are logged.
//! Build with `cairn plugin build .`.

wit_bindgen::generate!({ path: "wit", world: "channel" });

use cairn::plugin::types::{Error, HttpRequest, HttpResponse, InboundMessage, LogLevel, OutboundMessage};
use cairn::plugin::{buffer, log};
use exports::cairn::plugin::channel_plugin::Guest;

struct Plugin;

impl Guest for Plugin {
    fn init(config: String) -> Result<(), Error> {
        log::log(LogLevel::Info, &format!("{{id}} started with config {config}"));
        Ok(())
    }

    fn poll() -> Result<(), Error> {
        Ok(())
    }

    fn deliver(message: OutboundMessage) -> Result<(), Error> {
        log::log(
            LogLevel::Info,
            &format!("reply to {}: {}", message.conversation, message.payload),
        );
        Ok(())
    }

    fn handle_webhook(request: HttpRequest) -> HttpResponse {
        let text = String::from_utf8_lossy(&request.body).into_owned();
        let sender = request
            .headers
            .iter()
            .find(|(name, _)| name == "x-sender")
            .map_or_else(|| "anonymous".to_string(), |(_, value)| value.clone());
        let conversation = match request.path.trim_matches('/') {
            "" => "default".to_string(),
            path => path.to_string(),
        };
        let payload = format!("{{\"text\":{}}}", json_string(&text));
        let pushed = buffer::push(&InboundMessage {
            sender,
            conversation,
            payload,
            priority: None,
            dedup_key: None,
            said_at: None,
        });
        match pushed {
            Ok(id) => respond(202, format!("{{\"id\":{id}}}")),
            Err(error) => respond(400, format!("{{\"error\":{}}}", json_string(&format!("{error:?}")))),
        }
    }
}

fn respond(status: u16, body: String) -> HttpResponse {
    HttpResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.into_bytes(),
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

export!(Plugin);
