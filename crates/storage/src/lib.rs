//! Cairn's storage: the interfaces the host's stores write and read through, their SQLite
//! implementations, and the plumbing they share — opening a database durably, migrating it,
//! and one group-commit writer per database.
//!
//! - [`buffer`]: [`buffer::BufferStore`] and `buffer.db`.
//! - [`journal`]: [`journal::JournalStore`], [`journal::JournalAdmin`] and `journal.db`.
//! - [`memory`]: [`memory::MemoryStore`], [`memory::SessionStore`] and `memory.db`.
//! - [`cache`]: [`cache::ResponseCacheStore`] and `cache.db` (the LLM response cache).
//! - [`host`]: [`host::KvStore`], [`host::StatusStore`], [`host::LifecycleStore`] and
//!   `host.db`.
//!
//! - [`pg`]: the same stores on PostgreSQL, for several hosts on one database.
//!
//! Each database file (`host.db`, `buffer.db`, `journal.db`, `memory.db`) has its
//! migrations in `migrations/<name>/NNNN_*.sql`, embedded at build time. The schema version
//! is kept in SQLite's `user_version`; pending migrations run in one transaction.

#![deny(missing_docs)]

pub mod buffer;
pub mod cache;
mod checkpointer;
pub mod database;
pub mod host;
pub mod journal;
pub mod memory;
mod open_files;
pub mod pg;
pub mod readers;
pub mod writer;

use std::path::{Path, PathBuf};

pub use cairn_vocab::ErrorKind;
pub use cairn_vocab::time::now_ms;
pub use checkpointer::BACKSTOP_PAGES;
pub use open_files::still_open_after;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

/// Why a store could not be opened, read or written: the one error type of this crate.
/// A failed write wrote nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// SQLite refused to open the file or apply a pragma.
    #[error("{path}: {message}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        message: String,
    },
    /// A migration failed; the database stays at the previous version.
    #[error("{path}: migration {version} failed: {message}")]
    Migrate {
        /// The database file.
        path: PathBuf,
        /// The migration that failed (1-based).
        version: usize,
        /// SQLite's error.
        message: String,
    },
    /// The database's writer thread could not be started.
    #[error("{path}: cannot start the writer thread: {message}")]
    Spawn {
        /// The database file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// The database was written by a newer Cairn with more migrations than this one knows.
    #[error("{path}: schema version {found} is newer than this cairn supports ({known})")]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The version found in the file.
        found: usize,
        /// The newest version this build knows.
        known: usize,
    },
    /// The file is not a database, is truncated or fails SQLite's integrity check: the
    /// store refuses it rather than write over what may still be read from it.
    #[error(
        "{path}: the database is damaged ({detail}); cairn will not open it. Restore it from a backup, or move it aside together with its -wal and -shm files to start afresh (`sqlite3 FILE .recover` may save what is readable)"
    )]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// What SQLite found.
        detail: String,
    },
    /// Something other than a file (a directory) stands where a database file belongs.
    #[error(
        "{path}: a directory, not a database file; cairn will not open it. Move it aside: a host makes the database anew where nothing is"
    )]
    NotAFile {
        /// Where the database file belongs.
        path: PathBuf,
    },
    /// The `storage:` URL is not a PostgreSQL connection string.
    #[error(
        "storage: `{url}` is not a PostgreSQL URL: {message}; expected `sqlite` (the default) or `postgres://USER:PASSWORD@HOST/DATABASE`"
    )]
    BadUrl {
        /// The URL, its password redacted.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The PostgreSQL server could not be reached (or refused the login).
    #[error("cannot reach PostgreSQL at {url}: {message}")]
    Unreachable {
        /// The URL, its password redacted.
        url: String,
        /// The client's error.
        message: String,
    },
    /// A PostgreSQL database holds a store's schema newer than this build knows.
    #[error(
        "{url}: the {store} schema is at version {found}, newer than this cairn supports ({known})"
    )]
    SchemaTooNew {
        /// The URL, its password redacted.
        url: String,
        /// The store (`buffer`, `journal`, …).
        store: String,
        /// The version found in the database.
        found: usize,
        /// The newest version this build knows.
        known: usize,
    },
    /// PostgreSQL refused a read, a write or the commit.
    #[error("postgres: {0}")]
    Postgres(String),
    /// The connection to PostgreSQL broke under a statement (the server restarted or ended
    /// the session, or the network failed): nothing of it was committed, and it may succeed
    /// on the connection made anew.
    #[error("postgres: the connection broke: {0}")]
    ConnectionLost(String),
    /// Another host got there first: the messages of a batch were routed by another router,
    /// or a claim this host let lapse was taken over. Nothing was written.
    #[error("{0}")]
    Taken(String),
    /// PostgreSQL aborted a write that deadlocked with another transaction (or could not
    /// be serialised with it); running it again may succeed.
    #[error("postgres: {0}")]
    Conflict(String),
    /// The store's writer has stopped (the store is shutting down).
    #[error("the store is not accepting writes (shutting down)")]
    Stopped,
    /// SQLite refused a read, a write or the commit.
    #[error("{0}")]
    Sqlite(String),
    /// The disk holding the database is full (or the file may grow no further): the write
    /// was rolled back and stored nothing. It succeeds again once there is space.
    #[error("the disk is full ({0}): nothing of this write was stored")]
    DiskFull(String),
}

