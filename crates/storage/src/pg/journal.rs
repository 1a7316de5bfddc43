//! The event journal on PostgreSQL, shared by several hosts.
//!
//! - An append takes its sequence number from `journal_head` under that row's lock, held
//!   until the append's transaction commits: events commit in sequence order, so a
//!   subscriber reading up to the committed head never skips an event that commits later.
//! - One host delivers to each subscriber at a time: [`JournalStore::hold`] takes or renews
//!   a lease on the subscriber's row; a host that died stops renewing and another takes the
//!   subscription over where its cursor stands once the lease lapsed.
//! - An append's commit notifies `cairn_journal` with its topics; every host listens and
//!   wakes its matching subscribers at once. That is only a hint: subscribers also read
//!   every second, so a lost notification delays an event by a second at most.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Param, params};
use cairn_vocab::event::{Event, NewEvent};
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, GenericClient, Row};

use super::batch::Batcher;
use super::{PgPool, PgUrl};
use crate::journal::{AppendedElsewhere, JournalStore, Pending};
use crate::writer::Receipt;
use crate::{Migrations, StorageError, now_ms};

/// Migrations of the journal's tables on PostgreSQL.
pub const MIGRATIONS: Migrations = Migrations {
    name: "journal",
    scripts: &[
        include_str!("../../../../migrations/postgres/journal/0001_init.sql"),
        include_str!("../../../../migrations/postgres/journal/0002_event_depth.sql"),
        include_str!("../../../../migrations/postgres/journal/0003_rewound.sql"),
    ],
};

/// How long a host holds a subscription without renewing it by default. A delivering host
/// renews it every second, so a subscriber moves to another host this long after its
/// host died.
pub const DEFAULT_SUBSCRIPTION_LEASE: Duration = Duration::from_secs(15);

/// Connections each journal keeps for everything but appends.
const CONNECTIONS: usize = 3;

/// The journal's tables on a PostgreSQL database, delivering as host `holder`.
pub struct PgJournal {
    /// One connection for appends: they queue for `journal_head`'s lock anyway, so one
    /// writer commits all that wait in one transaction, one statement for all their rows.
    appends: PgPool,
    /// Events waiting for the append connection.
    waiting_appends: Batcher<NewEvent>,
    /// Alive while the journal is: the thread listening for other hosts' appends stops
    /// once it cannot upgrade this.
    alive: Arc<()>,
    pool: PgPool,
    holder: String,
    /// How long this host holds a subscription without renewing it, in ms.
    lease_ms: i64,
}

impl PgJournal {
    /// Connect to `url` and migrate the journal's tables; subscriptions this host holds
    /// lapse `lease` after it last renewed them.
    pub fn connect(url: &PgUrl, lease: Duration) -> Result<Self, StorageError> {
        let pool = PgPool::connect_migrated(url, CONNECTIONS, "journal-pg", &MIGRATIONS)?;
        Ok(Self {
            appends: PgPool::connect(url, 1, "journal-pg-append")?,
            waiting_appends: Batcher::new(insert_events),
            alive: Arc::new(()),
            pool,
            holder: super::holder_id(),
            lease_ms: super::millis(lease),
        })
    }
}

impl JournalStore for PgJournal {
    fn append(&self, event: NewEvent) -> Receipt<i64> {
        self.waiting_appends.push(&self.appends, event)
    }

    fn subscribe(&self, id: &str, patterns: &[String]) -> Receipt<i64> {
        let id = id.to_string();
        let patterns = serde_json::to_string(patterns).unwrap_or_else(|_| "[]".into());
        self.pool.submit(move |tx| {
            Ok(tx
                .query_one(
                    "INSERT INTO journal_subscribers (id, patterns, cursor, updated_at)
                     VALUES ($1, $2, (SELECT seq FROM journal_head), $3)
                     ON CONFLICT (id) DO UPDATE SET patterns = excluded.patterns
                     RETURNING cursor",
                    &[&id, &patterns, &now_ms()],
                )?
                .get(0))
        })
    }

    fn cursor(&self, subscriber: &str) -> Result<Option<i64>, StorageError> {
        let subscriber = subscriber.to_string();
        self.pool.read(move |client| {
            Ok(client
                .query_opt(
                    "SELECT cursor FROM journal_subscribers WHERE id = $1",
                    &[&subscriber],
                )?
                .map(|row| row.get(0)))
        })
    }

