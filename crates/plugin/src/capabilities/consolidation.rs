//! The host side of `consolidation`: the tools of plugins of kind `consolidator` with
//! read-write memory, every call bound to the manifest's memory scopes.

use super::*;

impl PluginContext {
    fn require_consolidation(&self) -> Result<&MemoryService, WitError> {
        if self.grants.kind != PluginKind::Consolidator {
            return Err(denied(
                "consolidation: the tools are only for plugins of kind consolidator",
            ));
        }
        self.require_memory(true)
    }

    fn session_in_scope(
        &self,
        memory: &MemoryService,
        id: &str,
    ) -> Result<cairn_memory::Session, WitError> {
        let session = memory
            .session(id)
            .map_err(|e| self.memory_error(e))?
            .ok_or_else(|| WitError::NotFound(format!("session `{id}` does not exist")))?;
        self.check_scope(&session_scope(&session), "the session")
            .map_err(|_| WitError::NotFound(format!("session `{id}` does not exist")))?;
        Ok(session)
    }
}

/// The scope a session's memories carry.
fn session_scope(session: &cairn_memory::Session) -> Scope {
    Scope {
        agent_id: session.agent_id.clone(),
        user_id: session.user_id.clone(),
        session_id: Some(session.id.clone()),
    }
}

impl wit::consolidation::Host for PluginContext {
    fn pending_sessions(&mut self, limit: u32) -> Result<Vec<wit::types::Session>, WitError> {
        let memory = self.require_consolidation()?;
        let sessions = memory
            .pending_sessions(limit.clamp(1, 1000) as usize)
            .map_err(|e| self.memory_error(e))?;
        Ok(sessions
            .into_iter()
            .filter(|s| self.check_scope(&session_scope(s), "the session").is_ok())
            .map(to_wit_session)
            .collect())
    }

    fn session_episodes(
        &mut self,
        session_id: String,
    ) -> Result<Vec<wit::types::MemoryEntry>, WitError> {
        let memory = self.require_consolidation()?;
        self.session_in_scope(memory, &session_id)?;
        let episodes = memory
            .session_episodes(&session_id)
            .map_err(|e| self.memory_error(e))?;
        Ok(episodes.into_iter().map(to_wit_entry).collect())
    }

    fn save_facts(
        &mut self,
        session_id: String,
        facts: Vec<wit::types::NewMemory>,
    ) -> Result<Vec<String>, WitError> {
        let memory = self.require_consolidation()?;
        self.session_in_scope(memory, &session_id)?;
        let facts: Vec<_> = facts.into_iter().map(from_wit_new).collect();
        for (i, fact) in facts.iter().enumerate() {
            self.check_scope(&fact.scope, &format!("facts[{i}]'s scope"))?;
        }
        self.admit_writes(WriteKind::Add, facts.len())?;
        memory
            .save_facts(&session_id, facts)
            .map_err(|e| self.memory_error(e))
    }

    fn mark_consolidated(&mut self, session_id: String) -> Result<(), WitError> {
        let memory = self.require_consolidation()?;
        self.session_in_scope(memory, &session_id)?;
        self.admit_writes(WriteKind::Add, 1)?;
        memory
            .mark_consolidated(&session_id)
            .map_err(|e| self.memory_error(e))
    }

    fn is_consolidated(&mut self, session_id: String) -> Result<bool, WitError> {
        let memory = self.require_consolidation()?;
        let session = self.session_in_scope(memory, &session_id)?;
        Ok(session.state == SessionState::Consolidated)
    }
}
