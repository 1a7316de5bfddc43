//! Every conversion between the `cairn:plugin@0.1.0` types and the newest API's: the
//! arguments of v0.1 imports up to v0.2 and their results back down, the arguments of calls
//! into v0.1 plugins down and their results up. What v0.1 cannot say takes v0.2's default
//! (no `said-at`, no `valid-from`, no `now`, plain text); what v0.2 adds is dropped on the
//! way down (token usage, typed session states become the v0.1 strings).

use super::super::EventView;
use super::super::latest as new;
use super::handler::cairn::plugin::memory::Session as OldSession;
use super::types as old;

/// Both directions of an enum whose cases are spelled alike.
macro_rules! same_enum {
    ($name:ident { $($case:ident),* $(,)? }) => {
        impl From<old::$name> for new::$name {
            fn from(value: old::$name) -> Self {
                match value { $(old::$name::$case => new::$name::$case),* }
            }
        }
        impl From<new::$name> for old::$name {
            fn from(value: new::$name) -> Self {
                match value { $(new::$name::$case => old::$name::$case),* }
            }
        }
    };
}

/// Both directions of a variant whose cases carry the same payload.
macro_rules! same_variant {
    ($name:ident { $($case:ident),* $(,)? }) => {
        impl From<old::$name> for new::$name {
            fn from(value: old::$name) -> Self {
                match value { $(old::$name::$case(payload) => new::$name::$case(payload)),* }
            }
        }
        impl From<new::$name> for old::$name {
            fn from(value: new::$name) -> Self {
                match value { $(new::$name::$case(payload) => old::$name::$case(payload)),* }
            }
        }
    };
}

/// Both directions of a record whose fields are spelled alike and convert one by one.
macro_rules! same_record {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl From<old::$name> for new::$name {
            fn from(value: old::$name) -> Self {
                new::$name { $($field: value.$field.into()),* }
            }
        }
        impl From<new::$name> for old::$name {
            fn from(value: new::$name) -> Self {
                old::$name { $($field: value.$field.into()),* }
            }
        }
    };
}

same_variant!(Error {
    InvalidInput,
    Denied,
    NotFound,
    Unavailable,
    Internal
});
same_enum!(LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error
});
same_enum!(MemoryKind {
    Episode,
    Fact,
    Core,
    Reflection,
    Procedure
});
same_record!(MemoryScope {
    agent_id,
    user_id,
    session_id
});
same_record!(OutboundMessage {
    conversation,
    recipient,
    payload,
    in_reply_to
});
/// v0.1's event record is v0.2's: a v0.1 handler gets its own copy of the borrowed event.
impl From<&EventView<'_>> for old::Event {
    fn from(event: &EventView<'_>) -> Self {
        old::Event {
            seq: event.seq,
            topic: event.topic.to_string(),
            payload: event.payload.to_string(),
            source: event.source.to_string(),
            session_id: event.session_id.map(str::to_string),
            agent_id: event.agent_id.map(str::to_string),
            user_id: event.user_id.map(str::to_string),
            created_at: event.created_at,
        }
    }
}
same_record!(HttpRequest {
    method,
    path,
    query,
    headers,
    body
});
same_record!(HttpResponse {
    status,
    headers,
    body
});
same_record!(ChatMessage { role, content });
same_record!(MemoryEntry {
    id,
    kind,
    content,
    category,
    scope,
    importance,
    tags,
    issue_refs,
    pr_refs,
    sources,
    subject,
    predicate,
    valid_from,
    valid_to,
    recorded_at,
    superseded_by
});
same_record!(RecallHit { entry, score });

/// A v0.1 message is dated when it is pushed.
impl From<old::InboundMessage> for new::InboundMessage {
    fn from(message: old::InboundMessage) -> Self {
        new::InboundMessage {
            sender: message.sender,
            conversation: message.conversation,
            payload: message.payload,
            priority: message.priority,
            dedup_key: message.dedup_key,
            said_at: None,
        }
    }
}

