//! Agent memory: episodes, facts, core memories, reflections and procedures in
//! `<data>/memory.db`, with hybrid recall (BM25 + embeddings, blended with importance and
//! recency), bi-temporal facts that are superseded rather than deleted, and the bookkeeping
//! consolidators need.
//!
//! - [`local`]: the built-in backend — write policy, recall, the background embedder,
//!   export/import, hygiene and snapshots — over a `cairn_storage::memory::MemoryStore`
//!   that keeps the rows (this crate holds no SQL).
//! - [`recall`]: query parsing and scoring, with a per-hit explanation.
//! - [`embed`]: embedding providers (`hash`, `openai`), the in-memory vector index and the
//!   background embedder.
//! - [`change`]: whether a memory's words tell of a change (knowledge updates).
//! - [`stream`]: importance and issue/PR reference rules.
//! - [`timeframe`]: time expressions in queries ("last month", "before I moved") and
//!   questions comparing two events.
//! - [`snapshot`]: `MEMORY_SNAPSHOT.md`, core memories as editable Markdown.
//! - [`service`]: what the rest of the host talks to — the SQLite store or a
//!   `memory-backend` plugin, as `cairn.yaml` says.

#![deny(missing_docs)]

pub mod change;
pub mod embed;
pub mod literal;
pub mod local;
pub mod recall;
pub mod rerank;
pub mod service;
pub mod snapshot;
pub mod stream;
pub mod timeframe;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use cairn_vocab::ErrorKind;
pub use cairn_vocab::memory::{
    AuditRow, ExportRecord, ListFilter, MemoryEntry, MemoryKind, MemoryStats, NewMemory, Scope,
    StoreOutcome,
};
pub use cairn_vocab::session::Session;
pub use embed::EmbeddingConfig;
pub use local::{CheckedImport, CheckedSnapshot, LocalMemory, link_target};
pub use recall::{RecallConfig, RecallHit, RecallQuery, ScoreParts};
pub use service::MemoryService;

pub use cairn_storage::memory::content_hash;

