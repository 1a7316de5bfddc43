//! The buffer on PostgreSQL, shared by several hosts.
//!
//! - Messages arriving together are stored in one statement and one commit; a message with
//!   a dedup key is stored once per key, whichever host receives it twice.
//! - Routing marks messages routed only if no other router did first: the whole batch is
//!   refused otherwise, so no message is routed twice.
//! - A host claims a main batch under a transaction-level advisory lock, and only the
//!   oldest unfinished batch of a conversation nobody is working on: one conversation's
//!   turns run one at a time, in order, whichever hosts take them. Within a priority,
//!   channels take turns, so one channel's flood cannot hold back another's messages.
//! - A claim is a lease: the claiming host renews it every third of [`PgBuffer::lease`]
//!   while it lives and works on it; once it lapsed (the host died) any host's next claim
//!   takes the work over (see [`super::lease`]). Tasks are claimed the same way, under an
//!   advisory lock of their own, channels taking turns there too (tasks have no
//!   conversation order to keep).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use cairn_vocab::buffer::{
    Batch, BatchStatus, BufferStats, BufferedMessage, ChannelDepth, ChannelQueue, FailedWork,
    NewBatch, RetryOutcome, RetrySelection, Route, RunningBatch, StatusCounts, TaskRow, TaskStatus,
};
use postgres::{Client, GenericClient, Row, Transaction};

use super::batch::Batcher;
use super::failed;
use super::lease::{Held, Work, renew_until_dropped};
use super::{PgPool, PgUrl};
use crate::buffer::{BufferStore, MessageRow};
use crate::writer::Receipt;
use crate::{Migrations, StorageError, now_ms};

/// Migrations of the buffer's tables on PostgreSQL.
pub const MIGRATIONS: Migrations = Migrations {
    name: "buffer",
    scripts: &[
        include_str!("../../../../migrations/postgres/buffer/0001_init.sql"),
        include_str!("../../../../migrations/postgres/buffer/0002_batch_attempts.sql"),
        include_str!("../../../../migrations/postgres/buffer/0003_conversation_heads.sql"),
        include_str!("../../../../migrations/postgres/buffer/0004_batch_retries.sql"),
        include_str!("../../../../migrations/postgres/buffer/0005_batch_received.sql"),
        include_str!("../../../../migrations/postgres/buffer/0006_channel_turns.sql"),
    ],
};

/// How long a claim holds without renewal by default: a dead host's turn is taken over by
/// another this long after its last renewal.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Connections each buffer keeps.
const CONNECTIONS: usize = 4;

/// The advisory lock main-batch claims take, so two hosts never start two turns of one
/// conversation ("claim" in ASCII).
const CLAIM_LOCK: i64 = 0x0063_6c61_696d;

/// The advisory lock task claims take, so channels' turns at the task queue are counted
/// one claim at a time across hosts ("task" in ASCII).
const TASK_CLAIM_LOCK: i64 = 0x7461_736b;

/// The buffer's tables on a PostgreSQL database, claiming as host `holder`.
pub struct PgBuffer {
    pool: PgPool,
    /// Messages without a dedup key waiting to be stored: the first to wait sends a job
    /// that stores every one waiting by then in one statement.
    inserts: Batcher<MessageRow>,
    holder: String,
    /// The claims this host's callers were given: the ones it renews.
    held: Held,
    /// How long a claim holds without renewal, in ms.
    lease_ms: i64,
    /// Dropped with the buffer, which stops the thread renewing this host's leases.
    _renewals: mpsc::Sender<()>,
}

impl PgBuffer {
    /// Connect to `url`, migrate the buffer's tables, and start renewing this host's
    /// claims every third of `lease`.
    pub fn connect(url: &PgUrl, lease: Duration) -> Result<Self, StorageError> {
        let pool = PgPool::connect_migrated(url, CONNECTIONS, "buffer-pg", &MIGRATIONS)?;
        let holder = super::holder_id();
        let held = Held::default();
        let (stop, stopped) = mpsc::channel();
        let renewing = (pool.clone(), holder.clone(), held.clone());
        thread::Builder::new()
            .name("buffer-pg-lease".into())
            .spawn(move || {
                let (pool, holder, held) = renewing;
                renew_until_dropped(&pool, &holder, &held, lease, &stopped);
            })
            .map_err(|e| url.unreachable(&format!("cannot start the lease thread: {e}")))?;
        Ok(Self {
            pool,
            inserts: Batcher::new(insert_all),
            holder,
            held,
            lease_ms: super::millis(lease),
            _renewals: stop,
        })
    }
}

