//! Lifecycle: the session monitor, the sleep trigger and the scheduler.
//!
//! - **Sessions**: a journal subscriber like any other (same cursor, retries and dead
//!   letters, served by `journal::dispatch`) follows `message.received` and
//!   `agent.response`, keeping each session's transcript. A session idle for
//!   `session_timeout_secs` ends (`session.ended` with its transcript and the reason); when a
//!   user starts a new session, their earlier ones become pending
//!   (`memory.session_completed` for each).
//! - **Sleep**: with no active session for `sleep_timeout_secs`, `sleep.started` is emitted
//!   once until new activity; a `message.received` while asleep sets the interrupt flag that
//!   plugins read through `lifecycle.interrupted()`, and ends the sleep (`sleep.interrupted`).
//! - **Scheduler**: manifest `schedule` entries (five-field cron, UTC) emit
//!   `schedule.<plugin>.<name>`; a tick missed while the host was down fires once at start
//!   unless `missed_schedules: skip`. A tick is claimed in the store before it fires
//!   ([`LifecycleStore::claim_fired`]), so hosts sharing a database fire each tick once.
//!
//! The lifecycle owns the session state machine — `active` → `ended` (idle) or `pending`
//! (the user moved on) → `consolidated` — and gives the agent each turn's session
//! ([`Lifecycle::session_for`]), so one idle clock decides both when a conversation starts a
//! new session and when a session ends. Sessions are kept by a [`SessionStore`] (memory.db's
//! `sessions`, where consolidators read them); sleep and schedule state by a
//! [`LifecycleStore`] (host.db).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use crate::buffer::{Buffer, BufferError};
use crate::journal::dispatch::{Absence, Subscriber, Undelivered};
use crate::journal::{Event, Journal, JournalError};
pub use crate::plugin::ports::{Interrupt, StopRequest};
use crate::store::StorageError;
use crate::store::host::LifecycleStore;
use crate::store::memory::{Activity, KeepOpen, SessionChoice, SessionStore};
use crate::store::now_ms;
use cairn_vocab::plugin::Schedule;
use timetable::Timetable;

mod timetable;
use cairn_vocab::session::SleepState;

/// Why the lifecycle could not read or record its state.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// Its sessions, sleep state or schedule could not be read or written.
    #[error("lifecycle state: {0}")]
    State(#[from] StorageError),
    /// The buffer could not say which conversations await an answer.
    #[error("lifecycle: {0}")]
    Buffer(#[from] BufferError),
    /// The journal could not say what the session monitor has yet to read.
    #[error("lifecycle: {0}")]
    Journal(#[from] JournalError),
}

impl LifecycleError {
    /// Whether a store refused for a reason that passes (see [`StorageError::is_passing`]).
    pub fn is_passing(&self) -> bool {
        match self {
            LifecycleError::State(e) => e.is_passing(),
            LifecycleError::Buffer(e) => e.is_passing(),
            LifecycleError::Journal(e) => e.is_passing(),
        }
    }
}

/// Lifecycle settings (`lifecycle:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LifecycleConfig {
    /// A session idle this long ends (default 1800).
    pub session_timeout_secs: u64,
    /// With no active session for this long the agent sleeps (default 7200).
    pub sleep_timeout_secs: u64,
    /// How often timeouts are checked, in ms (default 1000).
    pub check_interval_ms: u64,
    /// What to do with schedule ticks missed while the host was down: `fire-once` or `skip`.
    pub missed_schedules: MissedSchedules,
    /// Transcript entries kept per session (default 500).
    pub max_transcript_entries: usize,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            session_timeout_secs: 1800,
            sleep_timeout_secs: 7200,
            check_interval_ms: 1000,
            missed_schedules: MissedSchedules::FireOnce,
            max_transcript_entries: 500,
        }
    }
}

/// Policy for schedule ticks missed while the host was down.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MissedSchedules {
    /// Fire once at start for any number of missed ticks.
    FireOnce,
    /// Drop missed ticks.
    Skip,
}

/// The lifecycle of a host.
pub struct Lifecycle {
    config: LifecycleConfig,
    sessions: Arc<dyn SessionStore>,
    store: Arc<dyn LifecycleStore>,
    buffer: Arc<Buffer>,
    journal: Arc<Journal>,
    interrupt: Arc<Interrupt>,
}

/// The conversation key sessions are kept under: `<channel>:<conversation>`.
pub fn conversation_key(channel: &str, conversation: &str) -> String {
    format!("{channel}:{conversation}")
}

/// The journal subscriber id of the session monitor.
const SUBSCRIBER: &str = "host.lifecycle";

