//! The SQLite memory store, `<data>/memory.db`: the only code that reads or writes its
//! tables. Writes go through one group-commit writer thread; reads use a small pool of
//! connections (WAL lets them run beside the writer).

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

/// What a hygiene run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HygieneReport {
    /// False when the last run was too recent (nothing was done).
    pub ran: bool,
    /// Entries forgotten per category.
    pub forgotten: BTreeMap<String, u64>,
    /// Core memories written to the snapshot, when one was written.
    pub snapshot_entries: Option<u64>,
}

/// One entry waiting for a vector.
struct Unembedded {
    seq: i64,
    content: String,
    content_hash: String,
    scope: Scope,
}

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

    /// Memories relevant to `query`, best first (see [`super::recall`] for the scoring).
    pub fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        let config = &self.config.recall;
        let limit = query.limit.clamp(1, 1000);
        let candidates = (limit * config.candidates_per_hit.max(1)).max(50);
        let now = now_ms();
        let at = query.as_of.unwrap_or(now);
        let mut sql = Filters::default();
        sql.scope(&query.scope);
        sql.kinds(&query.kinds);
        if !query.categories.is_empty() {
            sql.any_of(
                "e.category",
                query.categories.iter().cloned().map(Value::Text),
            );
        }
        if let Some(session) = &query.exclude_session {
            sql.push(
                "(e.session_id IS NULL OR e.session_id != ?)",
                Value::Text(session.clone()),
            );
        }
        if let Some(since) = query.since {
            sql.push("e.valid_from >= ?", Value::Integer(since));
        }
        if let Some(until) = query.until {
            sql.push("e.valid_from < ?", Value::Integer(until));
        }
        sql.clauses.push("e.forgotten_at IS NULL".into());
        match query.as_of {
            None => sql.clauses.push("e.valid_to IS NULL".into()),
            Some(as_of) => {
                sql.push("e.valid_from <= ?", Value::Integer(as_of));
                sql.push(
                    "(e.valid_to IS NULL OR e.valid_to > ?)",
                    Value::Integer(as_of),
                );
            }
        }

        // Lexical candidates, scored by FTS5.
        let mut bm25: HashMap<i64, f64> = HashMap::new();
        if let Some(fts) =
            recall::fts_match(&query.text, &query.scope, query.exclude_session.as_deref())
        {
            let statement_sql = format!(
                "SELECT e.seq, bm25(entries_fts, 1.0, 0.5, 0.0) AS rank FROM entries_fts
                 JOIN entries e ON e.seq = entries_fts.rowid
                 WHERE entries_fts MATCH ? AND {} ORDER BY rank LIMIT {candidates}",
                sql.clause()
            );
            let mut values = vec![Value::Text(fts)];
            values.extend(sql.values.iter().cloned());
            let rows: Vec<(i64, f64)> = self.read(|conn| {
                let mut statement = conn.prepare_cached(&statement_sql)?;
                statement
                    .query_map(params_from_iter(values.iter()), |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect()
            })?;
            bm25.extend(rows);
        }

        // Semantic candidates from the vector index (the scope is re-checked in SQL below).
        let query_vector = match (&self.embedder, query.lexical_only) {
            (Some(embedder), false) if !query.text.trim().is_empty() => {
                match embedder.embed(std::slice::from_ref(&query.text)) {
                    Ok(mut vectors) => vectors.pop(),
                    Err(e) => {
                        tracing::warn!("recall falls back to BM25 only: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
        let mut cosines: HashMap<i64, f64> = HashMap::new();
        if let Some(vector) = &query_vector {
            let filter = ScanFilter {
                scope: &query.scope,
                exclude_session: query.exclude_session.as_deref(),
            };
            for (seq, similarity) in self.index().nearest(vector, &filter, candidates) {
                cosines.insert(seq, f64::from(similarity));
            }
            for seq in bm25.keys() {
                if !cosines.contains_key(seq)
                    && let Some(stored) = self.index().vector(*seq)
                {
                    cosines.insert(*seq, f64::from(embed::cosine(vector, &stored)));
                }
            }
        }

        let mut seqs: Vec<i64> = bm25.keys().chain(cosines.keys()).copied().collect();
        seqs.sort_unstable();
        seqs.dedup();
        if seqs.is_empty() {
            return Ok(Vec::new());
        }
        let mut entries: Vec<(i64, MemoryEntry)> = Vec::with_capacity(seqs.len());
        for chunk in seqs.chunks(500) {
            let statement_sql = format!(
                "SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.seq IN ({}) AND {}",
                vec!["?"; chunk.len()].join(","),
                sql.clause()
            );
            let mut values: Vec<Value> = chunk.iter().map(|s| Value::Integer(*s)).collect();
            values.extend(sql.values.iter().cloned());
            let rows: Vec<(i64, MemoryEntry)> = self.read(|conn| {
                let mut statement = conn.prepare(&statement_sql)?;
                statement
                    .query_map(params_from_iter(values.iter()), |r| {
                        Ok((r.get(0)?, row_to_entry(r)?))
                    })?
                    .collect()
            })?;
            entries.extend(rows);
        }

        let best_bm25 = bm25.values().map(|b| -b).fold(0.0, f64::max);
        let min_relevance = query.min_relevance.unwrap_or(config.min_relevance);
        let mut hits: Vec<RecallHit> = entries
            .into_iter()
            .map(|(seq, entry)| {
                let cosine = query_vector.as_ref().map(|_| cosines.get(&seq).copied());
                let parts = recall::score(
                    config,
                    bm25.get(&seq).copied(),
                    best_bm25,
                    cosine.flatten(),
                    entry.importance,
                    at - entry.valid_from,
                );
                RecallHit {
                    score: parts.score,
                    explain: parts,
                    entry,
                }
            })
            .filter(|hit| hit.explain.relevance >= min_relevance)
            .collect();
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.entry.recorded_at.cmp(&a.entry.recorded_at))
        });
        let mut hits = recall::collapse_duplicates(hits, config.duplicate_similarity);
        hits.truncate(limit);
        Ok(hits)
    }

    // ---------------------------------------------------------------- sessions

    /// The session a conversation's new activity belongs to, recording the activity: its
    /// current session while that is active and was last active less than `idle_ms` ago,
    /// else a new one — `<conversation>` for the first, then `<conversation>#2`, `#3`, …
    /// (so "outside the current session" never hides earlier sessions of the conversation).
    pub async fn session_for(
        &self,
        conversation: &str,
        user: Option<&str>,
        agent: Option<&str>,
        now: i64,
        idle_ms: i64,
    ) -> Result<String, MemoryError> {
        let (conversation, user, agent) = (
            conversation.to_string(),
            user.map(str::to_string),
            agent.map(str::to_string),
        );
        Ok(self
            .writer
            .write(move |conn| {
                let current: Option<(String, String, i64)> = conn
                    .query_row(
                        "SELECT id, state, coalesce(last_activity, started_at) FROM sessions
                         WHERE conversation = ?1 ORDER BY started_at DESC, rowid DESC LIMIT 1",
                        params![conversation],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()?;
                if let Some((id, state, last)) = current
                    && state == "active"
                    && now - last < idle_ms
                {
                    conn.execute(
                        "UPDATE sessions SET last_activity = ?2 WHERE id = ?1",
                        params![id, now],
                    )?;
                    return Ok(id);
                }
                let earlier: i64 = conn.query_row(
                    "SELECT count(*) FROM sessions
                     WHERE id = ?1 OR substr(id, 1, length(?1) + 1) = ?1 || '#'",
                    params![conversation],
                    |r| r.get(0),
                )?;
                let id = if earlier == 0 {
                    conversation.clone()
                } else {
                    format!("{conversation}#{}", earlier + 1)
                };
                conn.execute(
                    "INSERT INTO sessions (id, conversation, user_id, agent_id, started_at, last_activity, state)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5, 'active')",
                    params![id, conversation, user, agent, now],
                )?;
                Ok(id)
            })
            .await?)
    }

    /// A session ended: it now waits for consolidation. Unknown sessions are ignored.
    pub async fn end_session(&self, id: &str, at: i64) -> Result<(), MemoryError> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE sessions SET state = 'pending', ended_at = ?2 WHERE id = ?1 AND state = 'active'",
                    params![id, at],
                )
            })
            .await?;
        Ok(())
    }

    /// Sessions that ended and wait for consolidation, oldest first.
    pub fn pending_sessions(&self, limit: usize) -> Result<Vec<Session>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare(
                "SELECT id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity FROM sessions
                 WHERE state = 'pending' ORDER BY ended_at, id LIMIT ?1",
            )?;
            statement
                .query_map(params![limit.max(1) as i64], row_to_session)?
                .collect()
        })
    }

    /// One session.
    pub fn session(&self, id: &str) -> Result<Option<Session>, MemoryError> {
        self.read(|conn| {
            conn.query_row(
                "SELECT id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity FROM sessions WHERE id = ?1",
                params![id],
                row_to_session,
            )
            .optional()
        })
    }

    /// Mark a session consolidated.
    pub fn mark_consolidated(&self, id: &str) -> Result<(), MemoryError> {
        let id_owned = id.to_string();
        let changed = self.writer.write_blocking(move |conn| {
            conn.execute(
                "UPDATE sessions SET state = 'consolidated', consolidated_at = ?2,
                     ended_at = coalesce(ended_at, ?2) WHERE id = ?1",
                params![id_owned, now_ms()],
            )
        })?;
        if changed == 0 {
            return Err(MemoryError::NotFound(format!(
                "session `{id}` is not known"
            )));
        }
        Ok(())
    }

    // ---------------------------------------------------------------- embeddings

    /// Start the background embedder thread (no-op without a provider or if running).
    pub fn start_embedder(self: &Arc<Self>) {
        if self.embedder.is_none() {
            return;
        }
        let mut worker = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if worker.is_some() {
            return;
        }
        let memory = Arc::downgrade(self);
        let signal = self.signal.clone();
        let spawned = std::thread::Builder::new()
            .name("cairn-embedder".into())
            .spawn(move || {
                let mut backoff = Duration::from_secs(1);
                loop {
                    let Some(memory) = memory.upgrade() else {
                        return;
                    };
                    match memory.embed_pending(|_| {}) {
                        Ok(_) => backoff = Duration::from_secs(1),
                        Err(e) => {
                            tracing::warn!("background embedding failed (will retry): {e}");
                            backoff = (backoff * 2).min(Duration::from_secs(60));
                        }
                    }
                    drop(memory);
                    if !signal.wait(backoff) {
                        return;
                    }
                }
            });
        match spawned {
            Ok(handle) => *worker = Some(handle),
            Err(e) => tracing::error!("cannot start the embedder thread: {e}"),
        }
    }

    /// Stop the background embedder and wait for it.
    pub fn stop_embedder(&self) {
        self.signal.stop();
        let handle = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    /// Embed every live entry lacking a vector from the configured model, in batches, from
    /// where the last pass got to (so a wake-up after one new episode reads only new rows);
    /// `progress(done)` is called after each batch. Returns how many were embedded.
    pub fn embed_pending(&self, mut progress: impl FnMut(u64)) -> Result<u64, MemoryError> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(0);
        };
        let (provider, model) = (
            embedder.provider().to_string(),
            embedder.model().to_string(),
        );
        let batch = self.config.embeddings.batch_size.clamp(1, 2048);
        let mut done = 0u64;
        let mut after = self.embedded_through.load(Ordering::Acquire);
        loop {
            if self.signal.stopped() {
                break;
            }
            let pending = self.unembedded(&provider, &model, after, batch)?;
            let Some(last) = pending.last() else { break };
            after = last.seq;
            let hashes: Vec<String> = pending.iter().map(|p| p.content_hash.clone()).collect();
            let cached = self.cached_vectors(&provider, &model, &hashes)?;
            let mut unique = std::collections::HashSet::new();
            let missing: Vec<&Unembedded> = pending
                .iter()
                .filter(|p| !cached.contains_key(&p.content_hash))
                .filter(|p| unique.insert(p.content_hash.as_str()))
                .collect();
            let texts: Vec<String> = missing.iter().map(|p| p.content.clone()).collect();
            let fresh = embedder
                .embed(&texts)
                .map_err(|e| MemoryError::Unavailable(e.to_string()))?;
            let mut vectors: HashMap<String, Vec<f32>> = cached;
            for (item, vector) in missing.iter().zip(fresh) {
                vectors.insert(item.content_hash.clone(), vector);
            }
            let rows: Vec<(i64, String, Vec<f32>)> = pending
                .iter()
                .filter_map(|p| {
                    vectors
                        .get(&p.content_hash)
                        .map(|v| (p.seq, p.content_hash.clone(), v.clone()))
                })
                .collect();
            self.save_vectors(&provider, &model, rows.clone())?;
            for item in &pending {
                if let Some(vector) = vectors.get(&item.content_hash) {
                    self.index().upsert(item.seq, &item.scope, vector);
                }
            }
            self.embedded_through.fetch_max(after, Ordering::AcqRel);
            done += pending.len() as u64;
            progress(done);
        }
        Ok(done)
    }

    /// Drop every stored vector so that the next embedding pass recomputes them all.
    pub fn clear_vectors(&self) -> Result<(), MemoryError> {
        self.writer.write_blocking(|conn| {
            conn.execute("DELETE FROM embeddings", [])?;
            conn.execute("DELETE FROM embedding_cache", [])
        })?;
        self.embedded_through.store(0, Ordering::Release);
        Ok(())
    }

    /// Live entries without a vector from the configured model.
    pub fn embedding_backlog(&self) -> Result<u64, MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(0);
        };
        let (provider, model) = (
            embedder.provider().to_string(),
            embedder.model().to_string(),
        );
        self.read(|conn| {
            conn.query_row(
                "SELECT count(*) FROM entries e LEFT JOIN embeddings m ON m.entry_seq = e.seq
                 WHERE e.forgotten_at IS NULL AND (m.entry_seq IS NULL OR m.provider != ?1 OR m.model != ?2)",
                params![provider, model],
                |r| r.get::<_, i64>(0),
            )
        })
        .map(|n| n as u64)
    }

    fn unembedded(
        &self,
        provider: &str,
        model: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Unembedded>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT e.seq, e.content, e.content_hash, e.agent_id, e.user_id, e.session_id
                 FROM entries e LEFT JOIN embeddings m ON m.entry_seq = e.seq
                 WHERE e.seq > ?3 AND e.forgotten_at IS NULL
                   AND (m.entry_seq IS NULL OR m.provider != ?1 OR m.model != ?2)
                 ORDER BY e.seq LIMIT ?4",
            )?;
            statement
                .query_map(params![provider, model, after, limit as i64], |r| {
                    Ok(Unembedded {
                        seq: r.get(0)?,
                        content: r.get(1)?,
                        content_hash: r.get(2)?,
                        scope: Scope {
                            agent_id: r.get(3)?,
                            user_id: r.get(4)?,
                            session_id: r.get(5)?,
                        },
                    })
                })?
                .collect()
        })
    }

    fn cached_vectors(
        &self,
        provider: &str,
        model: &str,
        hashes: &[String],
    ) -> Result<HashMap<String, Vec<f32>>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT vector FROM embedding_cache WHERE content_hash = ?1 AND provider = ?2 AND model = ?3",
            )?;
            let mut found = HashMap::new();
            for hash in hashes {
                if let Some(bytes) = statement
                    .query_row(params![hash, provider, model], |r| r.get::<_, Vec<u8>>(0))
                    .optional()?
                {
                    found.insert(hash.clone(), embed::from_bytes(&bytes));
                }
            }
            Ok(found)
        })
    }

    fn save_vectors(
        &self,
        provider: &str,
        model: &str,
        rows: Vec<(i64, String, Vec<f32>)>,
    ) -> Result<(), MemoryError> {
        let (provider, model) = (provider.to_string(), model.to_string());
        let capacity = self.config.embeddings.cache_entries as i64;
        self.writer.write_blocking(move |conn| {
            let now = now_ms();
            for (seq, hash, vector) in &rows {
                let bytes = embed::to_bytes(vector);
                conn.execute(
                    "INSERT INTO embeddings (entry_seq, provider, model, dims, vector) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (entry_seq) DO UPDATE SET provider = excluded.provider, model = excluded.model,
                         dims = excluded.dims, vector = excluded.vector",
                    params![seq, provider, model, vector.len() as i64, bytes],
                )?;
                conn.execute(
                    "INSERT INTO embedding_cache (content_hash, provider, model, vector, last_used) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT DO UPDATE SET last_used = excluded.last_used",
                    params![hash, provider, model, bytes, now],
                )?;
            }
            let cached: i64 = conn.query_row("SELECT count(*) FROM embedding_cache", [], |r| r.get(0))?;
            if cached > capacity {
                conn.execute(
                    "DELETE FROM embedding_cache WHERE rowid IN
                         (SELECT rowid FROM embedding_cache ORDER BY last_used LIMIT ?1)",
                    params![cached - capacity],
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }

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

    /// Every session, entry and audit row as JSONL records (entries and audit rows in the
    /// order they were recorded), so an import restores memory.db losslessly.
    pub fn export(&self, out: &mut dyn std::io::Write) -> Result<u64, MemoryError> {
        let io = |e: std::io::Error| MemoryError::Storage(format!("cannot write the export: {e}"));
        let (entries, sessions, audit) = self.read(|conn| {
            let mut statement = conn.prepare(&format!("SELECT {ENTRY_COLUMNS} FROM entries e ORDER BY e.seq"))?;
            let entries: Vec<MemoryEntry> = statement.query_map([], row_to_entry)?.collect::<Result<_, _>>()?;
            let mut statement = conn.prepare(
                "SELECT id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity FROM sessions ORDER BY started_at, id",
            )?;
            let sessions: Vec<Session> = statement.query_map([], row_to_session)?.collect::<Result<_, _>>()?;
            let mut statement = conn.prepare(&format!("SELECT {AUDIT_COLUMNS} FROM audit ORDER BY seq"))?;
            let audit: Vec<AuditRow> = statement.query_map([], row_to_audit)?.collect::<Result<_, _>>()?;
            Ok((entries, sessions, audit))
        })?;
        let mut lines = 0;
        let records = sessions
            .into_iter()
            .map(ExportRecord::Session)
            .chain(
                entries
                    .into_iter()
                    .map(|e| ExportRecord::Entry(Box::new(e))),
            )
            .chain(audit.into_iter().map(ExportRecord::Audit));
        for record in records {
            let line =
                serde_json::to_string(&record).map_err(|e| MemoryError::Storage(e.to_string()))?;
            writeln!(out, "{line}").map_err(io)?;
            lines += 1;
        }
        Ok(lines)
    }

    /// Import JSONL records. Every line is checked first; one bad line rejects the whole
    /// import (nothing is written) with its line number. Records whose id exists are skipped,
    /// and so are audit rows already present, so importing the same file twice adds nothing.
    pub fn import(&self, input: &str) -> Result<ImportReport, MemoryError> {
        let mut records = Vec::new();
        for (n, line) in input.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record: ExportRecord = serde_json::from_str(line)
                .map_err(|e| MemoryError::InvalidInput(format!("line {}: {e}", n + 1)))?;
            match &record {
                ExportRecord::Entry(entry) => validate_entry(entry),
                ExportRecord::Audit(row) => validate_audit(row),
                ExportRecord::Session(_) => Ok(()),
            }
            .map_err(|e| MemoryError::InvalidInput(format!("line {}: {e}", n + 1)))?;
            records.push(record);
        }
        let report = self.writer.write_blocking(move |conn| {
            let mut report = ImportReport::default();
            for record in &records {
                let added = match record {
                    ExportRecord::Session(s) => {
                        let added = conn.execute(
                            "INSERT OR IGNORE INTO sessions (id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                            params![s.id, s.user_id, s.agent_id, s.started_at, s.ended_at, s.state, s.conversation, s.last_activity],
                        )?;
                        report.sessions += added as u64;
                        added
                    }
                    ExportRecord::Entry(entry) => {
                        let added = insert_row(conn, entry, true)?;
                        report.entries += added as u64;
                        added
                    }
                    ExportRecord::Audit(row) => {
                        let added = insert_audit_once(conn, row)?;
                        report.audit += added as u64;
                        added
                    }
                };
                if added == 0 {
                    report.skipped += 1;
                }
            }
            Ok(report)
        })?;
        if report.entries > 0 {
            self.signal.notify();
        }
        Ok(report)
    }

    /// Forget entries past their category's retention (never facts or core memories;
    /// episodes only once their session is consolidated), at most once per
    /// `hygiene_interval_hours` unless `force`; then write the snapshot if configured.
    pub fn hygiene(&self, force: bool) -> Result<HygieneReport, MemoryError> {
        let now = now_ms();
        let interval = self.config.hygiene_interval_hours as i64 * 3_600_000;
        let retention = self.config.retention_days.clone();
        let report = self.writer.write_blocking(move |conn| {
            let last: Option<i64> = conn
                .query_row("SELECT value FROM maintenance WHERE key = 'hygiene_last_run'", [], |r| r.get::<_, String>(0))
                .optional()?
                .and_then(|v| v.parse().ok());
            let mut report = HygieneReport::default();
            if !force && last.is_some_and(|last| now - last < interval) {
                return Ok(report);
            }
            report.ran = true;
            for (category, days) in &retention {
                let cutoff = now - i64::from(*days) * 86_400_000;
                let mut statement = conn.prepare(
                    "SELECT e.id FROM entries e LEFT JOIN sessions s ON s.id = e.session_id
                     WHERE e.category = ?1 AND e.recorded_at < ?2 AND e.forgotten_at IS NULL
                       AND e.kind NOT IN ('fact', 'core')
                       AND (e.kind != 'episode' OR e.session_id IS NULL OR s.state = 'consolidated')",
                )?;
                let ids: Vec<String> = statement.query_map(params![category, cutoff], |r| r.get(0))?.collect::<Result<_, _>>()?;
                for id in &ids {
                    forget(conn, id, "hygiene")?;
                }
                if !ids.is_empty() {
                    report.forgotten.insert(category.clone(), ids.len() as u64);
                }
            }
            conn.execute(
                "INSERT INTO maintenance (key, value) VALUES ('hygiene_last_run', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![now.to_string()],
            )?;
            Ok(report)
        })?;
        let mut report = report;
        if report.ran && self.config.snapshot_on_hygiene {
            report.snapshot_entries =
                Some(self.export_snapshot(&self.data_dir.join(SNAPSHOT_FILE))?);
        }
        Ok(report)
    }

    /// Write the live core memories to a Markdown snapshot (see [`snapshot`]): readable
    /// prose, with each entry's full record in an HTML comment so hydration restores it.
    pub fn export_snapshot(&self, path: &Path) -> Result<u64, MemoryError> {
        let entries = self.list(&ListFilter {
            kinds: vec![MemoryKind::Core],
            limit: 1_000_000,
            ..ListFilter::default()
        })?;
        let text = snapshot::render(&entries)?;
        let temporary = path.with_extension("md.tmp");
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| MemoryError::Storage(format!("{}: {e}", path.display())))?;
        Ok(entries.len() as u64)
    }

    /// Restore core memories from a snapshot, as a person may have edited it: a missing
    /// entry is restored with the section's prose as its content (an `edit` audit row notes
    /// a changed text); a present entry whose prose was changed is superseded by the edited
    /// text; a section without a record becomes a new core memory. Unchanged entries that
    /// are present are skipped. Returns how many memories were restored, edited or added.
    pub fn hydrate(&self, path: &Path) -> Result<u64, MemoryError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| MemoryError::InvalidInput(format!("{}: {e}", path.display())))?;
        let mut records = Vec::new();
        let mut additions = Vec::new();
        for section in snapshot::parse(&text, path)? {
            let at = |e: MemoryError| {
                MemoryError::InvalidInput(format!("{} line {}: {e}", path.display(), section.line))
            };
            match section.record {
                Some(entry) => {
                    validate(&NewMemory::new(MemoryKind::Core, entry.content.clone()))
                        .map_err(at)?;
                    records.push((entry, section.edited));
                }
                None => {
                    let mut memory = NewMemory::new(MemoryKind::Core, section.content());
                    memory.scope.user_id = section.user();
                    validate(&memory).map_err(at)?;
                    additions.push(memory);
                }
            }
        }
        records.sort_by(|a, b| (a.0.recorded_at, &a.0.id).cmp(&(b.0.recorded_at, &b.0.id)));
        let (restored, edits) = self
            .writer
            .write_blocking(move |conn| restore_snapshot_records(conn, records))?;
        let mut changed = restored;
        for memory in edits.into_iter().chain(additions) {
            if let StoreOutcome::Stored { .. } = self.store_blocking(memory)? {
                changed += 1;
            }
        }
        self.signal.notify();
        Ok(changed)
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

/// Insert a prepared memory inside the writer's transaction, applying exact-duplicate and
/// supersede rules against what is committed at that moment.
fn insert(
    conn: &Connection,
    prepared: &Prepared,
    actor: &str,
) -> rusqlite::Result<Result<StoreOutcome, MemoryError>> {
    let entry = &prepared.entry;
    let hash = content_hash(&entry.content);
    if entry.kind != MemoryKind::Episode {
        let existing: Option<String> = conn
            .query_row(
                "SELECT id FROM entries WHERE content_hash = ?1 AND kind = ?2 AND valid_to IS NULL
                   AND forgotten_at IS NULL AND agent_id IS ?3 AND user_id IS ?4 AND session_id IS ?5
                   AND subject IS ?6 AND predicate IS ?7",
                params![
                    hash,
                    entry.kind.as_str(),
                    entry.scope.agent_id,
                    entry.scope.user_id,
                    entry.scope.session_id,
                    entry.subject,
                    entry.predicate
                ],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(existing) = existing {
            return Ok(Ok(StoreOutcome::Duplicate {
                existing,
                similarity: 1.0,
            }));
        }
    }
    let mut replaced: Vec<String> = Vec::new();
    if let Some(target) = &prepared.supersedes {
        let live: Option<Option<i64>> = conn
            .query_row(
                "SELECT valid_to FROM entries WHERE id = ?1 AND forgotten_at IS NULL",
                params![target],
                |r| r.get(0),
            )
            .optional()?;
        match live {
            None => {
                return Ok(Err(MemoryError::InvalidInput(format!(
                    "supersedes: no memory `{target}` to supersede"
                ))));
            }
            Some(Some(_)) => {
                return Ok(Err(MemoryError::InvalidInput(format!(
                    "supersedes: `{target}` was already superseded"
                ))));
            }
            Some(None) => replaced.push(target.clone()),
        }
    }
    if entry.kind == MemoryKind::Fact
        && let (Some(subject), Some(predicate)) = (&entry.subject, &entry.predicate)
    {
        let mut statement = conn.prepare(
            "SELECT id FROM entries WHERE kind = 'fact' AND subject = ?1 AND predicate = ?2
               AND valid_to IS NULL AND forgotten_at IS NULL AND agent_id IS ?3 AND user_id IS ?4",
        )?;
        let older: Vec<String> = statement
            .query_map(
                params![
                    subject,
                    predicate,
                    entry.scope.agent_id,
                    entry.scope.user_id
                ],
                |r| r.get(0),
            )?
            .collect::<Result<_, _>>()?;
        for id in older {
            if !replaced.contains(&id) {
                replaced.push(id);
            }
        }
    }
    insert_row(conn, entry, false)?;
    for old in &replaced {
        conn.execute(
            "UPDATE entries SET valid_to = max(valid_from, ?2), superseded_by = ?3 WHERE id = ?1",
            params![old, entry.valid_from, entry.id],
        )?;
        audit(
            conn,
            old,
            "supersede",
            actor,
            entry.recorded_at,
            Some(&entry.id),
        )?;
    }
    Ok(Ok(StoreOutcome::Stored {
        id: entry.id.clone(),
        superseded: replaced,
    }))
}

/// Insert the snapshot records missing from memory.db (an `edit` audit row notes a text
/// edited in the snapshot); returns how many were inserted, and the edited texts of present
/// live entries, to be stored as their successors.
fn restore_snapshot_records(
    conn: &Connection,
    records: Vec<(MemoryEntry, bool)>,
) -> rusqlite::Result<(u64, Vec<NewMemory>)> {
    let mut restored = 0;
    let mut edits = Vec::new();
    for (mut entry, edited) in records {
        let present: Option<(String, bool)> = conn
            .query_row(
                "SELECT content, valid_to IS NULL AND forgotten_at IS NULL FROM entries WHERE id = ?1",
                params![entry.id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match present {
            None => {
                (entry.issue_refs, entry.pr_refs) = stream::extract_refs(&entry.content);
                let inserted = insert_row(conn, &entry, true)?;
                restored += inserted as u64;
                if edited && inserted > 0 {
                    audit(
                        conn,
                        &entry.id,
                        "edit",
                        "snapshot",
                        now_ms(),
                        Some("text edited in the snapshot"),
                    )?;
                }
            }
            Some((stored, true)) if stored != entry.content => edits.push(NewMemory {
                kind: entry.kind,
                content: entry.content,
                category: entry.category,
                scope: entry.scope,
                importance: Some(entry.importance),
                tags: entry.tags,
                sources: entry.sources,
                subject: entry.subject,
                predicate: entry.predicate,
                supersedes: Some(entry.id),
                valid_from: None,
            }),
            Some(_) => {}
        }
    }
    Ok((restored, edits))
}

/// Insert a full record; with `ignore_existing`, an existing id is left alone (returns 0).
fn insert_row(
    conn: &Connection,
    entry: &MemoryEntry,
    ignore_existing: bool,
) -> rusqlite::Result<usize> {
    conn.execute(
        &format!(
            "INSERT {} INTO entries (id, kind, content, content_hash, category, agent_id, user_id, session_id,
                 importance, tags, issue_refs, pr_refs, sources, subject, predicate, valid_from, valid_to,
                 recorded_at, superseded_by, forgotten_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            if ignore_existing { "OR IGNORE" } else { "" }
        ),
        params![
            entry.id,
            entry.kind.as_str(),
            entry.content,
            content_hash(&entry.content),
            entry.category,
            entry.scope.agent_id,
            entry.scope.user_id,
            entry.scope.session_id,
            entry.importance,
            to_json(&entry.tags),
            to_json(&entry.issue_refs),
            to_json(&entry.pr_refs),
            to_json(&entry.sources),
            entry.subject,
            entry.predicate,
            entry.valid_from,
            entry.valid_to,
            entry.recorded_at,
            entry.superseded_by,
            entry.forgotten_at,
        ],
    )
}

/// A list column as JSON text.
fn to_json<T: Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".into())
}

fn forget(conn: &Connection, id: &str, actor: &str) -> rusqlite::Result<bool> {
    let now = now_ms();
    let changed = conn.execute(
        "UPDATE entries SET forgotten_at = ?2 WHERE id = ?1 AND forgotten_at IS NULL",
        params![id, now],
    )?;
    if changed > 0 {
        audit(conn, id, "forget", actor, now, None)?;
    }
    Ok(changed > 0)
}

fn audit(
    conn: &Connection,
    id: &str,
    action: &str,
    actor: &str,
    at: i64,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO audit (entry_id, action, actor, at, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, action, actor, at, detail],
    )?;
    Ok(())
}

const AUDIT_COLUMNS: &str = "entry_id, action, actor, at, detail";

fn row_to_audit(row: &Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        entry_id: row.get(0)?,
        action: row.get(1)?,
        actor: row.get(2)?,
        at: row.get(3)?,
        detail: row.get(4)?,
    })
}

