//! A database as a store uses it: one writer thread (group commit) and one connection for
//! reads, which WAL lets run beside the writer.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::Connection;

use crate::writer::{GroupWriter, Receipt};
use crate::{Migrations, StorageError, open_with_writer};

/// An open, migrated database with its writer thread and a read connection.
pub struct Database {
    writer: GroupWriter,
    reader: Mutex<Connection>,
}

impl Database {
    /// Open (creating and migrating) `path` and start its writer thread `writer_name`.
    pub fn open(
        path: &Path,
        migrations: &Migrations,
        writer_name: &str,
    ) -> Result<Self, StorageError> {
        let (writer, reader) = open_with_writer(path, migrations, writer_name)?;
        Ok(Self {
            writer,
            reader: Mutex::new(reader),
        })
    }

    /// Queue a write; the receipt resolves once its group committed.
    pub fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Receipt<T> {
        self.writer.submit(write)
    }

    /// Run a read on the read connection.
    pub fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        let conn = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        read(&conn).map_err(|e| StorageError::Sqlite(e.to_string()))
    }
}
