//! The event journal (`journal.db`): an append-only log of events, a durable cursor per
//! subscriber, and dead letters for events a subscriber could not take.
//!
//! Appends go through the group-commit writer, so an appended event is on disk when its
//! sequence number is returned. Each subscriber is served by its own task (see
//! [`dispatch`]): delivery is at-least-once and in order per subscriber, and one slow or
//! failing subscriber never holds up another. The module owns the tables `events`,
//! `subscribers` and `dead_letters`.

pub mod dispatch;

use std::path::Path;
use std::sync::Mutex;

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::plugin::manifest::{is_valid_topic, is_valid_topic_pattern};
use crate::store::writer::{GroupWriter, WriteError};
use crate::store::{self, Migrations, StoreError, now_ms};
pub use cairn_vocab::event::{DeadLetter, Event, NewEvent, SubscriberLag};
pub use cairn_vocab::topic::topic_matches;

/// Migrations of `journal.db`.
pub const MIGRATIONS: Migrations = Migrations {
    name: "journal",
    scripts: &[include_str!("../../../migrations/journal/0001_init.sql")],
};

/// Journal settings (`journal:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct JournalConfig {
    /// Largest event payload, in bytes (default 256 KiB).
    pub max_payload_bytes: usize,
    /// Deliveries of one event to one subscriber before it is dead-lettered (default 5).
    pub max_attempts: u32,
    /// Delay before the first redelivery, in ms; doubled each time (default 100).
    pub backoff_initial_ms: u64,
    /// Cap of the redelivery delay, in ms (default 10000).
    pub backoff_max_ms: u64,
    /// Events older than this that every subscriber has consumed are pruned (default 30).
    pub retention_days: u32,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            max_payload_bytes: 256 << 10,
            max_attempts: 5,
            backoff_initial_ms: 100,
            backoff_max_ms: 10_000,
            retention_days: 30,
        }
    }
}

/// Why a journal operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalError {
    /// The event was malformed; nothing was written. The text names the field.
    #[error("{0}")]
    InvalidInput(String),
    /// The journal is shutting down.
    #[error("the journal is not accepting writes (shutting down)")]
    Unavailable,
    /// SQLite failed.
    #[error("journal storage: {0}")]
    Storage(String),
}

impl From<WriteError> for JournalError {
    fn from(error: WriteError) -> Self {
        match error {
            WriteError::Stopped => JournalError::Unavailable,
            WriteError::Sqlite(text) => JournalError::Storage(text),
        }
    }
}

impl From<rusqlite::Error> for JournalError {
    fn from(error: rusqlite::Error) -> Self {
        JournalError::Storage(error.to_string())
    }
}

/// SQL selecting events after `after` whose topic matches `patterns`
/// (`seq > ? AND (topic = ? OR substr(topic, 1, n) = ? ...)`), with its parameters.
fn event_filter(patterns: &[String], after: i64) -> (String, Vec<Value>) {
    let mut values = vec![Value::Integer(after)];
    let topics = if patterns.iter().any(|p| p == "*") {
        "1".to_string()
    } else if patterns.is_empty() {
        "0".to_string()
    } else {
        let clauses: Vec<String> = patterns
            .iter()
            .map(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => {
                    values.push(Value::Text(prefix.to_string()));
                    format!("substr(topic, 1, {}) = ?", prefix.len())
                }
                None => {
                    values.push(Value::Text(pattern.clone()));
                    "topic = ?".to_string()
                }
            })
            .collect();
        clauses.join(" OR ")
    };
    (format!("seq > ? AND ({topics})"), values)
}

fn read_event(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        seq: row.get(0)?,
        topic: row.get(1)?,
        payload: row.get(2)?,
        source: row.get(3)?,
        session_id: row.get(4)?,
        agent_id: row.get(5)?,
        user_id: row.get(6)?,
        created_at: row.get(7)?,
    })
}

const EVENT_COLUMNS: &str =
    "seq, topic, payload, source, session_id, agent_id, user_id, created_at";

/// Events after `after` matching `patterns`, oldest first.
pub fn events_after(
    conn: &Connection,
    after: i64,
    patterns: &[String],
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    let (filter, mut values) = event_filter(patterns, after);
    values.push(Value::Integer(limit as i64));
    let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE {filter} ORDER BY seq LIMIT ?");
    let mut statement = conn.prepare_cached(&sql)?;
    statement
        .query_map(params_from_iter(values), read_event)?
        .collect()
}