impl StorageError {
    /// What kind of failure this is, as callers across the plugin boundary see it: a
    /// stopping store is `unavailable`, everything else is `internal`.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StorageError::Stopped
            | StorageError::Unreachable { .. }
            | StorageError::ConnectionLost(_)
            | StorageError::DiskFull(_) => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }

    pub(crate) fn open(path: &Path, error: rusqlite::Error) -> Self {
        if is_damage(&error) {
            return StorageError::Damaged {
                path: path.to_path_buf(),
                detail: error.to_string(),
            };
        }
        let mut message = error.to_string();
        if is_unwritable(path, &error) {
            message = format!("{message} ({UNWRITABLE})");
        }
        StorageError::Open {
            path: path.to_path_buf(),
            message,
        }
    }
}

/// Why a database in a directory this process cannot write to cannot be opened.
const UNWRITABLE: &str = "the data dir is not writable: SQLite makes its -wal and -shm files \
     beside a database even to read it; copy a read-only data dir, a mounted backup say, \
     somewhere writable";

/// Whether `error` opening `path` comes of a directory this process cannot write to.
fn is_unwritable(path: &Path, error: &rusqlite::Error) -> bool {
    let cannot = matches!(
        error.sqlite_error_code(),
        Some(
            rusqlite::ErrorCode::CannotOpen
                | rusqlite::ErrorCode::ReadOnly
                | rusqlite::ErrorCode::PermissionDenied
        )
    );
    cannot && !can_write_in(path.parent().unwrap_or(Path::new(".")))
}

/// Whether a file can be made in `dir` (its mode bits do not tell: a read-only mount keeps
/// them); the probe is removed at once.
pub(crate) fn can_write_in(dir: &Path) -> bool {
    let probe = dir.join(format!(".cairn-write-probe-{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .is_ok();
    if made {
        let _ = std::fs::remove_file(&probe);
    }
    made
}

impl StorageError {
    /// Whether the write failed for a reason that passes, so the same write succeeds later
    /// and is worth waiting for: the disk is full, or the database server cannot be reached
    /// or dropped the connection under it. Nothing of the write was stored.
    pub fn is_passing(&self) -> bool {
        matches!(
            self,
            StorageError::DiskFull(_)
                | StorageError::Unreachable { .. }
                | StorageError::ConnectionLost(_)
        )
    }

    /// A failed commit or transaction step, `doing` what.
    pub(crate) fn failed(doing: &str, error: &rusqlite::Error) -> Self {
        Self::of_sqlite(error, format!("{doing}: {error}"))
    }

    /// SQLite's `error`, told as `message`: a full disk apart from every other failure.
    fn of_sqlite(error: &rusqlite::Error, message: String) -> Self {
        if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            StorageError::DiskFull(message)
        } else {
            StorageError::Sqlite(message)
        }
    }
}

impl From<rusqlite::Error> for StorageError {
    fn from(error: rusqlite::Error) -> Self {
        Self::of_sqlite(&error, error.to_string())
    }
}

/// Column `index` of `row`, a name `parse` turns into a typed state or kind; a name this
/// build does not know is a conversion error naming it (`what` says what it names).
pub(crate) fn parsed<T>(
    row: &rusqlite::Row<'_>,
    index: usize,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> rusqlite::Result<T> {
    let name: String = row.get(index)?;
    parse(&name).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unknown {what} `{name}`").into(),
        )
    })
}

