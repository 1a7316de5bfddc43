//! Inbound messages, the batches the router makes of them, and spawned tasks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A message offered to the buffer.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// The channel it came through (a plugin id, or any name for `cairn send`).
    pub channel: String,
    /// Who sent it.
    pub sender: String,
    /// The conversation it belongs to.
    pub conversation: String,
    /// The message as JSON text.
    pub payload: String,
    /// A priority the producer asks for (lower is served first).
    pub priority: Option<u32>,
    /// An id the source gave the message (e.g. a webhook delivery id): a second message
    /// with the same key on the same channel is not stored again.
    pub dedup_key: Option<String>,
    /// When the message was really said (ms), when that is before it reaches the buffer
    /// (history imported or replayed); None = when it arrives. Memory dates its episode
    /// by it.
    pub said_at: Option<i64>,
}

/// Longest dedup key accepted, in bytes.
pub const MAX_DEDUP_KEY_BYTES: usize = 256;

/// Longest channel, sender or conversation accepted, in bytes: names, not text. Every event
/// and episode of a message carries them, so a longer one would overflow those limits
/// (a GitHub conversation, `owner/repository#123`, is under 150).
pub const MAX_NAME_BYTES: usize = 512;

/// A message as stored.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BufferedMessage {
    /// Buffer id, increasing in arrival order.
    pub id: i64,
    /// Channel it came through.
    pub channel: String,
    /// Who sent it.
    pub sender: String,
    /// Its conversation.
    pub conversation: String,
    /// The payload JSON text.
    pub payload: String,
    /// Arrival time (ms since the epoch).
    pub received_at: i64,
    /// Lower is served first.
    pub priority: u32,
    /// When it was really said, if the producer said so (see [`NewMessage::said_at`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub said_at: Option<i64>,
}

impl BufferedMessage {
    /// When the message was said: as its producer dated it, else its arrival.
    pub fn said_at(&self) -> i64 {
        self.said_at.unwrap_or(self.received_at)
    }
}

/// What the router decided for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Queued for the main agent.
    Main,
    /// A task record and a sub-agent turn; the main agent is not told.
    Spawn,
    /// Logged and discarded.
    Drop,
}

impl Route {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Main => "main",
            Route::Spawn => "spawn",
            Route::Drop => "drop",
        }
    }
}

/// Progress of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchStatus {
    /// Waiting for the main agent.
    Queued,
    /// The main agent is on it.
    Running,
    /// Answered and delivered.
    Done,
    /// The turn or the delivery failed; the error is recorded.
    Failed,
    /// Handed to a task.
    Spawned,
    /// Dropped by a rule.
    Dropped,
}

impl BatchStatus {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Queued => "queued",
            BatchStatus::Running => "running",
            BatchStatus::Done => "done",
            BatchStatus::Failed => "failed",
            BatchStatus::Spawned => "spawned",
            BatchStatus::Dropped => "dropped",
        }
    }
}

/// Progress of a spawned task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Waiting for the agent.
    Queued,
    /// The sub-agent is working on it.
    Running,
    /// Finished with a result.
    Done,
    /// Failed; the error is recorded.
    Failed,
}

impl TaskStatus {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
        }
    }

    /// The status named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [
            TaskStatus::Queued,
            TaskStatus::Running,
            TaskStatus::Done,
            TaskStatus::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A batch the router wants recorded.
#[derive(Debug, Clone)]
pub struct NewBatch {
    /// Channel of every message.
    pub channel: String,
    /// Conversation of every message.
    pub conversation: String,
    /// The most urgent priority among the messages.
    pub priority: u32,
    /// What to do with it.
    pub route: Route,
    /// The rule that decided, or none for the default.
    pub rule: Option<String>,
    /// Its messages, in id order; never empty.
    pub message_ids: Vec<i64>,
}

/// A recorded batch with its messages (always at least one, in id order).
#[derive(Debug, Clone, Serialize)]
pub struct Batch {
    /// Batch id.
    pub id: i64,
    /// Channel of the messages.
    pub channel: String,
    /// Conversation of the messages.
    pub conversation: String,
    /// Priority of the batch.
    pub priority: u32,
    /// How many times a host started this batch (1 the first time, 0 before any): more
    /// means an earlier attempt was cut short and may have answered it already.
    pub attempt: u32,
    /// How many times an operator queued it again after it (or its task) failed
    /// (`cairn buffer retry`).
    pub retried: u32,
    /// When the earlier attempt that journaled `message.received` for its messages and
    /// remembered them as episodes began (ms): a later attempt (after a stop, a crash or a
    /// retry) only asks and answers, so nothing is received twice, and reads the
    /// conversation's history as it stood then, without the batch's own messages.
    pub received_at: Option<i64>,
    /// The reply an earlier attempt made (the JSON the channel is given), kept before that
    /// attempt tried to deliver it: a later attempt — after a crash, a stop or `cairn buffer
    /// retry` — delivers it again rather than asking the model for another answer.
    pub kept_reply: Option<String>,
    /// The messages.
    pub messages: Vec<BufferedMessage>,
}

impl Batch {
    /// When its first message arrived (ms); none for a batch without messages.
    pub fn first_arrival(&self) -> Option<i64> {
        self.messages.iter().map(|m| m.received_at).min()
    }
}

