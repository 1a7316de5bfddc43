//! The memory the rest of the host talks to: the SQLite store, or — when `memory.backend`
//! names one — a `memory-backend` plugin for store/recall/get/list/forget/count/health.
//! Sessions and consolidation bookkeeping always stay in memory.db.
//!
//! Calls are blocking (SQLite, or a call into the backend plugin's sandbox); async callers
//! run them on the blocking pool.

use std::sync::{Arc, OnceLock};

use super::store::ListFilter;
use super::{
    MemoryEntry, MemoryError, MemoryKind, MemoryStore, NewMemory, RecallHit, RecallQuery, Scope,
    ScoreParts, StoreOutcome,
};
use crate::plugin::bindings::v0_1::types as wit;
use crate::plugin::runtime::CallError;
use crate::plugin::supervisor::PluginHandle;

/// Where memories live.
pub struct MemoryService {
    store: Arc<MemoryStore>,
    backend_plugin: Option<String>,
    backend: OnceLock<PluginHandle>,
}

impl MemoryService {
    /// Memory served by `store`, or by the plugin `memory.backend` names once it is attached.
    pub fn new(store: Arc<MemoryStore>) -> Self {
        let backend = store.config().backend.clone();
        Self {
            store,
            backend_plugin: (backend != "sqlite").then_some(backend),
            backend: OnceLock::new(),
        }
    }

    /// The SQLite store (sessions, consolidation bookkeeping, maintenance).
    pub fn store(&self) -> &Arc<MemoryStore> {
        &self.store
    }

    /// The id of the configured backend plugin, when memory is a plugin.
    pub fn backend_plugin(&self) -> Option<&str> {
        self.backend_plugin.as_deref()
    }

    /// Connect the running backend plugin named in the config.
    pub fn attach_backend(&self, handle: PluginHandle) {
        let _ = self.backend.set(handle);
    }

    fn plugin(&self) -> Result<Option<&PluginHandle>, MemoryError> {
        match &self.backend_plugin {
            None => Ok(None),
            Some(id) => self.backend.get().map(Some).ok_or_else(|| {
                MemoryError::Unavailable(format!("memory backend plugin `{id}` is not running"))
            }),
        }
    }

    /// Store a memory.
    pub fn save(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError> {
        match self.plugin()? {
            None => self.store.store_blocking(memory),
            Some(plugin) => {
                let entry = to_wit_new(&memory);
                let id = plugin
                    .call_blocking(move |i| i.memory_store(&entry))
                    .map_err(|e| backend_error(plugin, e))?;
                Ok(StoreOutcome::Stored {
                    id,
                    superseded: Vec::new(),
                })
            }
        }
    }

    /// Memories relevant to `query`, best first.
    pub fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        match self.plugin()? {
            None => self.store.recall(query),
            Some(plugin) => {
                let wit_query = wit::RecallQuery {
                    text: query.text.clone(),
                    scope: to_wit_scope(&query.scope),
                    kinds: query.kinds.iter().map(|k| to_wit_kind(*k)).collect(),
                    limit: query.limit.min(u32::MAX as usize) as u32,
                    as_of: query.as_of,
                    exclude_session: query.exclude_session.clone(),
                };
                let hits = plugin
                    .call_blocking(move |i| i.memory_recall(&wit_query))
                    .map_err(|e| backend_error(plugin, e))?;
                Ok(hits
                    .into_iter()
                    .map(|hit| RecallHit {
                        entry: from_wit_entry(hit.entry),
                        score: hit.score,
                        explain: ScoreParts {
                            score: hit.score,
                            ..ScoreParts::default()
                        },
                    })
                    .collect())
            }
        }
    }

    /// One memory by id.
    pub fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        match self.plugin()? {
            None => self.store.get(id),
            Some(plugin) => {
                let id = id.to_string();
                match plugin.call_blocking(move |i| i.memory_get(&id)) {
                    Ok(entry) => Ok(Some(from_wit_entry(entry))),
                    Err(CallError::Plugin(wit::Error::NotFound(_))) => Ok(None),
                    Err(e) => Err(backend_error(plugin, e)),
                }
            }
        }
    }

    /// Live memories of a scope, newest first.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError> {
        match self.plugin()? {
            None => self.store.list(filter),
            Some(plugin) => {
                let scope = to_wit_scope(&filter.scope);
                let kinds: Vec<wit::MemoryKind> =
                    filter.kinds.iter().map(|k| to_wit_kind(*k)).collect();
                let limit = filter.limit.min(u32::MAX as usize) as u32;
                let entries = plugin
                    .call_blocking(move |i| i.memory_list(&scope, &kinds, limit))
                    .map_err(|e| backend_error(plugin, e))?;
                Ok(entries.into_iter().map(from_wit_entry).collect())
            }
        }
    }

    /// Forget a memory (soft delete in SQLite, with an audit row naming `actor`).
    pub fn forget(&self, id: &str, actor: &str) -> Result<bool, MemoryError> {
        match self.plugin()? {
            None => self.store.forget_blocking(id, actor),
            Some(plugin) => {
                let id = id.to_string();
                plugin
                    .call_blocking(move |i| i.memory_forget(&id))
                    .map_err(|e| backend_error(plugin, e))
            }
        }
    }

    /// How many live memories a scope holds.
    pub fn count(&self, scope: &Scope) -> Result<u64, MemoryError> {
        match self.plugin()? {
            None => self.store.count(scope),
            Some(plugin) => {
                let scope = to_wit_scope(scope);
                plugin
                    .call_blocking(move |i| i.memory_count(&scope))
                    .map_err(|e| backend_error(plugin, e))
            }
        }
    }

    /// A one-line health report.
    pub fn health(&self) -> Result<String, MemoryError> {
        match self.plugin()? {
            None => {
                let stats = self.store.stats()?;
                Ok(format!(
                    "sqlite: {} live entries, {} awaiting embedding",
                    stats.live_by_kind.values().sum::<u64>(),
                    stats.embedding_backlog
                ))
            }
            Some(plugin) => plugin
                .call_blocking(|i| i.memory_health())
                .map_err(|e| backend_error(plugin, e)),
        }
    }
}