/// The ordered migrations of one database.
pub struct Migrations {
    /// Database name, for messages.
    pub name: &'static str,
    /// SQL scripts, applied in order; index + 1 is the schema version.
    pub scripts: &'static [&'static str],
}

/// Prepared statements kept per connection.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// Open (creating if needed) a database in WAL mode with `synchronous=FULL`, and migrate it.
/// In a directory this process cannot write to, SQLite opens the file read-only and fails
/// later (a pragma, a migration) in words that do not say why: a failure there says so.
/// An existing file is checked read-only first, and refused unchanged when it is damaged.
pub fn open(path: &Path, migrations: &Migrations) -> Result<Connection, StorageError> {
    verify_file(path)?;
    open_and_migrate(path, migrations).map_err(|error| {
        let dir = path.parent().unwrap_or(Path::new("."));
        if dir.is_dir() && !can_write_in(dir) {
            StorageError::Open {
                path: path.to_path_buf(),
                message: UNWRITABLE.to_string(),
            }
        } else {
            error
        }
    })
}

/// [`open`]'s work once an existing file is known to be sound.
fn open_and_migrate(path: &Path, migrations: &Migrations) -> Result<Connection, StorageError> {
    let open_err = |e| StorageError::open(path, e);
    let mut conn = Connection::open(path).map_err(open_err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open_err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open_err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(open_err)?;
    // Every statement is prepared through the cache: recall's filters make a few dozen
    // shapes, more than rusqlite's default of 16.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
    plan_stably(&conn).map_err(open_err)?;
    migrate(&mut conn, path, migrations)?;
    Ok(conn)
}

/// Open a database for a store that writes through a group-commit writer: returns the
/// writer (thread `writer_name`, owning one connection, with a thread beside it that
/// checkpoints the WAL off the commit path) and a second connection for reads.
pub fn open_with_writer(
    path: &Path,
    migrations: &Migrations,
    writer_name: &str,
) -> Result<(writer::GroupWriter, Connection), StorageError> {
    let write_conn = open(path, migrations)?;
    check_integrity(&write_conn, path)?;
    start_writer(path, migrations, writer_name, write_conn)
}

/// [`open_with_writer`] for a database whose integrity was checked already.
pub(crate) fn start_writer(
    path: &Path,
    migrations: &Migrations,
    writer_name: &str,
    mut write_conn: Connection,
) -> Result<(writer::GroupWriter, Connection), StorageError> {
    let spawn_error = |e: std::io::Error| StorageError::Spawn {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    checkpointer::limit_wal(&write_conn).map_err(|e| StorageError::open(path, e))?;
    let reader = open(path, migrations)?;
    let checkpoints =
        checkpointer::Checkpointer::spawn(format!("{writer_name}-ckpt"), path.to_path_buf())
            .map_err(spawn_error)?;
    checkpoints
        .watch(&mut write_conn)
        .map_err(|e| StorageError::open(path, e))?;
    let writer = writer::GroupWriter::spawn(writer_name, write_conn, Some(checkpoints))
        .map_err(spawn_error)?;
    Ok((writer, reader))
}

/// The data dir's database files, one per store, in the order a host opens them.
pub const DATA_DIR_FILES: [&str; 5] = [
    buffer::FILE,
    memory::FILE,
    host::FILE,
    journal::FILE,
    cache::FILE,
];

/// Check every database file of `data_dir` that exists, read-only, before any store opens
/// one for writing: a host refuses a damaged file before it has written to the others.
pub fn verify_data_dir(data_dir: &Path) -> Result<(), StorageError> {
    for file in DATA_DIR_FILES {
        verify_file(&data_dir.join(file))?;
    }
    Ok(())
}

/// Check a database file, if it exists, through a read-only connection: emptied, damaged
/// (`PRAGMA quick_check`) or written by a newer Cairn, it is refused with nothing written —
/// a connection that could write would fold its write-ahead log into the damaged file and
/// delete the log as it closed, where the refusal tells the operator to move both aside.
fn verify_file(path: &Path) -> Result<(), StorageError> {
    if !path.exists() {
        return Ok(());
    }
    refuse_emptied(path)?;
    let [wal, shm] = ["-wal", "-shm"].map(|suffix| {
        let mut name = path.to_path_buf().into_os_string();
        name.push(suffix);
        PathBuf::from(name)
    });
    let (had_wal, had_shm) = (wal.exists(), shm.exists());
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| StorageError::open(path, e))?;
    let file = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    let checked = check_integrity(&conn, path).and_then(|()| check_not_newer(&conn, path, file));
    drop(conn);
    // A read-only look at a WAL database leaves an empty log and a shared-memory index
    // beside it, which another process may have opened since: only SQLite, under its
    // locks, can tell whether anyone still uses them.
    let made = (!had_wal && wal.exists()) || (!had_shm && shm.exists());
    match &checked {
        Ok(()) if made => tidy_after_check(path),
        Ok(()) => {}
        Err(_) => remove_made_by_check(&wal, had_wal, &shm, had_shm),
    }
    checked
}

/// Let SQLite remove the log and index a check left beside a sound database: a connection
/// that can write deletes both as it closes if it is the file's last (folding an empty log
/// changes nothing), and leaves them to whoever else has the file open. (Until 2026-12-02
/// the check deleted them itself, so a process that opened the database meanwhile could
/// lose its index and its commits with it; seen in the code while looking into a CI failure
/// of commands started together on a new data dir, not observed as a loss.)
fn tidy_after_check(path: &Path) {
    if let Ok(conn) = Connection::open(path) {
        let _ = conn.busy_timeout(std::time::Duration::from_secs(5));
        // The log is opened at a connection's first read, and closed (so deleted) only if
        // it was opened.
        let _ = conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()));
        drop(conn);
    }
}

