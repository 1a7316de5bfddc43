//! The single writer of `buffer.db`: one thread, one connection, group commit.
//!
//! Every write is a request on a channel. The thread takes the first request, then every
//! request already waiting, runs them all in one transaction (each under its own savepoint,
//! so one failing request does not undo the others) and commits once: one fsync covers the
//! whole group. A requester is answered only after the commit, so an acknowledged insert is
//! on disk.

use std::sync::mpsc::{Receiver, Sender};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use tokio::sync::oneshot;

use super::{BatchStatus, BufferError, NewBatch, Route, TaskStatus, ValidMessage};
use crate::store::now_ms;

/// Most requests committed together.
const MAX_GROUP: usize = 4096;

/// A write request and where its answer goes.
pub(super) enum Request {
    Insert(ValidMessage, oneshot::Sender<Result<i64, BufferError>>),
    Route(NewBatch, oneshot::Sender<Result<i64, BufferError>>),
    ClaimMain(oneshot::Sender<Result<Option<i64>, BufferError>>),
    FinishBatch {
        id: i64,
        status: BatchStatus,
        reply: Option<String>,
        error: Option<String>,
        done: oneshot::Sender<Result<(), BufferError>>,
    },
    ClaimTask(oneshot::Sender<Result<Option<(i64, i64)>, BufferError>>),
    FinishTask {
        id: i64,
        status: TaskStatus,
        result: Option<String>,
        error: Option<String>,
        done: oneshot::Sender<Result<(), BufferError>>,
    },
    Requeue(oneshot::Sender<Result<(usize, usize), BufferError>>),
    Prune {
        before_ms: i64,
        done: oneshot::Sender<Result<(usize, usize), BufferError>>,
    },
}

/// Run the writer until every sender is dropped.
pub(super) fn run(mut conn: Connection, requests: Receiver<Request>) {
    while let Ok(first) = requests.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match requests.try_recv() {
                Ok(request) => group.push(request),
                Err(_) => break,
            }
        }
        commit_group(&mut conn, group);
    }
}

/// An answer waiting for the commit.
type Answer = Box<dyn FnOnce(Option<&BufferError>) + Send>;

fn commit_group(conn: &mut Connection, group: Vec<Request>) {
    let mut answers: Vec<Answer> = Vec::with_capacity(group.len());
    let tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => {
            let error = BufferError::Storage(e.to_string());
            for request in group {
                fail(request, error.clone());
            }
            return;
        }
    };
    let mut tx = tx;
    for request in group {
        answers.push(apply(&mut tx, request));
    }
    let commit_error = tx
        .commit()
        .err()
        .map(|e| BufferError::Storage(format!("commit failed: {e}")));
    for answer in answers {
        answer(commit_error.as_ref());
    }
}

/// Answer a request with an error without running it.
fn fail(request: Request, error: BufferError) {
    match request {
        Request::Insert(_, reply) | Request::Route(_, reply) => {
            let _ = reply.send(Err(error));
        }
        Request::ClaimMain(reply) => {
            let _ = reply.send(Err(error));
        }
        Request::FinishBatch { done, .. } | Request::FinishTask { done, .. } => {
            let _ = done.send(Err(error));
        }
        Request::ClaimTask(reply) => {
            let _ = reply.send(Err(error));
        }
        Request::Requeue(reply) | Request::Prune { done: reply, .. } => {
            let _ = reply.send(Err(error));
        }
    }
}