fn backend_error(plugin: &PluginHandle, error: CallError) -> MemoryError {
    match error {
        CallError::Plugin(wit::Error::InvalidInput(text)) => MemoryError::InvalidInput(text),
        CallError::Plugin(wit::Error::NotFound(text)) => MemoryError::NotFound(text),
        other => {
            MemoryError::Unavailable(format!("memory backend plugin `{}`: {other}", plugin.id()))
        }
    }
}

/// A kind as the plugin contract spells it.
pub fn to_wit_kind(kind: MemoryKind) -> wit::MemoryKind {
    match kind {
        MemoryKind::Episode => wit::MemoryKind::Episode,
        MemoryKind::Fact => wit::MemoryKind::Fact,
        MemoryKind::Core => wit::MemoryKind::Core,
        MemoryKind::Reflection => wit::MemoryKind::Reflection,
        MemoryKind::Procedure => wit::MemoryKind::Procedure,
    }
}

/// A kind from the plugin contract.
pub fn from_wit_kind(kind: wit::MemoryKind) -> MemoryKind {
    match kind {
        wit::MemoryKind::Episode => MemoryKind::Episode,
        wit::MemoryKind::Fact => MemoryKind::Fact,
        wit::MemoryKind::Core => MemoryKind::Core,
        wit::MemoryKind::Reflection => MemoryKind::Reflection,
        wit::MemoryKind::Procedure => MemoryKind::Procedure,
    }
}

/// A scope as the plugin contract spells it.
pub fn to_wit_scope(scope: &Scope) -> wit::MemoryScope {
    wit::MemoryScope {
        agent_id: scope.agent_id.clone(),
        user_id: scope.user_id.clone(),
        session_id: scope.session_id.clone(),
    }
}

/// A scope from the plugin contract.
pub fn from_wit_scope(scope: wit::MemoryScope) -> Scope {
    Scope {
        agent_id: scope.agent_id,
        user_id: scope.user_id,
        session_id: scope.session_id,
    }
}

/// A new memory from the plugin contract.
pub fn from_wit_new(memory: wit::NewMemory) -> NewMemory {
    NewMemory {
        kind: from_wit_kind(memory.kind),
        content: memory.content,
        category: memory.category,
        scope: from_wit_scope(memory.scope),
        importance: memory.importance,
        tags: memory.tags,
        sources: memory.sources,
        subject: memory.subject,
        predicate: memory.predicate,
        supersedes: memory.supersedes,
        valid_from: None,
    }
}

/// A new memory as the plugin contract spells it.
pub fn to_wit_new(memory: &NewMemory) -> wit::NewMemory {
    wit::NewMemory {
        kind: to_wit_kind(memory.kind),
        content: memory.content.clone(),
        category: if memory.category.is_empty() {
            memory.kind.default_category().to_string()
        } else {
            memory.category.clone()
        },
        scope: to_wit_scope(&memory.scope),
        importance: memory.importance,
        tags: memory.tags.clone(),
        sources: memory.sources.clone(),
        subject: memory.subject.clone(),
        predicate: memory.predicate.clone(),
        supersedes: memory.supersedes.clone(),
    }
}

/// A stored memory as the plugin contract spells it.
pub fn to_wit_entry(entry: MemoryEntry) -> wit::MemoryEntry {
    wit::MemoryEntry {
        id: entry.id,
        kind: to_wit_kind(entry.kind),
        content: entry.content,
        category: entry.category,
        scope: to_wit_scope(&entry.scope),
        importance: entry.importance,
        tags: entry.tags,
        issue_refs: entry.issue_refs,
        pr_refs: entry.pr_refs,
        sources: entry.sources,
        subject: entry.subject,
        predicate: entry.predicate,
        valid_from: entry.valid_from,
        valid_to: entry.valid_to,
        recorded_at: entry.recorded_at,
        superseded_by: entry.superseded_by,
    }
}

/// A stored memory from the plugin contract.
pub fn from_wit_entry(entry: wit::MemoryEntry) -> MemoryEntry {
    MemoryEntry {
        id: entry.id,
        kind: from_wit_kind(entry.kind),
        content: entry.content,
        category: entry.category,
        scope: from_wit_scope(entry.scope),
        importance: entry.importance,
        tags: entry.tags,
        issue_refs: entry.issue_refs,
        pr_refs: entry.pr_refs,
        sources: entry.sources,
        subject: entry.subject,
        predicate: entry.predicate,
        valid_from: entry.valid_from,
        valid_to: entry.valid_to,
        recorded_at: entry.recorded_at,
        superseded_by: entry.superseded_by,
        forgotten_at: None,
    }
}
