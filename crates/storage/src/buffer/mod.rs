//! The buffer's storage: the [`BufferStore`] interface the host's buffer service writes
//! and reads through, and its SQLite implementation over `buffer.db` (WAL, group commit).
//! The tables are `messages`, `batches`, `tasks`, `channel_priorities` and `channel_turns`;
//! [`failed`] holds what lists failed work and queues it again.

mod failed;

use std::collections::BTreeMap;
use std::path::Path;

use cairn_vocab::buffer::{
    Batch, BatchStatus, BufferStats, BufferedMessage, ChannelDepth, ChannelQueue, FailedWork,
    NewBatch, RetryOutcome, RetrySelection, Route, RunningBatch, StatusCounts, TaskRow, TaskStatus,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::database::Database;
use crate::writer::Receipt;
use crate::{Migrations, StorageError, now_ms, open_read_only};

/// The store's file in a data dir.
pub const FILE: &str = "buffer.db";

/// Migrations of `buffer.db`.
pub const MIGRATIONS: Migrations = Migrations {
    name: "buffer",
    scripts: &[
        include_str!("../../../../migrations/buffer/0001_init.sql"),
        include_str!("../../../../migrations/buffer/0002_dedup_and_channel_priorities.sql"),
        include_str!("../../../../migrations/buffer/0003_said_at.sql"),
        include_str!("../../../../migrations/buffer/0004_batch_attempts.sql"),
        include_str!("../../../../migrations/buffer/0005_batch_retries.sql"),
        include_str!("../../../../migrations/buffer/0006_batch_received.sql"),
        include_str!("../../../../migrations/buffer/0007_awaiting_answer.sql"),
        include_str!("../../../../migrations/buffer/0008_channel_turns.sql"),
    ],
};

/// A message that passed the buffer's checks, with its priority and arrival time fixed.
#[derive(Debug, Clone)]
pub struct MessageRow {
    /// The channel it came through.
    pub channel: String,
    /// Who sent it.
    pub sender: String,
    /// Its conversation.
    pub conversation: String,
    /// The payload, a JSON object as text.
    pub payload: String,
    /// Lower is served first.
    pub priority: u32,
    /// The priority is the channel's default, not one the producer or config chose.
    pub priority_is_default: bool,
    /// The producer's id for it; a second message with the key stores nothing.
    pub dedup_key: Option<String>,
    /// Arrival (ms since the epoch).
    pub received_at: i64,
    /// When it was really said, when the producer dated it.
    pub said_at: Option<i64>,
}

/// Where the buffer keeps messages, batches and tasks. Writes return a [`Receipt`] that
/// resolves once the write is on disk, awaited by async callers or waited for by threads.
pub trait BufferStore: Send + Sync {
    /// Store a message; its id (the first message's id when its dedup key is known).
    fn insert(&self, message: MessageRow) -> Receipt<i64>;
    /// The channel priorities the hosts remembered.
    fn channel_priorities(&self) -> Result<BTreeMap<String, u32>, StorageError>;
    /// Remember the priorities of the channels a host runs (`None`: the channel has none,
    /// so `default_priority`) and give those channels' unrouted default-priority messages
    /// theirs; how many messages changed. What is remembered of a channel the host does
    /// not run (disabled for now) stays, and so do its messages' priorities.
    fn set_channel_priorities(
        &self,
        priorities: BTreeMap<String, Option<u32>>,
        default_priority: u32,
    ) -> Receipt<usize>;
    /// Unrouted messages, most urgent first (priority, then arrival).
    fn unrouted(&self, limit: usize) -> Result<Vec<BufferedMessage>, StorageError>;
    /// Whether a channel has unrouted messages, or batches or tasks queued or running.
    fn has_pending_work(&self, channel: &str) -> Result<bool, StorageError>;
    /// Record a batch and mark its messages routed, all or nothing; its id.
    fn route(&self, batch: NewBatch) -> Receipt<i64>;
    /// Mark the next main batch running: the most urgent priority first, and within it the
    /// oldest batch of the channel served longest ago, so channels take turns; its id. Only
    /// batches of `channels` when given: a host claims only what it can deliver the reply
    /// of, and leaves the rest for a host that runs their channel. The batch is read in the
    /// claim's own transaction, so no second read can fail after the claim committed (a
    /// PostgreSQL connection still reconnecting) and leave the batch `running` with no one
    /// working on it.
    fn claim_main(&self, channels: Option<&[String]>) -> Receipt<Option<Batch>>;
    /// Record how a main batch ended.
    fn finish_batch(
        &self,
        id: i64,
        status: BatchStatus,
        reply: Option<String>,
        error: Option<String>,
    ) -> Receipt<()>;
    /// Keep the reply a main batch is about to deliver (see [`Batch::kept_reply`]): an
    /// attempt after a crash delivers it again rather than asking the model for another.
    fn keep_reply(&self, id: i64, reply: String) -> Receipt<()>;
    /// Record that a batch's messages were journaled and remembered by the attempt that
    /// began at `at` (see [`Batch::received_at`]); an earlier mark stays.
    fn mark_received(&self, id: i64, at: i64) -> Receipt<()>;
    /// The conversations (channel, conversation) with a message not answered yet: one not
    /// routed yet, or in a main batch queued or running (a follow-up waiting behind other
    /// work, or a batch queued again after a stop or a crash). Their sessions stay open.
    fn awaiting_answer(&self) -> Result<Vec<(String, String)>, StorageError>;
    /// Mark the next queued task running, channels taking turns as at the main queue; (task
    /// id, its batch), read in the claim's transaction as at [`BufferStore::claim_main`].
    fn claim_task(&self) -> Receipt<Option<(i64, Batch)>>;
    /// Record how a task ended.
    fn finish_task(
        &self,
        id: i64,
        status: TaskStatus,
        result: Option<String>,
        error: Option<String>,
    ) -> Receipt<()>;
    /// Put batches and tasks left running by a stopped host back in the queue.
    fn requeue(&self) -> Receipt<(usize, usize)>;
    /// Remove routed messages and finished work older than `before_ms`.
    fn prune(&self, before_ms: i64) -> Receipt<(usize, usize)>;
    /// A batch with its messages.
    fn batch(&self, id: i64) -> Result<Option<Batch>, StorageError>;
    /// Depth, per-channel breakdown, batch and task counts.
    fn stats(&self) -> Result<BufferStats, StorageError>;
    /// Main batches and tasks that ended `failed`, the latest first, at most `limit`.
    fn failed(&self, limit: usize) -> Result<Vec<FailedWork>, StorageError>;
    /// Queue failed batches and tasks again, all named or none (see [`RetryOutcome`]); a
    /// batch keeps the reply it could not deliver, for the retry to deliver.
    fn retry_failed(&self, which: RetrySelection) -> Receipt<RetryOutcome>;
}

/// `buffer.db`: a writer thread for writes, a connection for reads.
pub struct SqliteBuffer {
    db: Database,
}

impl SqliteBuffer {
    /// Open (creating and migrating) `<data>/buffer.db` and start its writer thread.
    pub fn open(data_dir: &Path) -> Result<Self, StorageError> {
        Ok(Self {
            db: Database::open(&data_dir.join(FILE), &MIGRATIONS, "buffer-writer")?,
        })
    }
}

impl BufferStore for SqliteBuffer {
    fn insert(&self, message: MessageRow) -> Receipt<i64> {
        self.db.submit(move |conn| insert(conn, &message))
    }

    fn channel_priorities(&self) -> Result<BTreeMap<String, u32>, StorageError> {
        self.db.read(channel_priorities)
    }

    fn set_channel_priorities(
        &self,
        priorities: BTreeMap<String, Option<u32>>,
        default_priority: u32,
    ) -> Receipt<usize> {
        self.db
            .submit(move |conn| set_channel_priorities(conn, &priorities, default_priority))
    }

    fn unrouted(&self, limit: usize) -> Result<Vec<BufferedMessage>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages WHERE routed = 0 ORDER BY priority, id LIMIT ?1"
            ))?
            .query_map(params![limit as i64], read_message)?
            .collect()
        })
    }

    fn has_pending_work(&self, channel: &str) -> Result<bool, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM messages WHERE routed = 0 AND channel = ?1)
                     OR EXISTS (SELECT 1 FROM batches WHERE channel = ?1 AND route = 'main'
                                  AND status IN ('queued', 'running'))
                     OR EXISTS (SELECT 1 FROM tasks t JOIN batches b ON b.id = t.batch_id
                                 WHERE b.channel = ?1 AND t.status IN ('queued', 'running'))",
            )?
            .query_row(params![channel], |row| row.get(0))
        })
    }

    fn route(&self, batch: NewBatch) -> Receipt<i64> {
        self.db.submit(move |conn| route(conn, &batch))
    }

    fn claim_main(&self, channels: Option<&[String]>) -> Receipt<Option<Batch>> {
        let channels = channels.map(|c| serde_json::Value::from(c.to_vec()).to_string());
        self.db
            .submit(move |conn| match claim_main(conn, channels.as_deref())? {
                Some(id) => read_batch(conn, id),
                None => Ok(None),
            })
    }

    fn finish_batch(
        &self,
        id: i64,
        status: BatchStatus,
        reply: Option<String>,
        error: Option<String>,
    ) -> Receipt<()> {
        self.db
            .submit(move |conn| finish_batch(conn, id, status, reply.as_deref(), error.as_deref()))
    }

    fn keep_reply(&self, id: i64, reply: String) -> Receipt<()> {
        self.db.submit(move |conn| {
            conn.prepare_cached("UPDATE batches SET reply = ?2 WHERE id = ?1")?
                .execute(params![id, reply])?;
            Ok(())
        })
    }

    fn mark_received(&self, id: i64, at: i64) -> Receipt<()> {
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "UPDATE batches SET received_at = ?2 WHERE id = ?1 AND received_at IS NULL",
            )?
            .execute(params![id, at])?;
            Ok(())
        })
    }

    fn awaiting_answer(&self) -> Result<Vec<(String, String)>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(
                "SELECT channel, conversation FROM batches
                  WHERE route = 'main' AND status IN ('queued', 'running')
                 UNION
                 SELECT channel, conversation FROM messages WHERE routed = 0",
            )?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect()
        })
    }

    fn claim_task(&self) -> Receipt<Option<(i64, Batch)>> {
        self.db.submit(|conn| match claim_task(conn)? {
            Some((task, batch)) => Ok(read_batch(conn, batch)?.map(|batch| (task, batch))),
            None => Ok(None),
        })
    }

    fn finish_task(
        &self,
        id: i64,
        status: TaskStatus,
        result: Option<String>,
        error: Option<String>,
    ) -> Receipt<()> {
        self.db
            .submit(move |conn| finish_task(conn, id, status, result.as_deref(), error.as_deref()))
    }

    fn requeue(&self) -> Receipt<(usize, usize)> {
        self.db.submit(requeue)
    }

    fn prune(&self, before_ms: i64) -> Receipt<(usize, usize)> {
        self.db.submit(move |conn| prune(conn, before_ms))
    }

    fn batch(&self, id: i64) -> Result<Option<Batch>, StorageError> {
        self.db.read(|conn| read_batch(conn, id))
    }

    fn stats(&self) -> Result<BufferStats, StorageError> {
        self.db.read(stats)
    }

    fn failed(&self, limit: usize) -> Result<Vec<FailedWork>, StorageError> {
        self.db.read(|conn| failed::list(conn, limit))
    }

    fn retry_failed(&self, which: RetrySelection) -> Receipt<RetryOutcome> {
        self.db.submit(move |conn| failed::retry(conn, &which))
    }
}

