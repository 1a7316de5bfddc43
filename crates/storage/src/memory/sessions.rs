//! The `sessions` table: one row per stretch of a conversation, with its transcript and
//! its place in the lifecycle (`active` → `ended` / `pending` → `consolidated`).

use std::path::Path;

use cairn_vocab::session::SessionState;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::*;

/// The columns [`row_to_session`] reads.
pub(super) const SESSION_COLUMNS: &str =
    "id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity, end_reason";

/// What recording an event in a session's transcript did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    /// The event was already recorded (a replay); nothing changed.
    Replay,
    /// Added to a session that had seen events before.
    Continued,
    /// The session's first event: its user's other active or ended sessions became
    /// `pending` (their ids).
    Started {
        /// Sessions of the same user now waiting for consolidation.
        completed: Vec<String>,
    },
}

/// A session that ended for being idle.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedSession {
    /// Its id.
    pub id: String,
    /// Its user.
    pub user_id: Option<String>,
    /// Its first activity.
    pub started_at: i64,
    /// Its transcript (a JSON array of `{role, text, at, ...}`).
    pub transcript: serde_json::Value,
}

impl SessionStore for SqliteMemory {
    fn session_for(
        &self,
        conversation: &str,
        user: Option<&str>,
        agent: Option<&str>,
        now: i64,
        idle_ms: i64,
    ) -> Result<SessionChoice, StorageError> {
        // The common case — the conversation's session is active and fresh — is a read: the
        // turn's `message.received` moves its `last_activity` on (`record_activity`). Only a
        // new session counts the conversation's earlier ones for its id.
        let (id, fresh) = self.read(|conn| match current_session(conn, conversation)? {
            Some((id, state, last))
                if state == SessionState::Active.as_str() && now - last < idle_ms =>
            {
                Ok((id, true))
            }
            _ => Ok((next_session_id(conn, conversation)?, false)),
        })?;
        if fresh {
            return Ok(SessionChoice {
                id,
                recorded: Receipt::ready(Ok(())),
            });
        }
        let (new_id, conversation, user, agent) = (
            id.clone(),
            conversation.to_string(),
            user.map(str::to_string),
            agent.map(str::to_string),
        );
        let recorded = self.submit(move |conn| {
            conn.prepare_cached("INSERT INTO sessions (id, conversation, user_id, agent_id, started_at, last_activity, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, 'active') ON CONFLICT(id) DO NOTHING")?.execute(params![new_id, conversation, user, agent, now])?;
            Ok(())
        });
        Ok(SessionChoice { id, recorded })
    }

    fn record_activity(
        &self,
        session: &str,
        user: Option<&str>,
        seq: i64,
        at: i64,
        entry: serde_json::Value,
        keep: usize,
    ) -> Receipt<Activity> {
        let (session, user) = (session.to_string(), user.map(str::to_string));
        self.submit(move |conn| {
            let known: Option<Option<i64>> = conn.prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")?.query_row(params![session], |r| r.get(0))
                .optional()?;
            let started = match known {
                Some(Some(last_seq)) if last_seq >= seq => return Ok(Activity::Replay),
                Some(last_seq) => last_seq.is_none(),
                None => {
                    conn.prepare_cached("INSERT INTO sessions (id, conversation, user_id, started_at, last_activity, state)
                         VALUES (?1, ?1, ?2, ?3, ?3, 'active')")?.execute(params![session, user, at])?;
                    true
                }
            };
            append_transcript(conn, &session, seq, &entry, keep)?;
            conn.prepare_cached(
                "UPDATE sessions SET last_activity = max(coalesce(last_activity, ?2), ?2), last_seq = ?3,
                     state = CASE WHEN state = 'consolidated' THEN state ELSE 'active' END,
                     ended_at = CASE WHEN state = 'consolidated' THEN ended_at END,
                     end_reason = CASE WHEN state = 'consolidated' THEN end_reason END
                 WHERE id = ?1",
            )?
            .execute(params![session, at, seq])?;
            if !started {
                return Ok(Activity::Continued);
            }
            let completed = match &user {
                Some(user) => complete_user_sessions(conn, user, &session, at)?,
                None => Vec::new(),
            };
            Ok(Activity::Started { completed })
        })
    }

    fn end_idle(&self, idle_before: i64, now: i64, keep: KeepOpen) -> Receipt<Vec<EndedSession>> {
        self.submit(move |conn| {
            let conversations = serde_json::Value::from(keep.conversations).to_string();
            let sessions = serde_json::Value::from(keep.sessions).to_string();
            let mut ended = conn
                .prepare_cached(
                    "UPDATE sessions SET state = 'ended', ended_at = ?2, end_reason = 'idle'
                     WHERE state = 'active' AND coalesce(last_activity, started_at) <= ?1
                       AND coalesce(conversation, id) NOT IN (SELECT value FROM json_each(?3))
                       AND id NOT IN (SELECT value FROM json_each(?4))
                     RETURNING id, user_id, started_at",
                )?
                .query_map(params![idle_before, now, conversations, sessions], |r| {
                    Ok(EndedSession {
                        id: r.get(0)?,
                        user_id: r.get(1)?,
                        started_at: r.get(2)?,
                        transcript: serde_json::Value::Array(Vec::new()),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            for session in &mut ended {
                session.transcript = transcript(conn, &session.id)?;
            }
            Ok(ended)
        })
    }

    fn active_sessions(&self) -> Result<u64, StorageError> {
        self.read(|conn| {
            conn.query_row(
                "SELECT count(*) FROM sessions WHERE state = 'active'",
                [],
                |r| r.get::<_, i64>(0),
            )
        })
        .map(|n| n as u64)
    }

    fn awaiting_consolidation(&self, limit: usize) -> Result<Vec<Session>, StorageError> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE state IN ('ended', 'pending')
                 ORDER BY ended_at, id LIMIT ?1"
            ))?
            .query_map(params![limit.max(1) as i64], row_to_session)?
            .collect()
        })
    }

