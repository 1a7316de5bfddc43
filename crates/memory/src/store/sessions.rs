//! Sessions as memory.db keeps them for consolidation: one per conversation stretch,
//! numbered when a conversation resumes after its session ended, and their state.

use super::*;

impl MemoryStore {
    /// The session a conversation's new activity belongs to, recording the activity: its
    /// current session while that is active and was last active less than `idle_ms` ago,
    /// else a new one — `<conversation>` for the first, then `<conversation>#2`, `#3`, …
    /// (so "outside the current session" never hides earlier sessions of the conversation).
    pub async fn session_for(
        &self,
        conversation: &str,
        user: Option<&str>,
        agent: Option<&str>,
        now: i64,
        idle_ms: i64,
    ) -> Result<String, MemoryError> {
        let (conversation, user, agent) = (
            conversation.to_string(),
            user.map(str::to_string),
            agent.map(str::to_string),
        );
        Ok(self
            .writer
            .write(move |conn| {
                let current: Option<(String, String, i64)> = conn
                    .query_row(
                        "SELECT id, state, coalesce(last_activity, started_at) FROM sessions
                         WHERE conversation = ?1 ORDER BY started_at DESC, rowid DESC LIMIT 1",
                        params![conversation],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()?;
                if let Some((id, state, last)) = current
                    && state == "active"
                    && now - last < idle_ms
                {
                    conn.execute(
                        "UPDATE sessions SET last_activity = ?2 WHERE id = ?1",
                        params![id, now],
                    )?;
                    return Ok(id);
                }
                let earlier: i64 = conn.query_row(
                    "SELECT count(*) FROM sessions
                     WHERE id = ?1 OR substr(id, 1, length(?1) + 1) = ?1 || '#'",
                    params![conversation],
                    |r| r.get(0),
                )?;
                let id = if earlier == 0 {
                    conversation.clone()
                } else {
                    format!("{conversation}#{}", earlier + 1)
                };
                conn.execute(
                    "INSERT INTO sessions (id, conversation, user_id, agent_id, started_at, last_activity, state)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?5, 'active')",
                    params![id, conversation, user, agent, now],
                )?;
                Ok(id)
            })
            .await?)
    }

    /// A session ended: it now waits for consolidation. Unknown sessions are ignored.
    pub async fn end_session(&self, id: &str, at: i64) -> Result<(), MemoryError> {
        let id = id.to_string();
        self.writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE sessions SET state = 'pending', ended_at = ?2 WHERE id = ?1 AND state = 'active'",
                    params![id, at],
                )
            })
            .await?;
        Ok(())
    }

    /// Sessions that ended and wait for consolidation, oldest first.
    pub fn pending_sessions(&self, limit: usize) -> Result<Vec<Session>, MemoryError> {
        self.read(|conn| {
            let mut statement = conn.prepare(
                "SELECT id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity FROM sessions
                 WHERE state = 'pending' ORDER BY ended_at, id LIMIT ?1",
            )?;
            statement
                .query_map(params![limit.max(1) as i64], row_to_session)?
                .collect()
        })
    }

    /// One session.
    pub fn session(&self, id: &str) -> Result<Option<Session>, MemoryError> {
        self.read(|conn| {
            conn.query_row(
                "SELECT id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity FROM sessions WHERE id = ?1",
                params![id],
                row_to_session,
            )
            .optional()
        })
    }

    /// Mark a session consolidated.
    pub fn mark_consolidated(&self, id: &str) -> Result<(), MemoryError> {
        let id_owned = id.to_string();
        let changed = self.writer.write_blocking(move |conn| {
            conn.execute(
                "UPDATE sessions SET state = 'consolidated', consolidated_at = ?2,
                     ended_at = coalesce(ended_at, ?2) WHERE id = ?1",
                params![id_owned, now_ms()],
            )
        })?;
        if changed == 0 {
            return Err(MemoryError::NotFound(format!(
                "session `{id}` is not known"
            )));
        }
        Ok(())
    }
}

pub(super) fn row_to_session(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: row.get(0)?,
        user_id: row.get(1)?,
        agent_id: row.get(2)?,
        started_at: row.get(3)?,
        ended_at: row.get(4)?,
        state: row.get(5)?,
        conversation: row.get(6)?,
        last_activity: row.get(7)?,
    })
}
