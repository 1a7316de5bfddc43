//! The host side of `memory`: every call bound to the manifest's declared scopes.

use super::*;

impl PluginContext {
    pub(super) fn require_kv(&self) -> Result<(), WitError> {
        if self.grants.kv {
            Ok(())
        } else {
            Err(denied("kv: the manifest does not grant capabilities.kv"))
        }
    }

    pub(super) fn require_memory(&self, write: bool) -> Result<&MemoryService, WitError> {
        match &self.grants.memory {
            Some((MemoryAccess::ReadWrite, _)) => {}
            Some((MemoryAccess::Read, _)) if !write => {}
            Some((MemoryAccess::Read, _)) => {
                return Err(denied(
                    "memory: the manifest grants capabilities.memory.access: read, not read-write",
                ));
            }
            None => {
                return Err(denied(
                    "memory: the manifest does not grant capabilities.memory",
                ));
            }
        }
        self.services
            .memory
            .as_deref()
            .ok_or_else(|| unavailable("agent memory"))
    }

    /// Pass `writes` writes of `kind` through the host's write gate.
    pub(super) fn admit_writes(&self, kind: WriteKind, writes: usize) -> Result<(), WitError> {
        self.services
            .memory_writes
            .admit(&self.plugin, kind, writes)
            .map_err(to_wit_error)
    }

    pub(super) fn scope_patterns(&self) -> &[ScopePattern] {
        self.grants
            .memory
            .as_ref()
            .map(|(_, patterns)| patterns.as_slice())
            .unwrap_or_default()
    }

    /// A call may address `scope` when it names every level the manifest declares, each
    /// matching one of that level's patterns (or the manifest declares `all`).
    pub(super) fn check_scope(&self, scope: &Scope, what: &str) -> Result<(), WitError> {
        let patterns = self.scope_patterns();
        if patterns.contains(&ScopePattern::All) {
            return Ok(());
        }
        for level in [ScopeLevel::Agent, ScopeLevel::User, ScopeLevel::Session] {
            let allowed: Vec<&Option<String>> = patterns
                .iter()
                .filter_map(|p| match p {
                    ScopePattern::Level { level: l, id } if *l == level => Some(id),
                    _ => None,
                })
                .collect();
            if allowed.is_empty() {
                continue;
            }
            let (name, value) = level_value(scope, level);
            let Some(value) = value else {
                return Err(denied(&format!(
                    "memory: {what} must name {name} (the manifest's capabilities.memory.scopes limit it)"
                )));
            };
            if !allowed
                .iter()
                .any(|id| id.as_ref().is_none_or(|id| id == value))
            {
                return Err(denied(&format!(
                    "memory: {name} `{value}` is outside the manifest's capabilities.memory.scopes"
                )));
            }
        }
        Ok(())
    }

