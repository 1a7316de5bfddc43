//! The event journal (`journal.db`): an append-only log of events, a durable cursor per
//! subscriber, and dead letters for events a subscriber could not take.
//!
//! Appends go through the group-commit writer, so an appended event is on disk when its
//! sequence number is returned. Each subscriber is served by its own task (see
//! [`dispatch`]): delivery is at-least-once and in order per subscriber, and one slow or
//! failing subscriber never holds up another. The module owns the tables `events`,
//! `subscribers` and `dead_letters`.

pub mod dispatch;
pub mod plugin_subscriber;

use std::path::Path;
use std::sync::{Arc, Mutex};

pub use cairn_storage::journal::{JournalAdmin, JournalOperator, MIGRATIONS, Pending};
use cairn_storage::journal::{JournalStore, SqliteJournal};
use cairn_storage::{ErrorKind, StorageError, now_ms};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::plugin::manifest::{is_valid_topic, is_valid_topic_pattern};
pub use cairn_vocab::event::{DeadLetter, Event, NewEvent, SubscriberLag};
pub use cairn_vocab::topic::topic_matches;

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
    /// On shared (PostgreSQL) storage: how long a host's hold on a subscriber's deliveries
    /// lasts without its heartbeat, in ms, before another host delivers instead
    /// (default 15000).
    pub subscription_lease_ms: u64,
    /// The longest chain of events plugins may emit while handling one another's events
    /// (default 8): two plugins answering each other's events stop here instead of
    /// filling the journal for ever.
    pub max_chain_depth: u32,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            max_payload_bytes: 256 << 10,
            max_attempts: 5,
            backoff_initial_ms: 100,
            backoff_max_ms: 10_000,
            retention_days: 30,
            subscription_lease_ms: cairn_storage::pg::millis(
                cairn_storage::pg::journal::DEFAULT_SUBSCRIPTION_LEASE,
            ) as u64,
            max_chain_depth: 8,
        }
    }
}

/// Why a journal operation failed; a failed write wrote nothing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalError {
    /// The input was malformed; nothing was written. The text names the field.
    #[error("{0}")]
    InvalidInput(String),
    /// The event would lengthen a chain of plugin emits past `journal.max_chain_depth`;
    /// nothing was written.
    #[error(
        "journal: this event would be the {depth}th of a chain of events plugins emit while handling one another's (journal.max_chain_depth is {limit}); the chain stops here"
    )]
    ChainTooDeep {
        /// Its place in the chain.
        depth: u32,
        /// The limit.
        limit: u32,
    },
    /// The store failed, or is stopping.
    #[error("journal: {0}")]
    Storage(#[from] StorageError),
}

impl JournalError {
    /// Whether the store refused the write for a reason that passes (a full disk, an
    /// unreachable database server): the same write succeeds later (see
    /// [`StorageError::is_passing`]).
    pub fn is_passing(&self) -> bool {
        matches!(self, JournalError::Storage(e) if e.is_passing())
    }

    /// What kind of failure this is, as callers across the plugin boundary see it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            JournalError::InvalidInput(_) => ErrorKind::InvalidInput,
            JournalError::ChainTooDeep { .. } => ErrorKind::Denied,
            JournalError::Storage(e) => e.kind(),
        }
    }
}

/// The journal of a data dir: checks at the edge and a wake-up for subscribers, over a
/// [`JournalStore`].
pub struct Journal {
    config: JournalConfig,
    store: Box<dyn JournalStore>,
    watchers: Arc<Mutex<Vec<Watcher>>>,
}

/// Wake the watchers whose patterns match `topic` (every watcher for `*`, a topic another
/// host could not name).
fn wake(watchers: &Mutex<Vec<Watcher>>, topic: &str) {
    let mut watchers = watchers.lock().unwrap_or_else(|p| p.into_inner());
    // A watcher whose subscriber has ended holds the only reference left.
    watchers.retain(|watcher| Arc::strong_count(&watcher.wake) > 1);
    for watcher in watchers.iter() {
        if topic == "*" || watcher.patterns.iter().any(|p| topic_matches(p, topic)) {
            watcher.wake.notify_one();
        }
    }
}

