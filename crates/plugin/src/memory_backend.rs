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
        let query = query.clone();
        self.plugin
            .call_blocking(move |i| i.memory_recall(&query))
            .map_err(|e| self.failed(e))
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
        let limit = as_u32(filter.limit);
        self.plugin
            .call_blocking(move |i| i.memory_list(&scope, &kinds, limit))
            .map_err(|e| self.failed(e))
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
