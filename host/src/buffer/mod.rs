//! The durable inbound message buffer (`buffer.db`): the single entry point for messages.
//!
//! Producers (channel plugins through `buffer.push`, `cairn send`, webhooks) hand messages to
//! [`Buffer::push`], which validates them at the edge and returns only once the row is on
//! disk (group commit). The router reads unrouted rows and records what it did with each
//! batch in the same transaction that marks the batch's messages routed. The tables and
//! their SQL live behind [`BufferStore`] in `cairn-storage` (`buffer.db` for SQLite).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::RwLock;

use cairn_storage::buffer::{BufferStore, MessageRow, SqliteBuffer};
pub use cairn_storage::buffer::{MIGRATIONS, read_stats};
use cairn_storage::{ErrorKind, StorageError, now_ms};
pub use cairn_vocab::buffer::{
    Batch, BatchStatus, BufferStats, BufferedMessage, ChannelDepth, FailedKind, FailedWork,
    MAX_DEDUP_KEY_BYTES, MAX_NAME_BYTES, NewBatch, NewMessage, NotFailed, RetryOutcome,
    RetrySelection, Route, StatusCounts, TaskRow, TaskStatus,
};
use serde::{Deserialize, Serialize};

/// Buffer settings (`buffer:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BufferConfig {
    /// Largest payload accepted, in bytes (default 1 MiB).
    pub max_payload_bytes: usize,
    /// Routed messages older than this are pruned by the daily job (default 7).
    pub retention_days: u32,
    /// A warning is logged while more messages than this wait unrouted (default 10000).
    pub warn_depth: i64,
    /// Priority of messages from channels that declare none (default 100, notifications).
    pub default_priority: u32,
    /// Per-channel priority overrides; they win over the channel's manifest and over a
    /// priority the channel passes with a message.
    pub channel_priority: BTreeMap<String, u32>,
    /// On shared (PostgreSQL) storage: how long a host's claim on a batch or task holds
    /// without being renewed, in ms, before another host may take it over — how soon the
    /// work of a host that died is picked up (default 30000).
    pub claim_lease_ms: u64,
}

impl Default for BufferConfig {
    fn default() -> Self {
        Self {
            max_payload_bytes: 1 << 20,
            retention_days: 7,
            warn_depth: 10_000,
            default_priority: 100,
            channel_priority: BTreeMap::new(),
            claim_lease_ms: cairn_storage::pg::millis(cairn_storage::pg::buffer::DEFAULT_LEASE)
                as u64,
        }
    }
}

/// Why a buffer operation failed; a failed write wrote nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BufferError {
    /// The input was malformed; nothing was written. The text names the field.
    #[error("{0}")]
    InvalidInput(String),
    /// The store failed, or is stopping.
    #[error("buffer: {0}")]
    Storage(#[from] StorageError),
}

impl BufferError {
    /// Whether the store refused the write for a reason that passes (a full disk, an
    /// unreachable database server): the same write succeeds later (see
    /// [`StorageError::is_passing`]).
    pub fn is_passing(&self) -> bool {
        matches!(self, BufferError::Storage(e) if e.is_passing())
    }

    /// Whether the store refused the write because another host took the work over (its
    /// lease lapsed): this host must leave it to that one.
    pub fn is_taken(&self) -> bool {
        matches!(self, BufferError::Storage(StorageError::Taken(_)))
    }

    /// What kind of failure this is, as callers across the plugin boundary see it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            BufferError::InvalidInput(_) => ErrorKind::InvalidInput,
            BufferError::Storage(e) => e.kind(),
        }
    }
}

/// The buffer of a data dir: validation and priorities at the edge, over a [`BufferStore`].
pub struct Buffer {
    config: BufferConfig,
    /// Channel priorities from the manifests (of this host, or remembered from the last).
    channel_defaults: RwLock<BTreeMap<String, u32>>,
    store: Box<dyn BufferStore>,
    /// Signalled when this process stored a message, so the router wakes for it at once
    /// instead of polling.
    arrived: tokio::sync::Notify,
}

/// How far ahead of the host's clock a producer's `said_at` may be (clocks differ a little).
pub const SAID_AT_LEEWAY_MS: i64 = 60_000;

/// Check a message as [`Buffer::push`] would, without a buffer: a producer outside the host
/// (`cairn send`) refuses bad input before it opens or creates anything.
pub fn check_message(message: &NewMessage, config: &BufferConfig) -> Result<(), BufferError> {
    validate(message.clone(), config, &BTreeMap::new()).map(|_| ())
}

use cairn_vocab::text::is_blank;