/// The journal of a data dir.
pub struct Journal {
    config: JournalConfig,
    writer: GroupWriter,
    reader: Mutex<Connection>,
    appended: Notify,
}

impl Journal {
    /// Open `<data>/journal.db` and start its writer.
    pub fn open(data_dir: &Path, config: JournalConfig) -> Result<Self, StoreError> {
        let (writer, reader) =
            store::open_with_writer(&data_dir.join("journal.db"), &MIGRATIONS, "journal-writer")?;
        Ok(Self {
            config,
            writer,
            reader: Mutex::new(reader),
            appended: Notify::new(),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &JournalConfig {
        &self.config
    }

    fn reader(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn validate(&self, event: &NewEvent) -> Result<(), JournalError> {
        if !is_valid_topic(&event.topic) {
            return Err(JournalError::InvalidInput(format!(
                "topic: `{}` is not a topic; expected dot-separated segments of a-z 0-9 _ -",
                event.topic
            )));
        }
        if event.payload.len() > self.config.max_payload_bytes {
            return Err(JournalError::InvalidInput(format!(
                "payload: {} bytes is over the limit of {} bytes",
                event.payload.len(),
                self.config.max_payload_bytes
            )));
        }
        serde_json::from_str::<serde::de::IgnoredAny>(&event.payload)
            .map_err(|e| JournalError::InvalidInput(format!("payload: expected JSON: {e}")))?;
        Ok(())
    }

    fn insert(conn: &Connection, event: &NewEvent) -> rusqlite::Result<i64> {
        conn.prepare_cached(
            "INSERT INTO events (topic, payload, source, session_id, agent_id, user_id, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            event.topic,
            event.payload,
            event.source,
            event.session_id,
            event.agent_id,
            event.user_id,
            now_ms()
        ])?;
        Ok(conn.last_insert_rowid())
    }

    /// Append an event; returns its sequence number once it is on disk.
    pub async fn append(&self, event: NewEvent) -> Result<i64, JournalError> {
        self.validate(&event)?;
        let seq = self
            .writer
            .write(move |conn| Self::insert(conn, &event))
            .await?;
        self.appended.notify_waiters();
        Ok(seq)
    }

    /// [`Journal::append`] for threads outside the async runtime (plugin calls).
    pub fn append_blocking(&self, event: NewEvent) -> Result<i64, JournalError> {
        self.validate(&event)?;
        let seq = self
            .writer
            .write_blocking(move |conn| Self::insert(conn, &event))?;
        self.appended.notify_waiters();
        Ok(seq)
    }

    /// Append a host event, logging (not failing) when the journal cannot take it.
    pub async fn emit(
        &self,
        topic: &str,
        payload: serde_json::Value,
        session_id: Option<String>,
        user_id: Option<String>,
    ) {
        let event = NewEvent {
            topic: topic.into(),
            payload: payload.to_string(),
            source: "host".into(),
            session_id,
            user_id,
            agent_id: None,
        };
        if let Err(e) = self.append(event).await {
            tracing::error!(topic, "cannot journal a host event: {e}");
        }
    }

    /// Resolves when an event is appended after the call.
    pub fn appended(&self) -> tokio::sync::futures::Notified<'_> {
        self.appended.notified()
    }

    /// Register a subscriber (or update its patterns) and return its cursor. A new
    /// subscriber starts at the current end of the journal; a known one resumes.
    pub async fn subscribe(&self, id: &str, patterns: &[String]) -> Result<i64, JournalError> {
        if let Some(bad) = patterns.iter().find(|p| !is_valid_topic_pattern(p)) {
            return Err(JournalError::InvalidInput(format!(
                "`{bad}` is not a topic pattern"
            )));
        }
        let id = id.to_string();
        let patterns_json = serde_json::to_string(patterns).unwrap_or_else(|_| "[]".into());
        Ok(self
            .writer
            .write(move |conn| {
                conn.execute(
                    "INSERT INTO subscribers (id, patterns, cursor, updated_at)
                     VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) FROM events), ?3)
                     ON CONFLICT (id) DO UPDATE SET patterns = excluded.patterns",
                    params![id, patterns_json, now_ms()],
                )?;
                conn.query_row(
                    "SELECT cursor FROM subscribers WHERE id = ?1",
                    params![id],
                    |r| r.get(0),
                )
            })
            .await?)
    }

    /// The cursor of a subscriber as stored (an operator may have rewound it).
    pub fn cursor(&self, subscriber: &str) -> Result<Option<i64>, JournalError> {
        Ok(self
            .reader()
            .query_row(
                "SELECT cursor FROM subscribers WHERE id = ?1",
                params![subscriber],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Dead-lettered events an operator asked to retry for `subscriber`, oldest first.
    pub fn retries(&self, subscriber: &str) -> Result<Vec<Event>, JournalError> {
        let conn = self.reader();
        let mut statement = conn.prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE seq IN
               (SELECT seq FROM dead_letters WHERE subscriber = ?1 AND status = 'retry') ORDER BY seq"
        ))?;
        Ok(statement
            .query_map(params![subscriber], read_event)?
            .collect::<Result<_, _>>()?)
    }

    /// Settle a retried dead letter: delete it when delivered, or put it back with the error.
    pub async fn settle_retry(
        &self,
        subscriber: &str,
        seq: i64,
        failure: Option<(String, u32)>,
    ) -> Result<(), JournalError> {
        let subscriber = subscriber.to_string();
        Ok(self
            .writer
            .write(move |conn| {
                match failure {
                    None => conn.execute(
                        "DELETE FROM dead_letters WHERE subscriber = ?1 AND seq = ?2",
                        params![subscriber, seq],
                    ),
                    Some((error, attempts)) => conn.execute(
                        "UPDATE dead_letters SET status = 'dead', error = ?3, attempts = attempts + ?4, created_at = ?5
                         WHERE subscriber = ?1 AND seq = ?2",
                        params![subscriber, seq, error, attempts, now_ms()],
                    ),
                }
                .map(|_| ())
            })
            .await?)
    }

    /// Delete events older than `retention_days` that every subscriber has consumed and no
    /// dead letter refers to; returns how many.
    pub async fn prune(&self) -> Result<usize, JournalError> {
        let before = now_ms() - i64::from(self.config.retention_days) * 86_400_000;
        Ok(self
            .writer
            .write(move |conn| {
                conn.execute(
                    "DELETE FROM events WHERE created_at < ?1
                       AND seq <= (SELECT coalesce(min(cursor), 0) FROM subscribers)
                       AND seq NOT IN (SELECT seq FROM dead_letters)",
                    params![before],
                )
            })
            .await?)
    }

    /// Prune now, then daily, until `stop` turns true.
    pub async fn run_retention(
        self: std::sync::Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) {
        crate::periodic::every(std::time::Duration::from_secs(86_400), stop, || async {
            match self.prune().await {
                Ok(0) => {}
                Ok(pruned) => {
                    tracing::info!(pruned, "pruned consumed journal events past retention")
                }
                Err(e) => tracing::error!("journal retention failed: {e}"),
            }
        })
        .await
    }

    /// The subscriber's next events after its cursor.
    pub fn pending(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Vec<Event>, JournalError> {
        Ok(events_after(&self.reader(), after, patterns, limit)?)
    }

    /// Move a subscriber's cursor past `seq` (never backwards).
    pub async fn advance(&self, subscriber: &str, seq: i64) -> Result<(), JournalError> {
        let subscriber = subscriber.to_string();
        Ok(self
            .writer
            .write(move |conn| {
                conn.execute(
                    "UPDATE subscribers SET cursor = max(cursor, ?2), updated_at = ?3 WHERE id = ?1",
                    params![subscriber, seq, now_ms()],
                )
                .map(|_| ())
            })
            .await?)
    }

    /// Record that a subscriber gave up on an event, and move its cursor past it, atomically.
    pub async fn dead_letter(
        &self,
        subscriber: &str,
        event: &Event,
        error: &str,
        attempts: u32,
    ) -> Result<(), JournalError> {
        let (subscriber, seq, topic, error) = (
            subscriber.to_string(),
            event.seq,
            event.topic.clone(),
            error.to_string(),
        );
        Ok(self
            .writer
            .write(move |conn| {
                conn.execute(
                    "INSERT OR REPLACE INTO dead_letters (subscriber, seq, topic, error, attempts, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![subscriber, seq, topic, error, attempts, now_ms()],
                )?;
                conn.execute(
                    "UPDATE subscribers SET cursor = max(cursor, ?2), updated_at = ?3 WHERE id = ?1",
                    params![subscriber, seq, now_ms()],
                )
                .map(|_| ())
            })
            .await?)
    }
}

/// Per-subscriber lag and dead letters of a journal database.
pub fn subscriber_lags(conn: &Connection) -> rusqlite::Result<Vec<SubscriberLag>> {
    let mut statement = conn.prepare(
        "SELECT s.id, s.patterns, s.cursor, (SELECT count(*) FROM dead_letters d WHERE d.subscriber = s.id)
         FROM subscribers s ORDER BY s.id",
    )?;
    let rows: Vec<(String, String, i64, i64)> = statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .map(|(id, patterns, cursor, dead_letters)| {
            let patterns: Vec<String> = serde_json::from_str(&patterns).unwrap_or_default();
            let (filter, values) = event_filter(&patterns, cursor);
            let sql = format!("SELECT count(*) FROM events WHERE {filter}");
            let lag = conn.query_row(&sql, params_from_iter(values), |r| r.get(0))?;
            Ok(SubscriberLag {
                id,
                patterns,
                cursor,
                lag,
                dead_letters,
            })
        })
        .collect()
}

/// Dead letters of a journal database, newest first.
pub fn dead_letters(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<DeadLetter>> {
    let mut statement = conn.prepare(
        "SELECT id, subscriber, seq, topic, error, attempts, status, created_at FROM dead_letters ORDER BY id DESC LIMIT ?1",
    )?;
    statement
        .query_map(params![limit as i64], |r| {
            Ok(DeadLetter {
                id: r.get(0)?,
                subscriber: r.get(1)?,
                seq: r.get(2)?,
                topic: r.get(3)?,
                error: r.get(4)?,
                attempts: r.get(5)?,
                status: r.get(6)?,
                created_at: r.get(7)?,
            })
        })?
        .collect()
}

/// The newest `limit` events matching `patterns`, oldest first.
pub fn recent(
    conn: &Connection,
    patterns: &[String],
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    let (filter, mut values) = event_filter(patterns, 0);
    values.push(Value::Integer(limit as i64));
    let sql =
        format!("SELECT {EVENT_COLUMNS} FROM events WHERE {filter} ORDER BY seq DESC LIMIT ?");
    let mut statement = conn.prepare(&sql)?;
    let mut rows: Vec<Event> = statement
        .query_map(params_from_iter(values), read_event)?
        .collect::<Result<_, _>>()?;
    rows.reverse();
    Ok(rows)
}

/// Rewind (or advance) a subscriber's cursor so delivery resumes at `from_seq`; a running
/// host picks the new position up on its next round. Returns whether the subscriber exists.
pub fn replay_from(conn: &Connection, subscriber: &str, from_seq: i64) -> rusqlite::Result<bool> {
    let changed = conn.execute(
        "UPDATE subscribers SET cursor = ?2, updated_at = ?3 WHERE id = ?1",
        params![subscriber, (from_seq - 1).max(0), now_ms()],
    )?;
    Ok(changed == 1)
}

/// Ask for one more delivery of dead letters (all of a subscriber's, or one by id);
/// returns how many.
pub fn retry_dead_letters(
    conn: &Connection,
    subscriber: Option<&str>,
    id: Option<i64>,
) -> rusqlite::Result<usize> {
    conn.execute(
        "UPDATE dead_letters SET status = 'retry'
         WHERE status = 'dead' AND (?1 IS NULL OR subscriber = ?1) AND (?2 IS NULL OR id = ?2)",
        params![subscriber, id],
    )
}

/// Delete dead letters (all of a subscriber's, or one by id); returns how many.
pub fn discard_dead_letters(
    conn: &Connection,
    subscriber: Option<&str>,
    id: Option<i64>,
) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM dead_letters WHERE (?1 IS NULL OR subscriber = ?1) AND (?2 IS NULL OR id = ?2)",
        params![subscriber, id],
    )
}