/// Read buffer statistics of a data dir without a running host; `None` if it has no buffer.
pub fn read_stats(data_dir: &Path) -> Result<Option<BufferStats>, StorageError> {
    let path = data_dir.join(FILE);
    let Some(conn) = open_read_only(&path)? else {
        return Ok(None);
    };
    stats(&conn)
        .map(Some)
        .map_err(|e| StorageError::open(&path, e))
}

const MESSAGE_COLUMNS: &str =
    "id, channel, sender, conversation, payload, received_at, priority, said_at";

fn read_message(row: &rusqlite::Row<'_>) -> rusqlite::Result<BufferedMessage> {
    Ok(BufferedMessage {
        id: row.get(0)?,
        channel: row.get(1)?,
        sender: row.get(2)?,
        conversation: row.get(3)?,
        payload: row.get(4)?,
        received_at: row.get(5)?,
        priority: row.get(6)?,
        said_at: row.get(7)?,
    })
}

/// A batch with its messages, in id order.
fn read_batch(conn: &Connection, id: i64) -> rusqlite::Result<Option<Batch>> {
    let head = conn
        .prepare_cached(
            "SELECT channel, conversation, priority, attempts, retried, received_at, reply
               FROM batches WHERE id = ?1",
        )?
        .query_row(params![id], |row| {
            Ok(Batch {
                id,
                channel: row.get(0)?,
                conversation: row.get(1)?,
                priority: row.get(2)?,
                attempt: row.get(3)?,
                retried: row.get(4)?,
                received_at: row.get(5)?,
                kept_reply: row.get(6)?,
                messages: Vec::new(),
            })
        })
        .optional()?;
    let Some(head) = head else {
        return Ok(None);
    };
    let messages = conn
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE batch_id = ?1 ORDER BY id"
        ))?
        .query_map(params![id], read_message)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Batch { messages, ..head }))
}

