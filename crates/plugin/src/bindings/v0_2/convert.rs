//! Every conversion between the `cairn:plugin@0.2.0` types (the newest API) and the host's
//! vocabulary, so no WIT type is seen outside the plugin runtime. Older API versions convert
//! their types to these (`v0_1/convert.rs`) and never to the vocabulary directly.

use cairn_vocab::channel::{HttpRequest, HttpResponse, OutboundMessage};
use cairn_vocab::event::Event;
use cairn_vocab::llm::{ChatMessage, Completion, CompletionRequest};
use cairn_vocab::memory::{
    MemoryEntry, MemoryKind, NewMemory, RecallHit, RecallQuery, Scope, ScoreParts,
};
use cairn_vocab::session::{Session, SessionState};
use cairn_vocab::{Error, ErrorKind};

use super::types as wit;

/// The most of a plugin's error message the host keeps: it goes to the log, the status
/// row and dead letters, which a plugin answering every call with megabytes must not bloat.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;

/// An error as the host speaks it, its message cut to [`MAX_ERROR_MESSAGE_BYTES`].
pub fn from_wit_error(error: wit::Error) -> Error {
    let (kind, message) = match error {
        wit::Error::InvalidInput(m) => (ErrorKind::InvalidInput, m),
        wit::Error::Denied(m) => (ErrorKind::Denied, m),
        wit::Error::NotFound(m) => (ErrorKind::NotFound, m),
        wit::Error::Unavailable(m) => (ErrorKind::Unavailable, m),
        wit::Error::Internal(m) => (ErrorKind::Internal, m),
    };
    Error {
        kind,
        message: cut(message, MAX_ERROR_MESSAGE_BYTES),
    }
}

/// `text` cut on a character boundary to at most `max` bytes, saying how much was cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("… ({} of {total} bytes cut)", total - end));
    text
}

/// An error as the plugin contract spells it.
pub fn to_wit_error(error: Error) -> wit::Error {
    match error.kind {
        ErrorKind::InvalidInput => wit::Error::InvalidInput(error.message),
        ErrorKind::Denied => wit::Error::Denied(error.message),
        ErrorKind::NotFound => wit::Error::NotFound(error.message),
        ErrorKind::Unavailable => wit::Error::Unavailable(error.message),
        ErrorKind::Internal => wit::Error::Internal(error.message),
    }
}

/// A journal event as delivered to a subscriber, borrowed: its strings are copied only into
/// the guest.
pub fn event_view(event: &Event) -> super::EventView<'_> {
    super::EventView {
        seq: event.seq as u64,
        topic: &event.topic,
        payload: &event.payload,
        source: &event.source,
        session_id: event.session_id.as_deref(),
        agent_id: event.agent_id.as_deref(),
        user_id: event.user_id.as_deref(),
        created_at: event.created_at,
    }
}

/// A reply as a channel receives it.
pub fn to_wit_outbound(message: &OutboundMessage) -> wit::OutboundMessage {
    wit::OutboundMessage {
        conversation: message.conversation.clone(),
        recipient: message.recipient.clone(),
        payload: message.payload.clone(),
        in_reply_to: message.in_reply_to.clone(),
    }
}

/// A webhook request as a channel receives it.
pub fn to_wit_request(request: &HttpRequest) -> wit::HttpRequest {
    wit::HttpRequest {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        headers: request.headers.clone(),
        body: request.body.clone(),
    }
}

/// A channel's answer to a webhook request.
pub fn from_wit_response(response: wit::HttpResponse) -> HttpResponse {
    HttpResponse {
        status: response.status,
        headers: response.headers,
        body: response.body,
    }
}

/// A kind as the plugin contract spells it.
pub fn to_wit_kind(kind: MemoryKind) -> wit::MemoryKind {
    match kind {
        MemoryKind::Episode => wit::MemoryKind::Episode,
        MemoryKind::Fact => wit::MemoryKind::Fact,
        MemoryKind::Core => wit::MemoryKind::Core,
        MemoryKind::Reflection => wit::MemoryKind::Reflection,
        MemoryKind::Procedure => wit::MemoryKind::Procedure,
    }
}

/// A kind from the plugin contract.
pub fn from_wit_kind(kind: wit::MemoryKind) -> MemoryKind {
    match kind {
        wit::MemoryKind::Episode => MemoryKind::Episode,
        wit::MemoryKind::Fact => MemoryKind::Fact,
        wit::MemoryKind::Core => MemoryKind::Core,
        wit::MemoryKind::Reflection => MemoryKind::Reflection,
        wit::MemoryKind::Procedure => MemoryKind::Procedure,
    }
}

/// A scope as the plugin contract spells it.
pub fn to_wit_scope(scope: &Scope) -> wit::MemoryScope {
    wit::MemoryScope {
        agent_id: scope.agent_id.clone(),
        user_id: scope.user_id.clone(),
        session_id: scope.session_id.clone(),
    }
}

/// A scope from the plugin contract.
pub fn from_wit_scope(scope: wit::MemoryScope) -> Scope {
    Scope {
        agent_id: scope.agent_id,
        user_id: scope.user_id,
        session_id: scope.session_id,
    }
}

/// A new memory from the plugin contract.
pub fn from_wit_new(memory: wit::NewMemory) -> NewMemory {
    NewMemory {
        kind: from_wit_kind(memory.kind),
        content: memory.content,
        category: memory.category,
        scope: from_wit_scope(memory.scope),
        importance: memory.importance,
        tags: memory.tags,
        sources: memory.sources,
        subject: memory.subject,
        predicate: memory.predicate,
        supersedes: memory.supersedes,
        valid_from: memory.valid_from,
        id: None,
    }
}

