//! Read connections for one database, pooled: WAL lets every reader run beside the writer
//! and beside each other, so a turn's reads never queue behind a background scan on the
//! same file. The pool grows on demand (a connection is opened when all are busy) and keeps
//! what it opened for the next read.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;

use crate::open_files::OpenFile;
use crate::{Migrations, StorageError, open};

/// The idle read connections of one database file.
pub struct ReaderPool {
    path: PathBuf,
    migrations: &'static Migrations,
    idle: Mutex<Vec<Connection>>,
    /// Counts the file open while the pool lives; dropped after the connections.
    _open: OpenFile,
}

impl ReaderPool {
    /// A pool over `path` that starts with `first`, an already open connection.
    pub fn new(path: &Path, migrations: &'static Migrations, first: Connection) -> Self {
        Self {
            path: path.to_path_buf(),
            migrations,
            idle: Mutex::new(vec![first]),
            _open: OpenFile::hold(Some(path)),
        }
    }

    /// Run `read` on an idle connection (opening one when none is idle) and return the
    /// connection to the pool afterwards.
    pub fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        let conn = match self.take_idle() {
            Some(conn) => conn,
            None => open(&self.path, self.migrations)?,
        };
        let result = read(&conn);
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
        result.map_err(StorageError::from)
    }

    fn take_idle(&self) -> Option<Connection> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }
}