impl PgBuffer {
    /// Record how claimed work ended, if it is still this host's (or was never claimed).
    fn finish(
        &self,
        work: Work,
        id: i64,
        status: &'static str,
        outcome: Option<String>,
        error: Option<String>,
    ) -> Receipt<()> {
        let holder = self.holder.clone();
        let held = self.held.clone();
        let (table, column, name) = work.table_outcome_name();
        self.pool.submit_then(
            move |tx| {
                let changed = tx.execute(
                    &format!(
                        "UPDATE {table}
                            SET status = $2, {column} = $3, error = $4, finished_at = $5,
                                lease_until = NULL
                          WHERE id = $1 AND (claimed_by = $6 OR claimed_by IS NULL)"
                    ),
                    &[&id, &status, &outcome, &error, &now_ms(), &holder],
                )?;
                taken_over(changed, name, id)
            },
            move |finished| {
                if matches!(finished, Ok(()) | Err(StorageError::Taken(_))) {
                    held.remove(work, id);
                }
            },
        )
    }
}

impl BufferStore for PgBuffer {
    fn insert(&self, message: MessageRow) -> Receipt<i64> {
        if message.dedup_key.is_some() {
            return self.pool.submit(move |tx| insert(tx, &message));
        }
        self.inserts.push(&self.pool, message)
    }

    fn channel_priorities(&self) -> Result<BTreeMap<String, u32>, StorageError> {
        self.pool.read(|client| {
            client
                .query(
                    "SELECT channel, priority FROM buffer_channel_priorities",
                    &[],
                )?
                .iter()
                .map(|row| Ok((row.get(0), to_u32(row.get(1)))))
                .collect()
        })
    }