/// The part of a payload the edge checks: its `text`, when it is a string.
#[derive(serde::Deserialize)]
struct Payload {
    #[serde(default, deserialize_with = "text_if_string")]
    text: Option<String>,
}

/// A payload's `text` when it is a string; none for any other value.
fn text_if_string<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let value = <serde_json::Value as serde::Deserialize>::deserialize(deserializer)?;
    Ok(value.as_str().map(str::to_string))
}

/// Check a message at the edge and fix its priority and arrival time.
fn validate(
    message: NewMessage,
    config: &BufferConfig,
    channel_defaults: &BTreeMap<String, u32>,
) -> Result<MessageRow, BufferError> {
    for (field, value) in [
        ("channel", &message.channel),
        ("sender", &message.sender),
        ("conversation", &message.conversation),
    ] {
        if is_blank(value) {
            let only = if value.is_empty() {
                ""
            } else {
                " (this one is only blanks or invisible characters)"
            };
            return Err(BufferError::InvalidInput(format!(
                "{field}: expected a non-empty string{only}"
            )));
        }
        if value.len() > MAX_NAME_BYTES {
            return Err(BufferError::InvalidInput(format!(
                "{field}: expected a name of at most {MAX_NAME_BYTES} bytes, got {}",
                value.len()
            )));
        }
    }
    if message.payload.len() > config.max_payload_bytes {
        return Err(BufferError::InvalidInput(format!(
            "payload: {} bytes is over buffer.max_payload_bytes ({} bytes)",
            message.payload.len(),
            config.max_payload_bytes
        )));
    }
    // Parsed as every reader parses it (routing rules, the agent, plugins): serde_json's
    // `IgnoredAny` accepts any depth, so a payload nested deeper than the readers' limit
    // of 128 would be stored and then fail wherever it is read.
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&message.payload) {
        return Err(BufferError::InvalidInput(format!(
            "payload: expected a JSON object: {e}"
        )));
    }
    if let Some(other) = json_type_unless_object(&message.payload) {
        return Err(BufferError::InvalidInput(format!(
            "payload: expected a JSON object (e.g. {{\"text\": \"...\"}}), got {other}"
        )));
    }
    // What the agent reads and remembers: nothing to answer when it shows nothing (the cli
    // channel and `cairn send` refused such text already; a plugin's `buffer.push` did not).
    if let Ok(Payload { text: Some(text) }) = serde_json::from_str(&message.payload)
        && is_blank(&text)
    {
        return Err(BufferError::InvalidInput(
            "payload.text: expected text that shows (not only blanks or invisible characters)"
                .into(),
        ));
    }
    if let Some(key) = &message.dedup_key
        && (key.trim().is_empty() || key.len() > MAX_DEDUP_KEY_BYTES)
    {
        return Err(BufferError::InvalidInput(format!(
            "dedup-key: expected non-empty text of at most {MAX_DEDUP_KEY_BYTES} bytes"
        )));
    }
    let received_at = now_ms();
    if let Some(said_at) = message.said_at
        && !(0..=received_at + SAID_AT_LEEWAY_MS).contains(&said_at)
    {
        return Err(BufferError::InvalidInput(format!(
            "said-at: expected a time from 1970 up to now (ms since the epoch), got {said_at}"
        )));
    }
    let chosen = config
        .channel_priority
        .get(&message.channel)
        .copied()
        .or(message.priority);
    let priority = chosen
        .or_else(|| channel_defaults.get(&message.channel).copied())
        .unwrap_or(config.default_priority);
    Ok(MessageRow {
        channel: message.channel,
        sender: message.sender,
        conversation: message.conversation,
        payload: message.payload,
        priority,
        priority_is_default: chosen.is_none(),
        dedup_key: message.dedup_key,
        received_at,
        said_at: message.said_at,
    })
}

/// The JSON type of valid JSON `text` when it is not an object (from its first character).
fn json_type_unless_object(text: &str) -> Option<&'static str> {
    match text.trim_start().chars().next()? {
        '{' => None,
        '"' => Some("a string"),
        '[' => Some("an array"),
        't' | 'f' => Some("a boolean"),
        'n' => Some("null"),
        _ => Some("a number"),
    }
}

impl Buffer {
    /// Open `<data>/buffer.db` and start its writer thread. Channel priorities are the
    /// ones the last host on this data dir declared (see [`Buffer::set_channel_priorities`]).
    pub fn open(data_dir: &Path, config: BufferConfig) -> Result<Self, BufferError> {
        Self::over(Box::new(SqliteBuffer::open(data_dir)?), config)
    }

    /// The buffer service over any store.
    pub fn over(store: Box<dyn BufferStore>, config: BufferConfig) -> Result<Self, BufferError> {
        let channel_defaults = store.channel_priorities()?;
        Ok(Self {
            config,
            channel_defaults: RwLock::new(channel_defaults),
            store,
            arrived: tokio::sync::Notify::new(),
        })
    }

