//! The built-in memory backend: write policy (validation, ids, near-duplicates), hybrid
//! recall, the background embedder with its vector index, export and snapshots — over a
//! [`MemoryStore`] that keeps the rows (`memory.db` through [`SqliteMemory`]).

mod embedding;
mod import_check;
mod maintenance;
mod search;
mod successors;

pub use embedding::TurnInFlight;
pub use import_check::CheckedImport;
pub use search::VectorSource;
pub use transfer::{CheckedSnapshot, link_target};
mod transfer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use super::embed::{self, EmbedSignal, EmbeddingProvider, HashEmbedder, ScanFilter, VectorIndex};
use super::recall::{self, RecallHit, RecallQuery};
use super::rerank;
use super::{
    MemoryConfig, MemoryEntry, MemoryError, MemoryKind, MemoryStats, NewMemory, SNAPSHOT_FILE,
    Scope, StoreOutcome,
};
use super::{snapshot, stream};
pub use cairn_storage::memory::ImportReport;
use cairn_storage::memory::{Insertion, MemoryStore, SqliteMemory};
use cairn_storage::now_ms;
use cairn_storage::writer::Receipt;
pub use cairn_vocab::memory::{AuditRow, ExportRecord, ListFilter};

pub use maintenance::HygieneReport;

/// Longest content of one memory, in bytes.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Similarity at or above which a memory about the same subject is a duplicate.
pub const DUPLICATE_SIMILARITY: f64 = 0.85;

/// The built-in memory backend over a [`MemoryStore`].
pub struct LocalMemory {
    data_dir: PathBuf,
    config: MemoryConfig,
    store: Arc<dyn MemoryStore>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// Why the embedder is not the one configured, and how to fix it.
    embedding_warning: Option<String>,
    /// The local model asked for when it could not load (absent or broken): its vectors
    /// are kept and counted (`memory stats`), and the entries without one wait for it.
    awaited_model: Option<(String, String)>,
    index: VectorIndex,
    index_loaded: OnceLock<()>,
    /// The store's mark the index has caught up to (a shared store: see
    /// [`MemoryStore::vectors_saved_after`]).
    index_mark: AtomicI64,
    /// Every live entry up to this seq has a vector from the configured model.
    embedded_through: AtomicI64,
    signal: Arc<EmbedSignal>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Turns in flight, which the background embedder yields the CPU to.
    turns: Arc<AtomicUsize>,
}

impl LocalMemory {
    /// Open `<data>/memory.db` (creating and migrating it) and serve memory from it.
    pub fn open(data_dir: &Path, config: MemoryConfig) -> Result<Arc<Self>, MemoryError> {
        Self::over(data_dir, config, Arc::new(SqliteMemory::open(data_dir)?))
    }

    /// Serve memory from `store`. On a cold start (the store remembers nothing and has not
    /// been hydrated yet — also when a start died while hydrating) core memories are
    /// hydrated from `MEMORY_SNAPSHOT.md` when it exists and `auto_hydrate` is on. Vectors
    /// of the configured model are loaded on first recall.
    pub fn over(
        data_dir: &Path,
        config: MemoryConfig,
        store: Arc<dyn MemoryStore>,
    ) -> Result<Arc<Self>, MemoryError> {
        let cold = store.awaits_hydration()?;
        let chosen = embed::provider_from_config(&config.embeddings);
        let chosen = keeping_model_vectors(chosen, store.as_ref())?;
        let (embedder, embedding_warning) = (chosen.provider, chosen.warning);
        let asks_local = matches!(
            config.embeddings.provider,
            embed::ProviderKind::Local | embed::ProviderKind::Auto
        );
        let awaited_model = (embedder.is_none() && asks_local).then(|| {
            (
                "local".to_string(),
                embed::local_model::MODEL_NAME.to_string(),
            )
        });
        let window = config.recall.scan_limit;
        let memory = Arc::new(Self {
            data_dir: data_dir.to_path_buf(),
            config,
            store,
            embedder,
            embedding_warning,
            awaited_model,
            index: VectorIndex::new(window),
            index_loaded: OnceLock::new(),
            index_mark: AtomicI64::new(0),
            embedded_through: AtomicI64::new(0),
            signal: Arc::new(EmbedSignal::default()),
            turns: Arc::new(AtomicUsize::new(0)),
            worker: Mutex::new(None),
        });
        let snapshot = data_dir.join(SNAPSHOT_FILE);
        if cold {
            if memory.config.auto_hydrate && snapshot.exists() {
                tracing::info!(snapshot = %snapshot.display(), "memory is new: hydrating core memories from the snapshot");
                let restored = memory.hydrate(&snapshot)?;
                tracing::info!(restored, snapshot = %snapshot.display(), "memory was new: core memories hydrated from the snapshot");
            }
            memory.store.settle_hydration().wait()?;
        }
        Ok(memory)
    }

