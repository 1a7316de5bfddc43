//! WAL checkpoints off the commit path.
//!
//! SQLite's automatic checkpoint runs inside the commit that fills the WAL past its limit:
//! that commit, and every write queued behind it on the group writer, waits while pages are
//! copied into the database file and it is fsynced (a turn's durable write was seen
//! waiting 140 ms). Here a thread of its own, on its own connection, checkpoints
//! passively a moment after writes were committed, beside the writer; the writer's
//! automatic checkpoint stays as a backstop at a much larger WAL.
//!
//! A WAL starts over from its beginning only when every frame in it was copied at the
//! moment a write begins, and under a steady stream of commits a checkpoint beside the
//! writer never catches up: the commits made while it copied are left. So once the WAL
//! holds [`FINISH_PAGES`] the writer finishes the job after its next commit — a passive
//! checkpoint of the few frames committed meanwhile ([`Checkpointer::finish_if_asked`]) — and its
//! next write starts the WAL over, as SQLite's own checkpoint would, without the copy of the
//! whole WAL on the commit path. Readers may still keep it from starting over (a reader
//! that began before the finish); past [`RESTART_PAGES`] the checkpointer starts it over
//! itself, waiting briefly for readers and the writer. A restarted WAL is cut back to
//! [`RESTART_PAGES`] by the writer's next commit ([`limit_wal`]), not to nothing: its
//! blocks stay allocated, and commits write over them instead of growing the file again (a
//! commit that extends a file costs its fsync more).

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite::hooks::Wal;

/// WAL pages at which the writer checkpoints by itself (about 40 MiB at 4 KiB pages), in case
/// the checkpointer cannot keep up or is refused.
pub const BACKSTOP_PAGES: i64 = 10_000;

/// WAL pages from which the checkpointer copies without waiting for [`GATHER`] and then
/// has the writer finish the copy, so that the WAL starts over. SQLite's own checkpoint
/// runs at 1,000 pages, inside the commit; finishing beside the writer takes a little longer,
/// so starting at half that keeps the WAL about as small (measured in `cargo xtask bench
/// buffer`: a fresh database's single-producer ingest 0.80–0.89 of the raw loop at 1,000,
/// 0.95–0.97 at 500).
const FINISH_PAGES: i64 = 500;

/// WAL pages past which the checkpointer starts the WAL over (about 10 MiB), and the size a
/// restarted WAL is cut back to. A passive checkpoint copies pages but the WAL only restarts
/// from its beginning when, at a commit, every page was copied and no reader was using it:
/// under readers that never pause (a busy host's recalls and routing) that moment may never
/// come, and the file grows. Past this size a restarting checkpoint waits briefly for the
/// readers and the writer instead.
const RESTART_PAGES: i64 = 2_500;

/// Longest a restarting checkpoint waits for readers and the writer; if they are still
/// busy, the next checkpoint tries again.
const RESTART_WAIT: Duration = Duration::from_millis(100);

/// How long the checkpointer lets commits gather before it copies them, unless the WAL
/// grew by [`FINISH_PAGES`] meanwhile.
const GATHER: Duration = Duration::from_millis(500);

/// What the writer's commits tell the checkpointer thread.
#[derive(Default)]
struct Signals {
    /// A commit was made since the last checkpoint.
    committed: bool,
    /// The WAL grew by [`FINISH_PAGES`] since the last checkpoint: copy it now.
    grown: bool,
    /// The writer is gone: the thread ends.
    closed: bool,
}

/// State the writer's connection and the checkpointer thread share.
#[derive(Default)]
struct Shared {
    signals: Mutex<Signals>,
    changed: Condvar,
    /// The WAL's pages at the thread's last checkpoint.
    checkpointed_at: AtomicI64,
    /// Set by the thread when it copied a WAL of [`FINISH_PAGES`] or more: the writer's
    /// next commit copies what was committed meanwhile.
    finish: AtomicBool,
}

impl Shared {
    fn signals(&self) -> MutexGuard<'_, Signals> {
        self.signals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A commit left the WAL at `wal_pages`. The thread is woken only when this changes
    /// what it waits for (the first commit, or the WAL grown), not by every commit.
    fn committed(&self, wal_pages: i64) {
        let at = self.checkpointed_at.load(Ordering::Relaxed);
        // A WAL smaller than at the last checkpoint was started over since.
        let since_checkpoint = if wal_pages >= at {
            wal_pages - at
        } else {
            wal_pages
        };
        let grown = since_checkpoint >= FINISH_PAGES;
        let mut signals = self.signals();
        let wake = !signals.committed || (grown && !signals.grown);
        signals.committed = true;
        signals.grown |= grown;
        drop(signals);
        if wake {
            self.changed.notify_one();
        }
    }