    fn session(&self, id: &str) -> Result<Option<Session>, StorageError> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"
            ))?
            .query_row(params![id], row_to_session)
            .optional()
        })
    }

    fn mark_consolidated(&self, id: &str, at: i64) -> Receipt<bool> {
        let id = id.to_string();
        self.submit(move |conn| {
            let changed = conn
                .prepare_cached(
                    "UPDATE sessions SET state = 'consolidated', consolidated_at = ?2,
                     ended_at = coalesce(ended_at, ?2) WHERE id = ?1",
                )?
                .execute(params![id, at])?;
            Ok(changed > 0)
        })
    }
}

/// Add an event's entry to a session's transcript and keep only its last `keep` entries.
fn append_transcript(
    conn: &Connection,
    session: &str,
    seq: i64,
    entry: &serde_json::Value,
    keep: usize,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO session_transcript (session_id, seq, entry) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![session, seq, entry.to_string()])?;
    conn.prepare_cached(
        "DELETE FROM session_transcript WHERE session_id = ?1 AND seq <=
             (SELECT seq FROM session_transcript WHERE session_id = ?1
              ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
    )?
    .execute(params![session, keep.max(1) as i64])?;
    Ok(())
}

/// A session's transcript as a JSON array, oldest entry first.
fn transcript(conn: &Connection, session: &str) -> rusqlite::Result<serde_json::Value> {
    let entries = conn
        .prepare_cached("SELECT entry FROM session_transcript WHERE session_id = ?1 ORDER BY seq")?
        .query_map(params![session], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(serde_json::Value::Array(
        entries
            .iter()
            .filter_map(|e| serde_json::from_str(e).ok())
            .collect(),
    ))
}

/// `<conversation>` for its first session, then `<conversation>#2`, `#3`, … (so "outside
/// the current session" never hides earlier sessions of the conversation).
fn next_session_id(conn: &Connection, conversation: &str) -> rusqlite::Result<String> {
    let earlier: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM sessions
         WHERE id = ?1 OR substr(id, 1, length(?1) + 1) = ?1 || '#'",
        )?
        .query_row(params![conversation], |r| r.get(0))?;
    Ok(if earlier == 0 {
        conversation.to_string()
    } else {
        format!("{conversation}#{}", earlier + 1)
    })
}

/// A new session of `user` began: their other active or idle-ended sessions become
/// pending; their ids.
fn complete_user_sessions(
    conn: &Connection,
    user: &str,
    current: &str,
    at: i64,
) -> rusqlite::Result<Vec<String>> {
    let completed = conn
        .prepare(
            "SELECT id FROM sessions WHERE user_id = ?1 AND id != ?2 AND state IN ('active', 'ended')
             ORDER BY started_at, id",
        )?
        .query_map(params![user, current], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    conn.prepare_cached(
        "UPDATE sessions SET state = 'pending', ended_at = coalesce(ended_at, ?3),
             end_reason = coalesce(end_reason, 'new session')
         WHERE user_id = ?1 AND id != ?2 AND state IN ('active', 'ended')",
    )?
    .execute(params![user, current, at])?;
    Ok(completed)
}

/// Insert an imported session unless its id exists; returns 1 if added.
pub(super) fn insert_session(conn: &Connection, s: &Session) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO sessions (id, user_id, agent_id, started_at, ended_at, state,
             conversation, last_activity, end_reason)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        s.id,
        s.user_id,
        s.agent_id,
        s.started_at,
        s.ended_at,
        s.state.as_str(),
        s.conversation,
        s.last_activity,
        s.end_reason
    ])
}

