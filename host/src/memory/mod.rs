//! Agent memory: episodes, facts, core memories, reflections and procedures in
//! `<data>/memory.db`, with hybrid recall (BM25 + embeddings, blended with importance and
//! recency), bi-temporal facts that are superseded rather than deleted, and the bookkeeping
//! consolidators need.
//!
//! - [`store`]: the SQLite store (tables, writes, reads, sessions, export/import, hygiene,
//!   snapshots); the only module that touches `memory.db`.
//! - [`recall`]: query parsing and scoring, with a per-hit explanation.
//! - [`embed`]: embedding providers (`hash`, `openai`), the in-memory vector index and the
//!   background embedder.
//! - [`stream`]: importance and issue/PR reference rules.
//! - [`snapshot`]: `MEMORY_SNAPSHOT.md`, core memories as editable Markdown.
//! - [`service`]: what the rest of the host talks to — the SQLite store or a
//!   `memory-backend` plugin, as `cairn.yaml` says.

pub mod embed;
pub mod recall;
pub mod service;
pub mod snapshot;
pub mod store;
pub mod stream;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use embed::EmbeddingConfig;
pub use recall::{RecallConfig, RecallHit, RecallQuery, ScoreParts};
pub use service::MemoryService;
pub use store::MemoryStore;

/// SHA-256 of a memory's content (hex): the embedding cache key, the exact-duplicate key,
/// and how a snapshot tells an edited text.
pub fn content_hash(content: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(content.as_bytes()))
}

/// What kind of memory an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    /// Something that happened: a message, a reply, an observation.
    Episode,
    /// A statement believed true until superseded.
    Fact,
    /// Always-relevant knowledge about the user or the agent.
    Core,
    /// A higher-level insight drawn from other memories.
    Reflection,
    /// How to do something.
    Procedure,
}

impl MemoryKind {
    /// Every kind, in declaration order.
    pub const ALL: [MemoryKind; 5] = [
        MemoryKind::Episode,
        MemoryKind::Fact,
        MemoryKind::Core,
        MemoryKind::Reflection,
        MemoryKind::Procedure,
    ];

    /// The name stored in the database and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Episode => "episode",
            MemoryKind::Fact => "fact",
            MemoryKind::Core => "core",
            MemoryKind::Reflection => "reflection",
            MemoryKind::Procedure => "procedure",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The category an entry of this kind gets when its author names none.
    pub fn default_category(self) -> &'static str {
        match self {
            MemoryKind::Episode => "conversation",
            MemoryKind::Core => "core",
            _ => "custom",
        }
    }
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a memory belongs to. An unset field on an entry means "shared at this level" (an
/// agent-wide fact has no user); an unset field in a query means "not filtered by this".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    /// The agent the memory belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The user the memory is about or came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The conversation session it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// A memory to store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMemory {
    /// Its kind.
    pub kind: MemoryKind,
    /// The text.
    pub content: String,
    /// core, daily, conversation or a custom name; empty takes the kind's default.
    #[serde(default)]
    pub category: String,
    /// Who it belongs to.
    #[serde(default)]
    pub scope: Scope,
    /// 1–10; none is scored by the memory-stream rules.
    #[serde(default)]
    pub importance: Option<u8>,
    /// Free-form labels.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Ids of the entries it was derived from.
    #[serde(default)]
    pub sources: Vec<String>,
    /// For facts: what the fact is about; with `predicate`, a newer value supersedes an older.
    #[serde(default)]
    pub subject: Option<String>,
    /// For facts: which property of the subject it states.
    #[serde(default)]
    pub predicate: Option<String>,
    /// The id of an entry this one replaces explicitly.
    #[serde(default)]
    pub supersedes: Option<String>,
    /// When it became true; none means now.
    #[serde(default)]
    pub valid_from: Option<i64>,
}

impl NewMemory {
    /// A memory of `kind` with `content` and everything else defaulted.
    pub fn new(kind: MemoryKind, content: impl Into<String>) -> Self {
        Self {
            kind,
            content: content.into(),
            category: String::new(),
            scope: Scope::default(),
            importance: None,
            tags: Vec::new(),
            sources: Vec::new(),
            subject: None,
            predicate: None,
            supersedes: None,
            valid_from: None,
        }
    }
}

