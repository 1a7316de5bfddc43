//! PostgreSQL behind the same store interfaces as SQLite, so several hosts can share one
//! database (`storage: postgres://…` in `cairn.yaml`).
//!
//! The `postgres` client blocks on a runtime of its own, which must not run inside the
//! host's tokio runtime; so every statement runs on a [`PgPool`] worker thread that owns
//! one connection, and callers get a [`Receipt`] (writes) or wait for the answer (reads)
//! exactly as with a SQLite store. A worker whose connection broke connects again, backing
//! off while the server stays away; meanwhile its work fails with
//! [`StorageError::Unreachable`] naming the URL (password redacted).
//!
//! - [`url`]: parsing and redacting the connection string.
//! - [`migrate`]: versioned schema per store, applied once under an advisory lock.
//! - [`buffer`]: [`crate::buffer::BufferStore`] for several hosts (claims with leases);
//!   `failed` lists failed work and queues it again.
//! - [`cache`]: [`crate::cache::ResponseCacheStore`], one LLM response cache for all hosts.
//! - [`host`]: [`crate::host::KvStore`], [`crate::host::StatusStore`] and
//!   [`crate::host::LifecycleStore`] for several hosts (each reports its own run and
//!   plugins; a schedule tick is claimed by one host).
//! - [`journal`]: [`crate::journal::JournalStore`] for several hosts (events commit in
//!   sequence order; one host delivers to each subscriber at a time).
//! - [`journal_admin`]: [`crate::journal::JournalOperator`], what `cairn journal` and
//!   `cairn status` read and repair.
//! - [`memory`]: [`crate::memory::MemoryStore`] and [`crate::memory::SessionStore`] shared
//!   by every host (full text on `tsvector`, vectors caught up across hosts).
//! - [`cluster`]: a private PostgreSQL server for tests and benches.

mod batch;
pub mod buffer;
pub mod cache;
pub mod cluster;
mod failed;
pub mod host;
pub mod journal;
pub mod journal_admin;
mod lease;
pub mod memory;
pub mod migrate;
pub mod url;

#[cfg(test)]
mod tests;

use std::hash::{BuildHasher, RandomState};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls, Transaction};
use tokio::sync::oneshot;

use crate::StorageError;
use crate::writer::Receipt;
pub use url::PgUrl;

/// A parameter of a statement built at run time: owned, so the statement can be handed to
/// a pool worker.
pub(crate) type Param = Box<dyn postgres::types::ToSql + Sync + Send>;