/// How many of the session monitor's unread events the timeout check looks through for the
/// sessions they name; more unread than that, and it ends no session until it caught up.
const UNREAD_LOOK: usize = 1000;

/// How far past now a schedule's last recorded tick may lie before it is taken for the mark
/// of a clock that was ahead (another host's clock may be a little ahead of this one's).
const CLOCK_AHEAD_SLACK: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

impl Lifecycle {
    /// The lifecycle over `sessions` and `store`, announcing what happens on `journal`;
    /// `buffer` says which conversations still await an answer (their sessions stay open).
    pub fn new(
        config: LifecycleConfig,
        sessions: Arc<dyn SessionStore>,
        store: Arc<dyn LifecycleStore>,
        buffer: Arc<Buffer>,
        journal: Arc<Journal>,
    ) -> Self {
        let lifecycle = Self {
            config,
            sessions,
            store,
            buffer,
            journal,
            interrupt: Arc::new(Interrupt::default()),
        };
        let interrupted = lifecycle.sleep_state().is_ok_and(|s| s.interrupted);
        lifecycle.interrupt.set(interrupted);
        lifecycle
    }

    /// The session of a turn in `conversation` (`<channel>:<conversation>`) whose first
    /// message arrived at `arrived` (ms): the conversation's current session if it was
    /// active and not idle for the session timeout when the message arrived — a message
    /// that waited behind other turns still joins the session it was said in, which the
    /// check keeps open meanwhile — else a new one (`<conversation>`, then `#2`, `#3`, …),
    /// whose row the choice's receipt records. When sessions cannot be read the turn still
    /// goes on, in a session named after the conversation.
    pub fn session_for(
        &self,
        conversation: &str,
        user: Option<&str>,
        agent: Option<&str>,
        arrived: i64,
    ) -> SessionChoice {
        let idle_ms = (self.config.session_timeout_secs as i64).saturating_mul(1000);
        self.sessions
            .session_for(conversation, user, agent, arrived, idle_ms)
            .unwrap_or_else(|e| {
                tracing::warn!(conversation, "cannot read the session: {e}");
                SessionChoice::unrecorded(conversation)
            })
    }

    /// The interrupt flag, for the `lifecycle` host interface.
    pub fn interrupt(&self) -> Arc<Interrupt> {
        self.interrupt.clone()
    }

    fn sleep_state(&self) -> Result<SleepState, LifecycleError> {
        Ok(self.store.sleep_state()?)
    }

    async fn set_sleep_state(&self, state: SleepState) -> Result<(), LifecycleError> {
        Ok(self.store.set_sleep_state(state).await?)
    }

    /// The topics the session monitor follows (through the journal's dispatcher, like any
    /// subscriber: see the [`Subscriber`] impl below).
    pub fn subscriptions() -> Vec<String> {
        vec!["message.received".to_string(), "agent.response".to_string()]
    }

    /// Check session and sleep timeouts every `check_interval_ms` until `stop`.
    pub async fn run(self: Arc<Self>, stop: watch::Receiver<bool>) {
        let interval = Duration::from_millis(self.config.check_interval_ms.max(10));
        crate::periodic::every(interval, stop, || async {
            if let Err(e) = self.check_timeouts().await {
                tracing::error!("lifecycle check failed: {e}");
            }
        })
        .await
    }

    /// Apply one journal event to the sessions (idempotent: replays are skipped).
    async fn observe(&self, event: &Event) -> Result<(), LifecycleError> {
        let Some(session) = event.session_id.clone() else {
            return Ok(());
        };
        let activity = self
            .sessions
            .record_activity(
                &session,
                event.user_id.as_deref(),
                event.seq,
                event.created_at,
                transcript_entry(event),
                self.config.max_transcript_entries,
            )
            .await?;
        let completed = match activity {
            Activity::Replay => return Ok(()),
            Activity::Continued => Vec::new(),
            Activity::Started { completed } => completed,
        };
        let woke = self.wake_on_activity(event).await?;
        for id in completed {
            self.journal
                .emit(
                    "memory.session_completed",
                    json!({"session_id": id, "user_id": event.user_id}),
                    Some(id.clone()),
                    event.user_id.clone(),
                )
                .await;
        }
        if woke {
            self.journal
                .emit(
                    "sleep.interrupted",
                    json!({"reason": "interrupted", "by_session": session}),
                    None,
                    None,
                )
                .await;
        }
        Ok(())
    }

