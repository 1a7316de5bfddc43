//! A `memory-backend` plugin serving the host's [`MemoryBackend`] interface: each operation
//! is a call into the plugin's sandbox, and its errors become memory errors.

use cairn_vocab::ErrorKind;

use super::runtime::CallError;
use super::supervisor::PluginHandle;
use cairn_memory::service::MemoryBackend;
use cairn_memory::{
    ListFilter, MemoryEntry, MemoryError, NewMemory, RecallHit, RecallQuery, Scope, StoreOutcome,
};

/// The memory of a running `memory-backend` plugin.
pub struct PluginMemoryBackend {
    plugin: PluginHandle,
}

impl PluginMemoryBackend {
    /// Memory served by `plugin`.
    pub fn new(plugin: PluginHandle) -> Self {
        Self { plugin }
    }

    fn failed(&self, error: CallError) -> MemoryError {
        match error {
            CallError::Plugin(e) if e.kind == ErrorKind::InvalidInput => {
                MemoryError::InvalidInput(e.message)
            }
            CallError::Plugin(e) if e.kind == ErrorKind::NotFound => {
                MemoryError::NotFound(e.message)
            }
            other => MemoryError::Unavailable(format!(
                "memory backend plugin `{}`: {other}",
                self.plugin.id()
            )),
        }
    }
}

/// How many more hits than asked a filtered recall or list asks the plugin for: the
/// `memory-backend` world's query has no categories, time span or relevance floor, so the
/// host applies them to what the plugin answers (until 2026-12-02 they were left out
/// without a word, and a search for "before January" answered December; found by an
/// operator's test).
const FILTERED_OVERFETCH: usize = 5;

/// The most a filtered recall or list asks the plugin for.
const MAX_ASKED: usize = 1_000;

/// Whether `query` has filters the plugin's query cannot carry.
fn filters_hits(query: &RecallQuery) -> bool {
    !query.categories.is_empty()
        || query.since.is_some()
        || query.until.is_some()
        || query.min_relevance.is_some()
}

/// Whether `hit` passes `query`'s filters: a category of `categories`, valid from within
/// `since`..`until`, scored at least `min_relevance` (the plugin's own score).
fn keeps_hit(query: &RecallQuery, hit: &RecallHit) -> bool {
    let entry = &hit.entry;
    (query.categories.is_empty() || query.categories.contains(&entry.category))
        && query.since.is_none_or(|since| entry.valid_from >= since)
        && query.until.is_none_or(|until| entry.valid_from < until)
        && query.min_relevance.is_none_or(|floor| hit.score >= floor)
}

/// Largest `u32` a count or limit can be sent as.
fn as_u32(value: usize) -> u32 {
    value.min(u32::MAX as usize) as u32
}

impl MemoryBackend for PluginMemoryBackend {
    fn save(&self, memory: NewMemory) -> Result<StoreOutcome, MemoryError> {
        let id = self
            .plugin
            .call_blocking(move |i| i.memory_store(&memory))
            .map_err(|e| self.failed(e))?;
        Ok(StoreOutcome::Stored {
            id,
            superseded: Vec::new(),
        })
    }

    fn recall(&self, query: &RecallQuery) -> Result<Vec<RecallHit>, MemoryError> {
        let filtered = filters_hits(query);
        let mut asked = query.clone();
        if filtered {
            asked.limit = query
                .limit
                .saturating_mul(FILTERED_OVERFETCH)
                .min(MAX_ASKED);
        }
        let mut hits = self
            .plugin
            .call_blocking(move |i| i.memory_recall(&asked))
            .map_err(|e| self.failed(e))?;
        for hit in &mut hits {
            hit.explain.scored_by = Some(self.plugin.id().to_string());
        }
        if !filtered {
            return Ok(hits);
        }
        let kept = hits.into_iter().filter(|hit| keeps_hit(query, hit));
        Ok(kept.take(query.limit).collect())
    }

    fn get(&self, id: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        let id = id.to_string();
        match self.plugin.call_blocking(move |i| i.memory_get(&id)) {
            Ok(entry) => Ok(Some(entry)),
            Err(CallError::Plugin(e)) if e.kind == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.failed(e)),
        }
    }

    fn list(&self, filter: &ListFilter) -> Result<Vec<MemoryEntry>, MemoryError> {
        let scope = filter.scope.clone();
        let kinds = filter.kinds.clone();
        let Some(category) = filter.category.clone() else {
            let limit = as_u32(filter.limit);
            return self
                .plugin
                .call_blocking(move |i| i.memory_list(&scope, &kinds, limit))
                .map_err(|e| self.failed(e));
        };
        let asked = as_u32(
            filter
                .limit
                .saturating_mul(FILTERED_OVERFETCH)
                .min(MAX_ASKED),
        );
        let entries = self
            .plugin
            .call_blocking(move |i| i.memory_list(&scope, &kinds, asked))
            .map_err(|e| self.failed(e))?;
        let kept = entries
            .into_iter()
            .filter(|entry| entry.category == category);
        Ok(kept.take(filter.limit).collect())
    }

    fn forget(&self, id: &str, _actor: &str) -> Result<bool, MemoryError> {
        let id = id.to_string();
        self.plugin
            .call_blocking(move |i| i.memory_forget(&id))
            .map_err(|e| self.failed(e))
    }

    fn set_importance(
        &self,
        _id: &str,
        _importance: u8,
        _actor: &str,
    ) -> Result<bool, MemoryError> {
        Err(MemoryError::Unavailable(
            "memory backend plugins cannot re-score importance: the memory-backend world has no set-importance".into(),
        ))
    }

    fn count(&self, scope: &Scope) -> Result<u64, MemoryError> {
        let scope = scope.clone();
        self.plugin
            .call_blocking(move |i| i.memory_count(&scope))
            .map_err(|e| self.failed(e))
    }

    fn health(&self) -> Result<String, MemoryError> {
        self.plugin
            .call_blocking(|i| i.memory_health())
            .map_err(|e| self.failed(e))
    }
}