/// The parameters of a built statement, as the client takes them.
pub(crate) fn params(values: &[Param]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    values
        .iter()
        .map(|value| value.as_ref() as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

/// Work a pool worker runs with its connection.
enum Job {
    /// A read, run on its own.
    Read(Read),
    /// A write, run in a group's transaction (or told it cannot run).
    Write(Write),
    /// A write run in a transaction of its own: one that takes a lock held to the end of
    /// its transaction (an advisory lock), which a group would hold while its later writes
    /// wait on other hosts' groups holding theirs — a deadlock no retry inside the group
    /// undoes, as the group keeps the lock it is waited on for.
    Alone(Write),
}

/// Runs a read on the worker's connection and answers its caller.
type Read = Box<dyn FnOnce(&mut Worker) + Send>;

/// Runs a write under a savepoint of the group's transaction, and returns what answers its
/// caller once the group committed (with the commit's error, if it failed).
type Write = Box<dyn FnOnce(Result<&mut Transaction<'_>, &StorageError>) -> Answer + Send>;

/// Answers a write's caller, given the error of the group's commit if it failed.
type Answer = Box<dyn FnOnce(Option<&StorageError>) + Send>;

/// Most writes committed in one transaction.
const MAX_GROUP: usize = 512;

/// First wait before connecting again after a failure; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between two attempts to reach a server that is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Connection worker threads sharing one queue of work. Cloning shares the workers; they
/// stop once every clone is dropped and the queue is empty.
#[derive(Clone)]
pub struct PgPool {
    jobs: mpsc::Sender<Job>,
    url: Arc<PgUrl>,
}

impl PgPool {
    /// Connect `workers` threads (named `name-N`) to `url`. Every worker connects before this
    /// returns, so an unreachable server is an error now, naming the URL.
    pub fn connect(url: &PgUrl, workers: usize, name: &str) -> Result<Self, StorageError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 0..workers.max(1) {
            // The client must be made on the worker's thread: its runtime cannot start on
            // a thread of the host's runtime.
            let (connected, outcome) = mpsc::channel();
            let queue = Arc::clone(&queue);
            let worker_url = url.clone();
            thread::Builder::new()
                .name(format!("{name}-{n}"))
                .spawn(move || {
                    let mut worker = match Worker::connect(worker_url) {
                        Ok(worker) => {
                            let _ = connected.send(Ok(()));
                            worker
                        }
                        Err(e) => {
                            let _ = connected.send(Err(e));
                            return;
                        }
                    };
                    while let Some(job) = next_job(&queue) {
                        worker.run(job, &queue);
                    }
                })
                .map_err(|e| url.unreachable(&format!("cannot start a connection thread: {e}")))?;
            outcome
                .recv()
                .unwrap_or_else(|_| Err(url.unreachable("the connection thread stopped")))?;
        }
        Ok(Self {
            jobs,
            url: Arc::new(url.clone()),
        })
    }

    /// [`PgPool::connect`], then bring `migrations`' tables up to date through the pool.
    pub fn connect_migrated(
        url: &PgUrl,
        workers: usize,
        name: &str,
        migrations: &'static crate::Migrations,
    ) -> Result<Self, StorageError> {
        let pool = Self::connect(url, workers, name)?;
        migrate::migrate(&pool, migrations)?;
        Ok(pool)
    }

    /// The URL the pool connects to.
    pub fn url(&self) -> &PgUrl {
        &self.url
    }

    /// Run `work` on a worker, in one transaction with the writes queued beside it (group
    /// commit: one WAL flush for the group) under a savepoint of its own, so its failure
    /// undoes only its own changes. The receipt resolves once the group committed.
    pub fn submit<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
    ) -> Receipt<T> {
        self.send_write(work, Job::Write, |_| {})
    }

    /// [`PgPool::submit`], calling `committed` with the work's outcome once its group
    /// committed (before the caller is answered; not at all when the commit failed): for a
    /// store that keeps in memory what it knows committed.
    pub fn submit_then<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
        committed: impl FnOnce(&Result<T, StorageError>) + Send + 'static,
    ) -> Receipt<T> {
        self.send_write(work, Job::Write, committed)
    }

    /// Run `work` on a worker in a transaction of its own, never grouped with other writes:
    /// for work that takes a transaction-level advisory lock (see [`Job::Alone`]). The
    /// receipt resolves once it committed.
    pub fn submit_alone<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
    ) -> Receipt<T> {
        self.send_write(work, Job::Alone, |_| {})
    }

    /// [`PgPool::submit_alone`], calling `committed` as [`PgPool::submit_then`] does.
    pub fn submit_alone_then<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
        committed: impl FnOnce(&Result<T, StorageError>) + Send + 'static,
    ) -> Receipt<T> {
        self.send_write(work, Job::Alone, committed)
    }

    /// Queue `work` as the write job `job` makes of it; `committed` is given its outcome once
    /// its transaction committed, then the receipt answers.
    fn send_write<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Transaction<'_>) -> Result<T, StorageError> + Send + 'static,
        job: fn(Write) -> Job,
        committed: impl FnOnce(&Result<T, StorageError>) + Send + 'static,
    ) -> Receipt<T> {
        let (reply, receiver) = oneshot::channel();
        let write: Write = Box::new(move |tx: Result<&mut Transaction<'_>, &StorageError>| {
            let outcome = match tx {
                Ok(tx) => in_savepoint(tx, work),
                Err(e) => Err(e.clone()),
            };
            Box::new(move |commit_error: Option<&StorageError>| {
                let _ = reply.send(match commit_error {
                    Some(e) => Err(e.clone()),
                    None => {
                        committed(&outcome);
                        outcome
                    }
                });
            }) as Answer
        });
        if self.jobs.send(job(write)).is_err() {
            return Receipt::ready(Err(StorageError::Stopped));
        }
        Receipt::answered_by(receiver)
    }

    /// Run `read` on a worker's connection and wait for its answer.
    pub fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&mut Client) -> Result<T, StorageError> + Send + 'static,
    ) -> Result<T, StorageError> {
        let (reply, receiver) = oneshot::channel();
        let job = Job::Read(Box::new(move |worker: &mut Worker| {
            let _ = reply.send(worker.with_client(read));
        }));
        if self.jobs.send(job).is_err() {
            return Err(StorageError::Stopped);
        }
        // pollster, not `blocking_recv`: this may be called on a runtime's thread; and
        // unconstrained by tokio's co-operative budget (see `Receipt::wait`).
        pollster::block_on(tokio::task::unconstrained(receiver))
            .unwrap_or(Err(StorageError::Stopped))
    }

    /// Hand `job` a worker's connection (or the reason there is none) without waiting: for
    /// a store that batches work its own way and answers its callers itself. False when
    /// the pool has stopped (the job was dropped unrun).
    pub fn run(
        &self,
        job: impl FnOnce(Result<&mut Client, StorageError>) + Send + 'static,
    ) -> bool {
        let job = Job::Read(Box::new(move |worker: &mut Worker| job(worker.client())));
        self.jobs.send(job).is_ok()
    }
}

