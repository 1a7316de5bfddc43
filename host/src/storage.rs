//! Opening the host's stores on the configured storage (`storage:` in `cairn.yaml`): SQLite
//! files in the data dir, or one PostgreSQL database several hosts share. Everything above
//! this module sees only the store interfaces.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cairn_storage::StorageError;
use cairn_storage::buffer::{BufferStore, SqliteBuffer};
use cairn_storage::cache::{ResponseCacheStore, SqliteCache};
use cairn_storage::host::{KvStore, LifecycleStore, SqliteHost, StatusStore};
use cairn_storage::journal::{JournalAdmin, JournalOperator, JournalStore, SqliteJournal};
use cairn_storage::memory::{MemoryStore, SessionStore, SqliteMemory};
use cairn_storage::pg::buffer::PgBuffer;
use cairn_storage::pg::cache::PgCache;
use cairn_storage::pg::host::PgHost;
use cairn_storage::pg::journal::PgJournal;
use cairn_storage::pg::journal_admin::PgJournalAdmin;
use cairn_storage::pg::memory::PgMemory;

use crate::buffer::BufferConfig;
use crate::config::Storage;
use crate::journal::JournalConfig;

/// Memory's two interfaces over one store.
pub struct MemoryStores {
    /// Entries, vectors, the audit trail.
    pub entries: Arc<dyn MemoryStore>,
    /// Conversation sessions.
    pub sessions: Arc<dyn SessionStore>,
}

/// The host state's three interfaces over one store.
pub struct HostStores {
    /// Plugin key/value state.
    pub kv: Arc<dyn KvStore>,
    /// This host's run and its plugins' states.
    pub status: Arc<dyn StatusStore>,
    /// Sleep state and schedule ticks.
    pub lifecycle: Arc<dyn LifecycleStore>,
}

impl MemoryStores {
    /// Both of memory's interfaces over `store`.
    fn over<S: MemoryStore + SessionStore + 'static>(store: Arc<S>) -> Self {
        Self {
            entries: store.clone(),
            sessions: store,
        }
    }
}

impl HostStores {
    /// The host state's three interfaces over `store`.
    fn over<S: KvStore + StatusStore + LifecycleStore + 'static>(store: Arc<S>) -> Self {
        Self {
            kv: store.clone(),
            status: store.clone(),
            lifecycle: store,
        }
    }
}

impl Storage {
    /// Refuse damaged database files before any store opens for writing (SQLite: each of
    /// the data dir's files that exists; PostgreSQL: nothing to check here).
    pub fn verify(&self, data_dir: &Path) -> Result<(), StorageError> {
        match self {
            Storage::Sqlite => cairn_storage::verify_data_dir(data_dir),
            Storage::Postgres(_) => Ok(()),
        }
    }

    /// The message buffer's store; on shared storage a claim holds `claim_lease_ms`.
    pub fn buffer(
        &self,
        data_dir: &Path,
        config: &BufferConfig,
    ) -> Result<Box<dyn BufferStore>, StorageError> {
        Ok(match self {
            Storage::Sqlite => Box::new(SqliteBuffer::open(data_dir)?),
            Storage::Postgres(url) => Box::new(PgBuffer::connect(
                url,
                Duration::from_millis(config.claim_lease_ms),
            )?),
        })
    }

    /// The event journal's store; on shared storage a subscription's hold lasts
    /// `subscription_lease_ms`.
    pub fn journal(
        &self,
        data_dir: &Path,
        config: &JournalConfig,
    ) -> Result<Box<dyn JournalStore>, StorageError> {
        Ok(match self {
            Storage::Sqlite => Box::new(SqliteJournal::open(data_dir)?),
            Storage::Postgres(url) => Box::new(PgJournal::connect(
                url,
                Duration::from_millis(config.subscription_lease_ms),
            )?),
        })
    }

    /// The journal as an operator sees it (`cairn journal`, `cairn status`): a data dir's
    /// `journal.db` (read-only unless `writable`; None when there is none yet) or the
    /// shared database's.
    pub fn journal_operator_for(
        &self,
        data_dir: &Path,
        writable: bool,
    ) -> Result<Option<Box<dyn JournalOperator>>, StorageError> {
        Ok(match self {
            Storage::Sqlite if writable => Some(Box::new(JournalAdmin::open(data_dir)?)),
            Storage::Sqlite => JournalAdmin::open_read_only(data_dir)?
                .map(|admin| Box::new(admin) as Box<dyn JournalOperator>),
            Storage::Postgres(url) => Some(Box::new(PgJournalAdmin::connect(url)?)),
        })
    }

    /// [`Storage::journal_operator_for`], read-only.
    pub fn journal_operator(
        &self,
        data_dir: &Path,
    ) -> Result<Option<Box<dyn JournalOperator>>, StorageError> {
        self.journal_operator_for(data_dir, false)
    }

    /// Memory's store.
    pub fn memory(&self, data_dir: &Path) -> Result<MemoryStores, StorageError> {
        Ok(match self {
            Storage::Sqlite => MemoryStores::over(Arc::new(SqliteMemory::open(data_dir)?)),
            Storage::Postgres(url) => MemoryStores::over(Arc::new(PgMemory::connect(url)?)),
        })
    }

    /// The host state's store.
    pub fn host(&self, data_dir: &Path) -> Result<HostStores, StorageError> {
        Ok(match self {
            Storage::Sqlite => HostStores::over(Arc::new(SqliteHost::open(data_dir)?)),
            Storage::Postgres(url) => HostStores::over(Arc::new(PgHost::connect(url)?)),
        })
    }

    /// The LLM response cache's store.
    pub fn cache(&self, data_dir: &Path) -> Result<Arc<dyn ResponseCacheStore>, StorageError> {
        Ok(match self {
            Storage::Sqlite => Arc::new(SqliteCache::open(data_dir)?),
            Storage::Postgres(url) => Arc::new(PgCache::connect(url)?),
        })
    }
}