    /// Wait for a commit, then let commits gather for [`GATHER`] or until the WAL grew;
    /// false once the writer is gone.
    fn wait_for_commits(&self) -> bool {
        let mut signals = self.signals();
        while !signals.committed && !signals.closed {
            signals = self
                .changed
                .wait(signals)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let deadline = Instant::now() + GATHER;
        while !signals.grown && !signals.closed {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            signals = self
                .changed
                .wait_timeout(signals, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *signals = Signals {
            closed: signals.closed,
            ..Signals::default()
        };
        !signals.closed
    }
}

/// The writer's side of the checkpointer; the thread ends when it is dropped.
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    /// Joined on drop: see [`crate::writer::join_unless_current`].
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Start the checkpointer thread `name` for the database at `path`.
    pub(crate) fn spawn(name: String, path: PathBuf) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&path, &thread))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Have SQLite tell the checkpointer of every commit on `writer` and the WAL's size
    /// after it. This replaces SQLite's automatic checkpoint, which the hook keeps as a
    /// backstop at [`BACKSTOP_PAGES`] (for when the thread cannot keep up or could not
    /// open the database).
    pub(crate) fn watch(&self, writer: &mut Connection) -> rusqlite::Result<()> {
        let shared = self.shared.clone();
        writer.wal_hook(Some(move |wal: &mut Wal, pages: c_int| {
            let pages = i64::from(pages);
            if pages >= BACKSTOP_PAGES {
                // An error here would fail the statement that committed: log it instead.
                if let Err(e) = wal.checkpoint() {
                    tracing::debug!("the writer's backstop checkpoint failed: {e}");
                }
            }
            shared.committed(pages);
            Ok(())
        }))
    }

    /// After a group was committed on `writer` and answered: when the thread asked for it,
    /// copy the frames committed since its checkpoint, so that the next write starts the
    /// WAL over.
    pub(crate) fn finish_if_asked(&self, writer: &Connection) {
        if self.shared.finish.swap(false, Ordering::AcqRel) {
            match checkpoint(writer, "PASSIVE") {
                Ok((_, wal_pages, copied)) => {
                    tracing::trace!(wal_pages, copied, "checkpoint finished by the writer");
                }
                Err(e) => tracing::debug!("the writer cannot finish the checkpoint: {e}"),
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.signals().closed = true;
        self.shared.changed.notify_one();
        crate::writer::join_unless_current(self.thread.take());
    }
}

fn run(path: &std::path::Path, shared: &Shared) {
    let conn = match Connection::open(path) {
        Ok(conn) => conn,
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot open the checkpointer's connection; the writer checkpoints by itself: {e}");
            return;
        }
    };
    if let Err(e) = conn.busy_timeout(RESTART_WAIT) {
        tracing::warn!(path = %path.display(), "cannot set the checkpointer's wait: {e}");
    }
    while shared.wait_for_commits() {
        match checkpoint(&conn, "PASSIVE") {
            Ok((_, wal_pages, copied)) => {
                tracing::trace!(path = %path.display(), wal_pages, copied, "checkpointed");
                shared.checkpointed_at.store(wal_pages, Ordering::Relaxed);
                if wal_pages >= RESTART_PAGES {
                    restart(&conn, path);
                } else if wal_pages >= FINISH_PAGES {
                    shared.finish.store(true, Ordering::Release);
                }
            }
            Err(e) => tracing::warn!(path = %path.display(), "checkpoint failed: {e}"),
        }
    }
}

/// Have the writer cut a restarted WAL back to [`RESTART_PAGES`] pages at its next commit
/// (SQLite's `journal_size_limit`, applied to the connection that writes).
pub(crate) fn limit_wal(writer: &Connection) -> rusqlite::Result<()> {
    let page_size: i64 = writer.pragma_query_value(None, "page_size", |row| row.get(0))?;
    writer.pragma_update(None, "journal_size_limit", RESTART_PAGES * page_size)
}

/// Copy every page and make the writer's next commit start the WAL over (cutting it back:
/// [`limit_wal`]); when readers or the writer stay busy past [`RESTART_WAIT`], the next
/// checkpoint tries again.
fn restart(conn: &Connection, path: &std::path::Path) {
    match checkpoint(conn, "RESTART") {
        Ok((false, _, _)) => tracing::trace!(path = %path.display(), "WAL restarted"),
        Ok((true, _, _)) => tracing::trace!(path = %path.display(), "WAL busy; restarting later"),
        Err(e) => tracing::debug!(path = %path.display(), "cannot restart the WAL yet: {e}"),
    }
}

/// Run a checkpoint in `mode`: whether it was kept from finishing by readers or the
/// writer, the WAL's pages and how many of them are copied into the database.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(bool, i64, i64)> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        Ok((row.get::<_, i64>(0)? != 0, row.get(1)?, row.get(2)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to a new database in WAL mode that never checkpoints by itself.
    fn wal_writer(path: &std::path::Path) -> Connection {
        let writer = Connection::open(path).expect("open");
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        writer
            .pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no automatic checkpoint");
        // Waits out the checkpointer holding the lock, as the real writer does.
        writer
            .busy_timeout(Duration::from_secs(5))
            .expect("busy timeout");
        writer
    }

