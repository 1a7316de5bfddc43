//! The journal's storage: the [`JournalStore`] interface the host's journal appends and
//! delivers through, [`JournalAdmin`] for an operator's reads and repairs, and their SQLite
//! implementation over `journal.db` (events, subscribers with durable cursors, dead
//! letters).

use std::path::Path;

use cairn_vocab::event::{DeadLetter, DeadLetterStatus, Event, NewEvent, SubscriberLag};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use crate::database::Database;
use crate::writer::Receipt;
use crate::{Migrations, StorageError, now_ms, open};

/// The store's file in a data dir.
pub const FILE: &str = "journal.db";

/// Migrations of `journal.db`.
pub const MIGRATIONS: Migrations = Migrations {
    name: "journal",
    scripts: &[
        include_str!("../../../migrations/journal/0001_init.sql"),
        include_str!("../../../migrations/journal/0002_event_depth.sql"),
        include_str!("../../../migrations/journal/0003_rewound.sql"),
    ],
};

/// Events a subscriber has yet to take, from [`JournalStore::pending`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    /// The matching events, oldest first.
    pub events: Vec<Event>,
    /// Every event up to this sequence number was searched: a subscriber that took
    /// `events` can search from here next time instead of from its cursor, which moves only
    /// past events it takes (so a subscriber to rare topics is not re-reading the whole
    /// journal on every append).
    pub searched_to: i64,
}