    fn set_channel_priorities(
        &self,
        priorities: BTreeMap<String, Option<u32>>,
        default_priority: u32,
    ) -> Receipt<usize> {
        self.pool.submit_alone(move |tx| {
            // Hosts starting together change the table one after the other.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('buffer_channel_priorities', 7))",
                &[],
            )?;
            let mut changed = 0;
            for (channel, priority) in &priorities {
                tx.execute(
                    "DELETE FROM buffer_channel_priorities WHERE channel = $1",
                    &[channel],
                )?;
                if let Some(priority) = priority {
                    tx.execute(
                        "INSERT INTO buffer_channel_priorities (channel, priority) VALUES ($1, $2)",
                        &[channel, &i64::from(*priority)],
                    )?;
                }
                let effective = i64::from(priority.unwrap_or(default_priority));
                changed += tx.execute(
                    "UPDATE buffer_messages SET priority = $2
                      WHERE NOT routed AND priority_is_default AND channel = $1
                        AND priority <> $2",
                    &[channel, &effective],
                )?;
            }
            Ok(to_usize(changed))
        })
    }

    fn unrouted(&self, limit: usize) -> Result<Vec<BufferedMessage>, StorageError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.pool.read(move |client| {
            Ok(client
                .query(
                    &format!(
                        "SELECT {MESSAGE_COLUMNS} FROM buffer_messages WHERE NOT routed
                          ORDER BY priority, id LIMIT $1"
                    ),
                    &[&limit],
                )?
                .iter()
                .map(read_message)
                .collect())
        })
    }

    fn has_pending_work(&self, channel: &str) -> Result<bool, StorageError> {
        let channel = channel.to_string();
        self.pool.read(move |client| {
            Ok(client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM buffer_messages WHERE NOT routed AND channel = $1)
                         OR EXISTS (SELECT 1 FROM buffer_batches WHERE channel = $1
                                      AND route = 'main' AND status IN ('queued', 'running'))
                         OR EXISTS (SELECT 1 FROM buffer_tasks t
                                      JOIN buffer_batches b ON b.id = t.batch_id
                                     WHERE b.channel = $1 AND t.status IN ('queued', 'running'))",
                    &[&channel],
                )?
                .get(0))
        })
    }

    fn route(&self, batch: NewBatch) -> Receipt<i64> {
        self.pool.submit(move |tx| route(tx, &batch))
    }

    fn claim_main(&self, channels: Option<&[String]>) -> Receipt<Option<Batch>> {
        let (holder, lease) = (self.holder.clone(), self.lease_ms);
        let channels = channels.map(<[String]>::to_vec);
        let held = self.held.clone();
        self.pool.submit_alone_then(
            move |tx| match claim_main(tx, &holder, lease, channels.as_deref())? {
                Some(id) => read_batch(tx, id),
                None => Ok(None),
            },
            move |claimed| {
                if let Ok(Some(batch)) = claimed {
                    held.insert(Work::Batch, batch.id);
                }
            },
        )
    }

    fn finish_batch(
        &self,
        id: i64,
        status: BatchStatus,
        reply: Option<String>,
        error: Option<String>,
    ) -> Receipt<()> {
        self.finish(Work::Batch, id, status.as_str(), reply, error)
    }

    fn keep_reply(&self, id: i64, reply: String) -> Receipt<()> {
        let holder = self.holder.clone();
        self.pool.submit(move |tx| {
            let changed = tx.execute(
                "UPDATE buffer_batches SET reply = $2
                  WHERE id = $1 AND (claimed_by = $3 OR claimed_by IS NULL)",
                &[&id, &reply, &holder],
            )?;
            taken_over(changed, "batch", id)
        })
    }

    fn mark_received(&self, id: i64, at: i64) -> Receipt<()> {
        self.pool.submit(move |tx| {
            tx.execute(
                "UPDATE buffer_batches SET received_at = $2 WHERE id = $1 AND received_at IS NULL",
                &[&id, &at],
            )?;
            Ok(())
        })
    }

    fn awaiting_answer(&self) -> Result<Vec<(String, String)>, StorageError> {
        self.pool.read(|client| {
            // Through `buffer_batches_conversation_heads`, which holds unfinished main
            // batches, and `buffer_messages_unrouted`.
            let rows = client.query(
                "SELECT channel, conversation FROM buffer_batches
                  WHERE route = 'main' AND status IN ('queued', 'running')
                 UNION
                 SELECT channel, conversation FROM buffer_messages WHERE NOT routed",
                &[],
            )?;
            rows.iter()
                .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                .collect()
        })
    }

    fn claim_task(&self) -> Receipt<Option<(i64, Batch)>> {
        let (holder, lease) = (self.holder.clone(), self.lease_ms);
        let held = self.held.clone();
        self.pool.submit_alone_then(
            move |tx| match claim_task(tx, &holder, lease)? {
                Some((task, batch)) => Ok(read_batch(tx, batch)?.map(|batch| (task, batch))),
                None => Ok(None),
            },
            move |claimed| {
                if let Ok(Some((task, _))) = claimed {
                    held.insert(Work::Task, *task);
                }
            },
        )
    }

    fn finish_task(
        &self,
        id: i64,
        status: TaskStatus,
        result: Option<String>,
        error: Option<String>,
    ) -> Receipt<()> {
        self.finish(Work::Task, id, status.as_str(), result, error)
    }

    fn requeue(&self) -> Receipt<(usize, usize)> {
        let holder = self.holder.clone();
        self.pool.submit(move |tx| {
            let now = now_ms();
            let mut counts = [0usize; 2];
            for (count, table) in counts.iter_mut().zip(["buffer_batches", "buffer_tasks"]) {
                *count = to_usize(tx.execute(
                    &format!(
                        "UPDATE {table}
                            SET status = 'queued', started_at = NULL, claimed_by = NULL,
                                lease_until = NULL
                          WHERE status = 'running' AND (claimed_by = $1 OR lease_until < $2)"
                    ),
                    &[&holder, &now],
                )?);
            }
            Ok((counts[0], counts[1]))
        })
    }

    fn prune(&self, before_ms: i64) -> Receipt<(usize, usize)> {
        self.pool.submit(move |tx| prune(tx, before_ms))
    }

    fn batch(&self, id: i64) -> Result<Option<Batch>, StorageError> {
        self.pool.read(move |client| read_batch(client, id))
    }

    fn stats(&self) -> Result<BufferStats, StorageError> {
        self.pool.read(stats)
    }

    fn failed(&self, limit: usize) -> Result<Vec<FailedWork>, StorageError> {
        self.pool.read(move |client| failed::list(client, limit))
    }

    fn retry_failed(&self, which: RetrySelection) -> Receipt<RetryOutcome> {
        self.pool.submit(move |tx| failed::retry(tx, &which))
    }
}