/// Insert an imported audit row unless the same row is already there; returns 1 if added.
fn insert_audit_once(conn: &Connection, row: &AuditRow) -> rusqlite::Result<usize> {
    conn.execute(
        "INSERT INTO audit (entry_id, action, actor, at, detail)
         SELECT ?1, ?2, ?3, ?4, ?5
         WHERE NOT EXISTS (SELECT 1 FROM audit WHERE entry_id = ?1 AND action = ?2 AND actor = ?3
                             AND at = ?4 AND detail IS ?5)",
        params![row.entry_id, row.action, row.actor, row.at, row.detail],
    )
}

fn validate_audit(row: &AuditRow) -> Result<(), MemoryError> {
    for (field, value) in [
        ("entry_id", &row.entry_id),
        ("action", &row.action),
        ("actor", &row.actor),
    ] {
        if value.trim().is_empty() {
            return Err(MemoryError::InvalidInput(format!(
                "{field}: expected non-empty text"
            )));
        }
    }
    Ok(())
}

fn json_list<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    index: usize,
) -> rusqlite::Result<Vec<T>> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn row_to_entry(row: &Row<'_>) -> rusqlite::Result<MemoryEntry> {
    let kind: String = row.get(2)?;
    Ok(MemoryEntry {
        id: row.get(1)?,
        kind: MemoryKind::parse(&kind).unwrap_or(MemoryKind::Episode),
        content: row.get(3)?,
        category: row.get(4)?,
        scope: Scope {
            agent_id: row.get(5)?,
            user_id: row.get(6)?,
            session_id: row.get(7)?,
        },
        importance: row.get(8)?,
        tags: json_list(row, 9)?,
        issue_refs: json_list(row, 10)?,
        pr_refs: json_list(row, 11)?,
        sources: json_list(row, 12)?,
        subject: row.get(13)?,
        predicate: row.get(14)?,
        valid_from: row.get(15)?,
        valid_to: row.get(16)?,
        recorded_at: row.get(17)?,
        superseded_by: row.get(18)?,
        forgotten_at: row.get(19)?,
    })
}