/// Who waits for events on which topics ([`Journal::watch`]).
struct Watcher {
    patterns: Vec<String>,
    wake: Arc<Notify>,
}

impl Journal {
    /// Open `<data>/journal.db` and start its writer.
    pub fn open(data_dir: &Path, config: JournalConfig) -> Result<Self, JournalError> {
        Ok(Self::over(Box::new(SqliteJournal::open(data_dir)?), config))
    }

    /// The journal service over any store.
    pub fn over(store: Box<dyn JournalStore>, config: JournalConfig) -> Self {
        let watchers: Arc<Mutex<Vec<Watcher>>> = Arc::default();
        let woken = Arc::clone(&watchers);
        store.on_appended_elsewhere(Arc::new(move |topic: &str| wake(&woken, topic)));
        Self {
            config,
            store,
            watchers,
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &JournalConfig {
        &self.config
    }

    fn validate(&self, event: &NewEvent) -> Result<(), JournalError> {
        if event.depth > self.config.max_chain_depth {
            return Err(JournalError::ChainTooDeep {
                depth: event.depth,
                limit: self.config.max_chain_depth,
            });
        }
        if !is_valid_topic(&event.topic) {
            return Err(JournalError::InvalidInput(format!(
                "topic: `{}` is not a topic; expected dot-separated segments of a-z 0-9 _ -",
                event.topic
            )));
        }
        if event.payload.len() > self.config.max_payload_bytes {
            return Err(JournalError::InvalidInput(format!(
                "payload: {} bytes is over journal.max_payload_bytes ({} bytes)",
                event.payload.len(),
                self.config.max_payload_bytes
            )));
        }
        // Parsed as subscribers parse it: `IgnoredAny` would accept any depth.
        serde_json::from_str::<serde_json::Value>(&event.payload)
            .map_err(|e| JournalError::InvalidInput(format!("payload: expected JSON: {e}")))?;
        Ok(())
    }

    /// Append an event; returns its sequence number once it is on disk.
    pub async fn append(&self, event: NewEvent) -> Result<i64, JournalError> {
        self.validate(&event)?;
        let topic = event.topic.clone();
        let seq = self.store.append(event).await?;
        self.wake_watchers(&topic);
        Ok(seq)
    }

    /// [`Journal::append`] for threads outside the async runtime (plugin calls).
    pub fn append_blocking(&self, event: NewEvent) -> Result<i64, JournalError> {
        self.validate(&event)?;
        let topic = event.topic.clone();
        let seq = self.store.append(event).wait()?;
        self.wake_watchers(&topic);
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
        self.emit_one(host_event(topic, payload, session_id, user_id))
            .await;
    }

    /// Append host events in order, all handed to the writer at once so that it commits
    /// them together (a batch's hundred `message.received` take one commit, not a hundred
    /// one after the other). An event the journal refuses is appended again alone, waiting
    /// for space when the disk is full, or logged; only then can it land after a later one.
    pub async fn emit_all(&self, events: Vec<NewEvent>) {
        let mut submitted = Vec::with_capacity(events.len());
        for event in events {
            match self.validate(&event) {
                Ok(()) => submitted.push((self.store.append(event.clone()), event)),
                Err(e) => tracing::error!(topic = %event.topic, "cannot journal a host event: {e}"),
            }
        }
        for (receipt, event) in submitted {
            match receipt.await {
                Ok(_) => self.wake_watchers(&event.topic),
                Err(_) => self.emit_one(event).await,
            }
        }
    }

    /// [`Journal::emit`] of a built event: waits while the disk is full or the database
    /// server is away, so a host event (a schedule tick, an answer, a turn's record) is not
    /// lost to an outage.
    async fn emit_one(&self, event: NewEvent) {
        let appended =
            crate::retry::while_passing("journal a host event", JournalError::is_passing, || {
                self.append(event.clone())
            })
            .await;
        if let Err(e) = appended {
            tracing::error!(topic = %event.topic, "cannot journal a host event: {e}");
        }
    }

    /// A wake-up signalled each time this process appends an event on a topic `patterns`
    /// match (a wake-up that finds nobody waiting is kept for the next wait, so none is
    /// lost). Only matching appends wake it: a subscriber to rare topics is not woken, and
    /// does not read the journal, for every event. On a journal several hosts share, the
    /// other hosts' appends wake it too, as soon as the store hears of them (a hint: the
    /// subscriber looks every second anyway).
    pub fn watch(&self, patterns: &[String]) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        self.watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Watcher {
                patterns: patterns.to_vec(),
                wake: wake.clone(),
            });
        wake
    }