const MESSAGE_COLUMNS: &str =
    "id, channel, sender, conversation, payload, received_at, priority, said_at";

fn read_message(row: &Row) -> BufferedMessage {
    BufferedMessage {
        id: row.get(0),
        channel: row.get(1),
        sender: row.get(2),
        conversation: row.get(3),
        payload: row.get(4),
        received_at: row.get(5),
        priority: to_u32(row.get(6)),
        said_at: row.get(7),
    }
}

fn to_u32(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// A finish that changed nothing: another host took the work over after this host's lease
/// lapsed (or it never existed).
fn taken_over(changed: u64, what: &str, id: i64) -> Result<(), StorageError> {
    if changed == 1 {
        return Ok(());
    }
    Err(StorageError::Taken(format!(
        "{what} {id} is not this host's: it does not exist, or its lease lapsed and another host took it over"
    )))
}

/// Insert `messages` (none with a dedup key) in one transaction; their ids, in order.
fn insert_all(client: &mut Client, messages: &[&MessageRow]) -> Result<Vec<i64>, StorageError> {
    let count = i64::try_from(messages.len()).unwrap_or(i64::MAX);
    let mut tx = client.transaction()?;
    let ids: Vec<i64> = tx
        .query(
            "SELECT nextval(pg_get_serial_sequence('buffer_messages', 'id'))
               FROM generate_series(1, $1::bigint)",
            &[&count],
        )?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let text =
        |pick: fn(&MessageRow) -> &str| -> Vec<&str> { messages.iter().map(|m| pick(m)).collect() };
    let received: Vec<i64> = messages.iter().map(|m| m.received_at).collect();
    let said: Vec<Option<i64>> = messages.iter().map(|m| m.said_at).collect();
    let priorities: Vec<i64> = messages.iter().map(|m| i64::from(m.priority)).collect();
    let defaults: Vec<bool> = messages.iter().map(|m| m.priority_is_default).collect();
    tx.execute(
        "INSERT INTO buffer_messages (id, channel, sender, conversation, payload, received_at,
                                      said_at, priority, priority_is_default)
         OVERRIDING SYSTEM VALUE
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
                              $6::bigint[], $7::bigint[], $8::bigint[], $9::boolean[])",
        &[
            &ids,
            &text(|m| &m.channel),
            &text(|m| &m.sender),
            &text(|m| &m.conversation),
            &text(|m| &m.payload),
            &received,
            &said,
            &priorities,
            &defaults,
        ],
    )?;
    tx.commit()?;
    Ok(ids)
}

