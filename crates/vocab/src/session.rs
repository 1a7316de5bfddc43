//! Conversation sessions.

use serde::{Deserialize, Serialize};

/// A conversation session as the consolidation tools see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// `<channel>:<conversation>`.
    pub id: String,
    /// The user who spoke in it.
    pub user_id: Option<String>,
    /// The agent who answered.
    pub agent_id: Option<String>,
    /// First activity.
    pub started_at: i64,
    /// When it ended, if it did.
    pub ended_at: Option<i64>,
    /// `active`, `pending` (ended, waiting for consolidation) or `consolidated`.
    pub state: String,
    /// The conversation (`<channel>:<conversation>`) it belongs to.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Its last activity.
    #[serde(default)]
    pub last_activity: Option<i64>,
}

/// Whether the agent sleeps, as the lifecycle keeps it across restarts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SleepState {
    /// The agent is asleep (no active session for the sleep timeout).
    pub asleep: bool,
    /// A message arrived while it slept; plugins see this through `lifecycle.interrupted()`.
    pub interrupted: bool,
    /// The last activity seen, if any (idleness counts from here).
    pub last_activity: Option<i64>,
}