/// A stored memory, as read back, exported and imported (every column, so export/import is
/// lossless).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// Stable id.
    pub id: String,
    /// Its kind.
    pub kind: MemoryKind,
    /// The text.
    pub content: String,
    /// Its category.
    pub category: String,
    /// Who it belongs to.
    pub scope: Scope,
    /// 1–10.
    pub importance: u8,
    /// Free-form labels.
    pub tags: Vec<String>,
    /// Issue numbers the content mentions.
    pub issue_refs: Vec<u32>,
    /// Pull-request numbers the content mentions.
    pub pr_refs: Vec<u32>,
    /// Ids of the entries it was derived from.
    pub sources: Vec<String>,
    /// For facts: the subject.
    pub subject: Option<String>,
    /// For facts: the predicate.
    pub predicate: Option<String>,
    /// When it became true (ms since the epoch).
    pub valid_from: i64,
    /// When it stopped being true (superseded), if it did.
    pub valid_to: Option<i64>,
    /// When the host learned it.
    pub recorded_at: i64,
    /// The entry that replaced it.
    pub superseded_by: Option<String>,
    /// When it was forgotten (soft delete); forgotten entries are never recalled.
    pub forgotten_at: Option<i64>,
}

impl MemoryEntry {
    /// The entry `memory` becomes when recorded as `id` at `now`: the kind's default
    /// category, memory-stream importance when none is given, issue and PR refs from the
    /// content, valid from `now` unless it says otherwise.
    pub fn recorded(memory: &NewMemory, id: String, now: i64) -> Self {
        let category = if memory.category.is_empty() {
            memory.kind.default_category().to_string()
        } else {
            memory.category.clone()
        };
        let importance = memory.importance.unwrap_or_else(|| {
            stream::default_importance(&memory.content, memory.kind, &memory.tags)
        });
        let (issue_refs, pr_refs) = stream::extract_refs(&memory.content);
        Self {
            id,
            kind: memory.kind,
            content: memory.content.clone(),
            category,
            scope: memory.scope.clone(),
            importance,
            tags: memory.tags.clone(),
            issue_refs,
            pr_refs,
            sources: memory.sources.clone(),
            subject: memory.subject.clone(),
            predicate: memory.predicate.clone(),
            valid_from: memory.valid_from.unwrap_or(now),
            valid_to: None,
            recorded_at: now,
            superseded_by: None,
            forgotten_at: None,
        }
    }
}

/// What storing a memory did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StoreOutcome {
    /// Stored as `id`; `superseded` lists the entries it replaced.
    Stored {
        /// The new entry.
        id: String,
        /// Entries that now end where this one starts.
        superseded: Vec<String>,
    },
    /// Not stored: an equal (or, within the same subject, near-equal) memory exists.
    Duplicate {
        /// The existing entry.
        existing: String,
        /// How similar it is (1.0 for exact).
        similarity: f64,
    },
}

impl StoreOutcome {
    /// The id callers should use: the new entry, or the existing duplicate.
    pub fn id(&self) -> &str {
        match self {
            StoreOutcome::Stored { id, .. } => id,
            StoreOutcome::Duplicate { existing, .. } => existing,
        }
    }
}

/// A conversation session as the consolidation tools see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// `<channel>:<conversation>`.
    pub id: String,
    /// The user who spoke in it.
    pub user_id: Option<String>,
    /// The agent who answered.
    pub agent_id: Option<String>,
    /// First activity.
    pub started_at: i64,
    /// When it ended, if it did.
    pub ended_at: Option<i64>,
    /// `active`, `pending` (ended, waiting for consolidation) or `consolidated`.
    pub state: String,
    /// The conversation (`<channel>:<conversation>`) it belongs to.
    #[serde(default)]
    pub conversation: Option<String>,
    /// Its last activity.
    #[serde(default)]
    pub last_activity: Option<i64>,
}

/// Counts for `cairn memory stats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemoryStats {
    /// Live entries (not forgotten, not superseded) per kind.
    pub live_by_kind: BTreeMap<String, u64>,
    /// Live entries per category.
    pub live_by_category: BTreeMap<String, u64>,
    /// Entries superseded by newer ones (kept for as-of queries).
    pub superseded: u64,
    /// Forgotten entries (soft-deleted, awaiting purge).
    pub forgotten: u64,
    /// Entries with a vector from the configured provider and model.
    pub embedded: u64,
    /// Entries waiting to be embedded (or re-embedded after a model change).
    pub embedding_backlog: u64,
    /// Rows in the embedding cache.
    pub embedding_cache: u64,
    /// Sessions per state.
    pub sessions: BTreeMap<String, u64>,
    /// Size of memory.db and its WAL, in bytes.
    pub database_bytes: u64,
    /// When hygiene last ran.
    pub hygiene_last_run: Option<i64>,
}

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The caller's input is malformed; the text names the field.
    #[error("{0}")]
    InvalidInput(String),
    /// No such entry or session.
    #[error("{0}")]
    NotFound(String),
    /// The backend cannot serve the call (stopping, a plugin backend that is down, ...).
    #[error("{0}")]
    Unavailable(String),
    /// SQLite or the embedding provider failed.
    #[error("{0}")]
    Storage(String),
}