/// Store a message once per (channel, dedup key); its id, or the first one's.
fn insert(tx: &mut Transaction<'_>, message: &MessageRow) -> Result<i64, StorageError> {
    let inserted = tx.query_opt(
        "INSERT INTO buffer_messages (channel, sender, conversation, payload, received_at,
                                      priority, priority_is_default, dedup_key, said_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (channel, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
         RETURNING id",
        &[
            &message.channel,
            &message.sender,
            &message.conversation,
            &message.payload,
            &message.received_at,
            &i64::from(message.priority),
            &message.priority_is_default,
            &message.dedup_key,
            &message.said_at,
        ],
    )?;
    match inserted {
        Some(row) => Ok(row.get(0)),
        None => Ok(tx
            .query_one(
                "SELECT id FROM buffer_messages WHERE channel = $1 AND dedup_key = $2",
                &[&message.channel, &message.dedup_key],
            )?
            .get(0)),
    }
}

/// Record a batch and mark its messages routed, all or nothing.
fn route(tx: &mut Transaction<'_>, batch: &NewBatch) -> Result<i64, StorageError> {
    let status = match batch.route {
        Route::Main => BatchStatus::Queued,
        Route::Spawn => BatchStatus::Spawned,
        Route::Drop => BatchStatus::Dropped,
    }
    .as_str();
    let now = now_ms();
    let finished = (batch.route == Route::Drop).then_some(now);
    let count = i32::try_from(batch.message_ids.len()).unwrap_or(i32::MAX);
    let batch_id: i64 = tx
        .query_one(
            "INSERT INTO buffer_batches (channel, conversation, priority, route, rule,
                                         message_count, status, created_at, finished_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
            &[
                &batch.channel,
                &batch.conversation,
                &i64::from(batch.priority),
                &batch.route.as_str(),
                &batch.rule,
                &count,
                &status,
                &now,
                &finished,
            ],
        )?
        .get(0);
    let marked = tx.execute(
        "UPDATE buffer_messages SET routed = TRUE, batch_id = $1
          WHERE id = ANY($2) AND NOT routed",
        &[&batch_id, &batch.message_ids],
    )?;
    if to_usize(marked) != batch.message_ids.len() {
        return Err(StorageError::Taken(format!(
            "batch refused: {} of its {} messages were already routed (or are gone)",
            batch.message_ids.len() - to_usize(marked),
            batch.message_ids.len()
        )));
    }
    if batch.route == Route::Spawn {
        tx.execute(
            "INSERT INTO buffer_tasks (batch_id, channel, status, created_at)
             VALUES ($1, $2, 'queued', $3)",
            &[&batch_id, &batch.channel, &now],
        )?;
    }
    Ok(batch_id)
}

/// Claim the next main batch that is the oldest unfinished one of a conversation no host is
/// working on (a lapsed claim counts as nobody's): the most urgent priority first, and within
/// it the channel served longest ago, so channels take turns; its id. With `channels`, only
/// batches of those.
fn claim_main(
    tx: &mut Transaction<'_>,
    holder: &str,
    lease: i64,
    channels: Option<&[String]>,
) -> Result<Option<i64>, StorageError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CLAIM_LOCK])?;
    let now = now_ms();
    let claimed = tx.query_opt(
        // The channels with queued main batches are found one index probe each (not a scan
        // of the queue). Each one's queued batches are tried most urgent first on
        // `buffer_batches_main_queue`, each checked on `buffer_batches_conversation_heads`
        // for an older unfinished batch of its conversation, so a channel's search stops at
        // its first batch that may run; a lapsed claim is the oldest of its conversation
        // already. The claimed batch's channel then takes the last turn.
        "WITH RECURSIVE queued(channel) AS (
             (SELECT channel FROM buffer_batches
               WHERE route = 'main' AND status = 'queued' ORDER BY channel LIMIT 1)
             UNION ALL
             SELECT (SELECT b.channel FROM buffer_batches b
                      WHERE b.route = 'main' AND b.status = 'queued'
                        AND b.channel > queued.channel
                      ORDER BY b.channel LIMIT 1)
               FROM queued WHERE queued.channel IS NOT NULL),
         candidates AS (
             SELECT head.id, head.priority, head.channel FROM queued
              CROSS JOIN LATERAL (
                SELECT b.id, b.priority, b.channel FROM buffer_batches b
                 WHERE b.channel = queued.channel AND b.route = 'main' AND b.status = 'queued'
                   AND ($4::text[] IS NULL OR b.channel = ANY($4))
                   AND NOT EXISTS (
                       SELECT 1 FROM buffer_batches o
                        WHERE o.channel = b.channel AND o.conversation = b.conversation
                          AND o.route = 'main' AND o.status IN ('queued', 'running')
                          AND o.id < b.id)
                   AND NOT EXISTS (
                       SELECT 1 FROM buffer_batches r
                        WHERE r.channel = b.channel AND r.conversation = b.conversation
                          AND r.route = 'main' AND r.status = 'running'
                          AND r.lease_until >= $1)
                 ORDER BY b.priority, b.id LIMIT 1) head
             UNION ALL
             (SELECT l.id, l.priority, l.channel FROM buffer_batches l
               WHERE l.route = 'main' AND l.status = 'running' AND l.lease_until < $1
                 AND ($4::text[] IS NULL OR l.channel = ANY($4))
               ORDER BY l.priority, l.id LIMIT 1)),
         claimed AS (
             UPDATE buffer_batches
                SET status = 'running', started_at = $1, claimed_by = $2, lease_until = $3,
                    attempts = attempts + 1
              WHERE id = (
                SELECT c.id FROM candidates c
                  LEFT JOIN buffer_channel_turns t ON t.queue = 'main' AND t.channel = c.channel
                 ORDER BY c.priority, COALESCE(t.last_turn, 0), c.id LIMIT 1)
              RETURNING id, channel)
         SELECT id, channel FROM claimed",
        &[&now, &holder, &(now + lease), &channels],
    )?;
    let Some(row) = claimed else {
        return Ok(None);
    };
    take_turn(tx, "main", row.get(1))?;
    Ok(Some(row.get(0)))
}