fn row_to_session(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: row.get(0)?,
        user_id: row.get(1)?,
        agent_id: row.get(2)?,
        started_at: row.get(3)?,
        ended_at: row.get(4)?,
        state: row.get(5)?,
        conversation: row.get(6)?,
        last_activity: row.get(7)?,
    })
}

/// SQL `WHERE` clauses with their parameters, built from a query's filters.
#[derive(Default)]
struct Filters {
    clauses: Vec<String>,
    values: Vec<Value>,
}

impl Filters {
    fn push(&mut self, clause: &str, value: Value) {
        self.clauses.push(clause.to_string());
        self.values.push(value);
    }

    /// Scope rules: a set agent or user admits its own entries and those shared at that
    /// level (NULL); a set session admits only that session.
    fn scope(&mut self, scope: &Scope) {
        if let Some(agent) = &scope.agent_id {
            self.push(
                "(e.agent_id = ? OR e.agent_id IS NULL)",
                Value::Text(agent.clone()),
            );
        }
        if let Some(user) = &scope.user_id {
            self.push(
                "(e.user_id = ? OR e.user_id IS NULL)",
                Value::Text(user.clone()),
            );
        }
        if let Some(session) = &scope.session_id {
            self.push("e.session_id = ?", Value::Text(session.clone()));
        }
    }

    fn kinds(&mut self, kinds: &[MemoryKind]) {
        if !kinds.is_empty() {
            self.any_of(
                "e.kind",
                kinds.iter().map(|k| Value::Text(k.as_str().into())),
            );
        }
    }

    fn any_of(&mut self, column: &str, values: impl Iterator<Item = Value>) {
        let values: Vec<Value> = values.collect();
        self.clauses.push(format!(
            "{column} IN ({})",
            vec!["?"; values.len()].join(",")
        ));
        self.values.extend(values);
    }

    fn clause(&self) -> String {
        if self.clauses.is_empty() {
            "1".into()
        } else {
            self.clauses.join(" AND ")
        }
    }
}