/// Where the journal keeps events, subscribers' cursors and dead letters. Writes return a
/// [`Receipt`] that resolves once they are on disk.
pub trait JournalStore: Send + Sync {
    /// Append a checked event; its sequence number.
    fn append(&self, event: NewEvent) -> Receipt<i64>;
    /// Register a subscriber (or update its patterns); its cursor. A new subscriber starts
    /// at the current end of the journal.
    fn subscribe(&self, id: &str, patterns: &[String]) -> Receipt<i64>;
    /// A subscriber's cursor as stored (an operator may have rewound it).
    fn cursor(&self, subscriber: &str) -> Result<Option<i64>, StorageError>;
    /// The cursor an operator moved `subscriber`'s to (`replay_from`) since the last call,
    /// if they did. Until the delivering host has asked, its own moves of the cursor are
    /// refused: they were decided before it knew of the replay.
    fn take_rewind(&self, subscriber: &str) -> Receipt<Option<i64>>;
    /// Dead-lettered events an operator asked to retry for `subscriber`, oldest first.
    fn retries(&self, subscriber: &str) -> Result<Vec<Event>, StorageError>;
    /// Settle a retried dead letter: delete it when delivered, else record the new failure.
    fn settle_retry(
        &self,
        subscriber: &str,
        seq: i64,
        failure: Option<(String, u32)>,
    ) -> Receipt<()>;
    /// The highest seq among `subscriber`'s dead letters, if it has any: a delivery at or
    /// below it may be of an event a replay brought back after it was dead-lettered.
    fn last_dead_letter(&self, subscriber: &str) -> Result<Option<i64>, StorageError>;
    /// `subscriber` took the events `seqs` after all (a replay delivered them again): their
    /// dead letters, if any, no longer hold and are deleted; how many.
    fn clear_dead_letters(&self, subscriber: &str, seqs: Vec<i64>) -> Receipt<usize>;
    /// Delete events older than `before_ms` every subscriber consumed and no dead letter
    /// refers to; how many.
    fn prune(&self, before_ms: i64) -> Receipt<usize>;
    /// Events after `after` matching `patterns`, oldest first, and how far the journal was
    /// searched for them.
    fn pending(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Pending, StorageError>;
    /// The first event of `topic` recorded at or after `since_ms` whose payload's
    /// top-level `field` is the integer `value` — how a host that takes over a batch an
    /// earlier attempt may have answered finds that answer. It scans the topic's events
    /// since `since_ms`: for rare lookups, not the turn's path.
    fn find_event(
        &self,
        topic: &str,
        since_ms: i64,
        field: &str,
        value: i64,
    ) -> Result<Option<Event>, StorageError>;
    /// Move a subscriber's cursor past `seq` (never backwards; not at all while an
    /// operator's move waits for [`JournalStore::take_rewind`]).
    fn advance(&self, subscriber: &str, seq: i64) -> Receipt<()>;
    /// Record that a subscriber gave up on an event and move its cursor past it (unless an
    /// operator's move waits for [`JournalStore::take_rewind`]), atomically.
    fn dead_letter(
        &self,
        subscriber: &str,
        event: &Event,
        error: &str,
        attempts: u32,
    ) -> Receipt<()>;
    /// Whether this host may deliver to `subscriber` now. Where several hosts share the
    /// journal one holds each subscription at a time, by a lease each call renews; another
    /// host takes it over once the holder has stopped calling for a lease. A journal one
    /// host owns (a data dir's) always says yes.
    fn hold(&self, subscriber: &str) -> Receipt<bool> {
        let _ = subscriber;
        Receipt::ready(Ok(true))
    }
    /// Give up this host's hold on `subscriber` (it stops delivering to it), so another host
    /// takes it over at its next look rather than after the lease; nothing when another
    /// host holds it, or on a journal one host owns.
    fn release(&self, subscriber: &str) -> Receipt<()> {
        let _ = subscriber;
        Receipt::ready(Ok(()))
    }
    /// Call `wake` with the topic of events other hosts append, soon after they commit: a
    /// hint that lets a subscriber read at once rather than at its next look. It may come
    /// late, twice, or not at all; readers never depend on it. A journal only one host
    /// writes has nothing to tell.
    fn on_appended_elsewhere(&self, wake: AppendedElsewhere) {
        let _ = wake;
    }
}

/// What [`JournalStore::on_appended_elsewhere`] calls with each topic appended elsewhere
/// (`*` when it cannot say which).
pub type AppendedElsewhere = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// `journal.db`: a writer thread for writes, a connection for reads.
pub struct SqliteJournal {
    db: Database,
}

impl SqliteJournal {
    /// Open (creating and migrating) `<data>/journal.db` and start its writer thread.
    pub fn open(data_dir: &Path) -> Result<Self, StorageError> {
        Ok(Self {
            db: Database::open(&data_dir.join(FILE), &MIGRATIONS, "journal-writer")?,
        })
    }
}

impl JournalStore for SqliteJournal {
    fn append(&self, event: NewEvent) -> Receipt<i64> {
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "INSERT INTO events (topic, payload, source, session_id, agent_id, user_id, created_at, depth)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                event.topic,
                event.payload,
                event.source,
                event.session_id,
                event.agent_id,
                event.user_id,
                now_ms(),
                event.depth
            ])?;
            Ok(conn.last_insert_rowid())
        })
    }

    fn subscribe(&self, id: &str, patterns: &[String]) -> Receipt<i64> {
        let id = id.to_string();
        let patterns = serde_json::to_string(patterns).unwrap_or_else(|_| "[]".into());
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "INSERT INTO subscribers (id, patterns, cursor, updated_at)
                 VALUES (?1, ?2, (SELECT coalesce(max(seq), 0) FROM events), ?3)
                 ON CONFLICT (id) DO UPDATE SET patterns = excluded.patterns",
            )?
            .execute(params![id, patterns, now_ms()])?;
            conn.prepare_cached("SELECT cursor FROM subscribers WHERE id = ?1")?
                .query_row(params![id], |r| r.get(0))
        })
    }

    fn cursor(&self, subscriber: &str) -> Result<Option<i64>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached("SELECT cursor FROM subscribers WHERE id = ?1")?
                .query_row(params![subscriber], |r| r.get(0))
                .optional()
        })
    }

    fn take_rewind(&self, subscriber: &str) -> Receipt<Option<i64>> {
        // Asked every second per subscriber: a read settles the usual answer (no replay)
        // without a write.
        let marked = self.db.read(|conn| {
            conn.prepare_cached("SELECT rewound FROM subscribers WHERE id = ?1")?
                .query_row(params![subscriber], |r| r.get::<_, i64>(0))
                .optional()
        });
        match marked {
            Ok(Some(1)) => {}
            Ok(_) => return Receipt::ready(Ok(None)),
            Err(e) => return Receipt::ready(Err(e)),
        }
        let subscriber = subscriber.to_string();
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "UPDATE subscribers SET rewound = 0 WHERE id = ?1 AND rewound = 1 RETURNING cursor",
            )?
            .query_row(params![subscriber], |r| r.get(0))
            .optional()
        })
    }

    fn find_event(
        &self,
        topic: &str,
        since_ms: i64,
        field: &str,
        value: i64,
    ) -> Result<Option<Event>, StorageError> {
        let path = format!("$.\"{}\"", field.replace('"', ""));
        self.db.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE topic = ?1 AND created_at >= ?2
                   AND json_extract(payload, ?3) = ?4 ORDER BY seq LIMIT 1"
            ))?
            .query_row(params![topic, since_ms, path, value], read_event)
            .optional()
        })
    }

    fn retries(&self, subscriber: &str) -> Result<Vec<Event>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE seq IN
                   (SELECT seq FROM dead_letters WHERE subscriber = ?1 AND status = 'retry') ORDER BY seq"
            ))?
            .query_map(params![subscriber], read_event)?
            .collect()
        })
    }

    fn last_dead_letter(&self, subscriber: &str) -> Result<Option<i64>, StorageError> {
        self.db.read(|conn| {
            conn.prepare_cached("SELECT max(seq) FROM dead_letters WHERE subscriber = ?1")?
                .query_row(params![subscriber], |r| r.get(0))
        })
    }

    fn clear_dead_letters(&self, subscriber: &str, seqs: Vec<i64>) -> Receipt<usize> {
        let subscriber = subscriber.to_string();
        self.db.submit(move |conn| {
            let mut delete =
                conn.prepare_cached("DELETE FROM dead_letters WHERE subscriber = ?1 AND seq = ?2")?;
            let mut cleared = 0;
            for seq in &seqs {
                cleared += delete.execute(params![subscriber, seq])?;
            }
            Ok(cleared)
        })
    }

    fn settle_retry(
        &self,
        subscriber: &str,
        seq: i64,
        failure: Option<(String, u32)>,
    ) -> Receipt<()> {
        let subscriber = subscriber.to_string();
        self.db.submit(move |conn| {
            match failure {
                None => conn.prepare_cached("DELETE FROM dead_letters WHERE subscriber = ?1 AND seq = ?2")?.execute(params![subscriber, seq]),
                Some((error, attempts)) => conn.prepare_cached("UPDATE dead_letters SET status = 'dead', error = ?3, attempts = attempts + ?4, created_at = ?5
                     WHERE subscriber = ?1 AND seq = ?2")?.execute(params![subscriber, seq, error, attempts, now_ms()]),
            }
            .map(|_| ())
        })
    }

    fn prune(&self, before_ms: i64) -> Receipt<usize> {
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "DELETE FROM events WHERE created_at < ?1
                   AND seq <= (SELECT coalesce(min(cursor), 0) FROM subscribers)
                   AND seq NOT IN (SELECT seq FROM dead_letters)",
            )?
            .execute(params![before_ms])
        })
    }

    fn pending(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Pending, StorageError> {
        self.db.read(|conn| {
            // Events are appended by one writer in sequence order, so every event up to the
            // last one seen now is committed: a search bounded by it is complete.
            let last: i64 = conn
                .prepare_cached("SELECT coalesce(max(seq), 0) FROM events")?
                .query_row([], |row| row.get(0))?;
            let events = events_between(conn, after, last, patterns, limit)?;
            let searched_to = match events.last() {
                Some(event) if events.len() == limit => event.seq,
                _ => last.max(after),
            };
            Ok(Pending {
                events,
                searched_to,
            })
        })
    }

    fn advance(&self, subscriber: &str, seq: i64) -> Receipt<()> {
        let subscriber = subscriber.to_string();
        self.db.submit(move |conn| {
            conn.prepare_cached(
                "UPDATE subscribers SET cursor = max(cursor, ?2), updated_at = ?3
                  WHERE id = ?1 AND rewound = 0",
            )?
            .execute(params![subscriber, seq, now_ms()])
            .map(|_| ())
        })
    }

    fn dead_letter(
        &self,
        subscriber: &str,
        event: &Event,
        error: &str,
        attempts: u32,
    ) -> Receipt<()> {
        let (subscriber, seq, topic, error) = (
            subscriber.to_string(),
            event.seq,
            event.topic.clone(),
            error.to_string(),
        );
        self.db.submit(move |conn| {
            conn.prepare_cached("INSERT OR REPLACE INTO dead_letters (subscriber, seq, topic, error, attempts, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?.execute(params![subscriber, seq, topic, error, attempts, now_ms()])?;
            conn.prepare_cached("UPDATE subscribers SET cursor = max(cursor, ?2), updated_at = ?3 WHERE id = ?1 AND rewound = 0")?.execute(params![subscriber, seq, now_ms()])
            .map(|_| ())
        })
    }
}

/// An operator's view of a journal, with or without a running host: reading events, lag
/// and dead letters, and the repairs (replay, retry, discard) a running host picks up.
/// [`JournalAdmin`] serves a data dir's `journal.db`; the PostgreSQL one a shared database.
pub trait JournalOperator: Send {
    /// Per-subscriber cursor, lag and dead letters.
    fn subscriber_lags(&self) -> Result<Vec<SubscriberLag>, StorageError>;
    /// Dead letters, newest first.
    fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>, StorageError>;
    /// The newest `limit` events matching `patterns`, oldest first.
    fn recent(&self, patterns: &[String], limit: usize) -> Result<Vec<Event>, StorageError>;
    /// Events after `after` matching `patterns`, oldest first.
    fn events_after(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Vec<Event>, StorageError>;
    /// The last sequence number handed out, pruned events included (0 before the first
    /// append): a replay can start at most one past it.
    fn last_seq(&self) -> Result<i64, StorageError>;
    /// Rewind (or advance) a subscriber's cursor so delivery resumes at `from_seq`, marked
    /// for the delivering host to take notice ([`JournalStore::take_rewind`]); whether the
    /// subscriber exists.
    fn replay_from(&self, subscriber: &str, from_seq: i64) -> Result<bool, StorageError>;
    /// Ask for one more delivery of dead letters (a subscriber's, or one by id); how many.
    fn retry_dead_letters(
        &self,
        subscriber: Option<&str>,
        id: Option<i64>,
    ) -> Result<usize, StorageError>;
    /// Delete dead letters (a subscriber's, or one by id); how many.
    fn discard_dead_letters(
        &self,
        subscriber: Option<&str>,
        id: Option<i64>,
    ) -> Result<usize, StorageError>;
    /// Forget a subscriber with its dead letters, so retention no longer keeps events for it;
    /// refused while a host holds it (on a journal several hosts share).
    fn unsubscribe(&self, subscriber: &str) -> Result<Unsubscribed, StorageError>;
}

/// What [`JournalOperator::unsubscribe`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsubscribed {
    /// No subscriber by that id: nothing changed.
    Unknown,
    /// A host delivers to it now (its lease holds): nothing changed.
    Held,
    /// It is gone, with this many dead letters.
    Forgotten {
        /// Its dead letters, deleted with it.
        dead_letters: usize,
    },
}

/// The operator's view of a data dir's `journal.db`.
pub struct JournalAdmin {
    conn: Connection,
}

impl JournalAdmin {
    /// Open a data dir's journal for an operator's change (creating it if needed).
    pub fn open(data_dir: &Path) -> Result<Self, StorageError> {
        Ok(Self {
            conn: open(&data_dir.join(FILE), &MIGRATIONS)?,
        })
    }

    /// Open a data dir's journal read-only; `None` when there is none yet.
    pub fn open_read_only(data_dir: &Path) -> Result<Option<Self>, StorageError> {
        Ok(crate::open_read_only(&data_dir.join(FILE))?.map(|conn| Self { conn }))
    }
}

impl JournalOperator for JournalAdmin {
    fn subscriber_lags(&self) -> Result<Vec<SubscriberLag>, StorageError> {
        let conn = &self.conn;
        let mut statement = conn.prepare_cached(
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
                let lag = conn
                    .prepare_cached(&sql)?
                    .query_row(params_from_iter(values), |r| r.get(0))?;
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

    fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>, StorageError> {
        let conn = &self.conn;
        let mut statement = conn.prepare_cached(
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
                    status: crate::parsed(r, 6, DeadLetterStatus::parse, "dead-letter status")?,
                    created_at: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()
            .map_err(StorageError::from)
    }

    fn recent(&self, patterns: &[String], limit: usize) -> Result<Vec<Event>, StorageError> {
        let conn = &self.conn;
        let (filter, mut values) = event_filter(patterns, 0);
        values.push(Value::Integer(limit as i64));
        let sql =
            format!("SELECT {EVENT_COLUMNS} FROM events WHERE {filter} ORDER BY seq DESC LIMIT ?");
        let mut statement = conn.prepare_cached(&sql)?;
        let mut rows: Vec<Event> = statement
            .query_map(params_from_iter(values), read_event)?
            .collect::<Result<_, _>>()?;
        rows.reverse();
        Ok(rows)
    }

    fn events_after(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Vec<Event>, StorageError> {
        Ok(events_after(&self.conn, after, patterns, limit)?)
    }

    fn last_seq(&self) -> Result<i64, StorageError> {
        // `events.seq` is AUTOINCREMENT: SQLite keeps the last one handed out here.
        Ok(self.conn.query_row(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)",
            [],
            |row| row.get(0),
        )?)
    }

    fn replay_from(&self, subscriber: &str, from_seq: i64) -> Result<bool, StorageError> {
        let conn = &self.conn;
        let changed = conn
            .prepare_cached(
                "UPDATE subscribers SET cursor = ?2, rewound = 1, updated_at = ?3 WHERE id = ?1",
            )?
            .execute(params![subscriber, (from_seq - 1).max(0), now_ms()])?;
        Ok(changed == 1)
    }

    fn retry_dead_letters(
        &self,
        subscriber: Option<&str>,
        id: Option<i64>,
    ) -> Result<usize, StorageError> {
        let conn = &self.conn;
        conn.prepare_cached(
            "UPDATE dead_letters SET status = 'retry'
             WHERE status = 'dead' AND (?1 IS NULL OR subscriber = ?1) AND (?2 IS NULL OR id = ?2)",
        )?
        .execute(params![subscriber, id])
        .map_err(StorageError::from)
    }

    fn discard_dead_letters(
        &self,
        subscriber: Option<&str>,
        id: Option<i64>,
    ) -> Result<usize, StorageError> {
        let conn = &self.conn;
        conn.prepare_cached("DELETE FROM dead_letters WHERE (?1 IS NULL OR subscriber = ?1) AND (?2 IS NULL OR id = ?2)")?.execute(params![subscriber, id]).map_err(StorageError::from)
    }

    fn unsubscribe(&self, subscriber: &str) -> Result<Unsubscribed, StorageError> {
        let tx = self.conn.unchecked_transaction()?;
        let known = tx.execute("DELETE FROM subscribers WHERE id = ?1", params![subscriber])?;
        if known == 0 {
            return Ok(Unsubscribed::Unknown);
        }
        let dead_letters = tx.execute(
            "DELETE FROM dead_letters WHERE subscriber = ?1",
            params![subscriber],
        )?;
        tx.commit()?;
        Ok(Unsubscribed::Forgotten { dead_letters })
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
        depth: row.get(8)?,
    })
}

const EVENT_COLUMNS: &str =
    "seq, topic, payload, source, session_id, agent_id, user_id, created_at, depth";

/// Events after `after` matching `patterns`, oldest first.
fn events_after(
    conn: &Connection,
    after: i64,
    patterns: &[String],
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    events_between(conn, after, i64::MAX, patterns, limit)
}

/// Events after `after` and up to `through` matching `patterns`, oldest first.
fn events_between(
    conn: &Connection,
    after: i64,
    through: i64,
    patterns: &[String],
    limit: usize,
) -> rusqlite::Result<Vec<Event>> {
    let (filter, mut values) = event_filter(patterns, after);
    values.push(Value::Integer(through));
    values.push(Value::Integer(limit as i64));
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE {filter} AND seq <= ? ORDER BY seq LIMIT ?"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    statement
        .query_map(params_from_iter(values), read_event)?
        .collect()
}