    fn wake_watchers(&self, topic: &str) {
        wake(&self.watchers, topic);
    }

    /// Register a subscriber (or update its patterns) and return its cursor. A new
    /// subscriber starts at the current end of the journal; a known one resumes.
    pub async fn subscribe(&self, id: &str, patterns: &[String]) -> Result<i64, JournalError> {
        if let Some(bad) = patterns.iter().find(|p| !is_valid_topic_pattern(p)) {
            return Err(JournalError::InvalidInput(format!(
                "`{bad}` is not a topic pattern"
            )));
        }
        Ok(self.store.subscribe(id, patterns).await?)
    }

    /// The cursor of a subscriber as stored (an operator may have rewound it).
    pub fn cursor(&self, subscriber: &str) -> Result<Option<i64>, JournalError> {
        Ok(self.store.cursor(subscriber)?)
    }

    /// The first event of `topic` since `since_ms` whose payload's `field` is `value` (a
    /// scan of that topic: for rare lookups, see [`JournalStore::find_event`]).
    pub fn find_event(
        &self,
        topic: &str,
        since_ms: i64,
        field: &str,
        value: i64,
    ) -> Result<Option<Event>, JournalError> {
        Ok(self.store.find_event(topic, since_ms, field, value)?)
    }

    /// Dead-lettered events an operator asked to retry for `subscriber`, oldest first.
    pub fn retries(&self, subscriber: &str) -> Result<Vec<Event>, JournalError> {
        Ok(self.store.retries(subscriber)?)
    }

    /// Settle a retried dead letter: delete it when delivered, or put it back with the error.
    pub async fn settle_retry(
        &self,
        subscriber: &str,
        seq: i64,
        failure: Option<(String, u32)>,
    ) -> Result<(), JournalError> {
        Ok(self.store.settle_retry(subscriber, seq, failure).await?)
    }

    /// The highest seq among `subscriber`'s dead letters, if it has any (see
    /// [`Journal::clear_dead_letters`]).
    pub fn last_dead_letter(&self, subscriber: &str) -> Result<Option<i64>, JournalError> {
        Ok(self.store.last_dead_letter(subscriber)?)
    }

    /// `subscriber` took the events `seqs` after all (a replay delivered them again): delete
    /// their dead letters, so an operator is not shown a failure that no longer holds.
    pub async fn clear_dead_letters(
        &self,
        subscriber: &str,
        seqs: Vec<i64>,
    ) -> Result<usize, JournalError> {
        Ok(self.store.clear_dead_letters(subscriber, seqs).await?)
    }

