//! Events of the journal and the state of their subscribers.

use serde::{Deserialize, Serialize};

/// An event to append.
#[derive(Debug, Clone, Default)]
pub struct NewEvent {
    /// Dot-separated topic.
    pub topic: String,
    /// JSON text.
    pub payload: String,
    /// `host` or the emitting plugin's id.
    pub source: String,
    /// Session it belongs to.
    pub session_id: Option<String>,
    /// Agent it belongs to.
    pub agent_id: Option<String>,
    /// User it belongs to.
    pub user_id: Option<String>,
    /// How many plugin emits led to it: 0 unless a plugin emitted it while handling an
    /// event, then one more than that event's.
    pub depth: u32,
}

/// A stored event. Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Event {
    /// Position in the journal.
    pub seq: i64,
    /// Topic.
    pub topic: String,
    /// JSON text.
    pub payload: String,
    /// Who appended it.
    pub source: String,
    /// Session, if any.
    pub session_id: Option<String>,
    /// Agent, if any.
    pub agent_id: Option<String>,
    /// User, if any.
    pub user_id: Option<String>,
    /// When it was appended (ms since the epoch).
    pub created_at: i64,
    /// How many plugin emits led to it (see [`NewEvent::depth`]).
    #[serde(default)]
    pub depth: u32,
}

/// A subscriber's position, for `cairn status`. Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriberLag {
    /// Subscriber id (a plugin id).
    pub id: String,
    /// Its topic patterns.
    pub patterns: Vec<String>,
    /// The last event it consumed.
    pub cursor: i64,
    /// Matching events it has not consumed yet.
    pub lag: i64,
    /// Events it could not take.
    pub dead_letters: i64,
}

/// An event a subscriber could not take. Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// Dead-letter id.
    pub id: i64,
    /// The subscriber.
    pub subscriber: String,
    /// The event's sequence number.
    pub seq: i64,
    /// The event's topic.
    pub topic: String,
    /// The last error.
    pub error: String,
    /// How many deliveries were tried.
    pub attempts: i64,
    /// Given up on, or waiting for one more delivery.
    pub status: DeadLetterStatus,
    /// When it was given up on.
    pub created_at: i64,
}

/// Whether a dead letter rests or waits for the retry an operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterStatus {
    /// Given up on.
    Dead,
    /// One more delivery is pending.
    Retry,
}

impl DeadLetterStatus {
    /// The status as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterStatus::Dead => "dead",
            DeadLetterStatus::Retry => "retry",
        }
    }

    /// The status named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [DeadLetterStatus::Dead, DeadLetterStatus::Retry]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for DeadLetterStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}