    /// Note a message or an answer on the sleep clock; when the agent sleeps, wake it and
    /// raise the interrupt flag. Whether it woke. An answer counts as a message does: the
    /// agent sleeps only once it has been quiet for the sleep timeout after its last answer
    /// too (an answer long after its question, as after an outage, is not followed by sleep
    /// at once), and one made while it slept (a failed turn retried) wakes it.
    async fn wake_on_activity(&self, event: &Event) -> Result<bool, LifecycleError> {
        let mut state = self.sleep_state()?;
        let woke = state.asleep;
        state.last_activity = Some(event.created_at);
        if woke {
            state.asleep = false;
            state.interrupted = true;
        }
        self.set_sleep_state(state).await?;
        if woke {
            self.interrupt.set(true);
        }
        Ok(woke)
    }

    /// The sessions to leave open however idle they look: those of conversations with a
    /// message not answered yet, and those the session monitor has unread activity for
    /// (`None` when it is so far behind that it may have any: end none until it catches up).
    fn keep_open(&self) -> Result<Option<KeepOpen>, LifecycleError> {
        let conversations = self
            .buffer
            .awaiting_answer()?
            .iter()
            .map(|(channel, conversation)| conversation_key(channel, conversation))
            .collect();
        let cursor = self.journal.cursor(SUBSCRIBER)?.unwrap_or(0);
        let unread = self
            .journal
            .pending(cursor, &Self::subscriptions(), UNREAD_LOOK)?;
        if unread.events.len() >= UNREAD_LOOK {
            return Ok(None);
        }
        let sessions = unread
            .events
            .into_iter()
            .filter_map(|e| e.session_id)
            .collect();
        Ok(Some(KeepOpen {
            conversations,
            sessions,
        }))
    }

    /// End idle sessions and start sleeping when nothing is active. A session whose
    /// conversation has a message still to answer (its provider is down, its host stopped or
    /// died before answering, or it waits behind other turns) stays open however long that
    /// takes, and so does one
    /// whose activity the session monitor has yet to read (an answer journaled as its host
    /// stopped, read by the next): the answer joins its question, and the session is
    /// summarised with both.
    async fn check_timeouts(&self) -> Result<(), LifecycleError> {
        let now = now_ms();
        let idle_before = now - (self.config.session_timeout_secs as i64) * 1000;
        let ended = match self.keep_open()? {
            Some(keep) => self.sessions.end_idle(idle_before, now, keep).await?,
            None => Vec::new(),
        };
        for ended in ended {
            let payload = json!({
                "session_id": ended.id, "user_id": ended.user_id, "reason": "idle",
                "started_at": ended.started_at, "ended_at": now, "transcript": ended.transcript,
            });
            self.journal
                .emit("session.ended", payload, Some(ended.id), ended.user_id)
                .await;
        }
        let active = self.sessions.active_sessions()?;
        let mut state = self.sleep_state()?;
        let Some(last_activity) = state.last_activity else {
            // First run on this data dir: idleness counts from now.
            state.last_activity = Some(now);
            return self.set_sleep_state(state).await;
        };
        if active == 0
            && !state.asleep
            && now - last_activity >= (self.config.sleep_timeout_secs as i64) * 1000
        {
            state.asleep = true;
            state.interrupted = false;
            self.set_sleep_state(state).await?;
            self.interrupt.set(false);
            self.journal
                .emit(
                    "sleep.started",
                    json!({"idle_since": last_activity}),
                    None,
                    None,
                )
                .await;
        }
        Ok(())
    }

    /// Emit the plugins' cron schedules until `stop`: first the ticks missed while the host
    /// was down, then every tick as it comes due, all of those due at one moment together.
    pub async fn run_scheduler(
        self: Arc<Self>,
        schedules: Vec<Schedule>,
        mut stop: watch::Receiver<bool>,
    ) {
        let now = Utc::now();
        // Every schedule's ticks go on from now: one that fired since (another host of a
        // shared database) is refused by its claim, and one recorded as fired later than
        // now was recorded by a clock that was ahead (see `catch_up`).
        let mut timetable = Timetable::new(schedules, |_| now);
        for entry in timetable.entries() {
            self.catch_up(entry, now).await;
        }
        while let Some(next) = timetable.next_tick() {
            let wait = (next - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {
                    for due in timetable.take_due(Utc::now()) {
                        let Schedule { plugin, name, cron } = due.schedule;
                        if self.claim(plugin, name, due.at).await {
                            self.fire(plugin, name, cron, due.at, None).await;
                        }
                    }
                }
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
            }
        }
    }