/// Claim the next queued task, or one whose claim lapsed (its host died): channels take
/// turns, the one served longest ago first, each channel's tasks oldest first; (task id,
/// batch id).
fn claim_task(
    tx: &mut Transaction<'_>,
    holder: &str,
    lease: i64,
) -> Result<Option<(i64, i64)>, StorageError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&TASK_CLAIM_LOCK])?;
    let now = now_ms();
    let claimed = tx.query_opt(
        // The channels with queued tasks are found one index probe each, then each one's
        // oldest task; a lapsed claim competes with them by its channel's turn.
        "WITH RECURSIVE queued(channel) AS (
             (SELECT channel FROM buffer_tasks
               WHERE status = 'queued' ORDER BY channel LIMIT 1)
             UNION ALL
             SELECT (SELECT k.channel FROM buffer_tasks k
                      WHERE k.status = 'queued' AND k.channel > queued.channel
                      ORDER BY k.channel LIMIT 1)
               FROM queued WHERE queued.channel IS NOT NULL),
         candidates AS (
             SELECT head.id, head.channel FROM queued
              CROSS JOIN LATERAL (
                SELECT k.id, k.channel FROM buffer_tasks k
                 WHERE k.channel = queued.channel AND k.status = 'queued'
                 ORDER BY k.id LIMIT 1) head
             UNION ALL
             (SELECT l.id, l.channel FROM buffer_tasks l
               WHERE l.status = 'running' AND l.lease_until < $1
               ORDER BY l.id LIMIT 1)),
         claimed AS (
             UPDATE buffer_tasks
                SET status = 'running', started_at = $1, claimed_by = $2, lease_until = $3
              WHERE id = (
                SELECT c.id FROM candidates c
                  LEFT JOIN buffer_channel_turns t ON t.queue = 'task' AND t.channel = c.channel
                 ORDER BY COALESCE(t.last_turn, 0), c.id LIMIT 1)
              RETURNING id, batch_id, channel)
         SELECT id, batch_id, channel FROM claimed",
        &[&now, &holder, &(now + lease)],
    )?;
    let Some(row) = claimed else {
        return Ok(None);
    };
    take_turn(tx, "task", row.get(2))?;
    Ok(Some((row.get(0), row.get(1))))
}

/// Record that `channel` was just served at `queue` (`main` or `task`): it goes behind every
/// other channel waiting there. Called under the queue's claim lock.
fn take_turn(tx: &mut Transaction<'_>, queue: &str, channel: &str) -> Result<(), StorageError> {
    tx.execute(
        "INSERT INTO buffer_channel_turns (queue, channel, last_turn)
         VALUES ($1, $2, (SELECT COALESCE(MAX(last_turn), 0) + 1 FROM buffer_channel_turns
                           WHERE queue = $1))
         ON CONFLICT (queue, channel) DO UPDATE SET last_turn = EXCLUDED.last_turn",
        &[&queue, &channel],
    )?;
    Ok(())
}

/// Delete finished work older than `before_ms`; (messages, batches) deleted.
fn prune(tx: &mut Transaction<'_>, before_ms: i64) -> Result<(usize, usize), StorageError> {
    let messages = tx.execute(
        "DELETE FROM buffer_messages m USING buffer_batches b
          WHERE m.routed AND m.received_at < $1 AND b.id = m.batch_id
            AND (b.status IN ('done', 'failed', 'dropped')
                 OR (b.status = 'spawned' AND EXISTS (
                        SELECT 1 FROM buffer_tasks t
                         WHERE t.batch_id = b.id AND t.status IN ('done', 'failed'))))",
        &[&before_ms],
    )?;
    tx.execute(
        "DELETE FROM buffer_tasks t
          WHERE t.status IN ('done', 'failed') AND t.finished_at < $1
            AND NOT EXISTS (SELECT 1 FROM buffer_messages m WHERE m.batch_id = t.batch_id)",
        &[&before_ms],
    )?;
    let batches = tx.execute(
        "DELETE FROM buffer_batches b
          WHERE b.created_at < $1 AND b.status IN ('done', 'failed', 'dropped', 'spawned')
            AND NOT EXISTS (SELECT 1 FROM buffer_messages m WHERE m.batch_id = b.id)
            AND NOT EXISTS (SELECT 1 FROM buffer_tasks t WHERE t.batch_id = b.id)",
        &[&before_ms],
    )?;
    Ok((to_usize(messages), to_usize(batches)))
}