/// Remove the empty log and the index a check made beside a damaged database it refuses:
/// the refusal changes nothing, and a database refused as damaged has no other user to
/// share them with.
fn remove_made_by_check(wal: &Path, had_wal: bool, shm: &Path, had_shm: bool) {
    if !had_wal && std::fs::metadata(wal).is_ok_and(|m| m.len() == 0) {
        let _ = std::fs::remove_file(wal);
    }
    if !had_shm {
        let _ = std::fs::remove_file(shm);
    }
}

/// The database files this process checked already: each is checked once, whichever
/// opens it first ([`verify_data_dir`] or a store).
fn checked_files() -> &'static std::sync::Mutex<std::collections::HashSet<PathBuf>> {
    static CHECKED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
        std::sync::OnceLock::new();
    CHECKED.get_or_init(Default::default)
}

/// Refuse a database file that exists but is empty with no write-ahead log beside it.
/// SQLite would take it for a new database and the store would start afresh over whatever
/// was lost. A database this code creates is empty only for the instant before its first
/// write reaches the WAL (which holds everything until the first checkpoint). A directory
/// where the file belongs is refused too, by name, rather than as SQLite's "disk I/O error".
fn refuse_emptied(path: &Path) -> Result<(), StorageError> {
    if path.is_dir() {
        return Err(StorageError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if is_emptied(path) && !filled_while_new(path) {
        return Err(StorageError::Damaged {
            path: path.to_path_buf(),
            detail: "the file is empty".to_string(),
        });
    }
    Ok(())
}

/// How long an empty database file made a moment ago is waited for: another process is
/// creating it (its first write follows within milliseconds).
const NEW_FILE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether an empty database file is one another process has just made and now writes:
/// made less than [`NEW_FILE_WAIT`] ago, and written within that time. (Until 2026-12-02 a
/// command started beside another on a new data dir could find the file the other had
/// just made, and refuse it as emptied; found by an operator's test.)
fn filled_while_new(path: &Path) -> bool {
    let Some(made) = age(path) else {
        return false;
    };
    let mut waited = made;
    while waited < NEW_FILE_WAIT {
        if !is_emptied(path) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        waited += std::time::Duration::from_millis(20);
    }
    !is_emptied(path)
}

/// Whether `path` is an empty file with no write-ahead log content beside it.
/// How long ago the file at `path` was last written, if it can be told.
fn age(path: &Path) -> Option<std::time::Duration> {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
}

/// Whether the file at `path` was written less than `within` ago (or in the future, as a
/// clock set back shows it).
fn made_within(path: &Path, within: std::time::Duration) -> bool {
    match std::fs::metadata(path).and_then(|meta| meta.modified()) {
        Ok(at) => at.elapsed().map_or(true, |elapsed| elapsed < within),
        Err(_) => false,
    }
}

fn is_emptied(path: &Path) -> bool {
    let len = |path: &Path| std::fs::metadata(path).map(|meta| meta.len()).ok();
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    path.is_file() && len(path) == Some(0) && matches!(len(Path::new(&wal)), None | Some(0))
}

/// Whether SQLite's error says the file is not a database or is malformed.
pub(crate) fn is_damage(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt)
    )
}