    /// The settings this backend runs with.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// Which embeddings recall uses — `local all-MiniLM-L6-v2 (semantic)`, `hash hash-v1-256
    /// (lexical)`, … — and, when it is not the configured one, why and how to fix it.
    pub fn embeddings_in_use(&self) -> (String, Option<String>) {
        let name = match &self.embedder {
            None => "none (BM25 only)".to_string(),
            Some(e) if e.provider() == "hash" => format!("hash {} (lexical)", e.model()),
            Some(e) => format!("{} {} (semantic)", e.provider(), e.model()),
        };
        (name, self.embedding_warning.clone())
    }

    /// Whether recall embeds queries (an embedding provider is on).
    pub fn embeds(&self) -> bool {
        self.embedder.is_some()
    }

    /// The provider and model of the configured embeddings (as stored vectors are keyed),
    /// when they are on.
    pub fn model(&self) -> Option<(String, String)> {
        self.embedder
            .as_ref()
            .map(|e| (e.provider().to_string(), e.model().to_string()))
    }

    // ---------------------------------------------------------------- writes

    /// Store a memory. Episodes are stored as given (never deduplicated); other kinds skip
    /// exact duplicates in the same scope; a fact with the subject and predicate of a live
    /// fact (or naming one in `supersedes`) supersedes it; a fact nearly equal (similarity
    /// ≥ 0.85) to a live fact about the same subject is a duplicate.
    pub fn store_blocking(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError> {
        self.store_all_blocking(vec![memory])
            .pop()
            .unwrap_or_else(|| Err(MemoryError::InvalidInput("no memory to store".into())))
    }

    /// Store several memories, in order, each as [`Self::store_blocking`] would — but every
    /// insert is queued before the first is awaited, so the writer commits them together
    /// (one fsync for a turn's episodes). One outcome per memory.
    pub fn store_all_blocking(
        &self,
        memories: Vec<NewMemory>,
    ) -> Vec<Result<StoreOutcome, MemoryError>> {
        let queued: Vec<_> = memories
            .into_iter()
            .map(|memory| self.queue_insert(memory))
            .collect();
        let outcomes: Vec<_> = queued
            .into_iter()
            .map(|queued| {
                let (id, receipt) = match queued? {
                    Queued::Insert(id, receipt) => (id, receipt),
                    Queued::NearDuplicate(existing, similarity) => {
                        return Ok(StoreOutcome::Duplicate {
                            existing,
                            similarity,
                        });
                    }
                };
                match receipt.wait()? {
                    Insertion::Stored { superseded } => Ok(StoreOutcome::Stored { id, superseded }),
                    Insertion::Duplicate { existing } => Ok(StoreOutcome::Duplicate {
                        existing,
                        similarity: 1.0,
                    }),
                    Insertion::Refused(reason) => Err(MemoryError::InvalidInput(reason)),
                }
            })
            .collect();
        let stored = outcomes
            .iter()
            .any(|o| matches!(o, Ok(StoreOutcome::Stored { .. })));
        if stored && self.embedder.is_some() {
            self.signal.notify();
        }
        outcomes
    }

    /// Validate a memory and queue its insert, unless it is a near-duplicate fact.
    fn queue_insert(&self, memory: NewMemory) -> Result<Queued, MemoryError> {
        let prepared = self.prepare(memory)?;
        if let Some((existing, similarity)) = self.near_duplicate(&prepared)? {
            return Ok(Queued::NearDuplicate(existing, similarity));
        }
        let id = prepared.entry.id.clone();
        let receipt = self
            .store
            .insert(prepared.entry, prepared.supersedes, "store");
        Ok(Queued::Insert(id, receipt))
    }

    fn prepare(&self, memory: NewMemory) -> Result<Prepared, MemoryError> {
        validate(&memory)?;
        let now = now_ms();
        let id = memory
            .id
            .clone()
            .unwrap_or_else(|| new_id(&memory.content, now));
        let entry = crate::record(&memory, id, now);
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
        if entry.subject.is_none()
            || entry.kind == MemoryKind::Episode
            || prepared.supersedes.is_some()
        {
            return Ok(None);
        }
        let candidates = self.store.same_subject_facts(entry)?;
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
        let seqs: Vec<i64> = candidates.iter().map(|(seq, _, _)| *seq).collect();
        let mut stored = self.vectors_of(&seqs);
        let mut best: Option<(String, f64)> = None;
        for (seq, id, content) in candidates {
            let vector = stored
                .remove(&seq)
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
        Ok(self.store.forget(id, actor).wait()?)
    }

    /// Re-score a live memory's importance (1 to 10); whether there was one.
    pub fn set_importance_blocking(
        &self,
        id: &str,
        importance: u8,
        actor: &str,
    ) -> Result<bool, MemoryError> {
        if !(1..=10).contains(&importance) {
            return Err(MemoryError::InvalidInput(format!(
                "importance: {importance} is not in 1..=10"
            )));
        }
        Ok(self.store.set_importance(id, importance, actor).wait()?)
    }

    /// Remove entries for good: the given ids, or (with none given) every forgotten entry.
    /// Returns how many rows were removed.
    pub fn purge(&self, ids: &[String], actor: &str) -> Result<u64, MemoryError> {
        let removed = self.store.purge(ids.to_vec(), actor).wait()?;
        for seq in &removed {
            self.index().remove(*seq);
            // SQLite may hand a purged top seq to the next entry: embed from below it.
            self.embedded_through.fetch_min(seq - 1, Ordering::AcqRel);
        }
        Ok(removed.len() as u64)
    }

    // ---------------------------------------------------------------- reads

    /// One entry by id (forgotten and superseded ones too: `get` is for inspection).
    pub fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        Ok(self.store.get(id)?)
    }

    /// Entries matching `filter`, newest first.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError> {
        Ok(self.store.list(filter)?)
    }