    /// Delete events older than `retention_days` that every subscriber has consumed and no
    /// dead letter refers to; returns how many.
    pub async fn prune(&self) -> Result<usize, JournalError> {
        let before = now_ms() - i64::from(self.config.retention_days) * 86_400_000;
        Ok(self.store.prune(before).await?)
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

    /// A subscriber's next events after `after` (its cursor, or where its last search
    /// ended), and how far the journal was searched.
    pub fn pending(
        &self,
        after: i64,
        patterns: &[String],
        limit: usize,
    ) -> Result<Pending, JournalError> {
        Ok(self.store.pending(after, patterns, limit)?)
    }

    /// Whether this host may deliver to `subscriber` now (see [`JournalStore::hold`]): always
    /// on a data dir's journal; on a shared one, while this host holds its lease.
    pub async fn hold(&self, subscriber: &str) -> Result<bool, JournalError> {
        Ok(self.store.hold(subscriber).await?)
    }

    /// Give up this host's hold on `subscriber` as it stops delivering to it (see
    /// [`JournalStore::release`]), so another host takes it over without waiting out the
    /// lease.
    pub async fn release(&self, subscriber: &str) -> Result<(), JournalError> {
        Ok(self.store.release(subscriber).await?)
    }

    /// The cursor an operator moved `subscriber`'s to (`cairn journal replay`) since the last
    /// call, if they did; this host's own moves of it are refused until it asked.
    pub async fn take_rewind(&self, subscriber: &str) -> Result<Option<i64>, JournalError> {
        Ok(self.store.take_rewind(subscriber).await?)
    }

    /// Move a subscriber's cursor past `seq` (never backwards; not at all while an
    /// operator's move waits for [`Journal::take_rewind`]).
    pub async fn advance(&self, subscriber: &str, seq: i64) -> Result<(), JournalError> {
        Ok(self.store.advance(subscriber, seq).await?)
    }

    /// Record that a subscriber gave up on an event, and move its cursor past it, atomically.
    pub async fn dead_letter(
        &self,
        subscriber: &str,
        event: &Event,
        error: &str,
        attempts: u32,
    ) -> Result<(), JournalError> {
        Ok(self
            .store
            .dead_letter(subscriber, event, error, attempts)
            .await?)
    }
}

/// An event the host itself appends (source `host`, no agent, the start of a chain).
pub fn host_event(
    topic: &str,
    payload: serde_json::Value,
    session_id: Option<String>,
    user_id: Option<String>,
) -> NewEvent {
    NewEvent {
        topic: topic.into(),
        payload: payload.to_string(),
        source: "host".into(),
        session_id,
        user_id,
        agent_id: None,
        depth: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::{Place, on_each_backend};
    use cairn_storage::journal::Unsubscribed;
    use cairn_storage::pg::journal::{DEFAULT_SUBSCRIPTION_LEASE, PgJournal};

    on_each_backend!(async a_search_reports_how_far_it_read_so_the_next_starts_there, async host_events_emitted_together_land_in_order_and_wake_watchers, async a_watcher_is_woken_only_by_the_topics_it_watches, async retention_prunes_only_events_every_subscriber_consumed, async a_forgotten_subscriber_no_longer_holds_events_back_unless_a_host_holds_it, async a_replay_holds_off_the_hosts_cursor_moves_until_it_takes_notice);

    /// A journal on `place`, as a host opens it.
    fn journal_on(place: &Place, config: JournalConfig) -> Journal {
        match place {
            Place::Sqlite(dir) => Journal::open(dir.path(), config).expect("open"),
            Place::Postgres(url) => {
                let store = PgJournal::connect(url, DEFAULT_SUBSCRIPTION_LEASE).expect("connect");
                Journal::over(Box::new(store), config)
            }
        }
    }

    /// An operator's connection to the journal on `place`, as `cairn journal` opens it.
    fn operator_on(place: &Place) -> Box<dyn JournalOperator> {
        let (storage, data_dir) = match place {
            Place::Sqlite(dir) => (crate::config::Storage::Sqlite, dir.path()),
            Place::Postgres(url) => (
                crate::config::Storage::Postgres(url.clone()),
                std::path::Path::new(""),
            ),
        };
        storage
            .journal_operator_for(data_dir, true)
            .expect("open")
            .expect("a writable journal")
    }

    async fn a_replay_holds_off_the_hosts_cursor_moves_until_it_takes_notice(place: Place) {
        let journal = journal_on(&place, JournalConfig::default());
        let all = ["*".to_string()];
        journal.subscribe("sub", &all).await.expect("subscribe");
        let mut seqs = Vec::new();
        for _ in 0..5 {
            seqs.push(journal.append(event("work.item")).await.expect("append"));
        }
        journal.advance("sub", seqs[3]).await.expect("advance");
        assert_eq!(journal.take_rewind("sub").await.expect("look"), None);
        assert!(
            operator_on(&place)
                .replay_from("sub", seqs[1])
                .expect("replay")
        );
        // A move decided before the host knew of the replay changes nothing...
        journal.advance("sub", seqs[4]).await.expect("advance");
        journal
            .dead_letter(
                "sub",
                &journal.pending(seqs[3], &all, 1).expect("read").events[0],
                "boom",
                1,
            )
            .await
            .expect("dead letter");
        assert_eq!(journal.cursor("sub").expect("cursor"), Some(seqs[0]));
        // ...until it has taken notice, once.
        assert_eq!(
            journal.take_rewind("sub").await.expect("look"),
            Some(seqs[0])
        );
        assert_eq!(journal.take_rewind("sub").await.expect("look"), None);
        journal.advance("sub", seqs[2]).await.expect("advance");
        assert_eq!(journal.cursor("sub").expect("cursor"), Some(seqs[2]));
        // The replay delivers the dead-lettered event again: its dead letter goes.
        assert_eq!(
            journal.last_dead_letter("sub").expect("read"),
            Some(seqs[4])
        );
        let cleared = journal.clear_dead_letters("sub", vec![seqs[3], seqs[4]]);
        assert_eq!(cleared.await.expect("clear"), 1);
        assert_eq!(journal.last_dead_letter("sub").expect("read"), None);
        assert!(
            operator_on(&place)
                .dead_letters(10)
                .expect("list")
                .is_empty()
        );
    }

    fn head(admin: &JournalAdmin) -> Option<i64> {
        let newest = admin.recent(&["*".to_string()], 1).expect("recent");
        newest.last().map(|event| event.seq)
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
        let pending = journal
            .pending(cursor, &patterns, 10)
            .expect("pending")
            .events;
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
        let admin = JournalAdmin::open_read_only(dir.path())
            .expect("open")
            .expect("exists");
        let lags = admin.subscriber_lags().expect("lags");
        assert_eq!(lags[0].cursor, pending[2].seq);
        assert_eq!(lags[0].lag, 0);
        assert_eq!(lags[0].dead_letters, 1);
        assert_eq!(admin.dead_letters(10).expect("dead")[0].error, "boom");
        assert_eq!(
            journal.subscribe("sub", &patterns).await.expect("resume"),
            pending[2].seq
        );
    }

    async fn host_events_emitted_together_land_in_order_and_wake_watchers(place: Place) {
        let journal = journal_on(&place, JournalConfig::default());
        let patterns = vec!["message.*".to_string()];
        let woken = journal.watch(&patterns);
        let events = (0..50)
            .map(|i| {
                host_event(
                    "message.received",
                    serde_json::json!({ "n": i }),
                    None,
                    None,
                )
            })
            .chain([host_event("bad topic", serde_json::json!({}), None, None)])
            .collect();
        journal.emit_all(events).await;
        let found = journal.pending(0, &patterns, 100).expect("read");
        let numbers: Vec<String> = found.events.iter().map(|e| e.payload.clone()).collect();
        let expected: Vec<String> = (0..50).map(|i| format!("{{\"n\":{i}}}")).collect();
        assert_eq!(
            numbers, expected,
            "every valid event once, in the order given"
        );
        assert!(found.events.iter().all(|e| e.source == "host"));
        tokio::time::timeout(std::time::Duration::from_secs(5), woken.notified())
            .await
            .expect("the watcher was woken");
    }

    async fn a_search_reports_how_far_it_read_so_the_next_starts_there(place: Place) {
        let journal = journal_on(&place, JournalConfig::default());
        let rare = vec!["rare.topic".to_string()];
        let mut seqs = Vec::new();
        for topic in ["common.a", "rare.topic", "common.b", "common.c"] {
            seqs.push(journal.append(event(topic)).await.expect("append"));
        }
        let all = journal.pending(0, &rare, 10).expect("read");
        assert_eq!(all.events.len(), 1);
        assert_eq!(all.searched_to, seqs[3], "searched to the journal's end");
        let capped = journal.pending(0, &rare, 1).expect("read");
        assert_eq!(
            capped.searched_to, seqs[1],
            "a full page was searched only up to its last event"
        );
        let none = journal.pending(seqs[3], &rare, 10).expect("read");
        assert!(none.events.is_empty());
        assert_eq!(none.searched_to, seqs[3], "never behind where it started");
        journal.append(event("rare.topic")).await.expect("append");
        let next = journal.pending(none.searched_to, &rare, 10).expect("read");
        assert_eq!(next.events.len(), 1, "a later event is found from the mark");
    }

    async fn a_watcher_is_woken_only_by_the_topics_it_watches(place: Place) {
        let journal = journal_on(&place, JournalConfig::default());
        let wake = journal.watch(&["a.*".to_string()]);
        let woken = || tokio::time::timeout(std::time::Duration::from_millis(200), wake.notified());
        journal.append(event("b.other")).await.expect("append");
        assert!(woken().await.is_err(), "another topic does not wake it");
        journal.append(event("a.one")).await.expect("append");
        assert!(
            woken().await.is_ok(),
            "a matching append wakes it, even one made before it waited"
        );
    }

    async fn retention_prunes_only_events_every_subscriber_consumed(place: Place) {
        let config = JournalConfig {
            retention_days: 0,
            ..JournalConfig::default()
        };
        let journal = journal_on(&place, config);
        let all = vec!["*".to_string()];
        journal.subscribe("fast", &all).await.expect("subscribe");
        journal.subscribe("slow", &all).await.expect("subscribe");
        let mut seqs = Vec::new();
        for topic in ["a.one", "a.two", "a.three", "a.four"] {
            seqs.push(journal.append(event(topic)).await.expect("append"));
        }
        journal.advance("fast", seqs[3]).await.expect("advance");
        journal.advance("slow", seqs[2]).await.expect("advance");
        let events = journal.pending(0, &all, 10).expect("read").events;
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
            .events
            .into_iter()
            .map(|e| e.topic)
            .collect();
        assert_eq!(
            left,
            ["a.one", "a.four"],
            "dead-lettered and still-pending events stay"
        );
    }

    async fn a_forgotten_subscriber_no_longer_holds_events_back_unless_a_host_holds_it(
        place: Place,
    ) {
        let config = JournalConfig {
            retention_days: 0,
            ..JournalConfig::default()
        };
        let journal = journal_on(&place, config);
        let all = vec!["*".to_string()];
        journal.subscribe("served", &all).await.expect("subscribe");
        journal.subscribe("removed", &all).await.expect("subscribe");
        let mut last = 0;
        for topic in ["a.one", "a.two"] {
            last = journal.append(event(topic)).await.expect("append");
        }
        journal.advance("served", last).await.expect("advance");
        let events = journal.pending(0, &all, 10).expect("read").events;
        journal
            .dead_letter("removed", &events[0], "boom", 1)
            .await
            .expect("dead letter");
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            journal.prune().await.expect("prune"),
            0,
            "kept for `removed`"
        );

        let operator = operator_on(&place);
        if matches!(place, Place::Postgres(_)) {
            assert!(journal.hold("removed").await.expect("hold"));
            assert_eq!(
                operator.unsubscribe("removed").expect("unsubscribe"),
                Unsubscribed::Held,
                "a host delivers to it"
            );
            journal.release("removed").await.expect("release");
        }
        assert_eq!(
            operator.unsubscribe("removed").expect("unsubscribe"),
            Unsubscribed::Forgotten { dead_letters: 1 }
        );
        assert_eq!(
            operator.unsubscribe("removed").expect("unsubscribe"),
            Unsubscribed::Unknown
        );
        assert_eq!(journal.prune().await.expect("prune"), 2, "all taken now");
        let left: Vec<String> = operator
            .subscriber_lags()
            .expect("lags")
            .into_iter()
            .map(|lag| lag.id)
            .collect();
        assert_eq!(left, ["served"]);
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
                "over journal.max_payload_bytes (8 bytes)",
            ),
        ] {
            match journal.append(bad).await {
                Err(JournalError::InvalidInput(text)) => assert!(text.contains(expected), "{text}"),
                other => panic!("expected invalid input, got {other:?}"),
            }
        }
        let admin = JournalAdmin::open_read_only(dir.path())
            .expect("open")
            .expect("exists");
        assert_eq!(head(&admin), None);
    }
}
