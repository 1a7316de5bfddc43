//! The memory the rest of the host talks to: one [`MemoryBackend`] interface, served by the
//! SQLite store or — when `memory.backend` names one — by a `memory-backend` plugin (see
//! `crate::plugin::memory_backend`). Store, recall, get, list, forget, count, health and the
//! consolidation tools' episodes and facts all go through it. Sessions are the
//! lifecycle's ([`SessionStore`]): memory reads them, and consolidators mark them
//! consolidated, whichever backend keeps the memories.
//!
//! Calls are blocking (SQLite, or a call into the backend plugin's sandbox); async callers
//! run them on the blocking pool.

use std::sync::{Arc, OnceLock};

use cairn_storage::memory::SessionStore;

use crate::local::VectorSource;
use cairn_storage::now_ms;

use super::{
    ListFilter, LocalMemory, MemoryEntry, MemoryError, MemoryKind, NewMemory, RecallHit,
    RecallQuery, Scope, Session, StoreOutcome,
};

/// Where memories are stored and recalled: the operations a `memory-backend` plugin
/// exports, which memory.db serves too.
pub trait MemoryBackend: Send + Sync {
    /// Store a memory.
    fn save(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError>;
    /// Store several memories in order, one outcome each (backends that can commit them
    /// together do).
    fn save_all(&self, memories: Vec<NewMemory>) -> Vec<Result<StoreOutcome, MemoryError>> {
        memories.into_iter().map(|m| self.save(m)).collect()
    }
    /// Memories relevant to `query`, best first.
    fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError>;
    /// One memory by id.
    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError>;
    /// Live memories matching `filter`, newest first.
    fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError>;
    /// Forget a memory; `actor` is recorded where the backend keeps an audit trail.
    fn forget(&self, id: &str, actor: &str) -> Result<bool, MemoryError>;
    /// Re-score a live memory's importance; whether there was one.
    fn set_importance(&self, id: &str, importance: u8, actor: &str) -> Result<bool, MemoryError>;
    /// How many live memories a scope holds.
    fn count(&self, scope: &Scope) -> Result<u64, MemoryError>;
    /// A one-line health report.
    fn health(&self) -> Result<String, MemoryError>;
}

impl MemoryBackend for LocalMemory {
    fn save(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError> {
        self.store_blocking(memory)
    }

    fn save_all(&self, memories: Vec<NewMemory>) -> Vec<Result<StoreOutcome, MemoryError>> {
        self.store_all_blocking(memories)
    }

    fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        LocalMemory::recall(self, query)
    }

    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        LocalMemory::get(self, id)
    }

    fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError> {
        LocalMemory::list(self, filter)
    }

    fn forget(&self, id: &str, actor: &str) -> Result<bool, MemoryError> {
        self.forget_blocking(id, actor)
    }

    fn set_importance(&self, id: &str, importance: u8, actor: &str) -> Result<bool, MemoryError> {
        self.set_importance_blocking(id, importance, actor)
    }

    fn count(&self, scope: &Scope) -> Result<u64, MemoryError> {
        LocalMemory::count(self, scope)
    }

    fn health(&self) -> Result<String, MemoryError> {
        let stats = self.stats()?;
        Ok(format!(
            "sqlite: {} live entries, {} awaiting embedding",
            stats.live_by_kind.values().sum::<u64>(),
            stats.embedding_backlog
        ))
    }
}

/// Most episodes a session hands to a consolidator.
const MAX_SESSION_EPISODES: usize = 100_000;

/// Where memories live.
pub struct MemoryService {
    local: Arc<LocalMemory>,
    sessions: Arc<dyn SessionStore>,
    backend_plugin: Option<String>,
    backend: OnceLock<Arc<dyn MemoryBackend>>,
}

impl MemoryService {
    /// Memory served by `local`, or by the plugin `memory.backend` names once it is
    /// attached; sessions read from `sessions`.
    pub fn new(local: Arc<LocalMemory>, sessions: Arc<dyn SessionStore>) -> Self {
        let backend = local.config().backend.clone();
        Self {
            local,
            sessions,
            backend_plugin: (backend != "sqlite").then_some(backend),
            backend: OnceLock::new(),
        }
    }

    /// The built-in backend (maintenance: embeddings, hygiene, export).
    pub fn local(&self) -> &Arc<LocalMemory> {
        &self.local
    }

    /// The id of the configured backend plugin, when memory is a plugin.
    pub fn backend_plugin(&self) -> Option<&str> {
        self.backend_plugin.as_deref()
    }

    /// Connect the running backend plugin named in the config.
    pub fn attach_backend(&self, backend: Arc<dyn MemoryBackend>) {
        let _ = self.backend.set(backend);
    }

    /// The backend in force: memory.db, or the attached plugin.
    fn backend(&self) -> Result<&dyn MemoryBackend, MemoryError> {
        match &self.backend_plugin {
            None => Ok(&*self.local),
            Some(id) => self.backend.get().map(|b| &**b).ok_or_else(|| {
                MemoryError::Unavailable(format!("memory backend plugin `{id}` is not running"))
            }),
        }
    }