/// The entry `memory` becomes when recorded as `id` at `now`: the kind's default
/// category, memory-stream importance when none is given, issue and PR refs from the
/// content, valid from `now` unless it says otherwise.
pub fn record(memory: &NewMemory, id: String, now: i64) -> MemoryEntry {
    let category = if memory.category.is_empty() {
        memory.kind.default_category().to_string()
    } else {
        memory.category.clone()
    };
    let importance = memory
        .importance
        .unwrap_or_else(|| stream::default_importance(&memory.content, memory.kind, &memory.tags));
    let (issue_refs, pr_refs) = stream::extract_refs(&memory.content);
    MemoryEntry {
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

/// Why a memory operation failed: the one error type of this crate.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The caller's input is malformed; the text names the field.
    #[error("{0}")]
    InvalidInput(String),
    /// No such entry or session.
    #[error("{0}")]
    NotFound(String),
    /// The backend cannot serve the call (a plugin backend that is down, an embedding
    /// provider that does not answer, ...).
    #[error("{0}")]
    Unavailable(String),
    /// The store failed.
    #[error("memory store: {0}")]
    Storage(#[from] cairn_storage::StorageError),
    /// An export or a snapshot could not be written.
    #[error("{0}")]
    Write(String),
}

impl MemoryError {
    /// Whether the store refused the write for a reason that passes (a full disk, an
    /// unreachable database server): the same write succeeds later (see
    /// [`StorageError::is_passing`]).
    pub fn is_passing(&self) -> bool {
        matches!(self, MemoryError::Storage(e) if e.is_passing())
    }

    /// What kind of failure this is, as callers across the plugin boundary see it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            MemoryError::InvalidInput(_) => ErrorKind::InvalidInput,
            MemoryError::NotFound(_) => ErrorKind::NotFound,
            MemoryError::Unavailable(_) => ErrorKind::Unavailable,
            MemoryError::Storage(e) => e.kind(),
            MemoryError::Write(_) => ErrorKind::Internal,
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
    /// How far plugins may change memory (default `supervised`).
    pub autonomy: Autonomy,
    /// Memory writes one plugin may make in any minute (default 120).
    pub plugin_writes_per_minute: u32,
}

/// How far plugins may change memory (`memory.autonomy`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Autonomy {
    /// No plugin writes at all: store, save-facts, mark-consolidated and forget are denied.
    ReadOnly,
    /// Additive writes only (store, save-facts, mark-consolidated; a superseded fact stays
    /// queryable); forget is denied.
    #[default]
    Supervised,
    /// Every write the manifest grants, forget included.
    Full,
}

impl Autonomy {
    /// The name as configured.
    pub fn as_str(self) -> &'static str {
        match self {
            Autonomy::ReadOnly => "read-only",
            Autonomy::Supervised => "supervised",
            Autonomy::Full => "full",
        }
    }
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
            autonomy: Autonomy::Supervised,
            plugin_writes_per_minute: 120,
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
        if !(recall.centring_count.is_finite() && recall.centring_count >= 0.0) {
            return Err("memory.recall.centring_count: expected a number of at least 0".into());
        }
        if !(recall.half_life_hours.is_finite() && recall.half_life_hours > 0.0) {
            return Err(
                "memory.recall.half_life_hours: expected a positive number of hours".into(),
            );
        }
        // Each of these is work per recall: past its bound it only slows every recall.
        let counts = [
            ("candidates_per_hit", recall.candidates_per_hit, 1, 100),
            ("crowding_neighbours", recall.crowding_neighbours, 1, 100),
            ("successor_probes", recall.successor_probes, 0, 50),
        ];
        for (name, count, least, most) in counts {
            if !(least..=most).contains(&count) {
                return Err(format!(
                    "memory.recall.{name}: expected a whole number from {least} to {most}"
                ));
            }
        }
        if recall.scan_limit == 0 {
            return Err("memory.recall.scan_limit: expected at least 1".into());
        }
        if recall.bm25_weight + recall.vector_weight <= 0.0 {
            return Err(
                "memory.recall.bm25_weight / vector_weight: at least one must be positive".into(),
            );
        }
        let shares = [
            ("min_relevance", recall.min_relevance),
            ("duplicate_similarity", recall.duplicate_similarity),
            ("lexical_boost", recall.lexical_boost),
            ("min_similarity", recall.min_similarity),
            ("same_subject_similarity", recall.same_subject_similarity),
            (
                "same_subject_when_both_answer",
                recall.same_subject_when_both_answer,
            ),
            ("update_relevance_ratio", recall.update_relevance_ratio),
            (
                "same_subject_when_changed",
                recall.same_subject_when_changed,
            ),
            (
                "update_relevance_ratio_when_changed",
                recall.update_relevance_ratio_when_changed,
            ),
            ("successor_similarity", recall.successor_similarity),
            ("abstain_below", recall.abstain_below),
            ("diversity_lambda", recall.diversity_lambda),
            ("time_boost", recall.time_boost),
            ("time_boost_share", recall.time_boost_share),
            ("crowding_penalty", recall.crowding_penalty),
        ];
        for (name, share) in shares {
            if !(0.0..=1.0).contains(&share) {
                return Err(format!(
                    "memory.recall.{name}: expected a number from 0 to 1"
                ));
            }
        }
        if self.plugin_writes_per_minute == 0 {
            return Err("memory.plugin_writes_per_minute: expected at least 1".into());
        }
        if self.hygiene_interval_hours == 0 {
            return Err("memory.hygiene_interval_hours: expected at least 1".into());
        }
        Ok(())
    }
}

/// The snapshot file of core memories, beside memory.db.
pub const SNAPSHOT_FILE: &str = "MEMORY_SNAPSHOT.md";
