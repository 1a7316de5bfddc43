//! Memory records: what is stored, how it is scoped, queried, recalled and exported.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::session::Session;

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
        f.pad(self.as_str())
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
    /// The id to store it under, chosen by the caller so saving the same memory again (a
    /// turn resumed after a crash) stores it once; none takes a fresh one. At most 64 ASCII
    /// letters, digits, `-` or `_`.
    #[serde(default)]
    pub id: Option<String>,
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
            id: None,
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

/// Which entries `list` returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Scope (shared entries included for a set agent or user).
    pub scope: Scope,
    /// Only these kinds; empty means all.
    pub kinds: Vec<MemoryKind>,
    /// Only this category.
    pub category: Option<String>,
    /// Include superseded entries.
    pub include_superseded: bool,
    /// Include forgotten entries.
    pub include_forgotten: bool,
    /// Most entries returned (newest first).
    pub limit: usize,
}

/// One line of a JSONL export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExportRecord {
    /// A memory with every field.
    Entry(Box<MemoryEntry>),
    /// A session with its consolidation state.
    Session(Session),
    /// One row of an entry's audit trail (who forgot, superseded or edited it, and when).
    Audit(AuditRow),
}

/// One row of an entry's audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    /// The entry it is about.
    pub entry_id: String,
    /// `forget`, `purge`, `supersede`, `edit` or `rescore`.
    pub action: String,
    /// Who did it: `cli`, `hygiene`, `plugin:<id>`, `store`.
    pub actor: String,
    /// When (ms since the epoch).
    pub at: i64,
    /// For a supersede, the id of the newer entry.
    pub detail: Option<String>,
}

/// A recall request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecallQuery {
    /// Free text, matched as words (never as query syntax).
    pub text: String,
    /// Only memories in this scope (plus those shared at a set agent or user level).
    pub scope: Scope,
    /// Only these kinds; empty means all.
    pub kinds: Vec<MemoryKind>,
    /// Only these categories; empty means all.
    pub categories: Vec<String>,
    /// Skip memories of this session (the context provider skips the current one).
    pub exclude_session: Option<String>,
    /// Only memories valid from this time on (ms).
    pub since: Option<i64>,
    /// Only memories valid from before this time (ms).
    pub until: Option<i64>,
    /// Answer as memory stood at this time: what was valid then (valid time). None = now.
    pub as_of: Option<i64>,
    /// The moment the question is asked (ms): recency and time expressions in `text`
    /// ("last month") are measured from it. None = `as_of`, else the clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<i64>,
    /// Most hits returned.
    pub limit: usize,
    /// Overrides the configured minimum relevance.
    pub min_relevance: Option<f64>,
    /// Use BM25 only, even when embeddings are on.
    pub lexical_only: bool,
    /// `text` already embedded by the local memory's provider (the agent embeds a turn's
    /// query on its own to time the model apart from the host); None = embed it during
    /// recall. Never crosses to plugins.
    #[serde(skip)]
    pub query_vector: Option<Vec<f32>>,
}

/// The components of one hit's score, for `--explain`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScoreParts {
    /// SQLite's BM25 for the entry (lower is better), when the text matched.
    pub bm25_raw: Option<f64>,
    /// BM25 normalised per query to 0–1.
    pub bm25: f64,
    /// Cosine similarity to the query, when both have vectors.
    pub cosine: Option<f64>,
    /// The cosine with the common direction of the memory's vectors taken out, which a
    /// semantic model's relevance is made of (see `memory.recall.centring_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub centred_cosine: Option<f64>,
    /// With a semantic model, the centred cosine plus a little of BM25; otherwise the
    /// weighted mean of the signals present.
    pub relevance: f64,
    /// Importance mapped to 0.1–1.
    pub importance: f64,
    /// 0–1, halving every half-life of age.
    pub recency: f64,
    /// Age at the query's time, in hours; negative for a memory dated after it (a search
    /// `--at` a past moment).
    pub age_hours: f64,
    /// With a semantic model, the hit's mean likeness (centred cosine) to the candidates
    /// most like it: how crowded its neighbourhood is. A share of it is taken off the score
    /// (`memory.recall.crowding_penalty`), so a bland sentence that resembles everything
    /// stops outranking a specific answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crowding: Option<f64>,
    /// relevance·w + importance·w + recency·w, less the crowding penalty.
    pub score: f64,
    /// Why the hit sits where it does beyond its score: a newer memory on the same subject
    /// ranked above an older one, or a hit moved down for repeating a better one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjusted: Option<String>,
    /// How the time the query names ("last month") weighed on the hit: inside or outside
    /// the span, and the span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The memory backend plugin that scored the hit itself (`memory.backend`): its score
    /// is all there is, and the other parts were not measured, so they stay zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scored_by: Option<String>,
}

/// One recalled memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecallHit {
    /// The memory.
    pub entry: MemoryEntry,
    /// Final score, higher is better.
    pub score: f64,
    /// How the score was made.
    pub explain: ScoreParts,
}