    /// Store a memory.
    pub fn save(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError> {
        self.backend()?.save(memory)
    }

    /// Store several memories in order (in one commit on memory.db); one outcome each.
    pub fn save_all(&self, memories: Vec<NewMemory>) -> Vec<Result<StoreOutcome, MemoryError>> {
        match self.backend() {
            Ok(backend) => backend.save_all(memories),
            Err(e) => memories
                .iter()
                .map(|_| Err(MemoryError::Unavailable(e.to_string())))
                .collect(),
        }
    }

    /// Memories relevant to `query`, best first.
    pub fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        self.backend()?.recall(query)
    }

    /// [`MemoryService::recall`] with the query's vector on its way from `vector` (see
    /// [`VectorSource`]); a plugin backend recalls by its own means.
    pub fn recall_awaiting(
        &self,
        query: &RecallQuery,
        vector: VectorSource<'_>,
    ) -> Result<Vec<RecallHit>, MemoryError> {
        match &self.backend_plugin {
            None => self.local.recall_awaiting(query, Some(vector)),
            Some(_) => self.recall(query),
        }
    }

    /// One memory by id.
    pub fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        self.backend()?.get(id)
    }

    /// Live memories matching `filter`, newest first.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError> {
        self.backend()?.list(filter)
    }

    /// Forget a memory (soft delete in SQLite, with an audit row naming `actor`).
    pub fn forget(&self, id: &str, actor: &str) -> Result<bool, MemoryError> {
        self.backend()?.forget(id, actor)
    }

    /// Re-score a live memory's importance (audited with `actor` in SQLite).
    pub fn set_importance(
        &self,
        id: &str,
        importance: u8,
        actor: &str,
    ) -> Result<bool, MemoryError> {
        self.backend()?.set_importance(id, importance, actor)
    }

    /// How many live memories a scope holds.
    pub fn count(&self, scope: &Scope) -> Result<u64, MemoryError> {
        self.backend()?.count(scope)
    }

    /// A one-line health report.
    pub fn health(&self) -> Result<String, MemoryError> {
        self.backend()?.health()
    }

    /// The episodes of a session, oldest first, from wherever memories live.
    pub fn session_episodes(&self, session: &str) -> Result<Vec<MemoryEntry>, MemoryError> {
        let mut episodes = self.list(&ListFilter {
            scope: Scope {
                session_id: Some(session.to_string()),
                ..Scope::default()
            },
            kinds: vec![MemoryKind::Episode],
            limit: MAX_SESSION_EPISODES,
            ..ListFilter::default()
        })?;
        episodes.reverse();
        Ok(episodes)
    }

    /// Store facts drawn from a known session; a fact without sources gets the session's
    /// episodes as its provenance, and one whose scope leaves the agent or the user unset
    /// gets the session's, so it supersedes the facts of that agent and user with its
    /// subject and predicate (a plugin reads them from the episodes, which a host saving no
    /// episodes, or another backend, does not give it). Returns each fact's id (an existing
    /// one for duplicates).
    pub fn save_facts(
        &self,
        session: &str,
        facts: Vec<NewMemory>,
    ) -> Result<Vec<String>, MemoryError> {
        let Some(known) = self.sessions.session(session)? else {
            return Err(MemoryError::NotFound(format!(
                "session `{session}` is not known"
            )));
        };
        let episodes: Vec<String> = self
            .session_episodes(session)?
            .into_iter()
            .map(|e| e.id)
            .collect();
        let mut ids = Vec::with_capacity(facts.len());
        for (i, mut fact) in facts.into_iter().enumerate() {
            if fact.sources.is_empty() {
                fact.sources = episodes.clone();
            }
            if fact.scope.agent_id.is_none() {
                fact.scope.agent_id = known.agent_id.clone();
            }
            if fact.scope.user_id.is_none() {
                fact.scope.user_id = known.user_id.clone();
            }
            let outcome = self.save(fact).map_err(|e| match e {
                MemoryError::InvalidInput(text) => {
                    MemoryError::InvalidInput(format!("facts[{i}]: {text}"))
                }
                other => other,
            })?;
            ids.push(outcome.id().to_string());
        }
        Ok(ids)
    }

    /// Sessions waiting for consolidation, oldest end first.
    pub fn pending_sessions(&self, limit: usize) -> Result<Vec<Session>, MemoryError> {
        Ok(self.sessions.awaiting_consolidation(limit)?)
    }

    /// One session.
    pub fn session(&self, id: &str) -> Result<Option<Session>, MemoryError> {
        Ok(self.sessions.session(id)?)
    }

    /// Mark a session consolidated.
    pub fn mark_consolidated(&self, id: &str) -> Result<(), MemoryError> {
        if !self.sessions.mark_consolidated(id, now_ms()).wait()? {
            return Err(MemoryError::NotFound(format!(
                "session `{id}` is not known"
            )));
        }
        Ok(())
    }
}