/// Refuse a database that fails `PRAGMA quick_check` (a truncated file, torn or overwritten
/// pages): every page is read once, through the WAL, about 0.2 s for 370 MB on this
/// machine — paid once per database when a host starts, never on the hot path.
pub(crate) fn check_integrity(conn: &Connection, path: &Path) -> Result<(), StorageError> {
    let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if checked_files()
        .lock()
        .is_ok_and(|checked| checked.contains(&key))
    {
        return Ok(());
    }
    let damaged = |detail: String| StorageError::Damaged {
        path: path.to_path_buf(),
        detail,
    };
    let mut statement = conn
        .prepare("PRAGMA quick_check(3)")
        .map_err(|e| StorageError::open(path, e))?;
    let findings: Vec<String> = statement
        .query_map([], |row| row.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| {
            if is_damage(&e) {
                damaged(e.to_string())
            } else {
                StorageError::open(path, e)
            }
        })?;
    match findings.as_slice() {
        [ok] if ok == "ok" => {
            if let Ok(mut checked) = checked_files().lock() {
                checked.insert(key);
            }
            Ok(())
        }
        _ => Err(damaged(findings.join("; "))),
    }
}

/// Open an existing database read-only, without migrating; `None` when the file is missing
/// or not yet migrated (a host is creating it right now and has nothing to report).
pub fn open_read_only(path: &Path) -> Result<Option<Connection>, StorageError> {
    if !path.exists() {
        return Ok(None);
    }
    // An empty file made a moment ago is one a host is creating right now; an older one
    // was emptied, and is refused as a writer refuses it (until 2026-12-04 a reader took
    // it for no database: `cairn status` on an emptied host.db said no host had run).
    if is_emptied(path) {
        if made_within(path, NEW_FILE_WAIT) {
            return Ok(None);
        }
        return Err(StorageError::Damaged {
            path: path.to_path_buf(),
            detail: "the file is empty".to_string(),
        });
    }
    if path.is_dir() {
        return Err(StorageError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| StorageError::open(path, e))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| StorageError::open(path, e))?;
    plan_stably(&conn).map_err(|e| StorageError::open(path, e))?;
    let version = match schema_version(&conn) {
        Ok(version) => version,
        Err(e) if is_damage(&e) || is_unwritable(path, &e) => {
            return Err(StorageError::open(path, e));
        }
        Err(_) => return Ok(None),
    };
    // A file a newer Cairn wrote is not read as if this one knew its tables.
    let file = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    check_not_newer(&conn, path, file)?;
    Ok(Some(conn).filter(|_| version > 0))
}