    /// Adopt the priorities of the channels this host runs (`None`: the channel has none,
    /// so `buffer.default_priority`): remember them for `cairn send` while no host runs, and
    /// give those channels' unrouted messages that carry their channel's default priority
    /// the new one. What is remembered of a channel not run now (disabled for a while)
    /// stays. Returns how many messages changed priority.
    pub fn set_channel_priorities(
        &self,
        priorities: BTreeMap<String, Option<u32>>,
    ) -> Result<usize, BufferError> {
        let changed = self
            .store
            .set_channel_priorities(priorities, self.config.default_priority)
            .wait()?;
        let remembered = self.store.channel_priorities()?;
        *self
            .channel_defaults
            .write()
            .unwrap_or_else(|p| p.into_inner()) = remembered;
        Ok(changed)
    }

    fn validate(&self, message: NewMessage) -> Result<MessageRow, BufferError> {
        let defaults = self
            .channel_defaults
            .read()
            .unwrap_or_else(|p| p.into_inner());
        validate(message, &self.config, &defaults)
    }

    /// The settings in force.
    pub fn config(&self) -> &BufferConfig {
        &self.config
    }

    /// Validate and store a message; returns its id once it is on disk (the first message's
    /// id when its dedup key was stored before). Blocks the calling thread: use
    /// [`Buffer::push_async`] from async code.
    pub fn push(&self, message: NewMessage) -> Result<i64, BufferError> {
        let id = self.store.insert(self.validate(message)?).wait()?;
        self.arrived.notify_one();
        Ok(id)
    }

    /// [`Buffer::push`] for async callers.
    pub async fn push_async(&self, message: NewMessage) -> Result<i64, BufferError> {
        let receipt = self.store.insert(self.validate(message)?);
        let id = receipt.await?;
        self.arrived.notify_one();
        Ok(id)
    }

    /// Resolves when this process stores a message (at once if one was stored since the
    /// last call). Messages another process stores (`cairn send` beside a running host)
    /// are not signalled: whoever waits also looks again now and then.
    pub async fn arrival(&self) {
        self.arrived.notified().await
    }

    /// Unrouted messages, most urgent first (priority, then arrival).
    pub fn unrouted(&self, limit: usize) -> Result<Vec<BufferedMessage>, BufferError> {
        Ok(self.store.unrouted(limit)?)
    }

    /// Whether a channel still has work in the buffer: unrouted messages, or batches or
    /// tasks queued or running. A host asked to stop by its terminal waits for this to
    /// turn false, so what was typed gets its answer first.
    pub fn has_pending_work(&self, channel: &str) -> Result<bool, BufferError> {
        Ok(self.store.has_pending_work(channel)?)
    }

    /// Record a batch and mark its messages routed in one transaction.
    pub async fn route(&self, batch: NewBatch) -> Result<i64, BufferError> {
        if batch.message_ids.is_empty() {
            return Err(BufferError::InvalidInput(
                "a batch needs at least one message".into(),
            ));
        }
        Ok(self.store.route(batch).await?)
    }

    /// Take the most urgent queued main batch (marking it running), of `channels` only when
    /// given (see [`BufferStore::claim_main`]).
    pub async fn claim_main_batch(
        &self,
        channels: Option<&[String]>,
    ) -> Result<Option<Batch>, BufferError> {
        Ok(self.store.claim_main(channels).await?)
    }

    /// Record how a main batch ended.
    pub async fn finish_batch(
        &self,
        id: i64,
        status: BatchStatus,
        reply: Option<String>,
        error: Option<String>,
    ) -> Result<(), BufferError> {
        Ok(self.store.finish_batch(id, status, reply, error).await?)
    }

    /// Keep the reply a main batch is about to deliver (the JSON its channel is given), so an
    /// attempt after a crash delivers that reply rather than asking the model for another.
    pub async fn keep_reply(&self, id: i64, reply: String) -> Result<(), BufferError> {
        Ok(self.store.keep_reply(id, reply).await?)
    }

    /// Record that a batch's messages were journaled and remembered by the attempt that
    /// began at `at` (ms), so no later attempt receives them again.
    pub async fn mark_received(&self, id: i64, at: i64) -> Result<(), BufferError> {
        Ok(self.store.mark_received(id, at).await?)
    }

    /// The conversations (channel, conversation) with a message not answered yet: not routed
    /// yet, or in a main batch queued or running.
    pub fn awaiting_answer(&self) -> Result<Vec<(String, String)>, BufferError> {
        Ok(self.store.awaiting_answer()?)
    }

