//! The SQLite memory store, `<data>/memory.db`: the only code that reads or writes its
//! tables. Writes go through one group-commit writer thread; reads use a small pool of
//! connections (WAL lets them run beside the writer).

mod embedding;
mod hygiene;
mod rows;
mod search;
mod sessions;
mod transfer;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::embed::{self, EmbedSignal, EmbeddingProvider, HashEmbedder, ScanFilter, VectorIndex};
use super::recall::{self, RecallHit, RecallQuery};
use super::{
    MemoryConfig, MemoryEntry, MemoryError, MemoryKind, MemoryStats, NewMemory, SNAPSHOT_FILE,
    Scope, Session, StoreOutcome,
};
use super::{content_hash, snapshot, stream};
use cairn_storage::writer::GroupWriter;
use cairn_storage::{self as store, Migrations, now_ms};
pub use cairn_vocab::memory::{AuditRow, ExportRecord, ListFilter};

pub use hygiene::HygieneReport;
use rows::*;
use sessions::row_to_session;
pub use transfer::ImportReport;

/// Migrations of `memory.db`.
pub const MEMORY_MIGRATIONS: Migrations = Migrations {
    name: "memory",
    scripts: &[
        include_str!("../../../migrations/memory/0001_init.sql"),
        include_str!("../../../migrations/memory/0002_session_conversations.sql"),
        include_str!("../../../migrations/memory/0003_scoped_fts.sql"),
    ],
};

/// Longest content of one memory, in bytes.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Similarity at or above which a memory about the same subject is a duplicate.
pub const DUPLICATE_SIMILARITY: f64 = 0.85;

const ENTRY_COLUMNS: &str = "e.seq, e.id, e.kind, e.content, e.category, e.agent_id, e.user_id, \
    e.session_id, e.importance, e.tags, e.issue_refs, e.pr_refs, e.sources, e.subject, \
    e.predicate, e.valid_from, e.valid_to, e.recorded_at, e.superseded_by, e.forgotten_at";

