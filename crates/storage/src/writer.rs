//! Group commit: the single writer of a database.
//!
//! Every write is a closure put in one queue. Whoever commits next takes the first waiting
//! closure and every closure queued behind it, runs them all in one transaction (each under
//! its own savepoint, so one failing write does not undo the others) and commits once: one
//! fsync covers the whole group. A caller is answered only after the commit, so an
//! acknowledged write is on disk.
//!
//! Two kinds of committer share the one connection. The writer thread, woken by every
//! write, commits for async callers and for groups. A caller that blocks for its write
//! anyway ([`Receipt::wait`]: a plugin's thread, `cairn send`) and finds it waiting alone
//! with the connection free commits it itself, instead of sleeping until the writer thread
//! has woken, committed and woken it back: two thread hand-overs fewer per write.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::StorageError;
use crate::checkpointer::Checkpointer;
use crate::open_files::OpenFile;

/// Most writes committed together.
const MAX_GROUP: usize = 4096;

/// Runs a write inside the group's transaction (or learns it cannot run), and returns
/// whether it succeeded and how to answer its caller once the commit's outcome is known.
type Work = Box<dyn FnOnce(Result<&Connection, StorageError>) -> (bool, Answer) + Send>;
type Answer = Box<dyn FnOnce(Option<&StorageError>) + Send>;

/// Writes waiting for a commit, and whether anyone will commit them.
#[derive(Default)]
struct Queue {
    work: VecDeque<Work>,
    /// Every handle was dropped: the writer thread commits what is left and ends.
    closed: bool,
    /// The writer thread ended: nothing new is taken.
    stopped: bool,
}

/// What the writer thread and blocking callers share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when work arrives that no caller is committing, and when the last handle
    /// is dropped.
    arrived: Condvar,
    conn: Mutex<Connection>,
    /// Checkpoints the WAL beside the writer; asked after each commit whether to finish a copy.
    checkpoints: Option<Checkpointer>,
    /// Counts the file open until both connections above are closed, whichever owner (a
    /// handle, the writer thread, a blocking waiter's receipt) lets go last.
    _open: OpenFile,
}

impl Shared {
    /// What a writer on `conn` shares, with nothing queued.
    fn new(conn: Connection, checkpoints: Option<Checkpointer>) -> Arc<Self> {
        let open = OpenFile::hold(conn.path().map(std::path::Path::new));
        Arc::new(Self {
            queue: Mutex::new(Queue::default()),
            arrived: Condvar::new(),
            conn: Mutex::new(conn),
            checkpoints,
            _open: open,
        })
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commit what waits, holding `conn`; tells the writer thread when more is left than
    /// one group takes.
    fn commit_waiting(&self, conn: &mut Connection) {
        let (group, more) = {
            let mut queue = self.queue();
            let take = queue.work.len().min(MAX_GROUP);
            let group: Vec<Work> = queue.work.drain(..take).collect();
            (group, !queue.work.is_empty())
        };
        if group.is_empty() {
            return;
        }
        commit_group(conn, group);
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.finish_if_asked(conn);
        }
        if more {
            self.arrived.notify_one();
        }
    }

    /// Commit what waits if it is one write alone and the connection is free. Several
    /// waiting writes are left to the writer thread, which commits them as one group while
    /// more gather behind it (a waiter committing its own write at once would split them).
    fn try_commit_alone(&self) {
        if self.queue().work.len() > 1 {
            return;
        }
        let mut conn = match self.conn.try_lock() {
            Ok(conn) => conn,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        self.commit_waiting(&mut conn);
    }

    /// The writer thread: commit whatever arrives until every handle is gone.
    fn serve(&self) {
        loop {
            {
                let mut queue = self.queue();
                while queue.work.is_empty() && !queue.closed {
                    queue = self
                        .arrived
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if queue.work.is_empty() {
                    return;
                }
            }
            let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
            self.commit_waiting(&mut conn);
        }
    }
}

/// Marks the writer stopped when its thread ends, however it ends; what still waits is
/// answered `Stopped` (its reply is dropped).
struct StopOnExit(Arc<Shared>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        // Taken out under the lock, dropped after it is let go: each dropped reply wakes
        // its caller with `Stopped`.
        let abandoned = {
            let mut queue = self.0.queue();
            queue.stopped = true;
            std::mem::take(&mut queue.work)
        };
        drop(abandoned);
    }
}

/// The handles' shared part: the last one dropped lets the writer thread end, and waits
/// for it.
struct Handle {
    shared: Arc<Shared>,
    /// The writer thread; none for a writer served by blocking waiters alone.
    thread: Option<JoinHandle<()>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.queue().closed = true;
        self.shared.arrived.notify_all();
        join_unless_current(self.thread.take());
    }
}

