//! What the host exchanges with channels besides inbound messages: replies to deliver and
//! webhook requests to answer.

use serde::{Deserialize, Serialize};

/// A reply the host asks a channel to deliver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// The conversation to deliver into (as the channel gave it on the inbound side).
    pub conversation: String,
    /// The sender of the message being answered, when the reply answers one person.
    pub recipient: Option<String>,
    /// The reply as a JSON object; `text` holds the prose.
    pub payload: String,
    /// Buffer ids of the inbound messages this reply answers.
    pub in_reply_to: Vec<u64>,
}

/// An HTTP request the host received on a channel's webhook path.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Upper-case method, e.g. `POST`.
    pub method: String,
    /// The path below `/channels/<plugin-id>`, starting with `/`.
    pub path: String,
    /// The raw query string without `?`, empty when there is none.
    pub query: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The raw request body.
    pub body: Vec<u8>,
}

/// The answer a channel gives to a webhook request.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    /// HTTP status code.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: Vec<u8>,
}