/// A session as read with [`SESSION_COLUMNS`].
pub(super) fn row_to_session(row: &Row<'_>) -> rusqlite::Result<Session> {
    let state = crate::parsed(row, 5, SessionState::parse, "session state")?;
    Ok(Session {
        id: row.get(0)?,
        user_id: row.get(1)?,
        agent_id: row.get(2)?,
        started_at: row.get(3)?,
        ended_at: row.get(4)?,
        state,
        conversation: row.get(6)?,
        last_activity: row.get(7)?,
        end_reason: row.get(8)?,
    })
}

/// Move the sessions an older Cairn kept in `host.db` (`lifecycle_sessions`) into this
/// table, merging their transcripts and lifecycle states into the rows memory kept, and
/// drop the old table. Runs on `conn` before the writer starts (ATTACH cannot run inside
/// the writer's transactions). Idempotent: after a crash half-way the merge repeats.
pub(super) fn adopt_host_sessions(conn: &Connection, host_db: &Path) -> rusqlite::Result<()> {
    if !host_db.exists() {
        return Ok(());
    }
    conn.prepare_cached("ATTACH DATABASE ?1 AS legacy")?
        .execute(params![host_db.display().to_string()])?;
    let merged = merge_legacy_sessions(conn);
    conn.prepare_cached("DETACH DATABASE legacy")?.execute([])?;
    merged
}

/// Whether `host_db` still holds sessions of an older Cairn to move in, by a read-only
/// look (for a data dir that cannot be written, where [`adopt_host_sessions`] cannot run).
pub(super) fn host_sessions_waiting(host_db: &Path) -> Result<bool, StorageError> {
    let Some(conn) = crate::open_read_only(host_db)? else {
        return Ok(false);
    };
    let look = |sql: &str| -> Result<bool, StorageError> {
        conn.query_row(sql, [], |r| r.get(0))
            .map_err(|e| StorageError::open(host_db, e))
    };
    Ok(look(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'lifecycle_sessions'",
    )? && look("SELECT EXISTS (SELECT 1 FROM lifecycle_sessions)")?)
}

fn merge_legacy_sessions(conn: &Connection) -> rusqlite::Result<()> {
    let legacy: bool = conn.prepare_cached("SELECT count(*) > 0 FROM legacy.sqlite_master WHERE type = 'table' AND name = 'lifecycle_sessions'")?.query_row([], |r| r.get(0))?;
    if !legacy {
        return Ok(());
    }
    let moved: i64 = conn.query_row("SELECT count(*) FROM legacy.lifecycle_sessions", [], |r| {
        r.get(0)
    })?;
    conn.execute_batch(
        "BEGIN IMMEDIATE;
         UPDATE sessions SET
             last_seq = l.last_seq, end_reason = l.end_reason,
             last_activity = max(coalesce(sessions.last_activity, 0), l.last_activity),
             ended_at = coalesce(sessions.ended_at, l.ended_at),
             state = CASE WHEN sessions.state = 'consolidated' THEN 'consolidated' ELSE l.state END
         FROM legacy.lifecycle_sessions l
         WHERE l.id = sessions.id AND sessions.last_seq IS NULL;
         INSERT OR IGNORE INTO sessions (id, conversation, user_id, state, started_at, last_activity,
                                         ended_at, end_reason, last_seq)
             SELECT id, id, user_id, state, started_at, last_activity, ended_at, end_reason, last_seq
             FROM legacy.lifecycle_sessions;
         INSERT OR IGNORE INTO session_transcript (session_id, seq, entry)
             SELECT l.id, j.key, j.value FROM legacy.lifecycle_sessions l, json_each(l.transcript) j
             WHERE json_valid(l.transcript);
         DROP TABLE legacy.lifecycle_sessions;
         COMMIT;",
    )?;
    // (A host.db made since has the table too, empty: nothing to say then.)
    if moved > 0 {
        tracing::info!(
            sessions = moved,
            "sessions moved from host.db into memory.db"
        );
    }
    Ok(())
}

/// The newest session of a conversation: id, state and last activity.
fn current_session(
    conn: &Connection,
    conversation: &str,
) -> rusqlite::Result<Option<(String, String, i64)>> {
    conn.prepare_cached(
        "SELECT id, state, coalesce(last_activity, started_at) FROM sessions
         WHERE conversation = ?1 ORDER BY started_at DESC, rowid DESC LIMIT 1",
    )?
    .query_row(params![conversation], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
    .optional()
}
