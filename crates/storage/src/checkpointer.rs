//! WAL checkpoints off the commit path.
//!
//! SQLite's automatic checkpoint runs inside the commit that fills the WAL past its limit:
//! that commit, and every write queued behind it on the group writer, waits while pages are
//! copied into the database file and it is fsynced (a turn's durable write was seen
//! waiting 140 ms). Here a thread of its own, on its own connection, checkpoints
//! passively a moment after writes were committed, beside the writer; the writer's
//! automatic checkpoint stays as a backstop at a much larger WAL.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use rusqlite::Connection;

/// WAL pages at which the writer checkpoints by itself (about 40 MiB at 4 KiB pages), in case
/// the checkpointer cannot keep up or is refused.
pub(crate) const BACKSTOP_PAGES: i64 = 10_000;

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
    while commits.recv().is_ok() {
        std::thread::sleep(GATHER);
        while commits.try_recv().is_ok() {}
        let outcome = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
        });
        match outcome {
            Ok((wal_pages, copied)) => {
                tracing::trace!(path = %path.display(), wal_pages, copied, "checkpointed")
            }
            Err(e) => tracing::warn!(path = %path.display(), "checkpoint failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_copied_into_the_database_file_without_the_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        let writer = Connection::open(&path).expect("open");
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        writer
            .pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no automatic checkpoint");
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
}