/// Open a data dir's journal for an operator's change (replay, retry, discard).
pub fn open_for_admin(data_dir: &Path) -> Result<Connection, StoreError> {
    store::open(&data_dir.join("journal.db"), &MIGRATIONS)
}

/// Open a data dir's journal read-only; `None` when there is none yet.
pub fn open_read_only(data_dir: &Path) -> Result<Option<Connection>, StoreError> {
    store::open_read_only(&data_dir.join("journal.db"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(conn: &Connection) -> rusqlite::Result<Option<i64>> {
        conn.query_row("SELECT max(seq) FROM events", [], |r| r.get(0))
    }

    fn event(topic: &str) -> NewEvent {
        NewEvent {
            topic: topic.into(),
            payload: "{}".into(),
            source: "test".into(),
            ..NewEvent::default()
        }
    }

    #[test]
    fn patterns_match_exact_prefix_and_everything() {
        assert!(topic_matches("session.ended", "session.ended"));
        assert!(!topic_matches("session.ended", "session.ended.late"));
        assert!(topic_matches("schedule.*", "schedule.counter.minute"));
        assert!(!topic_matches("schedule.*", "schedules.x"));
        assert!(topic_matches("*", "anything.at_all"));
    }

    #[tokio::test]
    async fn subscribers_see_matching_events_after_their_cursor_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Journal::open(dir.path(), JournalConfig::default()).expect("open");
        journal
            .append(event("before.subscribe"))
            .await
            .expect("append");
        let patterns = vec!["a.*".to_string(), "b_c.exact".to_string()];
        let cursor = journal
            .subscribe("sub", &patterns)
            .await
            .expect("subscribe");
        assert_eq!(cursor, 1, "a new subscriber starts at the end");
        for topic in ["a.one", "bxc.exact", "b_c.exact", "a.two", "other"] {
            journal.append(event(topic)).await.expect("append");
        }
        let pending = journal.pending(cursor, &patterns, 10).expect("pending");
        let topics: Vec<&str> = pending.iter().map(|e| e.topic.as_str()).collect();
        assert_eq!(
            topics,
            ["a.one", "b_c.exact", "a.two"],
            "`_` is literal, not a wildcard"
        );
        journal
            .advance("sub", pending[1].seq)
            .await
            .expect("advance");
        journal
            .dead_letter("sub", &pending[2], "boom", 5)
            .await
            .expect("dead letter");
        journal
            .advance("sub", pending[0].seq)
            .await
            .expect("never backwards");
        let conn = open_read_only(dir.path()).expect("open").expect("exists");
        let lags = subscriber_lags(&conn).expect("lags");
        assert_eq!(lags[0].cursor, pending[2].seq);
        assert_eq!(lags[0].lag, 0);
        assert_eq!(lags[0].dead_letters, 1);
        assert_eq!(dead_letters(&conn, 10).expect("dead")[0].error, "boom");
        assert_eq!(
            journal.subscribe("sub", &patterns).await.expect("resume"),
            pending[2].seq
        );
    }

    #[tokio::test]
    async fn retention_prunes_only_events_every_subscriber_consumed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = JournalConfig {
            retention_days: 0,
            ..JournalConfig::default()
        };
        let journal = Journal::open(dir.path(), config).expect("open");
        let all = vec!["*".to_string()];
        journal.subscribe("fast", &all).await.expect("subscribe");
        journal.subscribe("slow", &all).await.expect("subscribe");
        let mut seqs = Vec::new();
        for topic in ["a.one", "a.two", "a.three", "a.four"] {
            seqs.push(journal.append(event(topic)).await.expect("append"));
        }
        journal.advance("fast", seqs[3]).await.expect("advance");
        journal.advance("slow", seqs[2]).await.expect("advance");
        let events = journal.pending(0, &all, 10).expect("read");
        journal
            .dead_letter("slow", &events[0], "boom", 1)
            .await
            .expect("dead letter");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            journal.prune().await.expect("prune"),
            2,
            "a.two and a.three"
        );
        let left: Vec<String> = journal
            .pending(0, &all, 10)
            .expect("read")
            .into_iter()
            .map(|e| e.topic)
            .collect();
        assert_eq!(
            left,
            ["a.one", "a.four"],
            "dead-lettered and still-pending events stay"
        );
    }

    #[tokio::test]
    async fn malformed_events_are_rejected_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = JournalConfig {
            max_payload_bytes: 8,
            ..JournalConfig::default()
        };
        let journal = Journal::open(dir.path(), config).expect("open");
        for (bad, expected) in [
            (event("Bad Topic"), "topic:"),
            (
                NewEvent {
                    payload: "{oops".into(),
                    ..event("t.x")
                },
                "payload: expected JSON",
            ),
            (
                NewEvent {
                    payload: "[1,2,3,4,5]".into(),
                    ..event("t.x")
                },
                "over the limit",
            ),
        ] {
            match journal.append(bad).await {
                Err(JournalError::InvalidInput(text)) => assert!(text.contains(expected), "{text}"),
                other => panic!("expected invalid input, got {other:?}"),
            }
        }
        let conn = open_read_only(dir.path()).expect("open").expect("exists");
        assert_eq!(head(&conn).expect("head"), None);
    }
}
