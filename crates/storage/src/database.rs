//! A database as a store uses it: one writer thread (group commit) and a pool of read
//! connections, which WAL lets run beside the writer.

use std::path::Path;

use rusqlite::Connection;

use crate::readers::ReaderPool;
use crate::writer::{GroupWriter, Receipt};
use crate::{Migrations, StorageError, open_with_writer};

/// An open, migrated database with its writer thread and its read connections.
pub struct Database {
    writer: GroupWriter,
    readers: ReaderPool,
}

impl Database {
    /// Open (creating and migrating) `path` and start its writer thread `writer_name`.
    pub fn open(
        path: &Path,
        migrations: &'static Migrations,
        writer_name: &str,
    ) -> Result<Self, StorageError> {
        let (writer, reader) = open_with_writer(path, migrations, writer_name)?;
        Ok(Self {
            writer,
            readers: ReaderPool::new(path, migrations, reader),
        })
    }

    /// Queue a write; the receipt resolves once its group committed.
    pub fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Receipt<T> {
        self.writer.submit(write)
    }

    /// Run a read on an idle read connection.
    pub fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        self.readers.read(read)
    }
}