/// Ask for stable query plans. Without them, a bound `LIMIT`, `LIKE` pattern or equality
/// makes SQLite (built with STAT4) compile a cached statement again whenever the bound
/// value changes — 12% of the host's CPU per turn, measured — and none of our statements
/// has a better plan for one value than for another.
fn plan_stably(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map(|_| ())
}

/// Refuse a data dir file written by a newer Cairn (a schema version past the migrations
/// this build has), so a start is refused before any store opens and writes (until
/// 2026-12-02 a newer `journal.db` was found only after `host.db` recorded the run).
fn check_not_newer(conn: &Connection, path: &Path, file: &str) -> Result<(), StorageError> {
    let known = match file {
        buffer::FILE => buffer::MIGRATIONS.scripts.len(),
        memory::FILE => memory::MIGRATIONS.scripts.len(),
        host::FILE => host::MIGRATIONS.scripts.len(),
        journal::FILE => journal::MIGRATIONS.scripts.len(),
        cache::FILE => cache::MIGRATIONS.scripts.len(),
        _ => return Ok(()),
    };
    let found: usize = schema_version(conn)
        .map_err(|e| StorageError::open(path, e))?
        .try_into()
        .unwrap_or(0);
    if found > known {
        return Err(StorageError::TooNew {
            path: path.to_path_buf(),
            found,
            known,
        });
    }
    Ok(())
}

/// The schema version a database was migrated to (0 before its first migration).
fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))
}