    /// At start: fire once a tick of `entry` missed while the host was down (unless
    /// `missed_schedules: skip`), and record the schedule as seen now.
    async fn catch_up(&self, entry: &timetable::Entry, now: DateTime<Utc>) {
        let Schedule { plugin, name, cron } = &entry.schedule;
        match self.last_fired(plugin, name) {
            Ok(Some(last)) if last > now + CLOCK_AHEAD_SLACK => {
                // Until 2026-12-02 such a schedule stayed silent until the clock caught up,
                // a day of nightly work skipped for a clock a day ahead (found by an
                // operator's test).
                tracing::warn!(
                    plugin,
                    schedule = name,
                    "last fired at {last}, later than now ({now}): the clock was ahead, or went back; its ticks go on from now"
                );
                self.record_fired(plugin, name, now).await;
            }
            Ok(Some(last)) => {
                let Some(missed) = entry.missed(last, now) else {
                    return;
                };
                if self.config.missed_schedules == MissedSchedules::FireOnce
                    && self.claim(plugin, name, missed.last).await
                {
                    self.fire(plugin, name, cron, missed.last, Some(&missed))
                        .await;
                }
                self.record_fired(plugin, name, now).await;
            }
            Ok(None) => self.record_fired(plugin, name, now).await,
            Err(e) => tracing::error!(plugin, schedule = name, "cannot read schedule state: {e}"),
        }
    }

    async fn fire(
        &self,
        plugin: &str,
        name: &str,
        expression: &str,
        at: DateTime<Utc>,
        missed: Option<&timetable::Missed>,
    ) {
        let topic = format!("schedule.{plugin}.{name}");
        let mut payload = json!({
            "plugin": plugin, "name": name, "cron": expression,
            "scheduled_for": at.timestamp_millis(), "missed": missed.is_some(),
        });
        if let Some(missed) = missed {
            payload["missed_ticks"] = missed.count.into();
            payload["first_missed_at"] = missed.first.timestamp_millis().into();
        }
        self.journal.emit(&topic, payload, None, None).await;
    }

    /// Claim tick `at` of schedule `name` of `plugin`; whether this host fires it. Claiming
    /// before firing makes each tick fire at most once across hosts sharing a database (the
    /// others find it claimed); a host killed between the claim and the journal append loses
    /// that one tick. False when the claim failed too (logged): a tick is never fired
    /// unclaimed.
    async fn claim(&self, plugin: &str, name: &str, at: DateTime<Utc>) -> bool {
        let result = self
            .store
            .claim_fired(plugin, name, at.timestamp_millis())
            .await;
        result.unwrap_or_else(|e| {
            tracing::error!(plugin, schedule = name, "cannot claim a schedule tick: {e}");
            false
        })
    }

    fn last_fired(&self, plugin: &str, name: &str) -> Result<Option<DateTime<Utc>>, StorageError> {
        let millis = self.store.last_fired(plugin, name)?;
        Ok(millis.and_then(|ms| Utc.timestamp_millis_opt(ms).single()))
    }

    async fn record_fired(&self, plugin: &str, name: &str, at: DateTime<Utc>) {
        let result = self
            .store
            .record_fired(plugin, name, at.timestamp_millis())
            .await;
        if let Err(e) = result {
            tracing::error!(
                plugin,
                schedule = name,
                "cannot record a schedule tick: {e}"
            );
        }
    }
}

/// A transcript line for a `message.received` or `agent.response` event.
fn transcript_entry(event: &Event) -> serde_json::Value {
    let payload: serde_json::Value = serde_json::from_str(&event.payload).unwrap_or_default();
    match event.topic.as_str() {
        "message.received" => {
            json!({"role": "user", "sender": payload["sender"], "text": payload["text"], "at": event.created_at})
        }
        _ => json!({"role": "assistant", "text": payload["reply"]["text"], "at": event.created_at}),
    }
}

