//! The operator's view of a journal on PostgreSQL ([`JournalOperator`]): what
//! `cairn journal` and `cairn status` read and repair, beside the running hosts.

use super::journal::{EVENT_COLUMNS, MIGRATIONS, read_event, topic_filter};
use super::{Param, PgPool, PgUrl, params};
use crate::journal::{JournalOperator, Unsubscribed};
use crate::{StorageError, now_ms};
use cairn_vocab::event::{DeadLetter, DeadLetterStatus, Event, SubscriberLag};

/// A journal on a PostgreSQL database, for an operator.
pub struct PgJournalAdmin {
    pool: PgPool,
}

impl PgJournalAdmin {
    /// Connect to `url` (migrating the journal's tables, as a host would).
    pub fn connect(url: &PgUrl) -> Result<Self, StorageError> {
        Ok(Self {
            pool: PgPool::connect_migrated(url, 1, "journal-admin-pg", &MIGRATIONS)?,
        })
    }

    /// Events after `after` matching `patterns`: the newest `limit` of them when
    /// `newest`, else the oldest; oldest first either way.
    fn events(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
        newest: bool,
    ) -> Result<Vec<Event>, StorageError> {
        let mut values: Vec<Param> = vec![Box::new(after)];
        let topics = topic_filter(patterns, &mut values);
        values.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        let order = if newest { "DESC" } else { "" };
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM journal_events WHERE seq > $1 AND ({topics})
              ORDER BY seq {order} LIMIT ${}",
            values.len()
        );
        let mut events: Vec<Event> = self.pool.read(move |client| {
            Ok(client
                .query(&sql, &params(&values))?
                .iter()
                .map(read_event)
                .collect())
        })?;
        if newest {
            events.reverse();
        }
        Ok(events)
    }
}

impl JournalOperator for PgJournalAdmin {
    fn subscriber_lags(&self) -> Result<Vec<SubscriberLag>, StorageError> {
        let rows: Vec<(String, String, i64, i64)> = self.pool.read(|client| {
            Ok(client
                .query(
                    "SELECT s.id, s.patterns, s.cursor,
                            (SELECT count(*) FROM journal_dead_letters d WHERE d.subscriber = s.id)
                       FROM journal_subscribers s ORDER BY s.id COLLATE \"C\"",
                    &[],
                )?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect())
        })?;
        rows.into_iter()
            .map(|(id, patterns, cursor, dead_letters)| {
                let patterns: Vec<String> = serde_json::from_str(&patterns).unwrap_or_default();
                let lag = self.lag(cursor, &patterns)?;
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
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.pool.read(move |client| {
            client
                .query(
                    "SELECT id, subscriber, seq, topic, error, attempts, status, created_at
                       FROM journal_dead_letters ORDER BY id DESC LIMIT $1",
                    &[&limit],
                )?
                .iter()
                .map(|r| {
                    let status: String = r.get(6);
                    Ok(DeadLetter {
                        id: r.get(0),
                        subscriber: r.get(1),
                        seq: r.get(2),
                        topic: r.get(3),
                        error: r.get(4),
                        attempts: i64::from(r.get::<_, i32>(5)),
                        status: DeadLetterStatus::parse(&status).ok_or_else(|| {
                            StorageError::Postgres(format!("unknown dead-letter status `{status}`"))
                        })?,
                        created_at: r.get(7),
                    })
                })
                .collect()
        })
    }

    fn recent(&self, patterns: &[String], limit: usize) -> Result<Vec<Event>, StorageError> {
        self.events(0, patterns, limit, true)
    }

    fn events_after(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Vec<Event>, StorageError> {
        self.events(after, patterns, limit, false)
    }

    fn last_seq(&self) -> Result<i64, StorageError> {
        self.pool.read(|client| {
            Ok(client
                .query_one("SELECT seq FROM journal_head", &[])?
                .get(0))
        })
    }

    fn replay_from(&self, subscriber: &str, from_seq: i64) -> Result<bool, StorageError> {
        let subscriber = subscriber.to_string();
        let changed = self
            .pool
            .submit(move |tx| {
                Ok(tx.execute(
                    "UPDATE journal_subscribers SET cursor = $2, rewound = 1, updated_at = $3
                      WHERE id = $1",
                    &[&subscriber, &(from_seq - 1).max(0), &now_ms()],
                )?)
            })
            .wait()?;
        Ok(changed == 1)
    }

    fn retry_dead_letters(
        &self,
        subscriber: Option<&str>,
        id: Option<i64>,
    ) -> Result<usize, StorageError> {
        let subscriber = subscriber.map(str::to_string);
        let changed = self
            .pool
            .submit(move |tx| {
                Ok(tx.execute(
                    "UPDATE journal_dead_letters SET status = 'retry'
                      WHERE status = 'dead' AND ($1::TEXT IS NULL OR subscriber = $1)
                        AND ($2::BIGINT IS NULL OR id = $2)",
                    &[&subscriber, &id],
                )?)
            })
            .wait()?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    fn discard_dead_letters(
        &self,
        subscriber: Option<&str>,
        id: Option<i64>,
    ) -> Result<usize, StorageError> {
        let subscriber = subscriber.map(str::to_string);
        let changed = self
            .pool
            .submit(move |tx| {
                Ok(tx.execute(
                    "DELETE FROM journal_dead_letters
                      WHERE ($1::TEXT IS NULL OR subscriber = $1) AND ($2::BIGINT IS NULL OR id = $2)",
                    &[&subscriber, &id],
                )?)
            })
            .wait()?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    fn unsubscribe(&self, subscriber: &str) -> Result<Unsubscribed, StorageError> {
        let subscriber = subscriber.to_string();
        self.pool
            .submit(move |tx| {
                let Some(row) = tx.query_opt(
                    "SELECT holder IS NOT NULL AND lease_until >= $2 FROM journal_subscribers
                      WHERE id = $1 FOR UPDATE",
                    &[&subscriber, &now_ms()],
                )?
                else {
                    return Ok(Unsubscribed::Unknown);
                };
                if row.try_get::<_, Option<bool>>(0)?.unwrap_or(false) {
                    return Ok(Unsubscribed::Held);
                }
                let dead_letters = tx.execute(
                    "DELETE FROM journal_dead_letters WHERE subscriber = $1",
                    &[&subscriber],
                )?;
                tx.execute(
                    "DELETE FROM journal_subscribers WHERE id = $1",
                    &[&subscriber],
                )?;
                Ok(Unsubscribed::Forgotten {
                    dead_letters: usize::try_from(dead_letters).unwrap_or(usize::MAX),
                })
            })
            .wait()
    }
}

impl PgJournalAdmin {
    /// Events after `cursor` a subscriber to `patterns` has yet to take.
    fn lag(&self, cursor: i64, patterns: &[String]) -> Result<i64, StorageError> {
        let mut values: Vec<Param> = vec![Box::new(cursor)];
        let topics = topic_filter(patterns, &mut values);
        let sql = format!("SELECT count(*) FROM journal_events WHERE seq > $1 AND ({topics})");
        self.pool
            .read(move |client| Ok(client.query_one(&sql, &params(&values))?.get(0)))
    }
}
