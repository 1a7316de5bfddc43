//! [`SessionStore`] on PostgreSQL: the `memory_sessions` table (one row per stretch of a
//! conversation, with its place in the lifecycle: `active` → `ended` / `pending` →
//! `consolidated`) and `memory_session_transcript` (the last entries of each session's
//! transcript), with the SQLite store's semantics.
//!
//! Several hosts share the tables, so the writes that race are made safe for it:
//! - recording activity locks the session's row first (`FOR UPDATE`), so an event is
//!   recorded once and only one host sees a session's first event; a session or transcript
//!   row another host inserted meanwhile is left as it is (`ON CONFLICT DO NOTHING`);
//! - ending idle sessions is one `UPDATE … WHERE state = 'active' … RETURNING`, so each
//!   session is ended (and handed to consolidation) by exactly one host;
//! - a new session chosen by two hosts at once is inserted once (`ON CONFLICT DO NOTHING`).

use cairn_vocab::session::{Session, SessionState};
use postgres::{Client, Row, Transaction};

use super::PgMemory;
use crate::StorageError;
use crate::memory::{Activity, EndedSession, KeepOpen, SessionChoice, SessionStore};
use crate::writer::Receipt;

/// The columns [`row_to_session`] reads.
pub(super) const SESSION_COLUMNS: &str =
    "id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity, end_reason";