/// Read buffer statistics from a connection (also used by `cairn status` without a host).
fn stats(conn: &Connection) -> Result<BufferStats, rusqlite::Error> {
    let mut statement = conn.prepare_cached(
        "SELECT channel, count(*), min(received_at) FROM messages WHERE routed = 0 GROUP BY channel ORDER BY channel",
    )?;
    let channels = statement
        .query_map([], |row| {
            Ok(ChannelDepth {
                channel: row.get(0)?,
                unrouted: row.get(1)?,
                oldest_received_at: row.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let depth = channels.iter().map(|c| c.unrouted).sum();
    let oldest = channels.iter().map(|c| c.oldest_received_at).min();
    let stored: i64 = conn
        .prepare_cached("SELECT count(*) FROM messages")?
        .query_row([], |row| row.get(0))?;
    let counts = |sql: &str| -> Result<StatusCounts, rusqlite::Error> {
        let mut statement = conn.prepare_cached(sql)?;
        let rows = statement
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
            })?
            .collect::<Result<StatusCounts, _>>()?;
        Ok(rows)
    };
    let batches =
        counts("SELECT route || '/' || status, count(*) FROM batches GROUP BY route, status")?;
    let tasks = counts("SELECT status, count(*) FROM tasks GROUP BY status")?;
    let queued = conn
        .prepare_cached(
            "SELECT channel, count(*), min(created_at) FROM batches
              WHERE route = 'main' AND status = 'queued' GROUP BY channel ORDER BY channel",
        )?
        .query_map([], |row| {
            Ok(ChannelQueue {
                channel: row.get(0)?,
                batches: row.get(1)?,
                oldest_created_at: row.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut statement = conn.prepare_cached(
        "SELECT id, batch_id, status, result, error, created_at, finished_at FROM tasks ORDER BY id DESC LIMIT 10",
    )?;
    let recent_tasks = statement
        .query_map([], |row| {
            Ok(TaskRow {
                id: row.get(0)?,
                batch_id: row.get(1)?,
                status: crate::parsed(row, 2, TaskStatus::parse, "task status")?,
                result: row.get(3)?,
                error: row.get(4)?,
                created_at: row.get(5)?,
                finished_at: row.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let running = conn
        .prepare_cached(
            "SELECT id, channel, conversation, attempts, started_at, received_at FROM batches
              WHERE route = 'main' AND status = 'running' ORDER BY started_at, id LIMIT 10",
        )?
        .query_map([], |row| {
            Ok(RunningBatch {
                id: row.get(0)?,
                channel: row.get(1)?,
                conversation: row.get(2)?,
                attempts: row.get(3)?,
                started_at: row.get(4)?,
                received_at: row.get(5)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(BufferStats {
        depth,
        oldest_unrouted_age_ms: oldest.map(|t| (now_ms() - t).max(0)),
        channels,
        stored,
        batches,
        queued,
        tasks,
        running,
        recent_tasks,
    })
}

/// Store a validated message; returns its id. A message whose dedup key this channel has
/// already stored is not stored again: the first message's id is returned.
fn insert(conn: &Connection, message: &MessageRow) -> rusqlite::Result<i64> {
    if let Some(key) = &message.dedup_key {
        let first: Option<i64> = conn
            .prepare_cached("SELECT id FROM messages WHERE channel = ?1 AND dedup_key = ?2")?
            .query_row(params![message.channel, key], |row| row.get(0))
            .optional()?;
        if let Some(id) = first {
            return Ok(id);
        }
    }
    conn.prepare_cached(
        "INSERT INTO messages (channel, sender, conversation, payload, received_at, priority,
                               priority_is_default, dedup_key, said_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        message.channel,
        message.sender,
        message.conversation,
        message.payload,
        message.received_at,
        message.priority,
        message.priority_is_default,
        message.dedup_key,
        message.said_at
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Replace the remembered channel priorities and give unrouted messages that carry their
/// channel's default priority the new one; returns how many messages changed.
fn set_channel_priorities(
    conn: &Connection,
    priorities: &BTreeMap<String, Option<u32>>,
    default_priority: u32,
) -> rusqlite::Result<usize> {
    let mut changed = 0;
    for (channel, priority) in priorities {
        conn.prepare_cached("DELETE FROM channel_priorities WHERE channel = ?1")?
            .execute(params![channel])?;
        if let Some(priority) = priority {
            conn.prepare_cached(
                "INSERT INTO channel_priorities (channel, priority) VALUES (?1, ?2)",
            )?
            .execute(params![channel, priority])?;
        }
        changed += conn
            .prepare_cached(
                "UPDATE messages SET priority = ?2
                  WHERE routed = 0 AND priority_is_default = 1 AND channel = ?1
                    AND priority <> ?2",
            )?
            .execute(params![channel, priority.unwrap_or(default_priority)])?;
    }
    Ok(changed)
}

/// The remembered channel priorities.
fn channel_priorities(conn: &Connection) -> rusqlite::Result<BTreeMap<String, u32>> {
    conn.prepare_cached("SELECT channel, priority FROM channel_priorities")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

/// Record a batch and mark its messages routed, all or nothing.
fn route(conn: &Connection, batch: &NewBatch) -> rusqlite::Result<i64> {
    let status = match batch.route {
        Route::Main => BatchStatus::Queued,
        Route::Spawn => BatchStatus::Spawned,
        Route::Drop => BatchStatus::Dropped,
    }
    .as_str();
    let now = now_ms();
    conn.prepare_cached("INSERT INTO batches (channel, conversation, priority, route, rule, message_count, status, created_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, CASE WHEN ?7 = 'dropped' THEN ?8 END)")?.execute(params![
            batch.channel,
            batch.conversation,
            batch.priority,
            batch.route.as_str(),
            batch.rule,
            batch.message_ids.len() as i64,
            status,
            now
        ])?;
    let batch_id = conn.last_insert_rowid();
    let mut mark = conn.prepare_cached(
        "UPDATE messages SET routed = 1, batch_id = ?1 WHERE id = ?2 AND routed = 0",
    )?;
    for id in &batch.message_ids {
        if mark.execute(params![batch_id, id])? != 1 {
            // Already routed (or gone): refuse the whole batch rather than double-route.
            return Err(rusqlite::Error::StatementChangedRows(0));
        }
    }
    if batch.route == Route::Spawn {
        conn.prepare_cached(
            "INSERT INTO tasks (batch_id, channel, status, created_at)
             VALUES (?1, ?2, 'queued', ?3)",
        )?
        .execute(params![batch_id, batch.channel, now])?;
    }
    Ok(batch_id)
}

/// Mark the next queued main batch running; returns its id. The most urgent priority goes
/// first; within it channels take turns (the one served longest ago first, one never served
/// before any), each channel's batches in arrival order. With `channels` (a JSON array of
/// names), only their batches.
fn claim_main(conn: &Connection, channels: Option<&str>) -> rusqlite::Result<Option<i64>> {
    let claimed: Option<(i64, String)> = conn
        .prepare_cached(
            // The channels with queued main batches, one index probe each (not a scan of
            // the queue), then each one's most urgent batch.
            "WITH RECURSIVE queued(channel) AS (
                 SELECT MIN(channel) FROM batches WHERE route = 'main' AND status = 'queued'
                 UNION ALL
                 SELECT (SELECT MIN(b.channel) FROM batches b
                          WHERE b.route = 'main' AND b.status = 'queued'
                            AND b.channel > queued.channel)
                   FROM queued WHERE queued.channel IS NOT NULL)
             SELECT b.id, b.channel FROM queued
               JOIN batches b ON b.id = (
                    SELECT q.id FROM batches q
                     WHERE q.channel = queued.channel AND q.route = 'main' AND q.status = 'queued'
                     ORDER BY q.priority, q.id LIMIT 1)
               LEFT JOIN channel_turns t ON t.queue = 'main' AND t.channel = queued.channel
              WHERE ?1 IS NULL OR queued.channel IN (SELECT value FROM json_each(?1))
              ORDER BY b.priority, COALESCE(t.last_turn, 0), b.id LIMIT 1",
        )?
        .query_row(params![channels], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((id, channel)) = claimed else {
        return Ok(None);
    };
    conn.prepare_cached(
        "UPDATE batches SET status = 'running', started_at = ?2, attempts = attempts + 1
         WHERE id = ?1",
    )?
    .execute(params![id, now_ms()])?;
    take_turn(conn, "main", &channel)?;
    Ok(Some(id))
}

/// Record that `channel` was just served at `queue` (`main` or `task`): it goes behind every
/// other channel waiting there.
fn take_turn(conn: &Connection, queue: &str, channel: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO channel_turns (queue, channel, last_turn)
         VALUES (?1, ?2, (SELECT COALESCE(MAX(last_turn), 0) + 1 FROM channel_turns
                           WHERE queue = ?1))
         ON CONFLICT (queue, channel) DO UPDATE SET last_turn = excluded.last_turn",
    )?
    .execute(params![queue, channel])?;
    Ok(())
}

/// Record how a main batch ended.
fn finish_batch(
    conn: &Connection,
    id: i64,
    status: BatchStatus,
    reply: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE batches SET status = ?2, reply = ?3, error = ?4, finished_at = ?5 WHERE id = ?1",
    )?
    .execute(params![id, status.as_str(), reply, error, now_ms()])?;
    Ok(())
}

/// Mark the next queued task running; returns (task id, batch id). Channels take turns (the
/// one served longest ago first, one never served before any), each channel's tasks oldest
/// first.
fn claim_task(conn: &Connection) -> rusqlite::Result<Option<(i64, i64)>> {
    let claimed: Option<(i64, i64, String)> = conn
        .prepare_cached(
            "WITH RECURSIVE queued(channel) AS (
                 SELECT MIN(channel) FROM tasks WHERE status = 'queued'
                 UNION ALL
                 SELECT (SELECT MIN(k.channel) FROM tasks k
                          WHERE k.status = 'queued' AND k.channel > queued.channel)
                   FROM queued WHERE queued.channel IS NOT NULL)
             SELECT k.id, k.batch_id, k.channel FROM queued
               JOIN tasks k ON k.id = (
                    SELECT q.id FROM tasks q
                     WHERE q.channel = queued.channel AND q.status = 'queued'
                     ORDER BY q.id LIMIT 1)
               LEFT JOIN channel_turns t ON t.queue = 'task' AND t.channel = queued.channel
              ORDER BY COALESCE(t.last_turn, 0), k.id LIMIT 1",
        )?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((id, batch_id, channel)) = claimed else {
        return Ok(None);
    };
    conn.prepare_cached("UPDATE tasks SET status = 'running', started_at = ?2 WHERE id = ?1")?
        .execute(params![id, now_ms()])?;
    take_turn(conn, "task", &channel)?;
    Ok(Some((id, batch_id)))
}

/// Record how a task ended.
fn finish_task(
    conn: &Connection,
    id: i64,
    status: TaskStatus,
    result: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE tasks SET status = ?2, result = ?3, error = ?4, finished_at = ?5 WHERE id = ?1",
    )?
    .execute(params![id, status.as_str(), result, error, now_ms()])?;
    Ok(())
}

/// Put running batches and tasks back in the queue; returns how many of each.
fn requeue(conn: &Connection) -> rusqlite::Result<(usize, usize)> {
    let batches = conn.prepare_cached("UPDATE batches SET status = 'queued', started_at = NULL WHERE route = 'main' AND status = 'running'")?.execute([])?;
    let tasks = conn
        .prepare_cached(
            "UPDATE tasks SET status = 'queued', started_at = NULL WHERE status = 'running'",
        )?
        .execute([])?;
    Ok((batches, tasks))
}

/// Delete finished work older than `before_ms`; returns (messages, batches) deleted.
fn prune(conn: &Connection, before_ms: i64) -> rusqlite::Result<(usize, usize)> {
    // Only messages whose batch is finished go: a queued main batch or an unfinished task
    // still needs its messages, however old.
    let finished_batches = "SELECT id FROM batches WHERE status IN ('done', 'failed', 'dropped')
         OR (status = 'spawned' AND id IN (SELECT batch_id FROM tasks WHERE status IN ('done', 'failed')))";
    let messages = conn.prepare_cached(&format!("DELETE FROM messages WHERE routed = 1 AND received_at < ?1 AND batch_id IN ({finished_batches})"))?.execute(params![before_ms])?;
    conn.prepare_cached(
        "DELETE FROM tasks WHERE status IN ('done', 'failed') AND finished_at < ?1
           AND batch_id NOT IN (SELECT batch_id FROM messages WHERE batch_id IS NOT NULL)",
    )?
    .execute(params![before_ms])?;
    let batches = conn.prepare_cached("DELETE FROM batches WHERE created_at < ?1 AND status IN ('done', 'failed', 'dropped', 'spawned')
           AND id NOT IN (SELECT batch_id FROM messages WHERE batch_id IS NOT NULL)
           AND id NOT IN (SELECT batch_id FROM tasks)")?.execute(params![before_ms])?;
    Ok((messages, batches))
}