/// `first` and the writes queued right behind it (up to [`MAX_GROUP`]); a read or a write
/// to run alone found behind them ends the group and runs next.
fn group_behind(first: Write, queue: &Mutex<mpsc::Receiver<Job>>) -> (Vec<Write>, Option<Job>) {
    let mut group = vec![first];
    // Held by another worker: it is either waiting for work (nothing is queued) or taking
    // a group itself; either way there is nothing to wait for here.
    let queue = match queue.try_lock() {
        Ok(queue) => queue,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return (group, None),
    };
    while group.len() < MAX_GROUP {
        match queue.try_recv() {
            Ok(Job::Write(write)) => group.push(write),
            Ok(next) => return (group, Some(next)),
            Err(_) => break,
        }
    }
    (group, None)
}

/// Times a write that deadlocked with another transaction is run again.
const CONFLICT_RETRIES: usize = 3;

/// Run `work` under a savepoint of `tx`: on failure only its own changes are undone, and a
/// write PostgreSQL aborted for a deadlock (hosts locking the same rows in another order)
/// runs again, its locks released with its savepoint.
fn in_savepoint<T>(
    tx: &mut Transaction<'_>,
    work: impl Fn(&mut Transaction<'_>) -> Result<T, StorageError>,
) -> Result<T, StorageError> {
    let mut attempt = 0;
    loop {
        let mut savepoint = tx.savepoint("write")?;
        match work(&mut savepoint) {
            Ok(value) => {
                savepoint.commit()?;
                return Ok(value);
            }
            Err(StorageError::Conflict(why)) if attempt < CONFLICT_RETRIES => {
                attempt += 1;
                tracing::debug!("write ran into another transaction ({why}); again");
                savepoint.rollback()?;
            }
            Err(e) => return Err(e),
        }
    }
}

fn next_job(queue: &Mutex<mpsc::Receiver<Job>>) -> Option<Job> {
    queue
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .recv()
        .ok()
}

/// A connection idle this long is checked before work runs on it: the server may have ended
/// its session meanwhile.
const IDLE_CHECK: Duration = Duration::from_millis(250);
/// How long that check may take before the connection is taken for dead.
const VALIDATE_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection and how to get it back when it breaks.
struct Worker {
    url: PgUrl,
    client: Option<Client>,
    /// When work last ran on the connection (see [`IDLE_CHECK`]).
    used_at: Instant,
    /// No attempt to connect again before this, after a failed one.
    retry_at: Option<Instant>,
    backoff: Duration,
    last_error: String,
}

impl Worker {
    fn connect(url: PgUrl) -> Result<Self, StorageError> {
        let client = url
            .config()
            .connect(NoTls)
            .map_err(|e| url.unreachable(&describe(&e)))?;
        Ok(Self {
            url,
            client: Some(client),
            used_at: Instant::now(),
            retry_at: None,
            backoff: FIRST_BACKOFF,
            last_error: String::new(),
        })
    }

    /// The connection, connecting again if it broke (at most once per backoff period).
    fn client(&mut self) -> Result<&mut Client, StorageError> {
        // A session the server ended while its connection sat idle (a restart, an
        // administrator's `pg_terminate_backend`) shows only once something reads the
        // socket, which the client does only while a statement runs: a connection idle for
        // a while is asked first (one round trip), so work never runs on a dead one (after
        // a server restart each pooled connection used to fail the next work given it).
        if self.used_at.elapsed() >= IDLE_CHECK
            && let Some(client) = self.client.as_mut()
            && client.is_valid(VALIDATE_TIMEOUT).is_err()
        {
            self.client = None;
        }
        self.used_at = Instant::now();
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            if self.retry_at.is_some_and(|at| Instant::now() < at) {
                return Err(self.url.unreachable(&self.last_error));
            }
            match self.url.config().connect(NoTls) {
                Ok(client) => {
                    tracing::info!("reconnected to PostgreSQL at {}", self.url.redacted());
                    self.client = Some(client);
                    self.retry_at = None;
                    self.backoff = FIRST_BACKOFF;
                }
                Err(e) => {
                    self.last_error = describe(&e);
                    self.retry_at = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    tracing::warn!(
                        "PostgreSQL at {} is unreachable ({}); next attempt in {:?}",
                        self.url.redacted(),
                        self.last_error,
                        self.backoff
                    );
                    return Err(self.url.unreachable(&self.last_error));
                }
            }
        }
        self.client
            .as_mut()
            .ok_or_else(|| StorageError::Postgres("no connection".into()))
    }

    fn with_client<T>(
        &mut self,
        read: impl FnOnce(&mut Client) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let outcome = read(self.client()?);
        if let Err(error) = &outcome {
            self.forget_if_lost(error);
        }
        outcome
    }

    /// Drop the connection when `error` says it broke, so the next work connects anew.
    fn forget_if_lost(&mut self, error: &StorageError) {
        if matches!(error, StorageError::ConnectionLost(_)) {
            self.client = None;
        }
    }

    /// Run `job`, and what ended its group of writes if one did.
    fn run(&mut self, job: Job, queue: &Mutex<mpsc::Receiver<Job>>) {
        match job {
            Job::Read(read) => read(self),
            Job::Alone(write) => self.commit_group(vec![write]),
            Job::Write(first) => {
                let (group, next) = group_behind(first, queue);
                self.commit_group(group);
                if let Some(next) = next {
                    self.run(next, queue);
                }
            }
        }
    }

    /// Run a group of writes in one transaction and answer each once it committed.
    fn commit_group(&mut self, group: Vec<Write>) {
        let failure = match self.client().and_then(|c| Ok(c.transaction()?)) {
            Ok(mut tx) => {
                let answers: Vec<Answer> =
                    group.into_iter().map(|write| write(Ok(&mut tx))).collect();
                let commit_error = tx.commit().err().map(StorageError::from);
                for answer in answers {
                    answer(commit_error.as_ref());
                }
                commit_error
            }
            Err(e) => {
                for write in group {
                    write(Err(&e))(None);
                }
                Some(e)
            }
        };
        if let Some(error) = &failure {
            self.forget_if_lost(error);
        }
    }
}