    /// Take the oldest queued task (marking it running), with its batch.
    pub async fn claim_task(&self) -> Result<Option<(i64, Batch)>, BufferError> {
        Ok(self.store.claim_task().await?)
    }

    /// Record how a task ended.
    pub async fn finish_task(
        &self,
        id: i64,
        status: TaskStatus,
        result: Option<String>,
        error: Option<String>,
    ) -> Result<(), BufferError> {
        Ok(self.store.finish_task(id, status, result, error).await?)
    }

    /// Put batches and tasks left running by a stopped host back in the queue; returns
    /// how many of each.
    pub async fn requeue_interrupted(&self) -> Result<(usize, usize), BufferError> {
        Ok(self.store.requeue().await?)
    }

    /// Remove routed messages (and finished batches and tasks) older than `retention_days`;
    /// unrouted messages and unfinished work are never removed. Returns (messages, batches).
    pub async fn prune(&self) -> Result<(usize, usize), BufferError> {
        let before_ms = now_ms() - i64::from(self.config.retention_days) * 86_400_000;
        Ok(self.store.prune(before_ms).await?)
    }

    /// Prune now, then once a day, until `stop` turns true.
    pub async fn run_retention(
        self: std::sync::Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        crate::periodic::every(std::time::Duration::from_secs(86_400), stop, || async {
            match self.prune().await {
                Ok((0, 0)) => {}
                Ok((messages, batches)) => {
                    tracing::info!(messages, batches, "pruned routed messages past retention")
                }
                Err(e) => tracing::error!("buffer retention failed: {e}"),
            }
        })
        .await
    }

    /// A batch with its messages.
    pub fn batch(&self, id: i64) -> Result<Option<Batch>, BufferError> {
        Ok(self.store.batch(id)?)
    }

    /// Depth, per-channel breakdown, batch and task counts.
    pub fn stats(&self) -> Result<BufferStats, BufferError> {
        Ok(self.store.stats()?)
    }

    /// Main batches and tasks that ended `failed`, the latest first, at most `limit`.
    pub fn failed(&self, limit: usize) -> Result<Vec<FailedWork>, BufferError> {
        Ok(self.store.failed(limit)?)
    }