/// Main batches and tasks that ended `failed`, for `cairn buffer failed`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailedWork {
    /// `batch` (a main batch) or `task` (a spawned task).
    pub kind: FailedKind,
    /// The batch's or the task's id: what `cairn buffer retry --batch|--task` takes.
    pub id: i64,
    /// The batch the work answers (the same as `id` for a batch).
    pub batch_id: i64,
    /// Channel of its messages.
    pub channel: String,
    /// Conversation of its messages.
    pub conversation: String,
    /// How many messages it holds.
    pub messages: i64,
    /// Why it failed, as recorded.
    pub error: Option<String>,
    /// Whether a reply was made and kept (its delivery failed): a retry delivers it.
    pub reply_kept: bool,
    /// How many times it was queued again already.
    pub retried: u32,
    /// When it failed (ms since the epoch).
    pub finished_at: Option<i64>,
}

/// Which kind of work failed.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FailedKind {
    /// A main batch.
    Batch,
    /// A spawned task.
    Task,
}

/// Failed work to queue again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetrySelection {
    /// Every failed batch and task.
    All,
    /// These batches and tasks, each of which must have failed.
    Named {
        /// Main batch ids.
        batches: Vec<i64>,
        /// Task ids.
        tasks: Vec<i64>,
    },
}

/// What a retry did: either every piece of work named was queued again, or none was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryOutcome {
    /// Queued again (ids in order).
    Queued {
        /// Main batches queued again.
        batches: Vec<i64>,
        /// Tasks queued again.
        tasks: Vec<i64>,
    },
    /// Nothing changed: these named ids are not failed.
    NotFailed {
        /// Batches named that are not failed main batches.
        batches: Vec<NotFailed>,
        /// Tasks named that are not failed tasks.
        tasks: Vec<NotFailed>,
    },
}

/// A batch or task named for a retry that is not failed, and what it is instead, so the
/// operator is told (`queued` already, `done`, `unknown`, …) rather than left to guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFailed {
    /// The id named.
    pub id: i64,
    /// Its state: `queued`, `running` or `done`; for a batch also `spawned as task N: retry
    /// it with --task N` (its task failed), `spawned as task N, done` (or `queued`,
    /// `running`) or `dropped by a routing rule`; `unknown` when there is no such id.
    pub state: String,
}

impl NotFailed {
    /// `id` in `state`, or `unknown` when the store found no state.
    pub fn new(id: i64, state: Option<String>) -> Self {
        Self {
            id,
            state: state.unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// Unrouted messages of one channel, for `cairn status`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChannelDepth {
    /// The channel.
    pub channel: String,
    /// How many of its messages wait unrouted.
    pub unrouted: i64,
    /// Arrival of its oldest unrouted message (ms since the epoch).
    pub oldest_received_at: i64,
}

/// The main batches of one channel waiting for a host to answer them, for `cairn status`:
/// a host answers only the channels it runs, so those of a channel no host runs wait.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChannelQueue {
    /// The channel.
    pub channel: String,
    /// How many of its main batches are queued.
    pub batches: i64,
    /// When its oldest queued batch was made (ms since the epoch).
    pub oldest_created_at: i64,
}

/// Counts of batches or tasks by status.
pub type StatusCounts = BTreeMap<String, i64>;

/// The buffer's state for `cairn status`. Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize)]
pub struct BufferStats {
    /// Messages waiting to be routed.
    pub depth: i64,
    /// Age in ms of the oldest unrouted message, if any.
    pub oldest_unrouted_age_ms: Option<i64>,
    /// The unrouted messages per channel.
    pub channels: Vec<ChannelDepth>,
    /// Messages ever stored and still kept (routed or not).
    pub stored: i64,
    /// Batches by route and status, e.g. `main/queued`.
    pub batches: StatusCounts,
    /// The queued main batches per channel.
    pub queued: Vec<ChannelQueue>,
    /// Tasks by status.
    pub tasks: StatusCounts,
    /// The most recent tasks.
    pub recent_tasks: Vec<TaskRow>,
    /// The main batches being answered, longest running first (at most 10): one running
    /// long is most likely waiting out a provider outage.
    pub running: Vec<RunningBatch>,
}

/// A main batch being answered, for `cairn status`.
#[derive(Debug, Clone, Serialize)]
pub struct RunningBatch {
    /// Batch id.
    pub id: i64,
    /// The channel it came in on.
    pub channel: String,
    /// Its conversation.
    pub conversation: String,
    /// Attempts so far, this one included.
    pub attempts: i64,
    /// When this attempt began (ms since the epoch).
    pub started_at: Option<i64>,
    /// When the attempt that received it began (ms since the epoch); none until received.
    pub received_at: Option<i64>,
}

/// One task, for `cairn status`.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRow {
    /// Task id.
    pub id: i64,
    /// The batch it runs.
    pub batch_id: i64,
    /// Where it is in its life.
    pub status: TaskStatus,
    /// The sub-agent's result.
    pub result: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// When it was created (ms since the epoch).
    pub created_at: i64,
    /// When it finished.
    pub finished_at: Option<i64>,
}
