//! The database files this process holds open. SQLite folds the write-ahead log into a
//! database and deletes its `-wal` and `-shm` when the last connection to it closes; a
//! process that exits with one still open leaves them behind (nothing is lost: the next
//! open folds them in, but a data dir copied without them is behind). `cairn run` waits, as
//! it exits, for the last of its databases to close, and names any still held.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The open files, each with how many holders (a writer, a reader pool) it has.
static OPEN: Mutex<BTreeMap<PathBuf, usize>> = Mutex::new(BTreeMap::new());

/// Woken whenever a holder lets its file go.
static RELEASED: Condvar = Condvar::new();

fn open_files() -> MutexGuard<'static, BTreeMap<PathBuf, usize>> {
    OPEN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A holder's claim on a database file, given back when dropped: the field declared last in
/// whatever owns the file's connections, so it is dropped after them.
pub(crate) struct OpenFile(Option<PathBuf>);

impl OpenFile {
    /// Count `path` as open until the claim drops; an in-memory database (no path) is not
    /// counted.
    pub(crate) fn hold(path: Option<&Path>) -> Self {
        let path = path.filter(|path| !path.as_os_str().is_empty());
        if let Some(path) = path {
            *open_files().entry(path.to_path_buf()).or_default() += 1;
        }
        Self(path.map(Path::to_path_buf))
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let Some(path) = self.0.take() else {
            return;
        };
        let mut open = open_files();
        if let Some(holders) = open.get_mut(&path) {
            *holders -= 1;
            if *holders == 0 {
                open.remove(&path);
            }
        }
        drop(open);
        RELEASED.notify_all();
    }
}

/// Wait up to `wait` for every database file of this process to close; returns those still
/// open then (held by work a stop left behind), in path order.
pub fn still_open_after(wait: Duration) -> Vec<PathBuf> {
    let deadline = Instant::now() + wait;
    let mut open = open_files();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if open.is_empty() || left.is_zero() {
            return open.keys().cloned().collect();
        }
        open = RELEASED
            .wait_timeout(open, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_open_until_its_last_holder_lets_it_go() {
        let path = Path::new("/nonexistent/open-files-test.db");
        let held = |open: &[PathBuf]| open.iter().any(|p| p == path);
        let writer = OpenFile::hold(Some(path));
        let readers = OpenFile::hold(Some(path));
        drop(writer);
        assert!(held(&still_open_after(Duration::ZERO)));
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(readers);
        });
        // Other tests' databases may stay open meanwhile: only this file is looked at.
        let deadline = Instant::now() + Duration::from_secs(60);
        while held(&still_open_after(Duration::from_millis(100))) {
            assert!(Instant::now() < deadline, "the file never closed");
        }
        letting_go.join().expect("thread");
    }

    #[test]
    fn an_in_memory_database_is_not_counted() {
        let memory = OpenFile::hold(Some(Path::new("")));
        assert!(memory.0.is_none());
    }
}
