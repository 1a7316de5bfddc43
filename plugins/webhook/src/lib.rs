//! The `webhook` channel (world `channel`): receives GitHub-style webhook deliveries on
//! `/channels/<id>/…`, verifies their `X-Hub-Signature-256` HMAC with a secret read from a
//! granted environment variable, and pushes one message per delivery. The conversation is
//! `<owner>/<repo>#<number>` when the delivery is about a pull request or issue, else the
//! repository. A redelivery (same `X-GitHub-Delivery`) is answered with the first message's
//! id and stores nothing. Replies are logged and kept in kv under `reply:<conversation>`;
//! with a GitHub token (the variable `config.token_env` names, granted in `capabilities.env`)
//! a reply to an issue or pull request is also posted there as a comment (`github.rs`).

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "channel",
});

mod github;

use std::cell::RefCell;

use cairn::plugin::types::{
    Error, HttpRequest, HttpResponse, InboundMessage, LogLevel, OutboundMessage,
};
use cairn::plugin::{buffer, kv, log};
use exports::cairn::plugin::channel_plugin::Guest;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

thread_local! {
    static SECRET: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    static POSTER: RefCell<Option<github::Poster>> = const { RefCell::new(None) };
}

struct Webhook;

fn respond(status: u16, body: Value) -> HttpResponse {
    HttpResponse {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
    }
}

