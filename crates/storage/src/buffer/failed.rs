//! Failed work in `buffer.db`: listing the main batches and tasks that ended `failed`, and
//! queueing them again (`cairn buffer failed|retry`).

use cairn_vocab::buffer::{FailedKind, FailedWork, NotFailed, RetryOutcome, RetrySelection};
use rusqlite::{Connection, OptionalExtension, params};

/// Failed main batches and tasks, the latest failure first, at most `limit`.
pub(super) fn list(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<FailedWork>> {
    conn.prepare_cached(
        "SELECT 'batch', id, id, channel, conversation, message_count, error,
                reply IS NOT NULL, retried, finished_at
           FROM batches WHERE route = 'main' AND status = 'failed'
         UNION ALL
         SELECT 'task', t.id, t.batch_id, b.channel, b.conversation, b.message_count, t.error,
                0, b.retried, t.finished_at
           FROM tasks t JOIN batches b ON b.id = t.batch_id WHERE t.status = 'failed'
         ORDER BY 10 DESC, 2 DESC LIMIT ?1",
    )?
    .query_map(params![limit as i64], |row| {
        let kind: String = row.get(0)?;
        Ok(FailedWork {
            kind: if kind == "task" {
                FailedKind::Task
            } else {
                FailedKind::Batch
            },
            id: row.get(1)?,
            batch_id: row.get(2)?,
            channel: row.get(3)?,
            conversation: row.get(4)?,
            messages: row.get(5)?,
            error: row.get(6)?,
            reply_kept: row.get(7)?,
            retried: row.get(8)?,
            finished_at: row.get(9)?,
        })
    })?
    .collect()
}

/// Queue the selected failed work again, or change nothing when a named id is not failed.
pub(super) fn retry(conn: &Connection, which: &RetrySelection) -> rusqlite::Result<RetryOutcome> {
    let (batches, tasks) = match which {
        RetrySelection::All => (
            ids(
                conn,
                "SELECT id FROM batches WHERE route = 'main' AND status = 'failed' ORDER BY id",
            )?,
            ids(
                conn,
                "SELECT id FROM tasks WHERE status = 'failed' ORDER BY id",
            )?,
        ),
        RetrySelection::Named { batches, tasks } => {
            let unfailed_batches = not_failed(conn, batches, BATCH_STATE)?;
            let unfailed_tasks = not_failed(conn, tasks, "SELECT status FROM tasks WHERE id = ?1")?;
            if !unfailed_batches.is_empty() || !unfailed_tasks.is_empty() {
                return Ok(RetryOutcome::NotFailed {
                    batches: unfailed_batches,
                    tasks: unfailed_tasks,
                });
            }
            (batches.clone(), tasks.clone())
        }
    };
    let mut batch = conn.prepare_cached(
        "UPDATE batches SET status = 'queued', error = NULL, started_at = NULL,
                finished_at = NULL, retried = retried + 1
          WHERE id = ?1",
    )?;
    for id in &batches {
        batch.execute(params![id])?;
    }
    let mut task = conn.prepare_cached(
        "UPDATE tasks SET status = 'queued', result = NULL, error = NULL, started_at = NULL,
                finished_at = NULL
          WHERE id = ?1",
    )?;
    let mut task_batch = conn.prepare_cached(
        "UPDATE batches SET retried = retried + 1
          WHERE id = (SELECT batch_id FROM tasks WHERE id = ?1)",
    )?;
    for id in &tasks {
        task.execute(params![id])?;
        task_batch.execute(params![id])?;
    }
    Ok(RetryOutcome::Queued { batches, tasks })
}

/// The ids a query lists.
fn ids(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<i64>> {
    conn.prepare_cached(sql)?
        .query_map([], |row| row.get(0))?
        .collect()
}

/// A batch's state as a retry sees it: a main batch's status, else what its route did.
const BATCH_STATE: &str = "SELECT CASE route WHEN 'main' THEN status
                                WHEN 'spawn' THEN (SELECT 'spawned as task ' || t.id
                                                          || CASE t.status
                                                             WHEN 'failed' THEN ': retry it with --task ' || t.id
                                                             ELSE ', ' || t.status END
                                                     FROM tasks t WHERE t.batch_id = b.id)
                                ELSE 'dropped by a routing rule' END
                             FROM batches b WHERE id = ?1";

/// Those of `named` whose state (`state_of` takes the id) is not `failed`, with it.
fn not_failed(
    conn: &Connection,
    named: &[i64],
    state_of: &str,
) -> rusqlite::Result<Vec<NotFailed>> {
    let mut statement = conn.prepare_cached(state_of)?;
    let mut unfailed = Vec::new();
    for id in named {
        let state: Option<String> = statement
            .query_row(params![id], |row| row.get(0))
            .optional()?;
        if state.as_deref() != Some("failed") {
            unfailed.push(NotFailed::new(*id, state));
        }
    }
    Ok(unfailed)
}