/// A new memory as the plugin contract spells it.
pub fn to_wit_new(memory: &NewMemory) -> wit::NewMemory {
    wit::NewMemory {
        kind: to_wit_kind(memory.kind),
        content: memory.content.clone(),
        category: if memory.category.is_empty() {
            memory.kind.default_category().to_string()
        } else {
            memory.category.clone()
        },
        scope: to_wit_scope(&memory.scope),
        importance: memory.importance,
        tags: memory.tags.clone(),
        sources: memory.sources.clone(),
        subject: memory.subject.clone(),
        predicate: memory.predicate.clone(),
        supersedes: memory.supersedes.clone(),
        valid_from: memory.valid_from,
    }
}

/// A stored memory as the plugin contract spells it.
pub fn to_wit_entry(entry: MemoryEntry) -> wit::MemoryEntry {
    wit::MemoryEntry {
        id: entry.id,
        kind: to_wit_kind(entry.kind),
        content: entry.content,
        category: entry.category,
        scope: to_wit_scope(&entry.scope),
        importance: entry.importance,
        tags: entry.tags,
        issue_refs: entry.issue_refs,
        pr_refs: entry.pr_refs,
        sources: entry.sources,
        subject: entry.subject,
        predicate: entry.predicate,
        valid_from: entry.valid_from,
        valid_to: entry.valid_to,
        recorded_at: entry.recorded_at,
        superseded_by: entry.superseded_by,
    }
}

/// A stored memory from the plugin contract.
pub fn from_wit_entry(entry: wit::MemoryEntry) -> MemoryEntry {
    MemoryEntry {
        id: entry.id,
        kind: from_wit_kind(entry.kind),
        content: entry.content,
        category: entry.category,
        scope: from_wit_scope(entry.scope),
        importance: entry.importance,
        tags: entry.tags,
        issue_refs: entry.issue_refs,
        pr_refs: entry.pr_refs,
        sources: entry.sources,
        subject: entry.subject,
        predicate: entry.predicate,
        valid_from: entry.valid_from,
        valid_to: entry.valid_to,
        recorded_at: entry.recorded_at,
        superseded_by: entry.superseded_by,
        forgotten_at: None,
    }
}

/// A recall query as a memory backend receives it.
pub fn to_wit_query(query: &RecallQuery) -> wit::RecallQuery {
    wit::RecallQuery {
        text: query.text.clone(),
        scope: to_wit_scope(&query.scope),
        kinds: query.kinds.iter().map(|k| to_wit_kind(*k)).collect(),
        limit: query.limit.min(u32::MAX as usize) as u32,
        as_of: query.as_of,
        exclude_session: query.exclude_session.clone(),
        now: query.now,
    }
}

/// A recalled memory from a backend (it scores, so the score is all the explanation).
pub fn from_wit_hit(hit: wit::RecallHit) -> RecallHit {
    RecallHit {
        entry: from_wit_entry(hit.entry),
        score: hit.score,
        explain: ScoreParts {
            score: hit.score,
            ..ScoreParts::default()
        },
    }
}

/// A session as the consolidation tools see it. The API names every state waiting for
/// consolidation `pending`, whether the session went idle or its user moved on.
pub fn to_wit_session(session: Session) -> wit::Session {
    let state = match session.state {
        SessionState::Active => wit::SessionState::Active,
        SessionState::Ended | SessionState::Pending => wit::SessionState::Pending,
        SessionState::Consolidated => wit::SessionState::Consolidated,
    };
    wit::Session {
        id: session.id,
        user_id: session.user_id,
        started_at: session.started_at,
        ended_at: session.ended_at,
        state,
    }
}

/// A plugin's completion request.
pub fn from_wit_completion_request(request: wit::CompletionRequest) -> CompletionRequest {
    CompletionRequest {
        messages: request
            .messages
            .into_iter()
            .map(|m| ChatMessage {
                role: m.role,
                content: m.content,
            })
            .collect(),
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        json: request.format == wit::ResponseFormat::Json,
    }
}

/// A completion with the tokens the provider counted.
pub fn to_wit_completion(completion: Completion) -> wit::Completion {
    wit::Completion {
        content: completion.content,
        model: completion.model,
        usage: wit::TokenUsage {
            input: saturate(completion.usage.input_tokens),
            output: saturate(completion.usage.output_tokens),
        },
    }
}

/// A count as a `u32`, the largest one when it does not fit.
fn saturate(count: u64) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_error_message_is_cut_on_a_character_boundary() {
        let huge = "é".repeat(1 << 20);
        let error = from_wit_error(wit::Error::Internal(huge));
        assert!(
            error.message.len() <= MAX_ERROR_MESSAGE_BYTES + 40,
            "{}",
            error.message.len()
        );
        assert!(
            error
                .message
                .ends_with(&format!("({} of {} bytes cut)", (2 << 20) - 4096, 2 << 20)),
            "{}",
            &error.message[4000..]
        );
        let small = from_wit_error(wit::Error::Denied("no".into()));
        assert_eq!(small.message, "no");
    }
    use cairn_vocab::llm::Usage;

    #[test]
    fn a_completion_carries_its_usage_and_a_request_its_format() {
        let completion = to_wit_completion(Completion {
            content: "ok".into(),
            model: "m".into(),
            usage: Usage {
                input_tokens: 12,
                output_tokens: u64::MAX,
            },
        });
        assert_eq!(
            (completion.usage.input, completion.usage.output),
            (12, u32::MAX)
        );
        let request = |format| wit::CompletionRequest {
            messages: vec![wit::ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            }],
            max_tokens: Some(5),
            temperature: None,
            format,
        };
        assert!(from_wit_completion_request(request(wit::ResponseFormat::Json)).json);
        assert!(!from_wit_completion_request(request(wit::ResponseFormat::Text)).json);
    }
}