/// Wait for a store's thread to end, unless it is the thread asking. A store's threads
/// close their connections as they end, and the last connection to close folds the WAL into
/// the database and deletes its `-wal` and `-shm`: a process that exits while one is still
/// open leaves them behind (seen after clean stops of `cairn run`).
pub(crate) fn join_unless_current(thread: Option<JoinHandle<()>>) {
    if let Some(thread) = thread
        && thread.thread().id() != std::thread::current().id()
    {
        // A thread that panicked has ended all the same.
        let _ = thread.join();
    }
}

/// The handle to a database's writer; cheap to clone.
#[derive(Clone)]
pub struct GroupWriter {
    handle: Arc<Handle>,
}

impl GroupWriter {
    /// Start the writer thread `name` on `conn`; `checkpoints`, when given, is told of
    /// every commit and checkpoints the WAL beside the writer.
    pub(crate) fn spawn(
        name: &str,
        conn: Connection,
        checkpoints: Option<Checkpointer>,
    ) -> std::io::Result<Self> {
        let shared = Shared::new(conn, checkpoints);
        let serving = StopOnExit(shared.clone());
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || serving.0.serve())?;
        Ok(Self::on(shared, Some(thread)))
    }

    /// A writer on `conn` with no thread: writes wait for a blocking waiter.
    #[cfg(test)]
    fn unserved(conn: Connection, checkpoints: Option<Checkpointer>) -> Self {
        Self::on(Shared::new(conn, checkpoints), None)
    }

    fn on(shared: Arc<Shared>, thread: Option<JoinHandle<()>>) -> Self {
        Self {
            handle: Arc::new(Handle { shared, thread }),
        }
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    /// Queue `write` and wake the writer thread; `reply` gets its result once the group
    /// holding it committed.
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
        {
            let mut queue = self.shared().queue();
            if queue.stopped {
                return Err(StorageError::Stopped);
            }
            queue.work.push_back(work);
        }
        self.shared().arrived.notify_one();
        Ok(())
    }

    /// Queue `write`; the receipt resolves once the group holding it committed.
    pub fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Receipt<T> {
        let (reply, receiver) = oneshot::channel();
        let reply = move |result| {
            let _ = reply.send(result);
        };
        match self.enqueue(write, reply) {
            Ok(()) => Receipt {
                outcome: Some(Ok(receiver)),
                writer: Some(self.handle.shared.clone()),
            },
            Err(refused) => Receipt {
                outcome: Some(Err(refused)),
                writer: None,
            },
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
    /// runtime's included; see [`Receipt::wait`]).
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
pub struct Receipt<T> {
    outcome: Option<Result<oneshot::Receiver<Result<T, StorageError>>, StorageError>>,
    /// The writer a blocking waiter may commit on (none for a receipt resolved from the
    /// start or refused, and once a waiter has tried).
    writer: Option<Arc<Shared>>,
}

impl<T> Receipt<T> {
    /// A receipt already resolved to `outcome`, for stores that answer at once (one kept
    /// in memory, say).
    pub fn ready(outcome: Result<T, StorageError>) -> Self {
        let (reply, receiver) = oneshot::channel();
        let _ = reply.send(outcome);
        Receipt {
            outcome: Some(Ok(receiver)),
            writer: None,
        }
    }

    /// A receipt that resolves when `receiver` is answered, for stores whose writes run on
    /// threads of their own (PostgreSQL's connection workers).
    pub(crate) fn answered_by(receiver: oneshot::Receiver<Result<T, StorageError>>) -> Self {
        Receipt {
            outcome: Some(Ok(receiver)),
            writer: None,
        }
    }

    /// Block the calling thread until the write committed or failed. When this write waits
    /// alone and no commit holds the connection, the calling thread commits it itself
    /// rather than wait for the writer thread to wake.
    pub fn wait(mut self) -> Result<T, StorageError> {
        if let Some(writer) = self.writer.take() {
            writer.try_commit_alone();
        }
        // Unconstrained: called on a runtime's task, tokio's co-operative budget would run
        // out after 128 waits and make the receiver answer "not yet" for ever, so this
        // loop would spin instead of returning.
        pollster::block_on(tokio::task::unconstrained(self))
    }
}

impl<T> Future for Receipt<T> {
    type Output = Result<T, StorageError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &mut self.get_mut().outcome;
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
    // Immediate: the write lock is taken at BEGIN, where a lock held elsewhere (the
    // checkpointer truncating the WAL) is waited for. A deferred transaction that reads
    // first would be refused at once with "database is locked" when it then writes.
    let mut tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let error = StorageError::failed("cannot begin a transaction", &e);
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
        .map(|e| StorageError::failed("commit failed", &e));
    for answer in answers {
        answer(commit_error.as_ref());
    }
}

/// Run one write under a savepoint, so a failed write is rolled back alone.
fn run_isolated(tx: &mut rusqlite::Transaction<'_>, work: Work) -> Answer {
    let mut savepoint = match tx.savepoint() {
        Ok(savepoint) => savepoint,
        Err(e) => {
            let (_, answer) = work(Err(StorageError::failed("cannot open a savepoint", &e)));
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
    fn many_waits_on_one_async_task_all_return() {
        // tokio's co-operative budget runs out after 128 polls on one task; a wait that
        // polled its receiver under that budget spun for ever from then on.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            let total: i64 = runtime.block_on(async {
                (0..1000)
                    .map(|i| Receipt::ready(Ok(i)).wait().expect("ready"))
                    .sum()
            });
            let _ = done.send(total);
        });
        let total = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("1000 waits on one task returned");
        assert_eq!(total, 499_500);
    }

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
    fn a_write_that_reads_first_waits_for_a_lock_held_elsewhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let open = || {
            let conn = Connection::open(&path).expect("open");
            conn.pragma_update(None, "journal_mode", "WAL")
                .expect("wal");
            conn.busy_timeout(std::time::Duration::from_secs(5))
                .expect("busy timeout");
            conn
        };
        let conn = open();
        conn.execute_batch("CREATE TABLE t (x)").expect("schema");
        let writer = GroupWriter::spawn("test-writer", conn, None).expect("spawn");
        // Another connection (as the checkpointer truncating the WAL) holds the write lock.
        let holder = open();
        holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let (held, release) = std::sync::mpsc::channel::<()>();
        let holding = std::thread::spawn(move || {
            let _ = release.recv_timeout(std::time::Duration::from_millis(300));
            holder.execute_batch("COMMIT").expect("unlock");
        });
        let written = writer.write_blocking(|c| {
            let before: i64 = c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?;
            c.execute("INSERT INTO t VALUES (?1)", [before])
        });
        drop(held);
        holding.join().expect("holder");
        assert_eq!(written.expect("the write waited for the lock"), 1);
    }

    #[test]
    fn a_blocking_waiter_commits_its_write_itself_when_it_waits_alone() {
        // No writer thread: only the waiter can commit.
        let writer = GroupWriter::unserved(Connection::open_in_memory().expect("db"), None);
        let committed_on = writer
            .write_blocking(|c| {
                c.execute_batch("CREATE TABLE t (x)")?;
                Ok(std::thread::current().id())
            })
            .expect("write");
        assert_eq!(committed_on, std::thread::current().id());
    }

    #[test]
    fn a_write_queued_while_another_commit_holds_the_connection_is_still_committed() {
        let conn = Connection::open_in_memory().expect("db");
        let writer = GroupWriter::spawn("test-writer", conn, None).expect("spawn");
        // The connection is held as a committer holds it; the next blocking write finds it
        // busy, so the writer thread (woken, then waiting for the connection) or a later
        // committer must take it. Losing the wake-up would hang here.
        let held = writer.shared().conn.lock().expect("connection");
        let second = {
            let writer = writer.clone();
            std::thread::spawn(move || {
                writer.write_blocking(|c| c.execute_batch("CREATE TABLE t (x)"))
            })
        };
        while writer.shared().queue().work.is_empty() {
            std::thread::yield_now();
        }
        drop(held);
        second.join().expect("second").expect("second write");
        let tables: i64 = writer
            .write_blocking(|c| {
                c.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE name = 't'",
                    [],
                    |r| r.get(0),
                )
            })
            .expect("count");
        assert_eq!(tables, 1);
    }

    #[test]
    fn writes_from_threads_and_tasks_at_once_are_each_committed_once() {
        let conn = Connection::open_in_memory().expect("db");
        conn.execute_batch("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            .expect("schema");
        let writer = GroupWriter::spawn("test-writer", conn, None).expect("spawn");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        let x = t * 1000 + i;
                        writer
                            .write_blocking(move |c| c.execute("INSERT INTO t VALUES (?1)", [x]))
                            .expect("blocking insert");
                    }
                })
            })
            .collect();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let tasks: Vec<_> = (0..100)
                .map(|i| {
                    let writer = writer.clone();
                    tokio::spawn(async move {
                        writer
                            .write(move |c| c.execute("INSERT INTO t VALUES (?1)", [10_000 + i]))
                            .await
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task").expect("async insert");
            }
        });
        for thread in threads {
            thread.join().expect("thread");
        }
        let rows: i64 = writer
            .write_blocking(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .expect("count");
        assert_eq!(rows, 500);
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