    #[test]
    fn commits_are_copied_into_the_database_file_without_the_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let writer = wal_writer(&path);
        writer
            .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .expect("write");
        let file_size = || std::fs::metadata(&path).expect("stat").len();
        // Only the header page is in the file; the table's page is still in the WAL.
        let before = file_size();
        assert!(before <= 4096, "{before} bytes");
        let checkpointer = Checkpointer::spawn("test-ckpt".into(), path.clone()).expect("spawn");
        checkpointer.shared.committed(1);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while file_size() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(file_size() > before, "the checkpointer copied the pages");
    }

    #[test]
    fn a_wal_grown_past_the_restart_size_is_started_over_and_cut_back_not_emptied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let writer = wal_writer(&path);
        limit_wal(&writer).expect("limit");
        let pages = RESTART_PAGES * 2;
        fill(&writer, pages);
        let wal = path.with_extension("db-wal");
        let wal_size = || std::fs::metadata(&wal).map_or(0, |m| m.len());
        let limit = RESTART_PAGES as u64 * 4096;
        assert!(wal_size() > limit * 3 / 2, "{}", wal_size());
        let mut writer = writer;
        let checkpointer = Checkpointer::spawn("test-ckpt".into(), path.clone()).expect("spawn");
        checkpointer.watch(&mut writer).expect("watch");
        checkpointer.shared.committed(pages);
        // Small commits until one starts the WAL over, which cuts the file back to the limit.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while wal_size() > limit && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            writer
                .execute("INSERT INTO t VALUES (zeroblob(10))", [])
                .expect("small write");
        }
        let size = wal_size();
        assert!(
            size <= limit,
            "the WAL was cut back to the limit: {size} bytes"
        );
        assert!(
            size > limit / 2,
            "the WAL kept its blocks instead of being emptied: {size} bytes"
        );
        let rows: i64 = writer
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert!(rows > pages, "every row is still there");
    }

    /// Add a table of blobs to `writer`'s database and commit `pages` pages of them in one
    /// transaction.
    fn fill(writer: &Connection, pages: i64) {
        writer
            .execute_batch("CREATE TABLE IF NOT EXISTS t (x BLOB)")
            .expect("create");
        writer
            .execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO t SELECT zeroblob(4000) FROM n",
                [pages],
            )
            .expect("fill");
    }

    #[test]
    fn once_the_wal_is_large_the_checkpointer_has_the_writer_finish_its_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let writer = wal_writer(&path);
        fill(&writer, FINISH_PAGES + 100);
        let checkpointer = Checkpointer::spawn("test-ckpt".into(), path.clone()).expect("spawn");
        checkpointer.shared.committed(FINISH_PAGES + 100);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !checkpointer.shared.finish.load(Ordering::Acquire)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            checkpointer.shared.finish.load(Ordering::Acquire),
            "a finish is due after copying a WAL of {} pages",
            FINISH_PAGES + 100
        );
    }

    #[test]
    fn a_copy_the_writer_finishes_lets_its_next_write_start_the_wal_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let writer = wal_writer(&path);
        fill(&writer, FINISH_PAGES);
        // The checkpointer's copy, then commits it did not copy: a reader busy meanwhile
        // keeps the first of them from starting the WAL over, as a steady stream of commits
        // beside the checkpointer does.
        let beside = Connection::open(&path).expect("open");
        let reader = Connection::open(&path).expect("open");
        reader
            .execute_batch("BEGIN; SELECT count(*) FROM t;")
            .expect("read");
        checkpoint(&beside, "PASSIVE").expect("checkpoint beside the writer");
        fill(&writer, 50);
        reader.execute_batch("COMMIT").expect("end the read");
        let checkpointer = Checkpointer {
            shared: Arc::default(),
            thread: None,
        };
        checkpointer.shared.finish.store(true, Ordering::Release);
        checkpointer.finish_if_asked(&writer);
        writer
            .execute("INSERT INTO t VALUES (zeroblob(10))", [])
            .expect("small write");
        let (_, wal_pages, _) = checkpoint(&beside, "PASSIVE").expect("look");
        assert!(
            wal_pages < 10,
            "the write after the finish started the WAL over: it holds {wal_pages} pages"
        );
    }
}