/// Run one request under a savepoint; return how to answer it once the commit is known.
fn apply(tx: &mut Transaction<'_>, request: Request) -> Answer {
    fn settle<T: Send + 'static>(
        reply: oneshot::Sender<Result<T, BufferError>>,
        result: Result<T, BufferError>,
    ) -> Answer {
        Box::new(move |commit_error| {
            let _ = reply.send(match commit_error {
                Some(error) => Err(error.clone()),
                None => result,
            });
        })
    }
    let mut savepoint = match tx.savepoint() {
        Ok(savepoint) => savepoint,
        Err(e) => {
            let error = BufferError::Storage(e.to_string());
            return Box::new(move |_| fail(request, error));
        }
    };
    macro_rules! run {
        ($reply:expr, $body:expr) => {{
            let result: Result<_, rusqlite::Error> = (|| $body)();
            let result = match result {
                Ok(value) => savepoint.commit().map(|()| value),
                Err(e) => {
                    let _ = savepoint.rollback();
                    Err(e)
                }
            };
            settle($reply, result.map_err(BufferError::from))
        }};
    }
    let sp = &savepoint;
    match request {
        Request::Insert(message, reply) => run!(reply, {
            sp.prepare_cached(
                "INSERT INTO messages (channel, sender, conversation, payload, received_at, priority)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                    message.channel,
                    message.sender,
                    message.conversation,
                    message.payload,
                    message.received_at,
                    message.priority
                ])?;
            Ok(sp.last_insert_rowid())
        }),
        Request::Route(batch, reply) => run!(reply, {
            let id = route(sp, &batch)?;
            Ok(id)
        }),
        Request::ClaimMain(reply) => run!(reply, {
            let id: Option<i64> = sp
                .query_row(
                    "SELECT id FROM batches WHERE route = 'main' AND status = 'queued' ORDER BY priority, id LIMIT 1",
                    [],
                    |row| row.get(0),
                )
                .optional()?;
            if let Some(id) = id {
                sp.execute(
                    "UPDATE batches SET status = 'running', started_at = ?2 WHERE id = ?1",
                    params![id, now_ms()],
                )?;
            }
            Ok(id)
        }),
        Request::FinishBatch {
            id,
            status,
            reply: text,
            error,
            done,
        } => run!(done, {
            sp.execute(
                "UPDATE batches SET status = ?2, reply = ?3, error = ?4, finished_at = ?5 WHERE id = ?1",
                params![id, status.as_str(), text, error, now_ms()],
            )?;
            Ok(())
        }),
        Request::ClaimTask(reply) => run!(reply, {
            let claimed: Option<(i64, i64)> = sp
                .query_row(
                    "SELECT id, batch_id FROM tasks WHERE status = 'queued' ORDER BY id LIMIT 1",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?;
            if let Some((id, _)) = claimed {
                sp.execute(
                    "UPDATE tasks SET status = 'running', started_at = ?2 WHERE id = ?1",
                    params![id, now_ms()],
                )?;
            }
            Ok(claimed)
        }),
        Request::FinishTask {
            id,
            status,
            result,
            error,
            done,
        } => run!(done, {
            sp.execute(
                "UPDATE tasks SET status = ?2, result = ?3, error = ?4, finished_at = ?5 WHERE id = ?1",
                params![id, status.as_str(), result, error, now_ms()],
            )?;
            Ok(())
        }),
        Request::Requeue(reply) => run!(reply, {
            let batches = sp.execute(
                "UPDATE batches SET status = 'queued', started_at = NULL WHERE route = 'main' AND status = 'running'",
                [],
            )?;
            let tasks = sp.execute(
                "UPDATE tasks SET status = 'queued', started_at = NULL WHERE status = 'running'",
                [],
            )?;
            Ok((batches, tasks))
        }),
        Request::Prune { before_ms, done } => run!(done, {
            // Only messages whose batch is finished go: a queued main batch or an unfinished
            // task still needs its messages, however old.
            let finished_batches = "SELECT id FROM batches WHERE status IN ('done', 'failed', 'dropped')
                 OR (status = 'spawned' AND id IN (SELECT batch_id FROM tasks WHERE status IN ('done', 'failed')))";
            let messages = sp.execute(
                &format!("DELETE FROM messages WHERE routed = 1 AND received_at < ?1 AND batch_id IN ({finished_batches})"),
                params![before_ms],
            )?;
            sp.execute(
                "DELETE FROM tasks WHERE status IN ('done', 'failed') AND finished_at < ?1
                   AND batch_id NOT IN (SELECT batch_id FROM messages WHERE batch_id IS NOT NULL)",
                params![before_ms],
            )?;
            let batches = sp.execute(
                "DELETE FROM batches WHERE created_at < ?1 AND status IN ('done', 'failed', 'dropped', 'spawned')
                   AND id NOT IN (SELECT batch_id FROM messages WHERE batch_id IS NOT NULL)
                   AND id NOT IN (SELECT batch_id FROM tasks)",
                params![before_ms],
            )?;
            Ok((messages, batches))
        }),
    }
}

/// Record a batch and mark its messages routed, all or nothing.
fn route(sp: &rusqlite::Savepoint<'_>, batch: &NewBatch) -> Result<i64, rusqlite::Error> {
    let status = match batch.route {
        Route::Main => BatchStatus::Queued,
        Route::Spawn => BatchStatus::Spawned,
        Route::Drop => BatchStatus::Dropped,
    }
    .as_str();
    let now = now_ms();
    sp.execute(
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
    let batch_id = sp.last_insert_rowid();
    let mut mark = sp.prepare_cached(
        "UPDATE messages SET routed = 1, batch_id = ?1 WHERE id = ?2 AND routed = 0",
    )?;
    for id in &batch.message_ids {
        if mark.execute(params![batch_id, id])? != 1 {
            // Already routed (or gone): refuse the whole batch rather than double-route.
            return Err(rusqlite::Error::StatementChangedRows(0));
        }
    }
    if batch.route == Route::Spawn {
        sp.execute(
            "INSERT INTO tasks (batch_id, status, created_at) VALUES (?1, 'queued', ?2)",
            params![batch_id, now],
        )?;
    }
    Ok(batch_id)
}

/// Hand a request to the writer thread.
pub(super) fn send(writer: &Sender<Request>, request: Request) -> Result<(), BufferError> {
    writer.send(request).map_err(|_| BufferError::Unavailable)
}
