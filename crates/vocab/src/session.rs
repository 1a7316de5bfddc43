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
    /// Where it is in its life.
    pub state: SessionState,
    /// The conversation (`<channel>:<conversation>`) it belongs to.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Its last activity.
    #[serde(default)]
    pub last_activity: Option<i64>,
    /// Why it ended: `idle`, or `new session` when its user started another.
    #[serde(default)]
    pub end_reason: Option<String>,
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

/// Where a session is in its life: `active` → `ended` (idle for the session timeout) or
/// `pending` (its user started another session) → `consolidated`. Ended and pending
/// sessions wait for consolidation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// In progress.
    Active,
    /// Idle for the session timeout; waits for consolidation.
    Ended,
    /// Its user started another session; waits for consolidation.
    Pending,
    /// Consolidated.
    Consolidated,
}

impl SessionState {
    /// The state's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Active => "active",
            SessionState::Ended => "ended",
            SessionState::Pending => "pending",
            SessionState::Consolidated => "consolidated",
        }
    }

    /// The state named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [
            SessionState::Active,
            SessionState::Ended,
            SessionState::Pending,
            SessionState::Consolidated,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// Whether it waits for consolidation.
    pub fn awaits_consolidation(self) -> bool {
        matches!(self, SessionState::Ended | SessionState::Pending)
    }
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}