impl SessionStore for PgMemory {
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
        let asked = conversation.to_string();
        let (id, fresh) =
            self.reads
                .read(move |client| match current_session(client, &asked)? {
                    Some((id, state, last))
                        if state == SessionState::Active.as_str() && now - last < idle_ms =>
                    {
                        Ok((id, true))
                    }
                    _ => Ok((next_session_id(client, &asked)?, false)),
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
        let recorded = self.writes.submit(move |tx| {
            // Another host that chose the same new session at once inserted it already.
            tx.execute(
                "INSERT INTO memory_sessions (id, conversation, user_id, agent_id, started_at,
                                              last_activity, state)
                 VALUES ($1, $2, $3, $4, $5, $5, 'active')
                 ON CONFLICT (id) DO NOTHING",
                &[&new_id, &conversation, &user, &agent, &now],
            )?;
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
        let (session, user, entry) = (
            session.to_string(),
            user.map(str::to_string),
            entry.to_string(),
        );
        let keep = i64::try_from(keep.max(1)).unwrap_or(i64::MAX);
        self.writes.submit(move |tx| {
            // The session's row stays locked until the commit: a host recording an event of
            // the same session at once waits here, then sees this one's `last_seq`.
            let mut known = locked_last_seq(tx, &session)?;
            if known.is_none() {
                let created = tx.execute(
                    "INSERT INTO memory_sessions (id, conversation, user_id, started_at,
                                                  last_activity, state)
                     VALUES ($1, $1, $2, $3, $3, 'active')
                     ON CONFLICT (id) DO NOTHING",
                    &[&session, &user, &at],
                )?;
                known = if created == 1 {
                    Some(None)
                } else {
                    // Another host inserted it meanwhile: lock and read its row.
                    locked_last_seq(tx, &session)?
                };
            }
            let started = match known {
                Some(Some(last_seq)) if last_seq >= seq => return Ok(Activity::Replay),
                Some(last_seq) => last_seq.is_none(),
                None => {
                    return Err(StorageError::Postgres(format!(
                        "session `{session}` disappeared while its activity was recorded"
                    )));
                }
            };
            append_transcript(tx, &session, seq, &entry, keep)?;
            tx.execute(
                "UPDATE memory_sessions
                    SET last_activity = greatest(coalesce(last_activity, $2), $2), last_seq = $3,
                        state = CASE WHEN state = 'consolidated' THEN state ELSE 'active' END,
                        ended_at = CASE WHEN state = 'consolidated' THEN ended_at END,
                        end_reason = CASE WHEN state = 'consolidated' THEN end_reason END
                  WHERE id = $1",
                &[&session, &at, &seq],
            )?;
            if !started {
                return Ok(Activity::Continued);
            }
            let completed = match &user {
                Some(user) => complete_user_sessions(tx, user, &session, at)?,
                None => Vec::new(),
            };
            Ok(Activity::Started { completed })
        })
    }

    fn end_idle(&self, idle_before: i64, now: i64, keep: KeepOpen) -> Receipt<Vec<EndedSession>> {
        self.writes.submit(move |tx| {
            // One statement finds and ends them: a host ending idle sessions at the same time
            // waits for this one's rows, finds them no longer active and skips them.
            let rows = tx.query(
                "WITH ended AS (
                     UPDATE memory_sessions SET state = 'ended', ended_at = $2, end_reason = 'idle'
                      WHERE state = 'active' AND coalesce(last_activity, started_at) <= $1
                        AND NOT (coalesce(conversation, id) = ANY($3))
                        AND NOT (id = ANY($4))
                      RETURNING id, user_id, started_at, row_order)
                 SELECT id, user_id, started_at FROM ended ORDER BY row_order",
                &[&idle_before, &now, &keep.conversations, &keep.sessions],
            )?;
            let mut ended = rows
                .iter()
                .map(|row| -> Result<EndedSession, StorageError> {
                    Ok(EndedSession {
                        id: row.try_get(0)?,
                        user_id: row.try_get(1)?,
                        started_at: row.try_get(2)?,
                        transcript: serde_json::Value::Array(Vec::new()),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            for session in &mut ended {
                session.transcript = transcript(tx, &session.id)?;
            }
            Ok(ended)
        })
    }

    fn active_sessions(&self) -> Result<u64, StorageError> {
        self.reads.read(|client| {
            let count: i64 = client
                .query_one(
                    "SELECT count(*) FROM memory_sessions WHERE state = 'active'",
                    &[],
                )?
                .try_get(0)?;
            Ok(u64::try_from(count).unwrap_or(0))
        })
    }

    fn awaiting_consolidation(&self, limit: usize) -> Result<Vec<Session>, StorageError> {
        let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
        self.reads.read(move |client| {
            // NULLs first and byte order, as SQLite sorts.
            client
                .query(
                    &format!(
                        "SELECT {SESSION_COLUMNS} FROM memory_sessions
                          WHERE state IN ('ended', 'pending')
                          ORDER BY ended_at NULLS FIRST, id COLLATE \"C\" LIMIT $1"
                    ),
                    &[&limit],
                )?
                .iter()
                .map(row_to_session)
                .collect()
        })
    }

    fn session(&self, id: &str) -> Result<Option<Session>, StorageError> {
        let id = id.to_string();
        self.reads.read(move |client| {
            client
                .query_opt(
                    &format!("SELECT {SESSION_COLUMNS} FROM memory_sessions WHERE id = $1"),
                    &[&id],
                )?
                .as_ref()
                .map(row_to_session)
                .transpose()
        })
    }

    fn mark_consolidated(&self, id: &str, at: i64) -> Receipt<bool> {
        let id = id.to_string();
        self.writes.submit(move |tx| {
            let changed = tx.execute(
                "UPDATE memory_sessions SET state = 'consolidated', consolidated_at = $2,
                        ended_at = coalesce(ended_at, $2)
                  WHERE id = $1",
                &[&id, &at],
            )?;
            Ok(changed > 0)
        })
    }
}

/// Lock a session's row until the commit; its `last_seq` (`None` inside when no event was
/// recorded yet), or `None` when there is no such session.
fn locked_last_seq(
    tx: &mut Transaction<'_>,
    session: &str,
) -> Result<Option<Option<i64>>, StorageError> {
    tx.query_opt(
        "SELECT last_seq FROM memory_sessions WHERE id = $1 FOR UPDATE",
        &[&session],
    )?
    .map(|row| row.try_get(0))
    .transpose()
    .map_err(StorageError::from)
}

/// Add an event's entry (JSON text) to a session's transcript and keep only its last
/// `keep` entries.
fn append_transcript(
    tx: &mut Transaction<'_>,
    session: &str,
    seq: i64,
    entry: &str,
    keep: i64,
) -> Result<(), StorageError> {
    tx.execute(
        "INSERT INTO memory_session_transcript (session_id, seq, entry) VALUES ($1, $2, $3)
         ON CONFLICT (session_id, seq) DO NOTHING",
        &[&session, &seq, &entry],
    )?;
    tx.execute(
        "DELETE FROM memory_session_transcript WHERE session_id = $1 AND seq <=
             (SELECT seq FROM memory_session_transcript WHERE session_id = $1
               ORDER BY seq DESC LIMIT 1 OFFSET $2)",
        &[&session, &keep],
    )?;
    Ok(())
}

/// A session's transcript as a JSON array, oldest entry first. An entry that does not
/// parse back is left out (as SQLite's store does), so one bad entry cannot keep its
/// session from ending.
fn transcript(tx: &mut Transaction<'_>, session: &str) -> Result<serde_json::Value, StorageError> {
    let rows = tx.query(
        "SELECT seq, entry FROM memory_session_transcript WHERE session_id = $1 ORDER BY seq",
        &[&session],
    )?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let seq: i64 = row.try_get(0)?;
        let text: &str = row.try_get(1)?;
        match serde_json::from_str(text) {
            Ok(entry) => entries.push(entry),
            Err(e) => {
                tracing::warn!("session `{session}`: transcript entry {seq} is left out: {e}");
            }
        }
    }
    Ok(serde_json::Value::Array(entries))
}

/// `<conversation>` for its first session, then `<conversation>#2`, `#3`, … (so "outside
/// the current session" never hides earlier sessions of the conversation).
fn next_session_id(client: &mut Client, conversation: &str) -> Result<String, StorageError> {
    let earlier: i64 = client
        .query_one(
            "SELECT count(*) FROM memory_sessions
              WHERE id = $1::text OR substr(id, 1, length($1::text) + 1) = $1::text || '#'",
            &[&conversation],
        )?
        .try_get(0)?;
    Ok(if earlier == 0 {
        conversation.to_string()
    } else {
        format!("{conversation}#{}", earlier + 1)
    })
}

/// A new session of `user` began: their other active or idle-ended sessions become
/// pending; their ids, oldest first.
fn complete_user_sessions(
    tx: &mut Transaction<'_>,
    user: &str,
    current: &str,
    at: i64,
) -> Result<Vec<String>, StorageError> {
    tx.query(
        "WITH completed AS (
             UPDATE memory_sessions
                SET state = 'pending', ended_at = coalesce(ended_at, $3),
                    end_reason = coalesce(end_reason, 'new session')
              WHERE user_id = $1 AND id <> $2 AND state IN ('active', 'ended')
              RETURNING id, started_at)
         SELECT id FROM completed ORDER BY started_at, id COLLATE \"C\"",
        &[&user, &current, &at],
    )?
    .iter()
    .map(|row| -> Result<String, StorageError> { Ok(row.try_get(0)?) })
    .collect()
}

/// The newest session of a conversation: id, state and last activity.
fn current_session(
    client: &mut Client,
    conversation: &str,
) -> Result<Option<(String, String, i64)>, StorageError> {
    client
        .query_opt(
            "SELECT id, state, coalesce(last_activity, started_at) FROM memory_sessions
              WHERE conversation = $1 ORDER BY started_at DESC, row_order DESC LIMIT 1",
            &[&conversation],
        )?
        .map(|row| -> Result<(String, String, i64), StorageError> {
            Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        })
        .transpose()
}

/// A session as read with [`SESSION_COLUMNS`].
pub(super) fn row_to_session(row: &Row) -> Result<Session, StorageError> {
    let state: &str = row.try_get(5)?;
    let state = SessionState::parse(state)
        .ok_or_else(|| StorageError::Postgres(format!("unknown session state `{state}`")))?;
    Ok(Session {
        id: row.try_get(0)?,
        user_id: row.try_get(1)?,
        agent_id: row.try_get(2)?,
        started_at: row.try_get(3)?,
        ended_at: row.try_get(4)?,
        state,
        conversation: row.try_get(6)?,
        last_activity: row.try_get(7)?,
        end_reason: row.try_get(8)?,
    })
}

/// Insert an imported session unless its id exists; returns 1 if added.
pub(super) fn insert_session(tx: &mut Transaction<'_>, s: &Session) -> Result<u64, StorageError> {
    Ok(tx.execute(
        "INSERT INTO memory_sessions (id, user_id, agent_id, started_at, ended_at, state,
             conversation, last_activity, end_reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
        &[
            &s.id,
            &s.user_id,
            &s.agent_id,
            &s.started_at,
            &s.ended_at,
            &s.state.as_str(),
            &s.conversation,
            &s.last_activity,
            &s.end_reason,
        ],
    )?)
}
