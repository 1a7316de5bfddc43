//! `memory.db` behind [`MemoryStore`] (entries, their full-text index, vectors, the audit
//! trail, retention bookkeeping) and [`SessionStore`] (conversation sessions and their
//! state machine's rows). [`SqliteMemory`] implements both over one database with one
//! writer thread and a small pool of read connections, which WAL lets run beside it.
//!
//! The store applies the rules that must hold atomically with a write (an exact duplicate
//! stores nothing; a fact supersedes the live facts with its subject and predicate;
//! retention never forgets facts, core memories or unconsolidated episodes); everything
//! else — validation, ids, near-duplicates, ranking, embedding — is the memory crate's.

mod entries;
pub(crate) mod search;
mod sessions;
mod transfer;
pub(crate) mod vectors;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cairn_vocab::memory::{
    AuditRow, ExportRecord, ListFilter, MemoryEntry, MemoryStats, RecallQuery, Scope,
};
use cairn_vocab::session::Session;
use rusqlite::Connection;
use serde::Serialize;

use crate::readers::ReaderPool;
use crate::writer::{GroupWriter, Receipt};
use crate::{Migrations, StorageError, open};

pub use search::{FullTextMatch, SCORED_MATCHES, SCORED_MATCHES_MAX};
pub use sessions::{Activity, EndedSession};
pub use vectors::quantize_int8;

/// The store's file in a data dir.
pub const FILE: &str = "memory.db";

/// Migrations of `memory.db`.
pub const MIGRATIONS: Migrations = Migrations {
    name: "memory",
    scripts: &[
        include_str!("../../../../migrations/memory/0001_init.sql"),
        include_str!("../../../../migrations/memory/0002_session_conversations.sql"),
        include_str!("../../../../migrations/memory/0003_scoped_fts.sql"),
        include_str!("../../../../migrations/memory/0004_one_session_table.sql"),
        include_str!("../../../../migrations/memory/0005_int8_vectors.sql"),
        include_str!("../../../../migrations/memory/0006_hydration_marker.sql"),
        include_str!("../../../../migrations/memory/0007_user_index_by_valid_time.sql"),
    ],
};

/// Of the current facts `live` (id, valid from) about what a new fact is about, the newest
/// one said after `valid_from`, if any: the new fact is then its past, not its successor.
pub(crate) fn newer_than(live: &[(String, i64)], valid_from: i64) -> Option<(String, i64)> {
    live.iter()
        .filter(|(_, since)| *since > valid_from)
        .max_by_key(|(_, since)| *since)
        .cloned()
}

/// SHA-256 of a memory's content (hex): the embedding cache key, the exact-duplicate key,
/// and how a snapshot tells an edited text.
pub fn content_hash(content: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(content.as_bytes()))
}

/// What inserting an entry did.
#[derive(Debug, Clone, PartialEq)]
pub enum Insertion {
    /// Stored; the ids of the live entries it superseded.
    Stored {
        /// Superseded ids.
        superseded: Vec<String>,
    },
    /// A live entry with the same content, kind, scope, subject and predicate exists.
    Duplicate {
        /// Its id.
        existing: String,
    },
    /// The explicit `supersedes` target cannot be superseded; the text says why.
    Refused(String),
}

/// One entry waiting for a vector of the configured model.
#[derive(Debug, Clone)]
pub struct Unembedded {
    /// Its row number.
    pub seq: i64,
    /// Its text.
    pub content: String,
    /// [`content_hash`] of the text.
    pub content_hash: String,
    /// Its scope (the vector index filters by it).
    pub scope: Scope,
}

/// One vector to keep: the entry's row number, its content hash (the cache key) and the
/// vector.
pub type VectorRow = (i64, String, Vec<f32>);

/// A vector saved to the store, as a host catching up on other hosts' saves reads it.
#[derive(Debug, Clone)]
pub struct SavedVector {
    /// The entry's row number.
    pub seq: i64,
    /// The entry's scope.
    pub scope: Scope,
    /// The vector.
    pub vector: Vec<f32>,
}