/// The SQLite memory store.
pub struct MemoryStore {
    path: PathBuf,
    data_dir: PathBuf,
    config: MemoryConfig,
    writer: GroupWriter,
    readers: Mutex<Vec<Connection>>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    index: VectorIndex,
    index_loaded: std::sync::OnceLock<()>,
    /// Every live entry up to this seq has a vector from the configured model.
    embedded_through: std::sync::atomic::AtomicI64,
    signal: Arc<EmbedSignal>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl MemoryStore {
    /// Open (creating and migrating) `<data>/memory.db`. On a cold start — no memory.db yet
    /// — core memories are hydrated from `MEMORY_SNAPSHOT.md` when it exists and
    /// `auto_hydrate` is on. Vectors of the configured model are loaded for recall.
    pub fn open(data_dir: &Path, config: MemoryConfig) -> Result<Arc<Self>, MemoryError> {
        let path = data_dir.join("memory.db");
        let cold = !path.exists();
        let (writer, reader) = store::open_with_writer(&path, &MEMORY_MIGRATIONS, "cairn-memory")
            .map_err(|e| MemoryError::Storage(e.to_string()))?;
        let embedder = embed::provider_from_config(&config.embeddings);
        let memory = Arc::new(Self {
            path,
            data_dir: data_dir.to_path_buf(),
            config,
            writer,
            readers: Mutex::new(vec![reader]),
            embedder,
            index: VectorIndex::default(),
            index_loaded: std::sync::OnceLock::new(),
            embedded_through: std::sync::atomic::AtomicI64::new(0),
            signal: Arc::new(EmbedSignal::default()),
            worker: Mutex::new(None),
        });
        let snapshot = data_dir.join(SNAPSHOT_FILE);
        if cold && memory.config.auto_hydrate && snapshot.exists() {
            let restored = memory.hydrate(&snapshot)?;
            tracing::info!(restored, snapshot = %snapshot.display(), "memory.db was missing: core memories hydrated from the snapshot");
        }
        Ok(memory)
    }

    /// The settings this store runs with.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read<T>(
        &self,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, MemoryError> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => store::open(&self.path, &MEMORY_MIGRATIONS)
                .map_err(|e| MemoryError::Storage(e.to_string()))?,
        };
        let result = read(&conn);
        self.readers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
        Ok(result?)
    }

    /// The vector index, loaded from memory.db on first use (commands that never recall
    /// never pay for it).
    fn index(&self) -> &VectorIndex {
        self.index_loaded.get_or_init(|| {
            if let Err(e) = self.load_index() {
                tracing::warn!(
                    "cannot load stored vectors; they are rebuilt as entries are embedded: {e}"
                );
            }
        });
        &self.index
    }

    fn load_index(&self) -> Result<(), MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(());
        };
        let (provider, model) = (
            embedder.provider().to_string(),
            embedder.model().to_string(),
        );
        self.read(|conn| {
            let mut statement = conn.prepare(
                "SELECT e.seq, e.agent_id, e.user_id, e.session_id, m.vector
                 FROM embeddings m JOIN entries e ON e.seq = m.entry_seq
                 WHERE m.provider = ?1 AND m.model = ?2 AND e.forgotten_at IS NULL",
            )?;
            let mut rows = statement.query(params![provider, model])?;
            while let Some(row) = rows.next()? {
                let scope = Scope {
                    agent_id: row.get(1)?,
                    user_id: row.get(2)?,
                    session_id: row.get(3)?,
                };
                let bytes: Vec<u8> = row.get(4)?;
                self.index
                    .upsert(row.get(0)?, &scope, &embed::from_bytes(&bytes));
            }
            Ok(())
        })
    }

    // ---------------------------------------------------------------- writes

    /// Store a memory. Episodes are stored as given (never deduplicated); other kinds skip
    /// exact duplicates in the same scope; a fact with the subject and predicate of a live
    /// fact (or naming one in `supersedes`) supersedes it; a fact nearly equal (similarity
    /// ≥ 0.85) to a live fact about the same subject is a duplicate.
    pub fn store_blocking(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError> {
        let prepared = self.prepare(memory)?;
        if let Some((existing, similarity)) = self.near_duplicate(&prepared)? {
            return Ok(StoreOutcome::Duplicate {
                existing,
                similarity,
            });
        }
        let outcome = self
            .writer
            .write_blocking(move |conn| insert(conn, &prepared, "store"))?;
        self.after_insert(&outcome);
        outcome
    }

    fn after_insert(&self, outcome: &Result<StoreOutcome, MemoryError>) {
        if matches!(outcome, Ok(StoreOutcome::Stored { .. })) && self.embedder.is_some() {
            self.signal.notify();
        }
    }

    fn prepare(&self, memory: NewMemory) -> Result<Prepared, MemoryError> {
        validate(&memory)?;
        let now = now_ms();
        let entry = crate::record(&memory, new_id(&memory.content, now), now);
        Ok(Prepared {
            entry,
            supersedes: memory.supersedes,
        })
    }

    /// A live fact about the same subject (in the same scope, with another predicate) whose
    /// similarity to the new one is at least 0.85, measured with the configured embeddings
    /// (lexical hash vectors when embeddings are off).
    fn near_duplicate(&self, prepared: &Prepared) -> Result<Option<(String, f64)>, MemoryError> {
        let entry = &prepared.entry;
        let Some(subject) = &entry.subject else {
            return Ok(None);
        };
        if entry.kind == MemoryKind::Episode || prepared.supersedes.is_some() {
            return Ok(None);
        }
        let (agent, user, predicate) = (
            entry.scope.agent_id.clone(),
            entry.scope.user_id.clone(),
            entry.predicate.clone(),
        );
        let kind = entry.kind.as_str();
        let candidates: Vec<(i64, String, String)> = self.read(|conn| {
            let mut statement = conn.prepare(
                "SELECT seq, id, content FROM entries
                 WHERE subject = ?1 AND kind = ?2 AND valid_to IS NULL AND forgotten_at IS NULL
                   AND agent_id IS ?3 AND user_id IS ?4 AND predicate IS NOT ?5
                 ORDER BY seq DESC LIMIT 50",
            )?;
            statement
                .query_map(params![subject, kind, agent, user, predicate], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect()
        })?;
        if candidates.is_empty() {
            return Ok(None);
        }
        let lexical = HashEmbedder::new(256);
        let embed_one = |text: &str| -> Vec<f32> {
            match &self.embedder {
                Some(embedder) => embedder
                    .embed(&[text.to_string()])
                    .ok()
                    .and_then(|mut v| v.pop())
                    .unwrap_or_else(|| lexical.vector(text)),
                None => lexical.vector(text),
            }
        };
        let new_vector = embed_one(&entry.content);
        let mut best: Option<(String, f64)> = None;
        for (seq, id, content) in candidates {
            let vector = self
                .index()
                .vector(seq)
                .filter(|v| v.len() == new_vector.len())
                .unwrap_or_else(|| embed_one(&content));
            let similarity = f64::from(embed::cosine(&new_vector, &vector));
            if similarity >= DUPLICATE_SIMILARITY && best.as_ref().is_none_or(|b| similarity > b.1)
            {
                best = Some((id, similarity));
            }
        }
        Ok(best)
    }

    /// Soft-delete a memory: it is never recalled again but stays in the database (and in
    /// the audit trail) until purged. Returns whether a live entry was forgotten.
    pub fn forget_blocking(&self, id: &str, actor: &str) -> Result<bool, MemoryError> {
        let (id, actor) = (id.to_string(), actor.to_string());
        Ok(self
            .writer
            .write_blocking(move |conn| forget(conn, &id, &actor))?)
    }

    /// Remove entries for good: the given ids, or (with none given) every forgotten entry.
    /// Returns how many rows were removed.
    pub fn purge(&self, ids: &[String], actor: &str) -> Result<u64, MemoryError> {
        let (ids, actor) = (ids.to_vec(), actor.to_string());
        let removed: Vec<(i64, String)> = self.writer.write_blocking(move |conn| {
            let targets: Vec<(i64, String)> = if ids.is_empty() {
                let mut statement =
                    conn.prepare("SELECT seq, id FROM entries WHERE forgotten_at IS NOT NULL")?;
                statement
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?
            } else {
                let mut found = Vec::new();
                for id in &ids {
                    if let Some(seq) = conn
                        .query_row("SELECT seq FROM entries WHERE id = ?1", params![id], |r| {
                            r.get(0)
                        })
                        .optional()?
                    {
                        found.push((seq, id.clone()));
                    }
                }
                found
            };
            let now = now_ms();
            for (seq, id) in &targets {
                conn.execute("DELETE FROM entries WHERE seq = ?1", params![seq])?;
                audit(conn, id, "purge", &actor, now, None)?;
            }
            Ok(targets)
        })?;
        for (seq, _) in &removed {
            self.index().remove(*seq);
            // SQLite may hand a purged top seq to the next entry: embed from below it.
            self.embedded_through.fetch_min(seq - 1, Ordering::AcqRel);
        }
        Ok(removed.len() as u64)
    }

    // ---------------------------------------------------------------- reads

    /// One entry by id (forgotten and superseded ones too: `get` is for inspection).
    pub fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        self.read(|conn| {
            conn.query_row(
                &format!("SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.id = ?1"),
                params![id],
                row_to_entry,
            )
            .optional()
        })
    }

    /// Entries matching `filter`, newest first.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError> {
        let mut sql = Filters::default();
        sql.scope(&filter.scope);
        sql.kinds(&filter.kinds);
        if let Some(category) = &filter.category {
            sql.push("e.category = ?", Value::Text(category.clone()));
        }
        if !filter.include_superseded {
            sql.clauses.push("e.valid_to IS NULL".into());
        }
        if !filter.include_forgotten {
            sql.clauses.push("e.forgotten_at IS NULL".into());
        }
        let query = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e WHERE {} ORDER BY e.seq DESC LIMIT {}",
            sql.clause(),
            filter.limit.max(1)
        );
        self.read(|conn| {
            let mut statement = conn.prepare(&query)?;
            statement
                .query_map(params_from_iter(sql.values.iter()), row_to_entry)?
                .collect()
        })
    }

    /// How many live entries a scope holds.
    pub fn count(&self, scope: &Scope) -> Result<u64, MemoryError> {
        let mut sql = Filters::default();
        sql.scope(scope);
        sql.clauses
            .push("e.valid_to IS NULL AND e.forgotten_at IS NULL".into());
        let query = format!("SELECT count(*) FROM entries e WHERE {}", sql.clause());
        self.read(|conn| {
            conn.query_row(&query, params_from_iter(sql.values.iter()), |r| {
                r.get::<_, i64>(0)
            })
        })
        .map(|n| n as u64)
    }

    // ---------------------------------------------------------------- sessions

    // ---------------------------------------------------------------- embeddings

    // ---------------------------------------------------------------- maintenance

    /// Counts for `cairn memory stats`.
    pub fn stats(&self) -> Result<MemoryStats, MemoryError> {
        let backlog = self.embedding_backlog()?;
        let model = self
            .embedder
            .as_ref()
            .map(|e| (e.provider().to_string(), e.model().to_string()));
        let embedded = match model {
            None => 0,
            Some((provider, model)) => self.read(|conn| {
                conn.query_row(
                    "SELECT count(*) FROM embeddings WHERE provider = ?1 AND model = ?2",
                    params![provider, model],
                    |r| r.get::<_, i64>(0),
                )
            })? as u64,
        };
        let mut stats = self.read(|conn| {
            let mut stats = MemoryStats::default();
            let mut statement = conn.prepare(
                "SELECT kind, category, count(*) FROM entries WHERE valid_to IS NULL AND forgotten_at IS NULL GROUP BY kind, category",
            )?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                let (kind, category, n): (String, String, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
                *stats.live_by_kind.entry(kind).or_default() += n as u64;
                *stats.live_by_category.entry(category).or_default() += n as u64;
            }
            stats.superseded = conn.query_row(
                "SELECT count(*) FROM entries WHERE valid_to IS NOT NULL AND forgotten_at IS NULL", [], |r| r.get::<_, i64>(0))? as u64;
            stats.forgotten = conn.query_row(
                "SELECT count(*) FROM entries WHERE forgotten_at IS NOT NULL", [], |r| r.get::<_, i64>(0))? as u64;
            stats.embedding_cache = conn.query_row("SELECT count(*) FROM embedding_cache", [], |r| r.get::<_, i64>(0))? as u64;
            let mut statement = conn.prepare("SELECT state, count(*) FROM sessions GROUP BY state")?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                stats.sessions.insert(row.get(0)?, row.get::<_, i64>(1)? as u64);
            }
            stats.hygiene_last_run = conn
                .query_row("SELECT value FROM maintenance WHERE key = 'hygiene_last_run'", [], |r| r.get::<_, String>(0))
                .optional()?
                .and_then(|v| v.parse().ok());
            Ok(stats)
        })?;
        stats.embedded = embedded;
        stats.embedding_backlog = backlog;
        stats.database_bytes = ["", "-wal"]
            .iter()
            .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", self.path.display())).ok())
            .map(|m| m.len())
            .sum();
        Ok(stats)
    }

    /// The audit trail of an entry, oldest first.
    pub fn audit_trail(&self, id: &str) -> Result<Vec<AuditRow>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare(&format!(
                "SELECT {AUDIT_COLUMNS} FROM audit WHERE entry_id = ?1 ORDER BY seq"
            ))?;
            statement.query_map(params![id], row_to_audit)?.collect()
        })
    }
}