    /// An existing entry is reachable when every declared level matches it; entries shared at
    /// a declared level (no id there) are readable but not writable.
    pub(super) fn check_entry(&self, entry: &MemoryEntry, write: bool) -> Result<(), WitError> {
        let patterns = self.scope_patterns();
        if patterns.contains(&ScopePattern::All) {
            return Ok(());
        }
        let outside = || WitError::NotFound(format!("memory `{}` does not exist", entry.id));
        for pattern in patterns {
            let ScopePattern::Level { level, .. } = pattern else {
                continue;
            };
            match level_value(&entry.scope, *level).1 {
                None if write => return Err(outside()),
                None => {}
                Some(_) => {
                    let mut probe = Scope::default();
                    match level {
                        ScopeLevel::Agent => probe.agent_id = entry.scope.agent_id.clone(),
                        ScopeLevel::User => probe.user_id = entry.scope.user_id.clone(),
                        ScopeLevel::Session => probe.session_id = entry.scope.session_id.clone(),
                    }
                    if self.check_level(&probe, *level).is_err() {
                        return Err(outside());
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn check_level(&self, scope: &Scope, level: ScopeLevel) -> Result<(), ()> {
        let value = level_value(scope, level).1.ok_or(())?;
        let matched = self.scope_patterns().iter().any(|p| match p {
            ScopePattern::All => true,
            ScopePattern::Level { level: l, id } => {
                *l == level && id.as_ref().is_none_or(|id| id == value)
            }
        });
        if matched { Ok(()) } else { Err(()) }
    }

    pub(super) fn entry_in_scope(
        &self,
        memory: &MemoryService,
        id: &str,
        write: bool,
    ) -> Result<MemoryEntry, WitError> {
        let entry = memory
            .get(id)
            .map_err(|e| self.memory_error(e))?
            .filter(|e| e.forgotten_at.is_none())
            .ok_or_else(|| WitError::NotFound(format!("memory `{id}` does not exist")))?;
        self.check_entry(&entry, write)?;
        Ok(entry)
    }
}

/// The name and value of one level of a scope.
pub(super) fn level_value(scope: &Scope, level: ScopeLevel) -> (&'static str, Option<&String>) {
    match level {
        ScopeLevel::Agent => ("agent-id", scope.agent_id.as_ref()),
        ScopeLevel::User => ("user-id", scope.user_id.as_ref()),
        ScopeLevel::Session => ("session-id", scope.session_id.as_ref()),
    }
}

impl PluginContext {
    /// A memory failure as the plugin gets it (a store away for a moment noted, see
    /// [`PluginContext::store_error`]).
    pub(super) fn memory_error(&self, error: MemoryError) -> WitError {
        self.store_error(cairn_vocab::Error::new(error.kind(), error.to_string()))
    }
}

impl wit::memory::Host for PluginContext {
    fn store(&mut self, entry: wit::types::NewMemory) -> Result<String, WitError> {
        let memory = self.require_memory(true)?;
        let entry = from_wit_new(entry);
        self.check_scope(&entry.scope, "the memory's scope")?;
        if let Some(target) = &entry.supersedes {
            self.entry_in_scope(memory, target, true)?;
        }
        self.admit_writes(WriteKind::Add, 1)?;
        let outcome = memory.save(entry).map_err(|e| self.memory_error(e))?;
        Ok(outcome.id().to_string())
    }

    fn recall(
        &mut self,
        query: wit::types::RecallQuery,
    ) -> Result<Vec<wit::types::RecallHit>, WitError> {
        let memory = self.require_memory(false)?;
        let scope = from_wit_scope(query.scope);
        self.check_scope(&scope, "the query's scope")?;
        let hits = memory
            .recall(&RecallQuery {
                text: query.text,
                scope,
                kinds: query.kinds.into_iter().map(from_wit_kind).collect(),
                limit: query.limit.clamp(1, 100) as usize,
                as_of: query.as_of,
                exclude_session: query.exclude_session,
                ..RecallQuery::default()
            })
            .map_err(|e| self.memory_error(e))?;
        Ok(hits
            .into_iter()
            .map(|hit| wit::types::RecallHit {
                entry: to_wit_entry(hit.entry),
                score: hit.score,
            })
            .collect())
    }

    fn get(&mut self, id: String) -> Result<wit::types::MemoryEntry, WitError> {
        let memory = self.require_memory(false)?;
        Ok(to_wit_entry(self.entry_in_scope(memory, &id, false)?))
    }

    fn list_entries(
        &mut self,
        scope: wit::types::MemoryScope,
        kinds: Vec<wit::types::MemoryKind>,
        limit: u32,
    ) -> Result<Vec<wit::types::MemoryEntry>, WitError> {
        let memory = self.require_memory(false)?;
        let scope = from_wit_scope(scope);
        self.check_scope(&scope, "the scope")?;
        let entries = memory
            .list(&ListFilter {
                scope,
                kinds: kinds.into_iter().map(from_wit_kind).collect(),
                limit: limit.clamp(1, 1000) as usize,
                ..ListFilter::default()
            })
            .map_err(|e| self.memory_error(e))?;
        Ok(entries.into_iter().map(to_wit_entry).collect())
    }

    fn forget(&mut self, id: String) -> Result<bool, WitError> {
        let memory = self.require_memory(true)?;
        match self.entry_in_scope(memory, &id, true) {
            Ok(_) => {}
            Err(WitError::NotFound(_)) => return Ok(false),
            Err(denial) => return Err(denial),
        }
        self.admit_writes(WriteKind::Remove, 1)?;
        memory
            .forget(&id, &format!("plugin:{}", self.plugin))
            .map_err(|e| self.memory_error(e))
    }

    fn set_importance(&mut self, id: String, importance: u8) -> Result<bool, WitError> {
        let memory = self.require_memory(true)?;
        match self.entry_in_scope(memory, &id, true) {
            Ok(_) => {}
            Err(WitError::NotFound(_)) => return Ok(false),
            Err(denial) => return Err(denial),
        }
        self.admit_writes(WriteKind::Add, 1)?;
        memory
            .set_importance(&id, importance, &format!("plugin:{}", self.plugin))
            .map_err(|e| self.memory_error(e))
    }

    fn count(&mut self, scope: wit::types::MemoryScope) -> Result<u64, WitError> {
        let memory = self.require_memory(false)?;
        let scope = from_wit_scope(scope);
        self.check_scope(&scope, "the scope")?;
        memory.count(&scope).map_err(|e| self.memory_error(e))
    }
}