/// A v0.1 memory is valid from when it is stored.
impl From<old::NewMemory> for new::NewMemory {
    fn from(memory: old::NewMemory) -> Self {
        new::NewMemory {
            kind: memory.kind.into(),
            content: memory.content,
            category: memory.category,
            scope: memory.scope.into(),
            importance: memory.importance,
            tags: memory.tags,
            sources: memory.sources,
            subject: memory.subject,
            predicate: memory.predicate,
            supersedes: memory.supersedes,
            valid_from: None,
        }
    }
}

/// A memory a v0.1 backend is asked to store (its valid time is lost: v0.1 has none).
impl From<new::NewMemory> for old::NewMemory {
    fn from(memory: new::NewMemory) -> Self {
        old::NewMemory {
            kind: memory.kind.into(),
            content: memory.content,
            category: memory.category,
            scope: memory.scope.into(),
            importance: memory.importance,
            tags: memory.tags,
            sources: memory.sources,
            subject: memory.subject,
            predicate: memory.predicate,
            supersedes: memory.supersedes,
        }
    }
}

/// A v0.1 query is asked now.
impl From<old::RecallQuery> for new::RecallQuery {
    fn from(query: old::RecallQuery) -> Self {
        new::RecallQuery {
            text: query.text,
            scope: query.scope.into(),
            kinds: convert_all(query.kinds),
            limit: query.limit,
            as_of: query.as_of,
            exclude_session: query.exclude_session,
            now: None,
        }
    }
}

/// A query for a v0.1 backend (which measures time from its own clock).
impl From<new::RecallQuery> for old::RecallQuery {
    fn from(query: new::RecallQuery) -> Self {
        old::RecallQuery {
            text: query.text,
            scope: query.scope.into(),
            kinds: convert_all(query.kinds),
            limit: query.limit,
            as_of: query.as_of,
            exclude_session: query.exclude_session,
        }
    }
}

/// A v0.1 completion request, in JSON mode when it came through `complete-json`.
pub(super) fn completion_request(
    request: old::CompletionRequest,
    format: new::ResponseFormat,
) -> new::CompletionRequest {
    new::CompletionRequest {
        messages: convert_all(request.messages),
        max_tokens: request.max_tokens,
        temperature: request.temperature,
        format,
    }
}

/// A completion without its token usage (v0.1 has none).
impl From<new::Completion> for old::Completion {
    fn from(completion: new::Completion) -> Self {
        old::Completion {
            content: completion.content,
            model: completion.model,
        }
    }
}

/// A session with its state spelled as v0.1 does.
impl From<new::Session> for OldSession {
    fn from(session: new::Session) -> Self {
        let state = match session.state {
            new::SessionState::Active => "active",
            new::SessionState::Pending => "pending",
            new::SessionState::Consolidated => "consolidated",
        };
        OldSession {
            id: session.id,
            user_id: session.user_id,
            started_at: session.started_at,
            ended_at: session.ended_at,
            state: state.to_string(),
        }
    }
}

/// Every item of a list, converted.
pub(super) fn convert_all<A, B: From<A>>(items: Vec<A>) -> Vec<B> {
    items.into_iter().map(B::from).collect()
}

/// A result whose value and error convert.
pub(super) fn convert_result<A, B: From<A>, E, F: From<E>>(result: Result<A, E>) -> Result<B, F> {
    result.map(B::from).map_err(F::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_v0_1_cannot_say_takes_the_v0_2_default_and_comes_back_down() {
        let message: new::InboundMessage = old::InboundMessage {
            sender: "ann".into(),
            conversation: "c".into(),
            payload: "{}".into(),
            priority: Some(3),
            dedup_key: None,
        }
        .into();
        assert_eq!((message.said_at, message.priority), (None, Some(3)));
        let session: OldSession = new::Session {
            id: "s".into(),
            user_id: None,
            started_at: 1,
            ended_at: Some(2),
            state: new::SessionState::Pending,
        }
        .into();
        assert_eq!(session.state, "pending");
        let json = completion_request(
            old::CompletionRequest {
                messages: Vec::new(),
                max_tokens: None,
                temperature: None,
            },
            new::ResponseFormat::Json,
        );
        assert_eq!(json.format, new::ResponseFormat::Json);
        let error: old::Error = new::Error::Denied("no".into()).into();
        assert!(matches!(error, old::Error::Denied(text) if text == "no"));
    }
}