impl Drop for MemoryStore {
    fn drop(&mut self) {
        self.signal.stop();
    }
}

/// A memory ready to insert: its full record and what it explicitly replaces.
struct Prepared {
    entry: MemoryEntry,
    supersedes: Option<String>,
}

/// A fresh entry id: `mem_` and 16 hex digits.
fn new_id(content: &str, now: i64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = Sha256::new();
    hasher.update(content.as_bytes());
    hasher.update(now.to_le_bytes());
    hasher.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hasher.update(std::process::id().to_le_bytes());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    hasher.update(nanos.to_le_bytes());
    format!("mem_{}", &hex::encode(hasher.finalize())[..16])
}

fn validate(memory: &NewMemory) -> Result<(), MemoryError> {
    let bad = |text: String| Err(MemoryError::InvalidInput(text));
    if memory.content.trim().is_empty() {
        return bad("content: expected non-empty text".into());
    }
    if memory.content.len() > MAX_CONTENT_BYTES {
        return bad(format!(
            "content: {} bytes is over the limit of {MAX_CONTENT_BYTES}",
            memory.content.len()
        ));
    }
    if let Some(importance) = memory.importance
        && !(1..=10).contains(&importance)
    {
        return bad(format!("importance: {importance} is not in 1..=10"));
    }
    if !memory.category.is_empty() && !is_name(&memory.category) {
        return bad(format!(
            "category: `{}` is not a name; expected a-z 0-9 - _ (at most 64)",
            memory.category
        ));
    }
    if memory.predicate.is_some() && memory.subject.is_none() {
        return bad("predicate: a predicate needs a subject".into());
    }
    for (i, tag) in memory.tags.iter().enumerate() {
        if tag.trim().is_empty() || tag.len() > 100 {
            return bad(format!("tags[{i}]: expected 1 to 100 bytes of text"));
        }
    }
    if memory.tags.len() > 64 || memory.sources.len() > 1000 {
        return bad("tags/sources: at most 64 tags and 1000 sources".into());
    }
    Ok(())
}

fn validate_entry(entry: &MemoryEntry) -> Result<(), MemoryError> {
    if entry.id.trim().is_empty() {
        return Err(MemoryError::InvalidInput(
            "id: expected a non-empty id".into(),
        ));
    }
    let mut check = NewMemory::new(entry.kind, entry.content.clone());
    check.category = entry.category.clone();
    check.importance = Some(entry.importance);
    check.tags = entry.tags.clone();
    check.subject = entry.subject.clone();
    check.predicate = entry.predicate.clone();
    validate(&check)
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}
