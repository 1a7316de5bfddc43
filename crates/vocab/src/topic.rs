//! The topic grammar: dot-separated segments of `[a-z0-9_-]`, subscriptions by exact
//! topic, `prefix.*` or `*`, and the topics only the host emits.

/// Host topics a plugin may subscribe to but never emit.
pub const HOST_TOPICS: &[&str] = &[
    "message.received",
    "agent.response",
    "turn.completed",
    "session.ended",
    "memory.session_completed",
    "sleep.started",
    "sleep.interrupted",
    "plugin.failed",
    "plugin.quarantined",
];

/// Whether `topic` is an exact topic: dot-separated segments of `[a-z0-9_-]`.
pub fn is_valid_topic(topic: &str) -> bool {
    topic.split('.').all(is_topic_segment)
}

/// Whether `pattern` is a subscription: an exact topic, `prefix.*`, or `*` for everything.
pub fn is_valid_topic_pattern(pattern: &str) -> bool {
    match pattern.strip_suffix(".*") {
        _ if pattern == "*" => true,
        Some(prefix) => is_valid_topic(prefix),
        None => is_valid_topic(pattern),
    }
}

/// Whether `topic` matches a subscription pattern: exact, `prefix.*` or `*`.
pub fn topic_matches(pattern: &str, topic: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) => topic.starts_with(prefix),
        None => pattern == topic,
    }
}

/// Whether `segment` is one segment of a topic (also the grammar of schedule names).
pub fn is_topic_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}
