//! WAL checkpoints off the commit path.
//!
//! SQLite's automatic checkpoint runs inside the commit that fills the WAL past its limit:
//! that commit, and every write queued behind it on the group writer, waits while pages are
//! copied into the database file and it is fsynced (a turn's durable write was seen
//! waiting 140 ms). Here a thread of its own, on its own connection, checkpoints
//! passively a moment after writes were committed, beside the writer, and starts the WAL
//! over once it grew past [`RESTART_PAGES`] because readers never let it restart by itself;
//! the writer's automatic checkpoint stays as a backstop at a much larger WAL. A restarted
//! WAL is cut back to [`RESTART_PAGES`] by the writer's next commit ([`limit_wal`]), not to
//! nothing: its blocks stay allocated, and commits write over them instead of growing the
//! file again (a commit that extends a file costs its fsync more).

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use rusqlite::Connection;

/// WAL pages at which the writer checkpoints by itself (about 40 MiB at 4 KiB pages), in case
/// the checkpointer cannot keep up or is refused.
pub const BACKSTOP_PAGES: i64 = 10_000;

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

/// How long the checkpointer lets commits gather before it copies them: at most one
/// checkpoint per database per interval.
const GATHER: Duration = Duration::from_millis(500);

/// The handle the writer tells of its commits; the thread ends when it is dropped.
pub(crate) struct Checkpointer {
    committed: SyncSender<()>,
}

impl Checkpointer {
    /// Start the checkpointer thread `name` for the database at `path`.
    pub(crate) fn spawn(name: String, path: PathBuf) -> std::io::Result<Self> {
        let (committed, commits) = sync_channel(1);
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&path, &commits))?;
        Ok(Self { committed })
    }

    /// A group was committed (never blocks: commits while one is pending are one).
    pub(crate) fn committed(&self) {
        // Full: a checkpoint is already due. Disconnected: the thread could not open the
        // database, and the writer's own checkpoint does the work.
        let _ = self.committed.try_send(());
    }
}

fn run(path: &std::path::Path, commits: &Receiver<()>) {
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
    while commits.recv().is_ok() {
        std::thread::sleep(GATHER);
        while commits.try_recv().is_ok() {}
        match checkpoint(&conn, "PASSIVE") {
            Ok((_, wal_pages, copied)) => {
                tracing::trace!(path = %path.display(), wal_pages, copied, "checkpointed");
                if wal_pages >= RESTART_PAGES {
                    restart(&conn, path);
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
        checkpointer.committed();
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
        writer
            .execute_batch("CREATE TABLE t (x BLOB)")
            .expect("create");
        let pages = RESTART_PAGES * 2;
        writer
            .execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO t SELECT zeroblob(4000) FROM n",
                [pages],
            )
            .expect("fill");
        let wal = path.with_extension("db-wal");
        let wal_size = || std::fs::metadata(&wal).map_or(0, |m| m.len());
        let limit = RESTART_PAGES as u64 * 4096;
        assert!(wal_size() > limit * 3 / 2, "{}", wal_size());
        let checkpointer = Checkpointer::spawn("test-ckpt".into(), path.clone()).expect("spawn");
        checkpointer.committed();
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
}
