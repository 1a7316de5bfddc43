//! Failed work on PostgreSQL: listing the main batches and tasks that ended `failed`, and
//! queueing them again (`cairn buffer failed|retry`), for every host on the database.

use cairn_vocab::buffer::{FailedKind, FailedWork, NotFailed, RetryOutcome, RetrySelection};
use postgres::{Client, Transaction};

use crate::StorageError;

/// Failed main batches and tasks, the latest failure first, at most `limit`.
pub(super) fn list(client: &mut Client, limit: usize) -> Result<Vec<FailedWork>, StorageError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = client.query(
        "SELECT 'batch', id, id, channel, conversation, message_count, error,
                reply IS NOT NULL, retried, finished_at
           FROM buffer_batches WHERE route = 'main' AND status = 'failed'
         UNION ALL
         SELECT 'task', t.id, t.batch_id, b.channel, b.conversation, b.message_count, t.error,
                FALSE, b.retried, t.finished_at
           FROM buffer_tasks t JOIN buffer_batches b ON b.id = t.batch_id
          WHERE t.status = 'failed'
         ORDER BY 10 DESC NULLS LAST, 2 DESC LIMIT $1",
        &[&limit],
    )?;
    Ok(rows
        .iter()
        .map(|row| FailedWork {
            kind: if row.get::<_, &str>(0) == "task" {
                FailedKind::Task
            } else {
                FailedKind::Batch
            },
            id: row.get(1),
            batch_id: row.get(2),
            channel: row.get(3),
            conversation: row.get(4),
            messages: i64::from(row.get::<_, i32>(5)),
            error: row.get(6),
            reply_kept: row.get(7),
            retried: u32::try_from(row.get::<_, i32>(8)).unwrap_or(0),
            finished_at: row.get(9),
        })
        .collect())
}

/// Queue the selected failed work again (its claim cleared), or change nothing when a
/// named id is not failed. The rows are locked while they are checked, so a retry made
/// beside another changes each piece of work once.
pub(super) fn retry(
    tx: &mut Transaction<'_>,
    which: &RetrySelection,
) -> Result<RetryOutcome, StorageError> {
    let failed_batches = ids(
        tx,
        "SELECT id FROM buffer_batches WHERE route = 'main' AND status = 'failed'
          ORDER BY id FOR UPDATE",
    )?;
    let failed_tasks = ids(
        tx,
        "SELECT id FROM buffer_tasks WHERE status = 'failed' ORDER BY id FOR UPDATE",
    )?;
    let (batches, tasks) = match which {
        RetrySelection::All => (failed_batches, failed_tasks),
        RetrySelection::Named { batches, tasks } => {
            let unfailed_batches = not_failed(tx, batches, &failed_batches, BATCH_STATE)?;
            let unfailed_tasks = not_failed(
                tx,
                tasks,
                &failed_tasks,
                "SELECT status FROM buffer_tasks WHERE id = $1",
            )?;
            if !unfailed_batches.is_empty() || !unfailed_tasks.is_empty() {
                return Ok(RetryOutcome::NotFailed {
                    batches: unfailed_batches,
                    tasks: unfailed_tasks,
                });
            }
            (batches.clone(), tasks.clone())
        }
    };
    tx.execute(
        "UPDATE buffer_batches
            SET status = 'queued', error = NULL, started_at = NULL, finished_at = NULL,
                claimed_by = NULL, lease_until = NULL, retried = retried + 1
          WHERE id = ANY($1)",
        &[&batches],
    )?;
    tx.execute(
        "UPDATE buffer_tasks
            SET status = 'queued', result = NULL, error = NULL, started_at = NULL,
                finished_at = NULL, claimed_by = NULL, lease_until = NULL
          WHERE id = ANY($1)",
        &[&tasks],
    )?;
    tx.execute(
        "UPDATE buffer_batches SET retried = retried + 1
          WHERE id IN (SELECT batch_id FROM buffer_tasks WHERE id = ANY($1))",
        &[&tasks],
    )?;
    Ok(RetryOutcome::Queued { batches, tasks })
}

/// A batch's state as a retry sees it: a main batch's status, else what its route did.
const BATCH_STATE: &str = "SELECT CASE route WHEN 'main' THEN status
                                WHEN 'spawn' THEN (SELECT 'spawned as task ' || t.id
                                                          || CASE t.status
                                                             WHEN 'failed' THEN ': retry it with --task ' || t.id
                                                             ELSE ', ' || t.status END
                                                     FROM buffer_tasks t WHERE t.batch_id = b.id)
                                ELSE 'dropped by a routing rule' END
                             FROM buffer_batches b WHERE id = $1";

/// Those of `named` not among `failed`, each with its state (`state_of` takes the id).
fn not_failed(
    tx: &mut Transaction<'_>,
    named: &[i64],
    failed: &[i64],
    state_of: &str,
) -> Result<Vec<NotFailed>, StorageError> {
    let mut unfailed = Vec::new();
    for id in named.iter().filter(|id| !failed.contains(id)) {
        let state = tx.query_opt(state_of, &[id])?.map(|row| row.get(0));
        unfailed.push(NotFailed::new(*id, state));
    }
    Ok(unfailed)
}

/// The ids a query lists.
fn ids(tx: &mut Transaction<'_>, sql: &str) -> Result<Vec<i64>, StorageError> {
    Ok(tx.query(sql, &[])?.iter().map(|row| row.get(0)).collect())
}
