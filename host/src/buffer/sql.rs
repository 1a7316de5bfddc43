//! The SQL of `buffer.db` writes. Each function runs inside the group-commit transaction
//! of the buffer's writer (see [`crate::store::writer`]).

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::{BatchStatus, NewBatch, Route, TaskStatus, ValidMessage};
use crate::store::now_ms;

/// Store a validated message; returns its id. A message whose dedup key this channel has
/// already stored is not stored again: the first message's id is returned.
pub(super) fn insert(conn: &Connection, message: &ValidMessage) -> rusqlite::Result<i64> {
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
                               priority_is_default, dedup_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        message.channel,
        message.sender,
        message.conversation,
        message.payload,
        message.received_at,
        message.priority,
        message.priority_is_default,
        message.dedup_key
    ])?;
    Ok(conn.last_insert_rowid())
}

/// Replace the remembered channel priorities and give unrouted messages that carry their
/// channel's default priority the new one; returns how many messages changed.
pub(super) fn set_channel_priorities(
    conn: &Connection,
    priorities: &BTreeMap<String, u32>,
    default_priority: u32,
) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM channel_priorities", [])?;
    let mut insert =
        conn.prepare_cached("INSERT INTO channel_priorities (channel, priority) VALUES (?1, ?2)")?;
    for (channel, priority) in priorities {
        insert.execute(params![channel, priority])?;
    }
    conn.execute(
        "UPDATE messages
            SET priority = coalesce((SELECT c.priority FROM channel_priorities c WHERE c.channel = messages.channel), ?1)
          WHERE routed = 0 AND priority_is_default = 1
            AND priority IS NOT coalesce((SELECT c.priority FROM channel_priorities c WHERE c.channel = messages.channel), ?1)",
        params![default_priority],
    )
}

/// The remembered channel priorities.
pub(super) fn channel_priorities(conn: &Connection) -> rusqlite::Result<BTreeMap<String, u32>> {
    conn.prepare("SELECT channel, priority FROM channel_priorities")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect()
}

/// Record a batch and mark its messages routed, all or nothing.
pub(super) fn route(conn: &Connection, batch: &NewBatch) -> rusqlite::Result<i64> {
    let status = match batch.route {
        Route::Main => BatchStatus::Queued,
        Route::Spawn => BatchStatus::Spawned,
        Route::Drop => BatchStatus::Dropped,
    }
    .as_str();
    let now = now_ms();
    conn.execute(
        "INSERT INTO batches (channel, conversation, priority, route, rule, message_count, status, created_at, finished_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, CASE WHEN ?7 = 'dropped' THEN ?8 END)",
        params![
            batch.channel,
            batch.conversation,
            batch.priority,
            batch.route.as_str(),
            batch.rule,
            batch.message_ids.len() as i64,
            status,
            now
        ],
    )?;
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
        conn.execute(
            "INSERT INTO tasks (batch_id, status, created_at) VALUES (?1, 'queued', ?2)",
            params![batch_id, now],
        )?;
    }
    Ok(batch_id)
}

/// Mark the most urgent queued main batch running; returns its id.
pub(super) fn claim_main(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    let id: Option<i64> = conn
        .query_row(
            "SELECT id FROM batches WHERE route = 'main' AND status = 'queued' ORDER BY priority, id LIMIT 1",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(id) = id {
        conn.execute(
            "UPDATE batches SET status = 'running', started_at = ?2 WHERE id = ?1",
            params![id, now_ms()],
        )?;
    }
    Ok(id)
}

/// Record how a main batch ended.
pub(super) fn finish_batch(
    conn: &Connection,
    id: i64,
    status: BatchStatus,
    reply: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE batches SET status = ?2, reply = ?3, error = ?4, finished_at = ?5 WHERE id = ?1",
        params![id, status.as_str(), reply, error, now_ms()],
    )?;
    Ok(())
}

/// Mark the oldest queued task running; returns (task id, batch id).
pub(super) fn claim_task(conn: &Connection) -> rusqlite::Result<Option<(i64, i64)>> {
    let claimed: Option<(i64, i64)> = conn
        .query_row(
            "SELECT id, batch_id FROM tasks WHERE status = 'queued' ORDER BY id LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    if let Some((id, _)) = claimed {
        conn.execute(
            "UPDATE tasks SET status = 'running', started_at = ?2 WHERE id = ?1",
            params![id, now_ms()],
        )?;
    }
    Ok(claimed)
}

/// Record how a task ended.
pub(super) fn finish_task(
    conn: &Connection,
    id: i64,
    status: TaskStatus,
    result: Option<&str>,
    error: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE tasks SET status = ?2, result = ?3, error = ?4, finished_at = ?5 WHERE id = ?1",
        params![id, status.as_str(), result, error, now_ms()],
    )?;
    Ok(())
}

/// Put running batches and tasks back in the queue; returns how many of each.
pub(super) fn requeue(conn: &Connection) -> rusqlite::Result<(usize, usize)> {
    let batches = conn.execute(
        "UPDATE batches SET status = 'queued', started_at = NULL WHERE route = 'main' AND status = 'running'",
        [],
    )?;
    let tasks = conn.execute(
        "UPDATE tasks SET status = 'queued', started_at = NULL WHERE status = 'running'",
        [],
    )?;
    Ok((batches, tasks))
}

/// Delete finished work older than `before_ms`; returns (messages, batches) deleted.
pub(super) fn prune(conn: &Connection, before_ms: i64) -> rusqlite::Result<(usize, usize)> {
    // Only messages whose batch is finished go: a queued main batch or an unfinished task
    // still needs its messages, however old.
    let finished_batches = "SELECT id FROM batches WHERE status IN ('done', 'failed', 'dropped')
         OR (status = 'spawned' AND id IN (SELECT batch_id FROM tasks WHERE status IN ('done', 'failed')))";
    let messages = conn.execute(
        &format!("DELETE FROM messages WHERE routed = 1 AND received_at < ?1 AND batch_id IN ({finished_batches})"),
        params![before_ms],
    )?;
    conn.execute(
        "DELETE FROM tasks WHERE status IN ('done', 'failed') AND finished_at < ?1
           AND batch_id NOT IN (SELECT batch_id FROM messages WHERE batch_id IS NOT NULL)",
        params![before_ms],
    )?;
    let batches = conn.execute(
        "DELETE FROM batches WHERE created_at < ?1 AND status IN ('done', 'failed', 'dropped', 'spawned')
           AND id NOT IN (SELECT batch_id FROM messages WHERE batch_id IS NOT NULL)
           AND id NOT IN (SELECT batch_id FROM tasks)",
        params![before_ms],
    )?;
    Ok((messages, batches))
}
