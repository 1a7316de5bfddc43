//! Group commit: the single writer of a database.
//!
//! Every write is a closure sent to one thread that owns the write connection. The thread
//! takes the first waiting closure and every closure queued behind it, runs them all in one
//! transaction (each under its own savepoint, so one failing write does not undo the others)
//! and commits once: one fsync covers the whole group. A caller is answered only after the
//! commit, so an acknowledged write is on disk.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll};

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::StorageError;
use crate::checkpointer::Checkpointer;

/// Most writes committed together.
const MAX_GROUP: usize = 4096;

/// Runs a write inside the group's transaction (or learns it cannot run), and returns
/// whether it succeeded and how to answer its caller once the commit's outcome is known.
type Work = Box<dyn FnOnce(Result<&Connection, StorageError>) -> (bool, Answer) + Send>;
type Answer = Box<dyn FnOnce(Option<&StorageError>) + Send>;

/// The handle to a database's writer thread; cheap to clone.
#[derive(Clone)]
pub struct GroupWriter {
    work: mpsc::Sender<Work>,
}

impl GroupWriter {
    /// Start the writer thread `name` on `conn`; `checkpoints`, when given, is told of
    /// every commit and checkpoints the WAL beside the writer.
    pub(crate) fn spawn(
        name: &str,
        mut conn: Connection,
        checkpoints: Option<Checkpointer>,
    ) -> std::io::Result<Self> {
        let (work, queue) = mpsc::channel::<Work>();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok(first) = queue.recv() {
                    let mut group = vec![first];
                    while group.len() < MAX_GROUP {
                        match queue.try_recv() {
                            Ok(next) => group.push(next),
                            Err(_) => break,
                        }
                    }
                    commit_group(&mut conn, group);
                    if let Some(checkpoints) = &checkpoints {
                        checkpoints.committed();
                    }
                }
            })?;
        Ok(Self { work })
    }

    /// Queue `write`; `reply` gets its result once the group holding it committed.
    fn enqueue<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        reply: impl FnOnce(Result<T, StorageError>) + Send + 'static,
    ) -> Result<(), StorageError> {
        let work: Work = Box::new(move |conn| {
            let result =
                conn.and_then(|conn| write(conn).map_err(|e| StorageError::Sqlite(e.to_string())));
            let succeeded = result.is_ok();
            let answer: Answer = Box::new(move |commit_error| {
                reply(match commit_error {
                    Some(error) if succeeded => Err(error.clone()),
                    _ => result,
                });
            });
            (succeeded, answer)
        });
        self.work.send(work).map_err(|_| StorageError::Stopped)
    }

    /// Queue `write`; the receipt resolves once the group holding it committed.
    pub fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Receipt<T> {
        let (reply, receiver) = oneshot::channel();
        match self.enqueue(write, move |result| {
            let _ = reply.send(result);
        }) {
            Ok(()) => Receipt(Some(Ok(receiver))),
            Err(refused) => Receipt(Some(Err(refused))),
        }
    }

    /// [`GroupWriter::submit`] and wait, for async callers.
    pub async fn write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StorageError> {
        self.submit(write).await
    }

    /// [`GroupWriter::submit`] and wait, blocking the calling thread (any thread, an async
    /// runtime's included).
    pub fn write_blocking<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StorageError> {
        self.submit(write).wait()
    }
}

/// A write queued on a store's writer. It resolves once the group holding the write has
/// committed (or failed): `.await` it from async code, or [`Receipt::wait`] for it from a
/// thread — an async runtime's thread included, since waiting never needs the runtime.
#[must_use = "a write is acknowledged only once its receipt resolves"]
pub struct Receipt<T>(Option<Result<oneshot::Receiver<Result<T, StorageError>>, StorageError>>);

impl<T> Receipt<T> {
    /// A receipt already resolved to `outcome`, for stores that answer at once (one kept
    /// in memory, say).
    pub fn ready(outcome: Result<T, StorageError>) -> Self {
        let (reply, receiver) = oneshot::channel();
        let _ = reply.send(outcome);
        Receipt(Some(Ok(receiver)))
    }

    /// Block the calling thread until the write committed or failed.
    pub fn wait(self) -> Result<T, StorageError> {
        pollster::block_on(self)
    }
}

impl<T> Future for Receipt<T> {
    type Output = Result<T, StorageError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.get_mut().0;
        match state {
            Some(Ok(receiver)) => Pin::new(receiver)
                .poll(cx)
                .map(|answer| answer.unwrap_or(Err(StorageError::Stopped))),
            Some(Err(_)) | None => match state.take() {
                Some(Err(refused)) => Poll::Ready(Err(refused)),
                _ => Poll::Ready(Err(StorageError::Stopped)),
            },
        }
    }
}

fn commit_group(conn: &mut Connection, group: Vec<Work>) {
    let mut tx = match conn.transaction() {
        Ok(tx) => tx,
        Err(e) => {
            let error = StorageError::Sqlite(format!("cannot begin a transaction: {e}"));
            for work in group {
                let (_, answer) = work(Err(error.clone()));
                answer(None);
            }
            return;
        }
    };
    let mut answers = Vec::with_capacity(group.len());
    for work in group {
        answers.push(run_isolated(&mut tx, work));
    }
    let commit_error = tx
        .commit()
        .err()
        .map(|e| StorageError::Sqlite(format!("commit failed: {e}")));
    for answer in answers {
        answer(commit_error.as_ref());
    }
}

/// Run one write under a savepoint, so a failed write is rolled back alone.
fn run_isolated(tx: &mut rusqlite::Transaction<'_>, work: Work) -> Answer {
    let mut savepoint = match tx.savepoint() {
        Ok(savepoint) => savepoint,
        Err(e) => {
            let (_, answer) = work(Err(StorageError::Sqlite(format!(
                "cannot open a savepoint: {e}"
            ))));
            return answer;
        }
    };
    let (succeeded, answer) = work(Ok(&savepoint));
    let finished = if succeeded {
        savepoint.commit()
    } else {
        savepoint.rollback()
    };
    if let Err(e) = finished {
        tracing::error!("cannot finish a savepoint: {e}");
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_write_is_rolled_back_alone() {
        let conn = Connection::open_in_memory().expect("db");
        conn.execute_batch("CREATE TABLE t (x INTEGER NOT NULL)")
            .expect("schema");
        let writer = GroupWriter::spawn("test-writer", conn, None).expect("spawn");
        let ok = writer.submit(|c| c.execute("INSERT INTO t VALUES (1)", []));
        let bad = writer.submit(|c| {
            c.execute("INSERT INTO t VALUES (2)", [])?;
            c.execute("INSERT INTO t VALUES (NULL)", [])
        });
        assert_eq!(ok.wait().expect("first write"), 1);
        assert!(bad.wait().is_err());
        let rows = writer
            .write_blocking(|c| {
                c.query_row("SELECT group_concat(x) FROM t", [], |r| {
                    r.get::<_, String>(0)
                })
            })
            .expect("read");
        assert_eq!(
            rows, "1",
            "the failed write's first insert was rolled back with it"
        );
    }

    #[test]
    fn a_blocking_write_works_inside_an_async_runtime() {
        let conn = Connection::open_in_memory().expect("db");
        let writer = GroupWriter::spawn("test-writer", conn, None).expect("spawn");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let answer = runtime
            .block_on(async { writer.write_blocking(|c| c.execute_batch("CREATE TABLE t (x)")) });
        assert!(answer.is_ok(), "{answer:?}");
    }
}