/// A retention pass: forget entries of each category recorded before its retention.
#[derive(Debug, Clone)]
pub struct RetentionRun {
    /// Now, in ms.
    pub now: i64,
    /// Skip the pass when the last one ran less than this long ago (ms) …
    pub interval_ms: i64,
    /// … unless forced.
    pub force: bool,
    /// Days kept per category.
    pub retention_days: BTreeMap<String, u32>,
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// Entries added.
    pub entries: u64,
    /// Sessions added.
    pub sessions: u64,
    /// Audit rows added.
    pub audit: u64,
    /// Records already present (same id), left as they were.
    pub skipped: u64,
}

/// Where memories live. Reads answer from committed state; writes return a [`Receipt`]
/// that resolves once they are on disk.
pub trait MemoryStore: Send + Sync {
    /// Insert a new entry with the rules that must hold atomically: an exact duplicate of a
    /// live non-episode stores nothing; an explicit `supersedes` target must be live; a fact
    /// with the subject and predicate of live facts supersedes them (an audit row each,
    /// by `actor`).
    fn insert(
        &self,
        entry: MemoryEntry,
        supersedes: Option<String>,
        actor: &str,
    ) -> Receipt<Insertion>;
    /// Soft-delete a live entry (audited); whether there was one.
    fn forget(&self, id: &str, actor: &str) -> Receipt<bool>;
    /// Re-score a live entry's importance (audited with the old and new score); whether
    /// there was one.
    fn set_importance(&self, id: &str, importance: u8, actor: &str) -> Receipt<bool>;
    /// Remove entries for good — `ids`, or every forgotten entry when empty — with an audit
    /// row each; the row numbers removed.
    fn purge(&self, ids: Vec<String>, actor: &str) -> Receipt<Vec<i64>>;
    /// One entry by id, live or not.
    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, StorageError>;
    /// Entries matching `filter`, newest first.
    fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, StorageError>;
    /// Live entries in a scope.
    fn count(&self, scope: &Scope) -> Result<u64, StorageError>;
    /// An entry's audit trail, oldest first.
    fn audit_trail(&self, id: &str) -> Result<Vec<AuditRow>, StorageError>;
    /// Counts for `cairn memory stats`; `embedded` and `embedding_backlog` for `model`
    /// (provider, model) when vectors are on.
    fn stats(&self, model: Option<(&str, &str)>) -> Result<MemoryStats, StorageError>;