    fn take_rewind(&self, subscriber: &str) -> Receipt<Option<i64>> {
        let subscriber = subscriber.to_string();
        // Asked every second per subscriber: a read settles the usual answer (no replay)
        // without a write.
        let marked = {
            let subscriber = subscriber.clone();
            self.pool.read(move |client| {
                Ok(client
                    .query_opt(
                        "SELECT rewound FROM journal_subscribers WHERE id = $1",
                        &[&subscriber],
                    )?
                    .map(|row| row.get::<_, i32>(0)))
            })
        };
        match marked {
            Ok(Some(1)) => {}
            Ok(_) => return Receipt::ready(Ok(None)),
            Err(e) => return Receipt::ready(Err(e)),
        }
        self.pool.submit(move |tx| {
            Ok(tx
                .query_opt(
                    "UPDATE journal_subscribers SET rewound = 0
                      WHERE id = $1 AND rewound = 1 RETURNING cursor",
                    &[&subscriber],
                )?
                .map(|row| row.get(0)))
        })
    }

    fn find_event(
        &self,
        topic: &str,
        since_ms: i64,
        field: &str,
        value: i64,
    ) -> Result<Option<Event>, StorageError> {
        let (topic, field, value) = (topic.to_string(), field.to_string(), value.to_string());
        self.pool.read(move |client| {
            Ok(client
                .query_opt(
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM journal_events
                          WHERE topic = $1 AND created_at >= $2
                            AND payload::jsonb ->> $3 = $4
                          ORDER BY seq LIMIT 1"
                    ),
                    &[&topic, &since_ms, &field, &value],
                )?
                .map(|row| read_event(&row)))
        })
    }

    fn retries(&self, subscriber: &str) -> Result<Vec<Event>, StorageError> {
        let subscriber = subscriber.to_string();
        self.pool.read(move |client| {
            Ok(client
                .query(
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM journal_events WHERE seq IN
                           (SELECT seq FROM journal_dead_letters
                             WHERE subscriber = $1 AND status = 'retry')
                         ORDER BY seq"
                    ),
                    &[&subscriber],
                )?
                .iter()
                .map(read_event)
                .collect())
        })
    }

    fn last_dead_letter(&self, subscriber: &str) -> Result<Option<i64>, StorageError> {
        let subscriber = subscriber.to_string();
        self.pool.read(move |client| {
            Ok(client
                .query_one(
                    "SELECT max(seq) FROM journal_dead_letters WHERE subscriber = $1",
                    &[&subscriber],
                )?
                .get(0))
        })
    }

    fn clear_dead_letters(&self, subscriber: &str, seqs: Vec<i64>) -> Receipt<usize> {
        let subscriber = subscriber.to_string();
        self.pool.submit(move |tx| {
            let cleared = tx.execute(
                "DELETE FROM journal_dead_letters WHERE subscriber = $1 AND seq = ANY($2)",
                &[&subscriber, &seqs],
            )?;
            Ok(cleared as usize)
        })
    }

    fn settle_retry(
        &self,
        subscriber: &str,
        seq: i64,
        failure: Option<(String, u32)>,
    ) -> Receipt<()> {
        let subscriber = subscriber.to_string();
        self.pool.submit(move |tx| {
            match &failure {
                None => tx.execute(
                    "DELETE FROM journal_dead_letters WHERE subscriber = $1 AND seq = $2",
                    &[&subscriber, &seq],
                )?,
                Some((error, attempts)) => tx.execute(
                    "UPDATE journal_dead_letters
                        SET status = 'dead', error = $3, attempts = attempts + $4, created_at = $5
                      WHERE subscriber = $1 AND seq = $2",
                    &[&subscriber, &seq, error, &to_i32(*attempts), &now_ms()],
                )?,
            };
            Ok(())
        })
    }

    fn prune(&self, before_ms: i64) -> Receipt<usize> {
        self.pool.submit(move |tx| {
            let pruned = tx.execute(
                "DELETE FROM journal_events e
                  WHERE e.created_at < $1
                    AND e.seq <= (SELECT coalesce(min(cursor), 0) FROM journal_subscribers)
                    AND NOT EXISTS (SELECT 1 FROM journal_dead_letters d WHERE d.seq = e.seq)",
                &[&before_ms],
            )?;
            Ok(usize::try_from(pruned).unwrap_or(usize::MAX))
        })
    }

    fn pending(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Pending, StorageError> {
        let patterns = patterns.to_vec();
        self.pool.read(move |client| {
            // Events commit in sequence order (see the module's note): every event up to
            // the committed head is visible, so a search bounded by it is complete.
            let head: i64 = client
                .query_one("SELECT seq FROM journal_head", &[])?
                .get(0);
            let events = events_between(client, after, head, &patterns, limit)?;
            let searched_to = match events.last() {
                Some(event) if events.len() == limit => event.seq,
                _ => head.max(after),
            };
            Ok(Pending {
                events,
                searched_to,
            })
        })
    }

    fn advance(&self, subscriber: &str, seq: i64) -> Receipt<()> {
        let subscriber = subscriber.to_string();
        self.pool.submit(move |tx| {
            tx.execute(
                "UPDATE journal_subscribers SET cursor = greatest(cursor, $2), updated_at = $3
                  WHERE id = $1 AND rewound = 0",
                &[&subscriber, &seq, &now_ms()],
            )?;
            Ok(())
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
        self.pool.submit(move |tx| {
            let now = now_ms();
            tx.execute(
                "INSERT INTO journal_dead_letters (subscriber, seq, topic, error, attempts, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (subscriber, seq) DO UPDATE
                    SET topic = $3, error = $4, attempts = $5, created_at = $6, status = 'dead'",
                &[&subscriber, &seq, &topic, &error, &to_i32(attempts), &now],
            )?;
            tx.execute(
                "UPDATE journal_subscribers SET cursor = greatest(cursor, $2), updated_at = $3
                  WHERE id = $1 AND rewound = 0",
                &[&subscriber, &seq, &now],
            )?;
            Ok(())
        })
    }

    fn on_appended_elsewhere(&self, wake: AppendedElsewhere) {
        let (url, alive) = (self.pool.url().clone(), Arc::downgrade(&self.alive));
        let started = std::thread::Builder::new()
            .name("journal-pg-listen".into())
            .spawn(move || listen(&url, &alive, &wake));
        if let Err(e) = started {
            tracing::warn!(
                "cannot listen for other hosts' events (they arrive within a second anyway): {e}"
            );
        }
    }

    fn hold(&self, subscriber: &str) -> Receipt<bool> {
        let (subscriber, holder, lease) =
            (subscriber.to_string(), self.holder.clone(), self.lease_ms);
        self.pool.submit(move |tx| {
            let now = now_ms();
            let held = tx.execute(
                "UPDATE journal_subscribers SET holder = $2, lease_until = $3
                  WHERE id = $1 AND (holder IS NULL OR holder = $2 OR lease_until < $4)",
                &[&subscriber, &holder, &(now + lease), &now],
            )?;
            Ok(held == 1)
        })
    }

    fn release(&self, subscriber: &str) -> Receipt<()> {
        let (subscriber, holder) = (subscriber.to_string(), self.holder.clone());
        self.pool.submit(move |tx| {
            tx.execute(
                "UPDATE journal_subscribers SET holder = NULL, lease_until = NULL
                  WHERE id = $1 AND holder = $2",
                &[&subscriber, &holder],
            )?;
            Ok(())
        })
    }
}

/// The channel appends notify, with their topics (one per line) as the payload.
const CHANNEL: &str = "cairn_journal";

/// Longest notification payload sent; more topics than fit say `*`.
const MAX_NOTIFY_BYTES: usize = 4000;

/// Pass every topic notified on [`CHANNEL`] to `wake` until `alive` is gone, connecting
/// again (after a pause) whenever the connection breaks.
fn listen(url: &PgUrl, alive: &Weak<()>, wake: &AppendedElsewhere) {
    while alive.strong_count() > 0 {
        let listened = url
            .config()
            .connect(postgres::NoTls)
            .and_then(|mut client| {
                client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
                while alive.strong_count() > 0 {
                    let mut notifications = client.notifications();
                    let mut heard = notifications.timeout_iter(Duration::from_secs(1));
                    while let Some(notification) = heard.next()? {
                        notification.payload().lines().for_each(|topic| wake(topic));
                    }
                }
                Ok(())
            });
        if let Err(e) = listened {
            tracing::debug!("listening for other hosts' events: {}", super::describe(&e));
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// The notification payload for `events`: their distinct topics, one per line, or `*`.
fn topics_of(events: &[&NewEvent]) -> String {
    let topics: std::collections::BTreeSet<&str> =
        events.iter().map(|event| event.topic.as_str()).collect();
    let joined = topics.into_iter().collect::<Vec<_>>().join("\n");
    if joined.len() > MAX_NOTIFY_BYTES {
        "*".into()
    } else {
        joined
    }
}

/// Insert `events` with consecutive sequence numbers in one transaction; their numbers.
fn insert_events(client: &mut Client, events: &[&NewEvent]) -> Result<Vec<i64>, StorageError> {
    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let mut tx = client.transaction()?;
    let last: i64 = tx
        .query_one(
            "UPDATE journal_head SET seq = seq + $1 RETURNING seq",
            &[&count],
        )?
        .get(0);
    let first = last - count + 1;
    let seqs: Vec<i64> = (first..=last).collect();
    let column = |pick: fn(&NewEvent) -> Option<String>| -> Vec<Option<String>> {
        events.iter().map(|event| pick(event)).collect()
    };
    let topics = column(|e| Some(e.topic.clone()));
    let payloads = column(|e| Some(e.payload.clone()));
    let sources = column(|e| Some(e.source.clone()));
    let sessions = column(|e| e.session_id.clone());
    let agents = column(|e| e.agent_id.clone());
    let users = column(|e| e.user_id.clone());
    let depths: Vec<i32> = events.iter().map(|e| to_i32(e.depth)).collect();
    tx.execute(
        "INSERT INTO journal_events
             (seq, topic, payload, source, session_id, agent_id, user_id, created_at, depth)
         SELECT seq, topic, payload, source, session_id, agent_id, user_id, $8, depth
           FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
                       $6::text[], $7::text[], $9::integer[])
             AS e (seq, topic, payload, source, session_id, agent_id, user_id, depth)",
        &[
            &seqs,
            &topics,
            &payloads,
            &sources,
            &sessions,
            &agents,
            &users,
            &now_ms(),
            &depths,
        ],
    )?;
    // Delivered to the listening hosts when (and only if) this commits.
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &topics_of(events)])?;
    tx.commit()?;
    Ok(seqs)
}

fn to_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

/// The columns [`read_event`] reads.
pub(super) const EVENT_COLUMNS: &str =
    "seq, topic, payload, source, session_id, agent_id, user_id, created_at, depth";

/// An event as read with [`EVENT_COLUMNS`].
pub(super) fn read_event(row: &Row) -> Event {
    Event {
        seq: row.get(0),
        topic: row.get(1),
        payload: row.get(2),
        source: row.get(3),
        session_id: row.get(4),
        agent_id: row.get(5),
        user_id: row.get(6),
        created_at: row.get(7),
        depth: u32::try_from(row.get::<_, i32>(8)).unwrap_or(0),
    }
}

/// Events after `after` and up to `through` whose topic matches `patterns` (exact topics,
/// `prefix.*`, or `*`), oldest first.
fn events_between(
    client: &mut impl GenericClient,
    after: i64,
    through: i64,
    patterns: &[String],
    limit: usize,
) -> Result<Vec<Event>, StorageError> {
    let mut values: Vec<Param> = vec![Box::new(after), Box::new(through)];
    let topics = topic_filter(patterns, &mut values);
    values.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM journal_events
          WHERE seq > $1 AND seq <= $2 AND ({topics}) ORDER BY seq LIMIT ${}",
        values.len()
    );
    Ok(client
        .query(&sql, &params(&values))?
        .iter()
        .map(read_event)
        .collect())
}

/// The SQL condition on `topic` that `patterns` (exact topics, `prefix.*`, or `*`) make,
/// its parameters pushed onto `values` (and numbered after those already there).
pub(super) fn topic_filter(patterns: &[String], values: &mut Vec<Param>) -> String {
    if patterns.iter().any(|p| p == "*") {
        return "TRUE".to_string();
    }
    if patterns.is_empty() {
        return "FALSE".to_string();
    }
    let clauses: Vec<String> = patterns
        .iter()
        .map(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => {
                values.push(Box::new(prefix.to_string()));
                format!(
                    "left(topic, {}) = ${}",
                    prefix.chars().count(),
                    values.len()
                )
            }
            None => {
                values.push(Box::new(pattern.clone()));
                format!("topic = ${}", values.len())
            }
        })
        .collect();
    clauses.join(" OR ")
}