fn migrate(
    conn: &mut Connection,
    path: &Path,
    migrations: &Migrations,
) -> Result<(), StorageError> {
    let current: usize = conn
        .pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))
        .map_err(|e| StorageError::open(path, e))?
        .try_into()
        .unwrap_or(0);
    let known = migrations.scripts.len();
    if current > known {
        return Err(StorageError::TooNew {
            path: path.to_path_buf(),
            found: current,
            known,
        });
    }
    if current == known {
        return Ok(());
    }
    // All pending scripts commit together: a reader (`cairn status` while a host starts)
    // sees the old schema or the new one, never a database migrated half way.
    let fail = |version: usize| {
        move |e: rusqlite::Error| StorageError::Migrate {
            path: path.to_path_buf(),
            version,
            message: e.to_string(),
        }
    };
    // Another process may be migrating the same new file (a `cairn send` beside a host
    // starting on a new data dir): the write lock is taken first and the version read again
    // under it, so one of them applies the scripts and the other finds them applied (until
    // 2026-12-02 both ran them and one failed, `table batches already exists`).
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(fail(current + 1))?;
    let current: usize = tx
        .pragma_query_value(None, "user_version", |row| row.get::<_, i64>(0))
        .map_err(fail(current + 1))?
        .try_into()
        .unwrap_or(0);
    if current >= known {
        return Ok(());
    }
    for (index, script) in migrations.scripts.iter().enumerate().skip(current) {
        tx.execute_batch(script).map_err(fail(index + 1))?;
    }
    tx.pragma_update(None, "user_version", known as i64)
        .map_err(fail(known))?;
    tx.commit().map_err(fail(known))?;
    tracing::debug!(
        database = migrations.name,
        from = current,
        to = known,
        "applied migrations"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_once_and_set_wal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("host.db");
        let conn = open(&path, &host::MIGRATIONS).expect("first open migrates");
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .expect("mode");
        assert_eq!(mode, "wal");
        drop(conn);
        let conn = open(&path, &host::MIGRATIONS).expect("second open is a no-op");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(version, host::MIGRATIONS.scripts.len() as i64);
    }

    #[test]
    fn a_cached_statement_runs_again_with_new_values_without_being_compiled_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("test.db");
        let migrations = Migrations {
            name: "test",
            scripts: &[
                "CREATE TABLE t (seq INTEGER PRIMARY KEY, topic TEXT NOT NULL);
                 CREATE INDEX t_topic ON t (topic);
                 INSERT INTO t (topic) VALUES ('a'), ('b'), ('a'), ('c');",
            ],
        };
        let conn = open(&path, &migrations).expect("open");
        // A bound LIMIT, an equality on an indexed column and a LIKE pattern each let SQLite
        // plan by the bound value unless the connection asks for stable plans.
        let sql = "SELECT seq FROM t WHERE seq > ?1 AND (topic = ?2 OR topic LIKE ?3)
                   ORDER BY seq LIMIT ?4";
        for (after, topic, limit) in [(0, "a", 1), (1, "b", 2), (0, "c", 3), (2, "a", 1)] {
            let mut statement = conn.prepare_cached(sql).expect("prepare");
            let rows: Vec<i64> = statement
                .query_map(
                    rusqlite::params![after, topic, format!("{topic}%"), limit],
                    |r| r.get(0),
                )
                .expect("query")
                .collect::<Result<_, _>>()
                .expect("rows");
            assert!(rows.len() <= limit as usize);
            assert_eq!(
                statement.get_status(rusqlite::StatementStatus::RePrepare),
                0,
                "the statement was compiled again for new values"
            );
        }
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("host.db");
        let conn = open(&path, &host::MIGRATIONS).expect("open");
        conn.pragma_update(None, "user_version", 99).expect("bump");
        drop(conn);
        let err = open(&path, &host::MIGRATIONS).expect_err("too new");
        assert!(matches!(err, StorageError::TooNew { found: 99, .. }));
        // The data dir's check finds it before any store opens, for every file.
        let journal = dir.path().join(journal::FILE);
        drop(open(&journal, &journal::MIGRATIONS).expect("open"));
        let err = verify_data_dir(dir.path()).expect_err("host.db too new");
        assert!(
            matches!(&err, StorageError::TooNew { path, .. } if path.ends_with("host.db")),
            "{err}"
        );
        std::fs::remove_file(&path).expect("remove host.db");
        verify_data_dir(dir.path()).expect("a current journal passes");
        let conn = Connection::open(&journal).expect("open");
        conn.pragma_update(None, "user_version", 99).expect("bump");
        drop(conn);
        let read = open_read_only(&journal).expect_err("a reader refuses it too");
        assert!(
            matches!(read, StorageError::TooNew { found: 99, .. }),
            "{read}"
        );
        let err = verify_data_dir(dir.path()).expect_err("journal.db too new");
        assert!(
            matches!(&err, StorageError::TooNew { path, found: 99, .. } if path.ends_with("journal.db")),
            "{err}"
        );
    }

    #[test]
    fn a_directory_where_a_database_belongs_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(buffer::FILE);
        std::fs::create_dir(&path).expect("a directory in its place");
        for refused in [
            verify_data_dir(dir.path()).expect_err("the check"),
            open(&path, &buffer::MIGRATIONS).expect_err("a store's open"),
            open_read_only(&path).expect_err("a reader's open"),
        ] {
            assert!(
                matches!(&refused, StorageError::NotAFile { path: at } if *at == path),
                "{refused}"
            );
            assert!(
                refused
                    .to_string()
                    .contains("a directory, not a database file")
            );
        }
        assert!(can_write_in(dir.path()), "a temp dir is writable");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("list").count(),
            1,
            "the probe is gone"
        );
    }

    #[test]
    fn a_failing_migration_leaves_the_earlier_schema_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("test.db");
        let first = Migrations {
            name: "test",
            scripts: &["CREATE TABLE a (x INTEGER);"],
        };
        drop(open(&path, &first).expect("version 1"));
        let broken = Migrations {
            name: "test",
            scripts: &[
                "CREATE TABLE a (x INTEGER);",
                "CREATE TABLE b (y INTEGER);",
                "CREATE TABLE c (z INTEGER); THIS IS NOT SQL;",
            ],
        };
        let err = open(&path, &broken).expect_err("script 3 fails");
        assert!(
            matches!(err, StorageError::Migrate { version: 3, .. }),
            "{err}"
        );
        let conn = open(&path, &first).expect("still at version 1");
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('b', 'c')",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(tables, 0, "nothing of versions 2 and 3 was kept");
    }
}