/// A batch with its messages, in id order.
fn read_batch(client: &mut impl GenericClient, id: i64) -> Result<Option<Batch>, StorageError> {
    let Some(head) = client.query_opt(
        "SELECT channel, conversation, priority, attempts, retried, received_at, reply
           FROM buffer_batches WHERE id = $1",
        &[&id],
    )?
    else {
        return Ok(None);
    };
    let messages = client
        .query(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM buffer_messages WHERE batch_id = $1 ORDER BY id"
            ),
            &[&id],
        )?
        .iter()
        .map(read_message)
        .collect();
    Ok(Some(Batch {
        id,
        channel: head.get(0),
        conversation: head.get(1),
        priority: to_u32(head.get(2)),
        attempt: u32::try_from(head.get::<_, i32>(3)).unwrap_or(0),
        retried: u32::try_from(head.get::<_, i32>(4)).unwrap_or(0),
        received_at: head.get(5),
        kept_reply: head.get(6),
        messages,
    }))
}

/// Depth, per-channel breakdown, batch and task counts.
fn stats(client: &mut postgres::Client) -> Result<BufferStats, StorageError> {
    let channels: Vec<ChannelDepth> = client
        .query(
            "SELECT channel, count(*), min(received_at) FROM buffer_messages WHERE NOT routed
              GROUP BY channel ORDER BY channel",
            &[],
        )?
        .iter()
        .map(|row| ChannelDepth {
            channel: row.get(0),
            unrouted: row.get(1),
            oldest_received_at: row.get(2),
        })
        .collect();
    let depth = channels.iter().map(|c| c.unrouted).sum();
    let oldest = channels.iter().map(|c| c.oldest_received_at).min();
    let stored: i64 = client
        .query_one("SELECT count(*) FROM buffer_messages", &[])?
        .get(0);
    let mut counts = |sql: &str| -> Result<StatusCounts, StorageError> {
        Ok(client
            .query(sql, &[])?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect())
    };
    let batches = counts(
        "SELECT route || '/' || status, count(*) FROM buffer_batches GROUP BY route, status",
    )?;
    let tasks = counts("SELECT status, count(*) FROM buffer_tasks GROUP BY status")?;
    let queued = client
        .query(
            "SELECT channel, count(*), min(created_at) FROM buffer_batches
              WHERE route = 'main' AND status = 'queued' GROUP BY channel ORDER BY channel",
            &[],
        )?
        .iter()
        .map(|row| ChannelQueue {
            channel: row.get(0),
            batches: row.get(1),
            oldest_created_at: row.get(2),
        })
        .collect();
    let recent_tasks = client
        .query(
            "SELECT id, batch_id, status, result, error, created_at, finished_at
               FROM buffer_tasks ORDER BY id DESC LIMIT 10",
            &[],
        )?
        .iter()
        .map(|row| {
            let status: String = row.get(2);
            Ok(TaskRow {
                id: row.get(0),
                batch_id: row.get(1),
                status: TaskStatus::parse(&status).ok_or_else(|| {
                    StorageError::Postgres(format!("unknown task status `{status}`"))
                })?,
                result: row.get(3),
                error: row.get(4),
                created_at: row.get(5),
                finished_at: row.get(6),
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    let running = client
        .query(
            "SELECT id, channel, conversation, attempts, started_at, received_at
               FROM buffer_batches
              WHERE route = 'main' AND status = 'running' ORDER BY started_at, id LIMIT 10",
            &[],
        )?
        .iter()
        .map(|row| {
            Ok(RunningBatch {
                id: row.try_get(0)?,
                channel: row.try_get(1)?,
                conversation: row.try_get(2)?,
                attempts: i64::from(row.try_get::<_, i32>(3)?),
                started_at: row.try_get(4)?,
                received_at: row.try_get(5)?,
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
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