    /// Queue failed work again — all of it named, or none when a named id is not failed. A
    /// running host takes it within a second (its queue's safety-net poll), else the next
    /// host to start.
    pub fn retry_failed(&self, which: RetrySelection) -> Result<RetryOutcome, BufferError> {
        Ok(self.store.retry_failed(which).wait()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::{Place, on_each_backend};
    use cairn_storage::pg::buffer::{DEFAULT_LEASE, PgBuffer};

    fn message(conversation: &str, payload: &str) -> NewMessage {
        NewMessage {
            channel: "cli".into(),
            sender: "ada".into(),
            conversation: conversation.into(),
            payload: payload.into(),
            priority: None,
            dedup_key: None,
            said_at: None,
        }
    }

    /// Push one message to `conversation` and route it alone by `route`; the batch's id.
    async fn push_and_route(buffer: &Buffer, conversation: &str, route: Route) -> i64 {
        let id = buffer
            .push_async(message(conversation, "{}"))
            .await
            .expect("push");
        let batch = NewBatch {
            channel: "cli".into(),
            conversation: conversation.into(),
            priority: 10,
            route,
            rule: None,
            message_ids: vec![id],
        };
        buffer.route(batch).await.expect("route")
    }

    /// Push one message from `channel` to `conversation` and route it alone to the main
    /// queue at `priority`; the batch's id.
    async fn route_main(buffer: &Buffer, channel: &str, conversation: &str, priority: u32) -> i64 {
        route_from(buffer, channel, conversation, priority, Route::Main).await
    }

    /// Push one message from `channel` to `conversation` and route it alone by `route` at
    /// `priority`; the batch's id.
    async fn route_from(
        buffer: &Buffer,
        channel: &str,
        conversation: &str,
        priority: u32,
        route: Route,
    ) -> i64 {
        let mut said = message(conversation, "{}");
        said.channel = channel.into();
        let id = buffer.push_async(said).await.expect("push");
        let batch = NewBatch {
            channel: channel.into(),
            conversation: conversation.into(),
            priority,
            route,
            rule: None,
            message_ids: vec![id],
        };
        buffer.route(batch).await.expect("route")
    }

    /// A buffer on `place`, as a host opens it.
    fn buffer_on(place: &Place, config: BufferConfig) -> Buffer {
        match place {
            Place::Sqlite(dir) => Buffer::open(dir.path(), config).expect("open buffer"),
            Place::Postgres(url) => {
                let store = PgBuffer::connect(url, DEFAULT_LEASE).expect("connect");
                Buffer::over(Box::new(store), config).expect("open buffer")
            }
        }
    }

    on_each_backend!(
        bad_messages_are_rejected_at_the_edge_and_nothing_is_written,
        priority_comes_from_config_then_message_then_manifest_then_default,
        a_message_sent_before_the_manifests_were_known_takes_its_channel_priority_later,
        a_repeated_dedup_key_answers_the_first_id_and_stores_nothing,
        concurrent_producers_are_all_acknowledged_with_distinct_ids
    );
    on_each_backend!(async routing_is_all_or_nothing_and_never_twice, async the_most_urgent_main_batch_is_claimed_first_and_requeued_after_a_crash, async pruning_keeps_unrouted_messages_and_unfinished_batches, async failed_work_is_listed_and_queued_again_all_named_or_none, async a_conversation_awaits_its_answer_from_arrival_until_answered, async channels_take_turns_within_a_priority_so_a_flood_holds_back_no_one, async channels_take_turns_at_the_task_queue_too, async a_host_claims_only_batches_of_the_channels_it_runs);

    fn open(place: &Place, config: BufferConfig) -> Buffer {
        let buffer = buffer_on(place, config);
        buffer
            .set_channel_priorities(BTreeMap::from([("cli".to_string(), Some(10))]))
            .expect("channel priorities");
        buffer
    }

    fn bad_messages_are_rejected_at_the_edge_and_nothing_is_written(place: Place) {
        let config = BufferConfig {
            max_payload_bytes: 16,
            ..BufferConfig::default()
        };
        let buffer = open(&place, config);
        let cases = [
            (message("c", "{not json"), "payload: expected a JSON object"),
            (
                message("c", "\"just a string\""),
                "payload: expected a JSON object (e.g. {\"text\": \"...\"}), got a string",
            ),
            (message("c", "[1,2]"), "got an array"),
            (
                message("c", "{\"text\":\" \u{200b}\"}"),
                "payload.text: expected text that shows",
            ),
            (
                message("c", "{\"text\":\"far too long for it\"}"),
                "payload: 30 bytes is over buffer.max_payload_bytes (16 bytes)",
            ),
            (
                message(" ", "{}"),
                "conversation: expected a non-empty string",
            ),
            (
                message("\u{200B}\u{FEFF}", "{}"),
                "conversation: expected a non-empty string",
            ),
            (
                NewMessage {
                    sender: String::new(),
                    ..message("c", "{}")
                },
                "sender: expected",
            ),
            (
                NewMessage {
                    sender: "a".repeat(513),
                    ..message("c", "{}")
                },
                "sender: expected a name of at most 512 bytes, got 513",
            ),
            (
                message(&"c".repeat(120_000), "{}"),
                "conversation: expected a name of at most 512 bytes",
            ),
            (
                NewMessage {
                    said_at: Some(now_ms() + 3_600_000),
                    ..message("c", "{}")
                },
                "said-at: expected a time from 1970 up to now",
            ),
        ];
        for (bad, expected) in cases {
            match buffer.push(bad) {
                Err(BufferError::InvalidInput(text)) => assert!(text.contains(expected), "{text}"),
                other => panic!("expected invalid input ({expected}), got {other:?}"),
            }
        }
        assert_eq!(buffer.stats().expect("stats").stored, 0);
    }

    fn priority_comes_from_config_then_message_then_manifest_then_default(place: Place) {
        let config = BufferConfig {
            channel_priority: BTreeMap::from([("hooks".to_string(), 5)]),
            ..BufferConfig::default()
        };
        let buffer = open(&place, config);
        let push = |channel: &str, priority: Option<u32>| {
            buffer
                .push(NewMessage {
                    channel: channel.into(),
                    priority,
                    ..message("c", "{}")
                })
                .expect("push")
        };
        push("hooks", Some(1));
        push("cli", None);
        push("cli", Some(42));
        push("other", None);
        let rows = buffer.unrouted(10).expect("unrouted");
        let priorities: Vec<(String, u32)> =
            rows.into_iter().map(|m| (m.channel, m.priority)).collect();
        assert_eq!(
            priorities,
            [
                ("hooks".into(), 5),
                ("cli".into(), 10),
                ("cli".into(), 42),
                ("other".into(), 100)
            ]
        );
    }

    fn a_message_sent_before_the_manifests_were_known_takes_its_channel_priority_later(
        place: Place,
    ) {
        let before = buffer_on(&place, BufferConfig::default());
        let early = before.push(message("c", "{}")).expect("push");
        let chosen = before
            .push(NewMessage {
                priority: Some(7),
                ..message("c", "{}")
            })
            .expect("push");
        drop(before);
        let host = open(&place, BufferConfig::default());
        let priorities: BTreeMap<i64, u32> = host
            .unrouted(10)
            .expect("unrouted")
            .into_iter()
            .map(|m| (m.id, m.priority))
            .collect();
        assert_eq!(priorities, BTreeMap::from([(early, 10), (chosen, 7)]));
        drop(host);
        let later = buffer_on(&place, BufferConfig::default());
        let id = later.push(message("c", "{}")).expect("push");
        let row = later.unrouted(10).expect("unrouted");
        assert_eq!(
            row.iter().find(|m| m.id == id).map(|m| m.priority),
            Some(10),
            "remembered from the last host while none runs"
        );
        // A host that runs another channel but not cli (disabled for a while) leaves cli's
        // remembered priority and its waiting messages alone.
        let without_cli = buffer_on(&place, BufferConfig::default());
        let changed = without_cli
            .set_channel_priorities(BTreeMap::from([("webhook".to_string(), Some(50))]))
            .expect("channel priorities");
        assert_eq!(changed, 0, "no webhook message waits");
        let kept: Vec<u32> = without_cli
            .unrouted(10)
            .expect("unrouted")
            .iter()
            .map(|m| m.priority)
            .collect();
        assert_eq!(kept, [7, 10, 10], "cli's messages keep their priorities");
        let id = without_cli.push(message("c", "{}")).expect("push");
        let row = without_cli.unrouted(10).expect("unrouted");
        assert_eq!(
            row.iter().find(|m| m.id == id).map(|m| m.priority),
            Some(10),
            "cli's priority is still remembered"
        );
        // A channel run with no priority of its own takes the default.
        let changed = without_cli
            .set_channel_priorities(BTreeMap::from([("cli".to_string(), None)]))
            .expect("channel priorities");
        assert_eq!(changed, 3, "the default 100, except the chosen 7");
    }

    fn a_repeated_dedup_key_answers_the_first_id_and_stores_nothing(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let keyed = |key: &str| NewMessage {
            dedup_key: Some(key.into()),
            ..message("c", "{}")
        };
        let first = buffer.push(keyed("delivery-1")).expect("push");
        assert_eq!(buffer.push(keyed("delivery-1")).expect("again"), first);
        let other_channel = buffer
            .push(NewMessage {
                channel: "hooks".into(),
                ..keyed("delivery-1")
            })
            .expect("push");
        assert_ne!(other_channel, first, "keys are per channel");
        assert_ne!(buffer.push(keyed("delivery-2")).expect("push"), first);
        assert_eq!(buffer.stats().expect("stats").stored, 3);
        assert!(matches!(
            buffer.push(keyed(" ")),
            Err(BufferError::InvalidInput(text)) if text.starts_with("dedup-key:")
        ));
    }

    async fn routing_is_all_or_nothing_and_never_twice(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let a = buffer.push_async(message("c", "{}")).await.expect("push");
        let b = buffer.push_async(message("c", "{}")).await.expect("push");
        let batch = NewBatch {
            channel: "cli".into(),
            conversation: "c".into(),
            priority: 10,
            route: Route::Main,
            rule: None,
            message_ids: vec![a, b],
        };
        let id = buffer.route(batch.clone()).await.expect("route");
        assert!(
            buffer.route(batch).await.is_err(),
            "the same messages cannot be routed twice"
        );
        let stored = buffer.batch(id).expect("batch").expect("exists");
        assert_eq!(
            stored.messages.iter().map(|m| m.id).collect::<Vec<_>>(),
            [a, b]
        );
        assert!(buffer.unrouted(10).expect("unrouted").is_empty());
        let stats = buffer.stats().expect("stats");
        assert_eq!(stats.batches.get("main/queued"), Some(&1));
    }

    async fn the_most_urgent_main_batch_is_claimed_first_and_requeued_after_a_crash(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let mut ids = Vec::new();
        for priority in [50, 10, 10] {
            let id = buffer.push_async(message("c", "{}")).await.expect("push");
            let batch = buffer
                .route(NewBatch {
                    channel: "cli".into(),
                    conversation: format!("c{priority}"),
                    priority,
                    route: Route::Main,
                    rule: None,
                    message_ids: vec![id],
                })
                .await
                .expect("route");
            ids.push(batch);
        }
        let first = buffer
            .claim_main_batch(None)
            .await
            .expect("claim")
            .expect("one");
        assert_eq!(first.id, ids[1], "priority 10 before 50, FIFO within 10");
        assert_eq!(first.attempt, 1);
        assert_eq!(buffer.requeue_interrupted().await.expect("requeue"), (1, 0));
        let again = buffer
            .claim_main_batch(None)
            .await
            .expect("claim")
            .expect("one");
        assert_eq!(again.id, ids[1]);
        assert_eq!(
            again.attempt, 2,
            "the second start says an attempt came before"
        );
    }

    async fn channels_take_turns_within_a_priority_so_a_flood_holds_back_no_one(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let mut flood = Vec::new();
        for conversation in ["f1", "f2", "f3", "f4"] {
            flood.push(route_main(&buffer, "flood", conversation, 10).await);
        }
        let cli = route_main(&buffer, "cli", "c1", 10).await;
        let other = [
            route_main(&buffer, "other", "o1", 10).await,
            route_main(&buffer, "other", "o2", 10).await,
        ];
        let urgent = route_main(&buffer, "flood", "f5", 5).await;
        let mut claimed = Vec::new();
        while let Some(batch) = buffer.claim_main_batch(None).await.expect("claim") {
            claimed.push(batch.id);
        }
        assert_eq!(
            claimed,
            [
                urgent, cli, other[0], flood[0], other[1], flood[1], flood[2], flood[3]
            ],
            "priority first; within it the channel served longest ago, a new one before any"
        );
    }

    async fn a_host_claims_only_batches_of_the_channels_it_runs(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let elsewhere = route_main(&buffer, "telegram", "t1", 5).await;
        let mine = route_main(&buffer, "cli", "c1", 10).await;
        let served = ["cli".to_string(), "webhook".to_string()];
        let claim = || buffer.claim_main_batch(Some(&served));
        let first = claim().await.expect("claim").expect("the cli batch");
        assert_eq!(
            first.id, mine,
            "the more urgent telegram batch is not this host's"
        );
        assert!(
            claim().await.expect("claim").is_none(),
            "nothing else it runs"
        );
        assert!(buffer.requeue_interrupted().await.is_ok());
        let any = buffer.claim_main_batch(None).await.expect("claim");
        assert_eq!(
            any.map(|b| b.id),
            Some(elsewhere),
            "left for a host that runs it"
        );
    }

    async fn channels_take_turns_at_the_task_queue_too(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let spawn =
            |channel, conversation| route_from(&buffer, channel, conversation, 10, Route::Spawn);
        let flood = [
            spawn("flood", "f1").await,
            spawn("flood", "f2").await,
            spawn("flood", "f3").await,
        ];
        let cli = spawn("cli", "c1").await;
        let other = spawn("other", "o1").await;
        let mut claimed = Vec::new();
        while let Some((_, batch)) = buffer.claim_task().await.expect("claim") {
            claimed.push(batch.id);
        }
        assert_eq!(claimed, [flood[0], cli, other, flood[1], flood[2]]);
    }

    async fn a_conversation_awaits_its_answer_from_arrival_until_answered(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let awaiting = || buffer.awaiting_answer().expect("awaiting");
        let conversation = |name: &str| ("cli".to_string(), name.to_string());
        assert!(awaiting().is_empty(), "nothing said yet");
        let early = buffer
            .push_async(message("early", "{}"))
            .await
            .expect("push");
        assert_eq!(awaiting(), [conversation("early")], "said, not routed yet");
        let batch = NewBatch {
            channel: "cli".into(),
            conversation: "early".into(),
            priority: 10,
            route: Route::Main,
            rule: None,
            message_ids: vec![early],
        };
        buffer.route(batch).await.expect("route");
        push_and_route(&buffer, "later", Route::Main).await;
        let mut both = awaiting();
        both.sort();
        assert_eq!(
            both,
            [conversation("early"), conversation("later")],
            "queued"
        );
        let first = buffer
            .claim_main_batch(None)
            .await
            .expect("claim")
            .expect("one");
        buffer.requeue_interrupted().await.expect("requeue");
        assert_eq!(awaiting().len(), 2, "running, then queued again");
        for _ in 0..2 {
            let batch = buffer
                .claim_main_batch(None)
                .await
                .expect("claim")
                .expect("one");
            buffer
                .finish_batch(batch.id, BatchStatus::Done, None, None)
                .await
                .expect("finish");
        }
        assert!(awaiting().is_empty(), "answered (batch {} first)", first.id);
        push_and_route(&buffer, "dropped", Route::Drop).await;
        assert!(awaiting().is_empty(), "a dropped message awaits nothing");
    }

    async fn failed_work_is_listed_and_queued_again_all_named_or_none(place: Place) {
        let buffer = open(&place, BufferConfig::default());
        let mut routed = Vec::new();
        for (conversation, route) in [("m", Route::Main), ("s", Route::Spawn)] {
            routed.push(push_and_route(&buffer, conversation, route).await);
        }
        let batch = buffer
            .claim_main_batch(None)
            .await
            .expect("claim")
            .expect("one");
        let reply = Some("{\"text\":\"kept\"}".to_string());
        let refused = Some("cli refused the delivery".to_string());
        buffer
            .finish_batch(batch.id, BatchStatus::Failed, reply.clone(), refused)
            .await
            .expect("finish");
        let (task, _) = buffer.claim_task().await.expect("claim").expect("one");
        let denied = Some("denied: 401".to_string());
        buffer
            .finish_task(task, TaskStatus::Failed, None, denied)
            .await
            .expect("finish");
        let listed = buffer.failed(10).expect("failed");
        let kinds: Vec<_> = listed
            .iter()
            .map(|w| (w.kind, w.id, w.reply_kept))
            .collect();
        assert!(
            kinds.contains(&(FailedKind::Batch, batch.id, true)),
            "{listed:?}"
        );
        assert!(
            kinds.contains(&(FailedKind::Task, task, false)),
            "{listed:?}"
        );

        let unknown = RetrySelection::Named {
            batches: vec![batch.id, routed[1]],
            tasks: vec![task + 100],
        };
        assert_eq!(
            buffer.retry_failed(unknown).expect("retry"),
            RetryOutcome::NotFailed {
                batches: vec![NotFailed::new(
                    routed[1],
                    Some(format!(
                        "spawned as task {task}: retry it with --task {task}"
                    ))
                )],
                tasks: vec![NotFailed::new(task + 100, None)]
            },
            "a spawn batch is no failed main batch, and the task is unknown"
        );
        assert_eq!(
            buffer.failed(10).expect("failed").len(),
            2,
            "nothing changed"
        );

        assert_eq!(
            buffer.retry_failed(RetrySelection::All).expect("retry"),
            RetryOutcome::Queued {
                batches: vec![batch.id],
                tasks: vec![task]
            }
        );
        assert!(buffer.failed(10).expect("failed").is_empty());
        let spawned_batch = RetrySelection::Named {
            batches: vec![routed[1]],
            tasks: Vec::new(),
        };
        assert_eq!(
            buffer.retry_failed(spawned_batch).expect("retry"),
            RetryOutcome::NotFailed {
                batches: vec![NotFailed::new(
                    routed[1],
                    Some(format!("spawned as task {task}, queued"))
                )],
                tasks: Vec::new()
            },
            "its task is queued again, so no retry is suggested"
        );
        let again = buffer
            .claim_main_batch(None)
            .await
            .expect("claim")
            .expect("one");
        assert_eq!((again.id, again.retried), (batch.id, 1));
        assert_eq!(again.kept_reply, reply, "the undelivered reply is kept");
        let (task_again, spawned) = buffer.claim_task().await.expect("claim").expect("one");
        assert_eq!((task_again, spawned.retried), (task, 1));
    }

    async fn pruning_keeps_unrouted_messages_and_unfinished_batches(place: Place) {
        let config = BufferConfig {
            retention_days: 0,
            ..BufferConfig::default()
        };
        let buffer = open(&place, config);
        let unrouted = buffer.push_async(message("u", "{}")).await.expect("push");
        let queued = buffer.push_async(message("q", "{}")).await.expect("push");
        let dropped = buffer.push_async(message("d", "{}")).await.expect("push");
        let route = |id, conversation: &str, route| NewBatch {
            channel: "cli".into(),
            conversation: conversation.into(),
            priority: 10,
            route,
            rule: None,
            message_ids: vec![id],
        };
        buffer
            .route(route(queued, "q", Route::Main))
            .await
            .expect("route");
        buffer
            .route(route(dropped, "d", Route::Drop))
            .await
            .expect("route");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (messages, batches) = buffer.prune().await.expect("prune");
        assert_eq!(
            (messages, batches),
            (1, 1),
            "only the dropped batch and its message go"
        );
        let stats = buffer.stats().expect("stats");
        assert_eq!(stats.depth, 1);
        assert_eq!(stats.stored, 2);
        assert_eq!(buffer.unrouted(10).expect("unrouted")[0].id, unrouted);
    }

    fn concurrent_producers_are_all_acknowledged_with_distinct_ids(place: Place) {
        let buffer = std::sync::Arc::new(open(&place, BufferConfig::default()));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let buffer = buffer.clone();
                std::thread::spawn(move || {
                    (0..25)
                        .map(|i| {
                            buffer
                                .push(message(&format!("c{t}"), &format!("{{\"i\":{i}}}")))
                                .expect("push")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<i64> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("join"))
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 200);
        assert_eq!(buffer.stats().expect("stats").stored, 200);
    }
}