impl Subscriber for Lifecycle {
    fn id(&self) -> &str {
        SUBSCRIBER
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        self.observe(event).await.map_err(|e| {
            let mut undelivered = Undelivered::from(format!("session monitor: {e}"));
            // Its stores away for a moment (a full disk, a database outage): wait for them
            // without spending attempts, so an outage never dead-letters a session's events.
            if e.is_passing() {
                undelivered.absent = Some(Absence::Returning);
            }
            undelivered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::BufferConfig;
    use crate::config::Storage;
    use crate::journal::JournalConfig;
    use cairn_vocab::event::NewEvent;
    use cairn_vocab::session::SessionState;

    /// A lifecycle on a fresh data dir whose sessions end after a second idle, with its
    /// session monitor subscribed; and that dir.
    fn lifecycle() -> (Lifecycle, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("data dir");
        let storage = Storage::Sqlite;
        let sessions = storage.memory(dir.path()).expect("memory").sessions;
        let host = storage.host(dir.path()).expect("host").lifecycle;
        let config = BufferConfig::default();
        let store = storage.buffer(dir.path(), &config).expect("buffer");
        let buffer = Arc::new(Buffer::over(store, config).expect("buffer"));
        let journal = Journal::open(dir.path(), JournalConfig::default()).expect("journal");
        let config = LifecycleConfig {
            session_timeout_secs: 1,
            ..LifecycleConfig::default()
        };
        let lifecycle = Lifecycle::new(config, sessions, host, buffer, Arc::new(journal));
        (lifecycle, dir)
    }

    fn event(topic: &str, payload: serde_json::Value) -> NewEvent {
        NewEvent {
            topic: topic.into(),
            payload: payload.to_string(),
            source: "host".into(),
            session_id: Some("cli:c".into()),
            agent_id: None,
            user_id: Some("ann".into()),
            depth: 0,
        }
    }

    /// Append `event`, and have the session monitor read it when `read`.
    async fn journal(lifecycle: &Lifecycle, event: NewEvent, read: bool) {
        let seq = lifecycle.journal.append(event).await.expect("append");
        if read {
            read_after(lifecycle, seq - 1).await;
        }
    }

    /// Have the session monitor read the event after `seq` and move its cursor past it.
    async fn read_after(lifecycle: &Lifecycle, seq: i64) {
        let pending = lifecycle.journal.pending(seq, &["*".into()], 1);
        let taken = pending.expect("read").events.remove(0);
        lifecycle.take(&taken).await.expect("observe");
        let advanced = lifecycle.journal.advance(SUBSCRIBER, taken.seq).await;
        advanced.expect("advance");
    }

    fn ended(lifecycle: &Lifecycle) -> Vec<serde_json::Value> {
        let events = lifecycle.journal.pending(0, &["session.ended".into()], 10);
        let events = events.expect("read").events;
        events
            .iter()
            .map(|e| serde_json::from_str(&e.payload).expect("json"))
            .collect()
    }

    #[tokio::test]
    async fn an_answer_made_while_the_agent_sleeps_wakes_it() {
        let (lifecycle, _dir) = lifecycle();
        let asleep = SleepState {
            asleep: true,
            interrupted: false,
            last_activity: Some(1),
        };
        lifecycle.set_sleep_state(asleep).await.expect("asleep");
        let answer = json!({"reply": {"text": "Done at last."}});
        journal(&lifecycle, event("agent.response", answer), true).await;
        let state = lifecycle.sleep_state().expect("read");
        assert!(!state.asleep && state.interrupted, "{state:?}");
        assert!(
            state.last_activity > Some(1),
            "the answer restarts the sleep clock"
        );
        assert!(lifecycle.interrupt().is_set());
        let interrupted = lifecycle
            .journal
            .pending(0, &["sleep.interrupted".into()], 10);
        assert_eq!(interrupted.expect("read").events.len(), 1);
    }

    #[tokio::test]
    async fn a_session_stays_open_until_its_monitor_has_read_the_answer() {
        let (lifecycle, _dir) = lifecycle();
        let patterns = Lifecycle::subscriptions();
        lifecycle
            .journal
            .subscribe(SUBSCRIBER, &patterns)
            .await
            .expect("subscribe");
        let question = json!({"sender": "ann", "text": "is the shop open?"});
        journal(&lifecycle, event("message.received", question), true).await;
        // The answer is journaled, and the monitor has not read it (its host stopped).
        let answer = json!({"reply": {"text": "Until six."}});
        journal(&lifecycle, event("agent.response", answer.clone()), false).await;
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        lifecycle.check_timeouts().await.expect("check");
        assert!(
            ended(&lifecycle).is_empty(),
            "idle, but its answer is unread"
        );
        let session = lifecycle
            .sessions
            .session("cli:c")
            .expect("read")
            .expect("kept");
        assert_eq!(session.state, SessionState::Active);

        read_after(&lifecycle, 1).await;
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        lifecycle.check_timeouts().await.expect("check");
        let ended = ended(&lifecycle);
        assert_eq!(ended.len(), 1, "{ended:?}");
        let roles: Vec<&str> = ended[0]["transcript"]
            .as_array()
            .expect("transcript")
            .iter()
            .filter_map(|entry| entry["role"].as_str())
            .collect();
        assert_eq!(roles, ["user", "assistant"], "ended once, with both");
    }
}