impl From<rusqlite::Error> for MemoryError {
    fn from(error: rusqlite::Error) -> Self {
        MemoryError::Storage(error.to_string())
    }
}

impl From<crate::store::writer::WriteError> for MemoryError {
    fn from(error: crate::store::writer::WriteError) -> Self {
        match error {
            crate::store::writer::WriteError::Stopped => {
                MemoryError::Unavailable(error.to_string())
            }
            crate::store::writer::WriteError::Sqlite(text) => MemoryError::Storage(text),
        }
    }
}

/// Retention of one category for hygiene.
pub type RetentionDays = BTreeMap<String, u32>;

/// Memory settings (`memory:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryConfig {
    /// Where memory lives: `sqlite` (memory.db), or the id of a `memory-backend` plugin.
    pub backend: String,
    /// The agent id recorded on the main agent's memories.
    pub agent_id: String,
    /// Save each user message and reply as an episode.
    pub save_episodes: bool,
    /// Memories put before the LLM call (0 turns the context provider off).
    pub context_limit: u32,
    /// Embeddings for hybrid recall.
    pub embeddings: EmbeddingConfig,
    /// Ranking.
    pub recall: RecallConfig,
    /// Entries older than this many days in a category are forgotten by hygiene (facts and
    /// core memories never are; episodes only once their session is consolidated).
    pub retention_days: RetentionDays,
    /// Hours between hygiene runs (default 12).
    pub hygiene_interval_hours: u64,
    /// Write MEMORY_SNAPSHOT.md (core memories) after each hygiene run.
    pub snapshot_on_hygiene: bool,
    /// Rebuild core memories from MEMORY_SNAPSHOT.md when memory.db is missing.
    pub auto_hydrate: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            backend: "sqlite".into(),
            agent_id: "main".into(),
            save_episodes: true,
            context_limit: 5,
            embeddings: EmbeddingConfig::default(),
            recall: RecallConfig::default(),
            retention_days: [("conversation".to_string(), 90), ("daily".to_string(), 30)]
                .into_iter()
                .collect(),
            hygiene_interval_hours: 12,
            snapshot_on_hygiene: true,
            auto_hydrate: true,
        }
    }
}

impl MemoryConfig {
    /// Check the settings; the error names the field and what was expected.
    pub fn validate(&self) -> Result<(), String> {
        let valid_backend = self.backend == "sqlite"
            || (!self.backend.is_empty()
                && self
                    .backend
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'));
        if !valid_backend {
            return Err(format!(
                "memory.backend: `{}` is neither `sqlite` nor a plugin id",
                self.backend
            ));
        }
        if self.agent_id.trim().is_empty() {
            return Err("memory.agent_id: expected a non-empty id".into());
        }
        if self.context_limit > 50 {
            return Err("memory.context_limit: expected at most 50".into());
        }
        let embeddings = &self.embeddings;
        if embeddings.provider == embed::ProviderKind::Hash
            && !(8..=4096).contains(&embeddings.dims)
        {
            return Err("memory.embeddings.dims: expected 8 to 4096".into());
        }
        if embeddings.provider == embed::ProviderKind::Openai
            && !(embeddings.url.starts_with("http://") || embeddings.url.starts_with("https://"))
        {
            return Err(format!(
                "memory.embeddings.url: `{}` is not an http:// or https:// URL",
                embeddings.url
            ));
        }
        if embeddings.batch_size == 0 {
            return Err("memory.embeddings.batch_size: expected at least 1".into());
        }
        let recall = &self.recall;
        let weights = [
            ("bm25_weight", recall.bm25_weight),
            ("vector_weight", recall.vector_weight),
            ("relevance_weight", recall.relevance_weight),
            ("importance_weight", recall.importance_weight),
            ("recency_weight", recall.recency_weight),
        ];
        for (name, weight) in weights {
            if !(0.0..=100.0).contains(&weight) {
                return Err(format!(
                    "memory.recall.{name}: expected a number from 0 to 100"
                ));
            }
        }
        if recall.bm25_weight + recall.vector_weight <= 0.0 {
            return Err(
                "memory.recall.bm25_weight / vector_weight: at least one must be positive".into(),
            );
        }
        if !(0.0..=1.0).contains(&recall.min_relevance)
            || !(0.0..=1.0).contains(&recall.duplicate_similarity)
        {
            return Err(
                "memory.recall.min_relevance / duplicate_similarity: expected 0 to 1".into(),
            );
        }
        if self.hygiene_interval_hours == 0 {
            return Err("memory.hygiene_interval_hours: expected at least 1".into());
        }
        Ok(())
    }
}

/// The snapshot file of core memories, beside memory.db.
pub const SNAPSHOT_FILE: &str = "MEMORY_SNAPSHOT.md";