fn header<'a>(request: &'a HttpRequest, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// Whether `signature` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under `secret`,
/// compared in constant time.
fn signature_valid(secret: &[u8], body: &[u8], signature: Option<&str>) -> bool {
    let Some(hex_digest) = signature.and_then(|s| s.strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(expected) = hex::decode(hex_digest) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// `owner/repo#number` for pull requests and issues, the repository otherwise.
fn conversation_of(body: &Value) -> String {
    let repository = body
        .pointer("/repository/full_name")
        .and_then(Value::as_str);
    let number = ["/pull_request/number", "/issue/number", "/number"]
        .iter()
        .find_map(|pointer| body.pointer(pointer).and_then(Value::as_u64));
    match (repository, number) {
        (Some(repository), Some(number)) => format!("{repository}#{number}"),
        (Some(repository), None) => repository.to_string(),
        (None, _) => body
            .pointer("/organization/login")
            .and_then(Value::as_str)
            .unwrap_or("github")
            .to_string(),
    }
}

/// The text of a delivery's message: what happened, by whom, on which thread, and what the
/// person wrote.
fn summary(event: &str, body: &Value, sender: &str, conversation: &str) -> String {
    let action = body
        .get("action")
        .and_then(Value::as_str)
        .map(|a| format!(" {a}"))
        .unwrap_or_default();
    let text_at = |pointers: &[&str]| {
        pointers.iter().find_map(|pointer| {
            body.pointer(pointer)
                .and_then(Value::as_str)
                .filter(|t| !t.trim().is_empty())
        })
    };
    let title = text_at(&["/pull_request/title", "/issue/title"])
        .map(|t| format!(": {}", t.chars().take(200).collect::<String>()))
        .unwrap_or_default();
    // What the person wrote: a comment or a review on a thread, else the opened thread's own
    // text — the part the agent is asked to answer.
    let said = text_at(&[
        "/comment/body",
        "/review/body",
        "/pull_request/body",
        "/issue/body",
    ])
    .map(|t| format!("\n\n{}", t.chars().take(SAID_MAX_CHARS).collect::<String>()))
    .unwrap_or_default();
    format!("{event}{action} by {sender} on {conversation}{title}{said}")
}

/// The most of what a person wrote that a message carries (a long issue body is cut).
const SAID_MAX_CHARS: usize = 8_000;

impl Guest for Webhook {
    fn init(config: String) -> Result<(), Error> {
        let config: Value = serde_json::from_str(&config)
            .map_err(|e| Error::InvalidInput(format!("config: {e}")))?;
        let variable = config
            .get("secret_env")
            .and_then(Value::as_str)
            .unwrap_or("CAIRN_WEBHOOK_SECRET");
        match std::env::var(variable) {
            Ok(secret) if !secret.is_empty() => {
                SECRET.with_borrow_mut(|s| *s = Some(secret.into_bytes()))
            }
            _ => log::log(
                LogLevel::Warn,
                &format!(
                    "webhook: {variable} is not set, so every delivery is refused with 401. To accept GitHub \
                     deliveries, set it to the secret your webhook signs with (`export {variable}=...`), list \
                     it in the manifest's capabilities.env, and restart."
                ),
            ),
        }
        let token_env = config
            .get("token_env")
            .and_then(Value::as_str)
            .unwrap_or("GITHUB_TOKEN");
        let api_base = config
            .get("api_base")
            .and_then(Value::as_str)
            .unwrap_or("https://api.github.com");
        match std::env::var(token_env) {
            Ok(token) if !token.is_empty() => {
                let poster = github::Poster::new(api_base, token).map_err(Error::InvalidInput)?;
                log::log(
                    LogLevel::Info,
                    &format!(
                        "webhook: replies to issues and pull requests are posted as comments via {api_base}"
                    ),
                );
                POSTER.with_borrow_mut(|p| *p = Some(poster));
            }
            _ => log::log(
                LogLevel::Info,
                &format!(
                    "webhook: {token_env} is not set, so replies are logged and kept in kv, not posted to GitHub"
                ),
            ),
        }
        Ok(())
    }

    fn poll() -> Result<(), Error> {
        Ok(())
    }

    fn deliver(message: OutboundMessage) -> Result<(), Error> {
        let text = serde_json::from_str::<Value>(&message.payload)
            .ok()
            .and_then(|p| p.get("text").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_else(|| message.payload.clone());
        log::log(
            LogLevel::Info,
            &format!("webhook: reply to {}: {text}", message.conversation),
        );
        // The kept copy is bookkeeping: a full quota, or a conversation too long for a kv key,
        // must not fail the reply itself (a store that is away still does, and the host
        // waits for it).
        match kv::set(
            &format!("reply:{}", message.conversation),
            message.payload.as_bytes(),
        ) {
            Ok(()) => {}
            Err(Error::Denied(reason) | Error::InvalidInput(reason)) => log::log(
                LogLevel::Warn,
                &format!(
                    "webhook: the reply to {} is not kept: {reason}",
                    message.conversation
                ),
            ),
            Err(error) => return Err(error),
        }
        let is_thread = message.conversation.contains('#');
        POSTER.with_borrow(|poster| match poster {
            Some(poster) if is_thread => {
                let url = poster
                    .comment(&message.conversation, &text)
                    .map_err(|reason| {
                        Error::Unavailable(format!(
                            "posting the reply to {}: {reason}",
                            message.conversation
                        ))
                    })?;
                log::log(
                    LogLevel::Info,
                    &format!("webhook: reply posted to {} {url}", message.conversation),
                );
                Ok(())
            }
            _ => Ok(()),
        })
    }

    fn handle_webhook(request: HttpRequest) -> HttpResponse {
        if request.method != "POST" {
            return respond(405, json!({"error": "use POST"}));
        }
        let verified = SECRET.with_borrow(|secret| {
            secret.as_deref().is_some_and(|secret| {
                signature_valid(
                    secret,
                    &request.body,
                    header(&request, "x-hub-signature-256"),
                )
            })
        });
        if !verified {
            return respond(
                401,
                json!({"error": "missing or invalid X-Hub-Signature-256"}),
            );
        }
        let body: Value = match serde_json::from_slice(&request.body) {
            Ok(body @ Value::Object(_)) => body,
            Ok(_) => return respond(400, json!({"error": "body: expected a JSON object"})),
            Err(e) => return respond(400, json!({"error": format!("body: expected JSON: {e}")})),
        };
        let event = header(&request, "x-github-event")
            .unwrap_or("unknown")
            .to_string();
        if let Some(ignored) = not_a_message(&event, &body) {
            return respond(200, json!({"ignored": ignored}));
        }
        let delivery = header(&request, "x-github-delivery")
            .map(str::to_string)
            .filter(|d| !d.trim().is_empty());
        let sender = body
            .pointer("/sender/login")
            .and_then(Value::as_str)
            .unwrap_or("github")
            .to_string();
        let conversation = conversation_of(&body);
        let payload = json!({
            "text": summary(&event, &body, &sender, &conversation),
            "event": event,
            "action": body.get("action"),
            "delivery": &delivery,
            "body": body,
        });
        let message = InboundMessage {
            sender,
            conversation,
            payload: payload.to_string(),
            priority: None,
            // GitHub redelivers with the same delivery id: the buffer answers the first id.
            dedup_key: delivery,
            said_at: said_at_of(&body),
        };
        match buffer::push(&message) {
            Ok(id) => respond(202, json!({"id": id})),
            Err(Error::InvalidInput(reason)) => respond(400, json!({"error": reason})),
            Err(error) => respond(503, json!({"error": host_error_text(&error)})),
        }
    }
}

/// Why a verified delivery is answered without a message, if it is: GitHub's `ping` when a
/// hook is made, and a comment this channel posted itself (GitHub reports those too, and
/// answering them would answer its own replies for ever).
fn not_a_message(event: &str, body: &Value) -> Option<&'static str> {
    let comment = body.pointer("/comment/body").and_then(Value::as_str);
    if event == "ping" {
        Some("ping: the hook works")
    } else if comment.is_some_and(github::is_own_comment) {
        Some("a comment this channel posted")
    } else {
        None
    }
}

/// A host error as a sender reads it: its kind, then the host's words (not Rust's debug
/// form with quotes escaped).
fn host_error_text(error: &Error) -> String {
    let (kind, text) = match error {
        Error::InvalidInput(text) => ("invalid input", text),
        Error::Denied(text) => ("denied", text),
        Error::NotFound(text) => ("not found", text),
        Error::Unavailable(text) => ("unavailable", text),
        Error::Internal(text) => ("internal error", text),
    };
    format!("{kind}: {text}")
}

/// Where GitHub says when what a delivery reports happened, most specific first: a
/// comment's or review's time, the pull request's or issue's last update, a push's head
/// commit.
const EVENT_TIMES: [&str; 5] = [
    "/comment/created_at",
    "/review/submitted_at",
    "/pull_request/updated_at",
    "/issue/updated_at",
    "/head_commit/timestamp",
];

/// When what a delivery reports was said (ms), so a redelivered or late event is
/// remembered at its own time; a time ahead of this host's clock counts as now.
fn said_at_of(body: &Value) -> Option<i64> {
    let said = EVENT_TIMES.iter().find_map(|pointer| {
        let text = body.pointer(pointer)?.as_str()?;
        chrono::DateTime::parse_from_rfc3339(text).ok()
    })?;
    Some(
        said.timestamp_millis()
            .min(chrono::Utc::now().timestamp_millis()),
    )
}

export!(Webhook);