/// Whether `error` means the connection is gone (closed, an I/O failure, or the server
/// ending the session): what ran on it committed nothing, and a new connection may succeed.
fn connection_lost(error: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    let ended = error.code().is_some_and(|code| {
        [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
        ]
        .contains(code)
    });
    let io = std::error::Error::source(error).is_some_and(|source| source.is::<std::io::Error>());
    ended || io || error.is_closed()
}

impl From<postgres::Error> for StorageError {
    fn from(error: postgres::Error) -> Self {
        use postgres::error::SqlState;
        let conflict = error.code().is_some_and(|code| {
            *code == SqlState::T_R_DEADLOCK_DETECTED || *code == SqlState::T_R_SERIALIZATION_FAILURE
        });
        let full = error.code().is_some_and(|code| {
            *code == SqlState::DISK_FULL || *code == SqlState::INSUFFICIENT_RESOURCES
        });
        if conflict {
            StorageError::Conflict(describe(&error))
        } else if connection_lost(&error) {
            StorageError::ConnectionLost(describe(&error))
        } else if full {
            StorageError::DiskFull(describe(&error))
        } else {
            StorageError::Postgres(describe(&error))
        }
    }
}

/// A host's id on the database: its name, process id and a random part, so a restarted
/// host never renews the leases of its previous life.
pub(crate) fn holder_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    // Randomly keyed per process, and a new key per call.
    let random = RandomState::new().hash_one(crate::now_ms());
    format!("{host}-{}-{random:016x}", std::process::id())
}

/// `duration` in whole milliseconds, as the tables keep times.
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The server's message (and detail) when it sent one, else the client's.
pub(crate) fn describe(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => error.to_string(),
    }
}
