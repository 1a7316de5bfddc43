//! Memory on PostgreSQL: [`crate::memory::MemoryStore`] and [`crate::memory::SessionStore`]
//! over tables every host shares. Entries keep the SQLite rules (an exact duplicate stores
//! nothing; a fact supersedes the live facts with its subject and predicate; every change
//! audited), full-text search runs on a `tsvector` column with a GIN index, and scoping is
//! SQL. Vectors are stored per entry; each host keeps its own in-memory index of them and
//! catches up on the vectors other hosts saved
//! ([`crate::memory::MemoryStore::vectors_saved_after`]).

mod entries;
mod search;
mod sessions;
mod transfer;
mod vectors;

use std::collections::{BTreeMap, HashMap};

use cairn_vocab::memory::{
    AuditRow, ExportRecord, ListFilter, MemoryEntry, MemoryStats, RecallQuery, Scope,
};

use super::{PgPool, PgUrl};
use crate::memory::{
    FullTextMatch, ImportReport, Insertion, MemoryStore, RetentionRun, SavedVector, Unembedded,
    VectorRow,
};
use crate::writer::Receipt;
use crate::{Migrations, StorageError};

/// Migrations of memory's tables on PostgreSQL.
pub const MIGRATIONS: Migrations = Migrations {
    name: "memory",
    scripts: &[
        include_str!("../../../../../migrations/postgres/memory/0001_entries.sql"),
        include_str!("../../../../../migrations/postgres/memory/0002_sessions.sql"),
        include_str!("../../../../../migrations/postgres/memory/0003_hydration_marker.sql"),
        include_str!("../../../../../migrations/postgres/memory/0004_user_index_by_valid_time.sql"),
    ],
};

/// Connections for writes (group-committed) and, apart, for reads, so a turn's reads never
/// queue behind another's commit.
const WRITE_CONNECTIONS: usize = 2;
const READ_CONNECTIONS: usize = 3;

/// Memory's tables on a PostgreSQL database.
pub struct PgMemory {
    writes: PgPool,
    reads: PgPool,
}

impl PgMemory {
    /// Connect to `url` and migrate memory's tables.
    pub fn connect(url: &PgUrl) -> Result<Self, StorageError> {
        let writes = PgPool::connect_migrated(url, WRITE_CONNECTIONS, "memory-pg", &MIGRATIONS)?;
        let reads = PgPool::connect(url, READ_CONNECTIONS, "memory-pg-read")?;
        Ok(Self { writes, reads })
    }
}

impl MemoryStore for PgMemory {
    fn insert(
        &self,
        entry: MemoryEntry,
        supersedes: Option<String>,
        actor: &str,
    ) -> Receipt<Insertion> {
        self.insert_entry(entry, supersedes, actor)
    }

    fn forget(&self, id: &str, actor: &str) -> Receipt<bool> {
        self.forget_entry(id, actor)
    }

    fn set_importance(&self, id: &str, importance: u8, actor: &str) -> Receipt<bool> {
        self.rescore_entry(id, importance, actor)
    }

    fn purge(&self, ids: Vec<String>, actor: &str) -> Receipt<Vec<i64>> {
        self.purge_entries(ids, actor)
    }

    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, StorageError> {
        self.get_entry(id)
    }

    fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, StorageError> {
        self.list_entries(filter)
    }

    fn count(&self, scope: &Scope) -> Result<u64, StorageError> {
        self.count_entries(scope)
    }

    fn audit_trail(&self, id: &str) -> Result<Vec<AuditRow>, StorageError> {
        self.entry_audit_trail(id)
    }

    fn stats(&self, model: Option<(&str, &str)>) -> Result<MemoryStats, StorageError> {
        self.entry_stats(model)
    }

    fn lexical_candidates(
        &self,
        fts: &FullTextMatch,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<HashMap<i64, f64>, StorageError> {
        self.lexical(fts, query, limit)
    }

    fn entries_matching(
        &self,
        seqs: &[i64],
        query: &RecallQuery,
    ) -> Result<Vec<(i64, MemoryEntry)>, StorageError> {
        self.matching(seqs, query)
    }

    fn newest_matching(
        &self,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StorageError> {
        self.newest(query, limit)
    }

    fn same_subject_facts(
        &self,
        entry: &MemoryEntry,
    ) -> Result<Vec<(i64, String, String)>, StorageError> {
        self.same_subject(entry)
    }

    fn visit_vectors(
        &self,
        provider: &str,
        model: &str,
        visit: &mut dyn FnMut(i64, Scope, Vec<f32>),
    ) -> Result<(), StorageError> {
        self.visit(provider, model, visit)
    }

    fn stored_vectors(
        &self,
        provider: &str,
        model: &str,
        seqs: &[i64],
    ) -> Result<HashMap<i64, Vec<f32>>, StorageError> {
        self.vectors_of(provider, model, seqs)
    }

    fn shared(&self) -> bool {
        true
    }

    fn vector_mark(&self) -> Result<i64, StorageError> {
        self.reads.read(|client| {
            Ok(client
                .query_one("SELECT last FROM memory_vector_head WHERE id = 1", &[])?
                .get(0))
        })
    }

    fn vectors_saved_after(
        &self,
        provider: &str,
        model: &str,
        mark: i64,
        limit: usize,
    ) -> Result<(Vec<SavedVector>, i64), StorageError> {
        self.saved_after(provider, model, mark, limit as i64)
    }

    fn unembedded(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Unembedded>, StorageError> {
        self.pending_vectors(provider, model, after, limit)
    }

    fn embedding_backlog(&self, provider: &str, model: &str) -> Result<u64, StorageError> {
        self.pending_count(provider, model)
    }

    fn cached_vectors(
        &self,
        provider: &str,
        model: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Vec<f32>>, StorageError> {
        self.cached(provider, model, hashes)
    }

    fn save_vectors(
        &self,
        provider: &str,
        model: &str,
        rows: Vec<VectorRow>,
        cache_capacity: usize,
    ) -> Receipt<()> {
        self.save(provider, model, rows, cache_capacity)
    }

    fn clear_vectors(&self) -> Receipt<()> {
        self.clear()
    }

    fn retention(&self, run: RetentionRun) -> Receipt<Option<BTreeMap<String, u64>>> {
        self.run_retention(run)
    }

    fn export(&self) -> Result<Vec<ExportRecord>, StorageError> {
        self.export_all()
    }

    fn import(&self, records: Vec<ExportRecord>) -> Receipt<ImportReport> {
        self.import_records(records)
    }

    fn restore(&self, records: Vec<(MemoryEntry, bool)>) -> Receipt<(u64, Vec<MemoryEntry>)> {
        self.restore_records(records)
    }

    fn awaits_hydration(&self) -> Result<bool, StorageError> {
        self.hydration_pending()
    }

    fn settle_hydration(&self) -> Receipt<()> {
        self.hydration_done()
    }
}