    /// How many live entries a scope holds.
    pub fn count(&self, scope: &Scope) -> Result<u64, MemoryError> {
        Ok(self.store.count(scope)?)
    }

    /// The model [`Self::stats`] counts vectors and the backlog for: the one in use, or the
    /// local model asked for while it cannot load; whether it is loaded.
    pub fn counted_model(&self) -> Option<((String, String), bool)> {
        match self.model() {
            Some(model) => Some((model, true)),
            None => self.awaited_model.clone().map(|model| (model, false)),
        }
    }

    /// Counts for `cairn memory stats`: vectors and backlog of [`Self::counted_model`].
    pub fn stats(&self) -> Result<MemoryStats, MemoryError> {
        let model = self.counted_model().map(|(model, _)| model);
        Ok(self
            .store
            .stats(model.as_ref().map(|(p, m)| (p.as_str(), m.as_str())))?)
    }

    /// The audit trail of an entry, oldest first.
    pub fn audit_trail(&self, id: &str) -> Result<Vec<AuditRow>, MemoryError> {
        Ok(self.store.audit_trail(id)?)
    }
}

impl Drop for LocalMemory {
    fn drop(&mut self) {
        self.signal.stop();
    }
}

/// A memory ready to insert: its full record and what it explicitly replaces.
struct Prepared {
    entry: MemoryEntry,
    supersedes: Option<String>,
}

/// A memory on its way into the store.
enum Queued {
    /// Its insert is queued: its id and the receipt of the insert.
    Insert(String, Receipt<Insertion>),
    /// A live fact says nearly the same: its id and how alike they are.
    NearDuplicate(String, f64),
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

/// Whether `id` can name an entry: 1 to 64 ASCII letters, digits, `-` or `_`.
fn is_entry_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The embedder and its warning, given what memory already holds. Under `auto` with the
/// local model missing or broken `hash` stands in — but not over vectors of the local model:
/// it would re-embed every entry over them (hours at scale, and again once the model is
/// back), so recall is BM25 only meanwhile and they are kept for the model's return.
fn keeping_model_vectors(
    chosen: embed::ChosenProvider,
    store: &dyn MemoryStore,
) -> Result<embed::ChosenProvider, MemoryError> {
    let Some(what) = &chosen.stands_in_for else {
        return Ok(chosen);
    };
    let model = embed::local_model::MODEL_NAME;
    let kept = store.stats(Some(("local", model)))?.embedded;
    if kept == 0 {
        return Ok(chosen);
    }
    let warning = format!(
        "{what}: recall is lexical (BM25 only) until it is back, keeping the {kept} vectors of \
         {model} memory holds (hash embeddings would replace them); {}",
        embed::local_model::INSTALL_HINT
    );
    Ok(embed::ChosenProvider {
        provider: None,
        warning: Some(warning),
        stands_in_for: None,
    })
}

fn validate(memory: &NewMemory) -> Result<(), MemoryError> {
    let bad = |text: String| Err(MemoryError::InvalidInput(text));
    if cairn_vocab::text::is_blank(&memory.content) {
        return bad(
            "content: expected text that shows (not only blanks or invisible characters)".into(),
        );
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
    if let Some(id) = &memory.id
        && !is_entry_id(id)
    {
        return bad(format!(
            "id: `{id}` is not an id; expected 1 to 64 ASCII letters, digits, - or _"
        ));
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

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}