    /// Row numbers and BM25 (lower is better) of the entries matching `fts` and `query`'s
    /// filters, best first. When a word is in most of the scope's matches it is left out
    /// of the search (see [`FullTextMatch`]).
    fn lexical_candidates(
        &self,
        fts: &FullTextMatch,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<HashMap<i64, f64>, StorageError>;
    /// The entries among `seqs` that pass `query`'s filters, with their row numbers.
    fn entries_matching(
        &self,
        seqs: &[i64],
        query: &RecallQuery,
    ) -> Result<Vec<(i64, MemoryEntry)>, StorageError>;
    /// The `limit` entries passing `query`'s filters said last (by valid time, then save
    /// order), newest first: for a question that names a time and nothing to match.
    fn newest_matching(
        &self,
        query: &RecallQuery,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StorageError>;
    /// Live facts of the same kind, subject, agent and user as `entry` with another
    /// predicate (newest 50): row number, id and content, for near-duplicate checks.
    fn same_subject_facts(
        &self,
        entry: &MemoryEntry,
    ) -> Result<Vec<(i64, String, String)>, StorageError>;

    /// Visit every live entry's stored vector of `provider`/`model`, oldest entry first
    /// on SQLite (in save order on PostgreSQL), so an index keeping the newest ends with
    /// them.
    fn visit_vectors(
        &self,
        provider: &str,
        model: &str,
        visit: &mut dyn FnMut(i64, Scope, Vec<f32>),
    ) -> Result<(), StorageError>;
    /// The stored vectors of `provider`/`model` of the entries `seqs` that have one: for
    /// the few recall candidates whose vectors the in-memory index no longer holds.
    fn stored_vectors(
        &self,
        provider: &str,
        model: &str,
        seqs: &[i64],
    ) -> Result<HashMap<i64, Vec<f32>>, StorageError>;
    /// Whether other hosts write to this store too (a shared database): this host's
    /// vector index must then catch up on their saves, and its embedder cannot assume it
    /// saw every entry below the last one it embedded.
    fn shared(&self) -> bool {
        false
    }
    /// Where saves of vectors stand now: [`MemoryStore::vectors_saved_after`] this mark
    /// returns every vector saved from now on. Read it before [`MemoryStore::visit_vectors`]
    /// to load an index that can catch up. A store only this process writes to has no
    /// marks (always 0).
    fn vector_mark(&self) -> Result<i64, StorageError> {
        Ok(0)
    }
    /// Up to `limit` live entries' vectors of `provider`/`model` saved after `mark` — by
    /// this host or another sharing the database — in the order they committed, and the
    /// mark to ask from next time. A store only this process writes to has nothing to
    /// catch up on.
    fn vectors_saved_after(
        &self,
        provider: &str,
        model: &str,
        mark: i64,
        limit: usize,
    ) -> Result<(Vec<SavedVector>, i64), StorageError> {
        let _ = (provider, model, limit);
        Ok((Vec::new(), mark))
    }
    /// Live entries after row `after` without a vector of `provider`/`model`, in order.
    fn unembedded(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Unembedded>, StorageError>;
    /// How many live entries lack a vector of `provider`/`model`.
    fn embedding_backlog(&self, provider: &str, model: &str) -> Result<u64, StorageError>;
    /// Cached vectors of `provider`/`model` by content hash.
    fn cached_vectors(
        &self,
        provider: &str,
        model: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Vec<f32>>, StorageError>;
    /// Keep vectors for entries and in the cache, which keeps at most `cache_capacity`
    /// (least recently used go first).
    fn save_vectors(
        &self,
        provider: &str,
        model: &str,
        rows: Vec<VectorRow>,
        cache_capacity: usize,
    ) -> Receipt<()>;
    /// Drop every vector and the cache.
    fn clear_vectors(&self) -> Receipt<()>;

    /// Forget entries past their category's retention (never facts or core memories;
    /// episodes only once their session is consolidated), unless the last pass was too
    /// recent; `None` when skipped, else what was forgotten per category.
    fn retention(&self, run: RetentionRun) -> Receipt<Option<BTreeMap<String, u64>>>;
    /// Every session, entry and audit row, in the order they were recorded.
    fn export(&self) -> Result<Vec<ExportRecord>, StorageError>;
    /// Add checked records; those already present (same id, or an equal audit row) are
    /// skipped.
    fn import(&self, records: Vec<ExportRecord>) -> Receipt<ImportReport>;
    /// Insert the snapshot entries missing from the store (`true` beside an entry means
    /// its text was edited in the snapshot: an `edit` audit row notes it); how many were
    /// inserted, and the present live entries whose text differs from the snapshot's.
    fn restore(&self, records: Vec<(MemoryEntry, bool)>) -> Receipt<(u64, Vec<MemoryEntry>)>;
    /// Whether memory still awaits its first hydration from a snapshot: from the store's
    /// creation (while it remembers nothing) until [`MemoryStore::settle_hydration`], so a
    /// start that dies before hydrating finished hydrates again on the next.
    fn awaits_hydration(&self) -> Result<bool, StorageError>;
    /// Record that the first hydration is done, or was not wanted.
    fn settle_hydration(&self) -> Receipt<()>;
}

/// Sessions [`SessionStore::end_idle`] leaves open however idle they look: what they are
/// waiting for has happened or will, and belongs in them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeepOpen {
    /// Conversations (`<channel>:<conversation>`) with a message not answered yet: every
    /// active session of theirs stays.
    pub conversations: Vec<String>,
    /// Sessions with activity the lifecycle has not read yet (an answer journaled while its
    /// host stopped, say).
    pub sessions: Vec<String>,
}

/// The session a turn belongs to: its id, decided at once, and the receipt of its row
/// (resolved at once when the session was already recorded).
pub struct SessionChoice {
    /// The session id: the conversation, then `#2`, `#3`, … for its later sessions.
    pub id: String,
    /// Resolves once the session is on disk.
    pub recorded: Receipt<()>,
}

impl SessionChoice {
    /// A session named `id` that is not recorded (a host whose sessions cannot be kept).
    pub fn unrecorded(id: &str) -> Self {
        Self {
            id: id.to_string(),
            recorded: Receipt::ready(Ok(())),
        }
    }

    /// A session named `id` that is already recorded: nothing is left to write.
    pub fn recorded(id: &str) -> Self {
        Self::unrecorded(id)
    }
}

/// Conversation sessions: one row per stretch of a conversation, numbered `#2`, `#3`, …
/// when it resumes after its session ended, with its transcript and state
/// (`active` → `ended` / `pending` → `consolidated`). The lifecycle drives the state
/// machine; memory reads it.
pub trait SessionStore: Send + Sync {
    /// The session a conversation's new activity at `now` belongs to: the conversation's
    /// current session while it is active and was active less than `idle_ms` ago, else a
    /// new one. The id is decided at once (a read); a new session is recorded by the
    /// choice's receipt, so a turn reads its context while the row is written. Sessions of
    /// one conversation are opened by one turn at a time.
    fn session_for(
        &self,
        conversation: &str,
        user: Option<&str>,
        agent: Option<&str>,
        now: i64,
        idle_ms: i64,
    ) -> Result<SessionChoice, StorageError>;
    /// Add journal event `seq` to a session's transcript (keeping the last `keep`
    /// entries), creating the session when unknown. Events already seen are skipped; the
    /// first event of a session moves its user's other active or ended sessions to
    /// `pending`.
    fn record_activity(
        &self,
        session: &str,
        user: Option<&str>,
        seq: i64,
        at: i64,
        entry: serde_json::Value,
        keep: usize,
    ) -> Receipt<Activity>;
    /// End every active session last active at or before `idle_before` (state `ended`,
    /// reason `idle`, at `now`), but those `keep` names.
    fn end_idle(&self, idle_before: i64, now: i64, keep: KeepOpen) -> Receipt<Vec<EndedSession>>;
    /// How many sessions are active.
    fn active_sessions(&self) -> Result<u64, StorageError>;
    /// Sessions waiting for consolidation (`ended` or `pending`), oldest end first.
    fn awaiting_consolidation(&self, limit: usize) -> Result<Vec<Session>, StorageError>;
    /// One session.
    fn session(&self, id: &str) -> Result<Option<Session>, StorageError>;
    /// Move a session to `consolidated`; whether it exists.
    fn mark_consolidated(&self, id: &str, at: i64) -> Receipt<bool>;
}

/// `memory.db`: a writer thread for writes, pooled connections for reads.
pub struct SqliteMemory {
    path: PathBuf,
    writer: GroupWriter,
    readers: ReaderPool,
}

impl SqliteMemory {
    /// Open (creating and migrating) `<data>/memory.db` and start its writer thread. Sessions
    /// an older Cairn kept in `host.db` are moved in first.
    pub fn open(data_dir: &Path) -> Result<Self, StorageError> {
        let path = data_dir.join(FILE);
        let conn = open(&path, &MIGRATIONS)?;
        crate::check_integrity(&conn, &path)?;
        // memory.db is sound: damage found from here on is host.db's.
        let host_db = data_dir.join(crate::host::FILE);
        if let Err(e) = sessions::adopt_host_sessions(&conn, &host_db) {
            // In a data dir this process cannot write to (a read-only mount of one a killed
            // host left, say) nothing can be moved or dropped; when host.db has no sessions
            // left to move, memory is read as it is.
            let read_only = !crate::can_write_in(data_dir);
            if !read_only || sessions::host_sessions_waiting(&host_db)? {
                return Err(Self::adoption_failed(&path, &host_db, e, read_only));
            }
        }
        let (writer, reader) = crate::start_writer(&path, &MIGRATIONS, "memory-writer", conn)?;
        let readers = ReaderPool::new(&path, &MIGRATIONS, reader);
        Ok(Self {
            path,
            writer,
            readers,
        })
    }

    /// Why moving host.db's sessions in failed: damage of host.db, a data dir that cannot
    /// be written (`read_only`), or the move itself.
    fn adoption_failed(
        path: &Path,
        host_db: &Path,
        error: rusqlite::Error,
        read_only: bool,
    ) -> StorageError {
        if crate::is_damage(&error) || read_only {
            return StorageError::open(host_db, error);
        }
        StorageError::Migrate {
            path: path.to_path_buf(),
            version: MIGRATIONS.scripts.len(),
            message: format!("moving sessions out of host.db: {error}"),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StorageError> {
        self.readers.read(read)
    }

    fn submit<T: Send + 'static>(
        &self,
        write: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Receipt<T> {
        self.writer.submit(write)
    }
}

impl MemoryStore for SqliteMemory {
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
        self.backlog(provider, model)
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
