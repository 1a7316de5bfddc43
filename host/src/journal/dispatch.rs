//! Delivery of journal events to one subscriber — a plugin or a host subsystem such as the
//! session monitor, through the one [`Subscriber`] interface: in journal order, at least
//! once, retried with capped exponential backoff, dead-lettered after `max_attempts`.
//!
//! Each subscriber runs as its own task, so a subscriber that hangs until its deadline or
//! fails every event delays only itself. The cursor moves only after an event was taken (or
//! dead-lettered), so an event being delivered when the host dies is delivered again on the
//! next start.

use std::future::Future;
use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use super::{Event, Journal, Pending};

/// Something that takes journal events. Every subscriber gets the same durable cursor,
/// retries and dead letters.
pub trait Subscriber: Send + Sync + 'static {
    /// Its id in the journal's subscriber table.
    fn id(&self) -> &str;
    /// Take one event; a failure is retried with backoff, then dead-lettered.
    fn take(&self, event: &Event) -> impl Future<Output = Result<(), Undelivered>> + Send;

    /// Take a run of events in order, stopping at the first that fails: how many were
    /// taken, and the failure of the next one. It may stop early without a failure (having
    /// taken at least one); the rest come in the next run. A subscriber for which one hop
    /// per run costs less than one per event overrides this.
    fn take_run(&self, events: EventRun) -> impl Future<Output = Run> + Send {
        async move {
            for (taken, event) in events.iter().enumerate() {
                if let Err(error) = self.take(event).await {
                    return Run {
                        taken,
                        failure: Some(error),
                    };
                }
            }
            Run {
                taken: events.len(),
                failure: None,
            }
        }
    }
}

/// A run of events handed to a subscriber: a window on the events read in one round,
/// shared rather than copied, so a plugin's thread can take it along.
#[derive(Debug, Clone)]
pub struct EventRun {
    round: Arc<[Event]>,
    window: Range<usize>,
}

impl EventRun {
    /// The events of `round` in `window`.
    ///
    /// # Panics
    /// If `window` is not within `round`.
    pub fn new(round: Arc<[Event]>, window: Range<usize>) -> Self {
        assert!(window.start <= window.end && window.end <= round.len());
        Self { round, window }
    }
}

impl Deref for EventRun {
    type Target = [Event];

    fn deref(&self) -> &[Event] {
        &self.round[self.window.clone()]
    }
}

/// How a run of deliveries ended: the first `taken` events were taken; `failure` is why
/// the one after them was not, if it was not.
#[derive(Debug)]
pub struct Run {
    /// How many events, from the first, the subscriber took.
    pub taken: usize,
    /// Why the next event was not taken.
    pub failure: Option<Undelivered>,
}

/// Why a subscriber did not take an event.
#[derive(Debug, Clone)]
pub struct Undelivered {
    /// What went wrong, as logged and kept with a dead letter.
    pub error: String,
    /// Nothing was tried: the subscriber is down for a moment and coming back (a plugin
    /// waiting out its backoff before a restart). Delivery waits for it instead of
    /// spending an attempt, so restart timing never dead-letters an event; a plugin that
    /// stays down (quarantined) fails as usual.
    pub not_ready: bool,
}

impl From<String> for Undelivered {
    fn from(error: String) -> Self {
        Self {
            error,
            not_ready: false,
        }
    }
}

impl From<&str> for Undelivered {
    fn from(error: &str) -> Self {
        error.to_string().into()
    }
}

/// How long a delivery first waits before it asks a subscriber that was not ready again;
/// the wait doubles up to [`NOT_READY_MAX_WAIT`] (a plugin's restart often takes a few ms,
/// a long backoff seconds).
const NOT_READY_FIRST_WAIT: Duration = Duration::from_millis(1);

/// The longest wait between asks of a subscriber that is not ready.
const NOT_READY_MAX_WAIT: Duration = Duration::from_millis(100);

/// How many events are read per round.
const READ_AHEAD: usize = 256;

/// Taken events whose cursor move is committed together. A batch's move is committed while
/// the next run is delivered, so a crash redelivers at most twice this many (each event is
/// delivered at least once).
const CURSOR_EVERY: usize = 64;

/// The longest a taken event waits for its cursor move to be committed.
const CURSOR_AFTER: Duration = Duration::from_millis(100);

/// Events a subscriber took whose cursor move is not committed yet. Committing one cursor
/// move per batch instead of per event takes a durable commit off each delivery; committing
/// it while the next run is delivered takes the commit's wait off the subscriber's path.
struct CursorBatch {
    /// A batch's last event, sealed when the batch was due: its move is committed beside the
    /// next run, or with the rest when no run follows.
    sealed: Option<i64>,
    /// The last event taken, if any since the last commit or seal.
    taken: Option<i64>,
    /// How many were taken since the last commit or seal.
    count: usize,
    /// When the first of them was taken.
    since: Instant,
}

impl CursorBatch {
    fn new() -> Self {
        Self {
            sealed: None,
            taken: None,
            count: 0,
            since: Instant::now(),
        }
    }

    fn took(&mut self, seq: i64) {
        if self.count == 0 {
            self.since = Instant::now();
        }
        self.taken = Some(seq);
        self.count += 1;
    }

    /// Whether enough were taken, or the first waited long enough, to commit now.
    fn due(&self) -> bool {
        self.count >= CURSOR_EVERY || (self.count > 0 && self.since.elapsed() >= CURSOR_AFTER)
    }

    /// Set the batch aside for its move to be committed beside the next run; the events
    /// taken from now on make a new batch.
    fn seal(&mut self) {
        if let Some(seq) = self.taken.take() {
            self.sealed = Some(seq);
            self.count = 0;
        }
    }

    /// Drop the batch: a dead letter moved the cursor past it already.
    fn forget(&mut self) {
        self.sealed = None;
        self.taken = None;
        self.count = 0;
    }

    /// Commit the cursor move of everything taken and record it in `position`; false
    /// (logged) when it cannot be recorded.
    async fn commit(&mut self, journal: &Journal, id: &str, position: &mut Position) -> bool {
        let Some(seq) = self.taken.or(self.sealed) else {
            return true;
        };
        let moved = advance(journal, id, seq, position).await;
        if moved {
            self.forget();
        }
        moved
    }

    /// Run `run` (the next run's delivery) while the sealed batch's move, if any, is
    /// committed: its outcome, and false (logged) when the move cannot be recorded. The run
    /// is handed over before the commit is asked for, so the subscriber's thread is woken
    /// before the journal's writer competes with it for a core.
    async fn commit_beside<T>(
        &mut self,
        journal: &Journal,
        id: &str,
        position: &mut Position,
        run: impl Future<Output = T>,
    ) -> (bool, T) {
        match self.sealed.take() {
            Some(seq) => {
                let (run, moved) = tokio::join!(biased; run, advance(journal, id, seq, position));
                (moved, run)
            }
            None => (true, run.await),
        }
    }
}

/// Move `id`'s durable cursor to `seq` and record it in `position`; false (logged) when it
/// cannot be recorded.
async fn advance(journal: &Journal, id: &str, seq: i64, position: &mut Position) -> bool {
    match journal.advance(id, seq).await {
        Ok(()) => {
            position.cursor = seq;
            true
        }
        Err(e) => {
            tracing::error!(subscriber = %id, "cannot move the cursor: {e}");
            false
        }
    }
}

/// How a delivery with retries ended.
enum Delivery {
    /// The subscriber took the event.
    Taken,
    /// Every attempt failed; the last error and the number of attempts.
    GaveUp(String, u32),
    /// The host is stopping; the event is left for the next start.
    Stopping,
}

/// Deliver one event, retrying with capped exponential backoff up to `max_attempts`;
/// `failed` is how an attempt already made (in a run) ended, which counts as the first.
/// While the subscriber is not ready, no attempt is spent: it is asked again shortly.
async fn deliver<S: Subscriber>(
    journal: &Journal,
    subscriber: &S,
    event: &Event,
    mut failed: Option<Undelivered>,
    stop: &mut watch::Receiver<bool>,
) -> Delivery {
    let config = journal.config();
    let mut attempt = 0u32;
    let mut not_ready_wait = NOT_READY_FIRST_WAIT;
    loop {
        let outcome = match failed.take() {
            Some(undelivered) => Err(undelivered),
            None => subscriber.take(event).await,
        };
        let error = match outcome {
            Ok(()) => return Delivery::Taken,
            Err(undelivered) if undelivered.not_ready => {
                tracing::debug!(
                    subscriber = subscriber.id(),
                    seq = event.seq,
                    "waiting for the subscriber: {}",
                    undelivered.error
                );
                tokio::select! {
                    _ = tokio::time::sleep(not_ready_wait) => {}
                    _ = stop.changed() => return Delivery::Stopping,
                }
                not_ready_wait = (not_ready_wait * 2).min(NOT_READY_MAX_WAIT);
                continue;
            }
            Err(undelivered) => undelivered.error,
        };
        attempt += 1;
        if attempt >= config.max_attempts {
            return Delivery::GaveUp(error, attempt);
        }
        let backoff = config
            .backoff_initial_ms
            .saturating_mul(1 << (attempt - 1).min(20))
            .min(config.backoff_max_ms);
        tracing::warn!(
            subscriber = subscriber.id(),
            seq = event.seq,
            attempt,
            backoff_ms = backoff,
            "delivery failed: {error}"
        );
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(backoff)) => {}
            _ = stop.changed() => return Delivery::Stopping,
        }
    }
}

/// How often a subscriber looks for what an operator did from another process: dead letters
/// to retry, a cursor moved by `cairn journal replay`.
const OPERATOR_LOOK: Duration = Duration::from_secs(1);

/// Where a subscriber is in the journal.
#[derive(Debug, Clone, Copy)]
struct Position {
    /// The last event it consumed, as stored.
    cursor: i64,
    /// Every event up to here was searched and none after `cursor` matched.
    searched_to: i64,
}

/// Deliver matching events to `subscriber` until `stop` turns true; an event in flight when
/// the stop comes is finished first (or left for the next start if it is being retried).
/// It wakes when this process appends a matching event, and every [`OPERATOR_LOOK`] it
/// re-delivers dead letters an operator asked to retry and reads the stored cursor, so
/// `cairn journal replay` takes effect on a running host. On a journal several hosts
/// share, it delivers only while this host holds the subscription (renewed at each look).
pub async fn serve<S: Subscriber>(
    journal: Arc<Journal>,
    subscriber: Arc<S>,
    patterns: Vec<String>,
    mut stop: watch::Receiver<bool>,
) {
    let id = subscriber.id().to_string();
    if !subscribe(&journal, &id, &patterns, &mut stop).await {
        return;
    }
    let appended = journal.watch(&patterns);
    let mut serving = Serving {
        journal,
        subscriber,
        id,
        patterns,
        stop,
        appended,
        at: None,
        looked: None,
        dead_letters: DeadLetters::default(),
        batch: CursorBatch::new(),
        read_ahead: None,
    };
    while serving.round().await {}
}

/// One subscriber's delivery, and what it carries from one round of events to the next.
struct Serving<S> {
    journal: Arc<Journal>,
    subscriber: Arc<S>,
    id: String,
    patterns: Vec<String>,
    stop: watch::Receiver<bool>,
    /// Woken when this process appends a matching event.
    appended: Arc<Notify>,
    /// Where it is in the journal; none until it holds the subscription and read its cursor.
    at: Option<Position>,
    /// When it last looked for what an operator did.
    looked: Option<Instant>,
    dead_letters: DeadLetters,
    /// Taken events whose cursor move is not committed yet. It is carried from round to
    /// round, so the end of a round costs no commit of its own.
    batch: CursorBatch,
    /// The next round, read while the last run of the one before was delivered.
    read_ahead: Option<Pending>,
}

impl<S: Subscriber> Serving<S> {
    /// Look for what an operator did when it is time, then read a round of events and
    /// deliver it (or wait for one); false when serving ends.
    async fn round(&mut self) -> bool {
        let look_due = self.look_due();
        if look_due || *self.stop.borrow() {
            // What was taken is recorded first: a replay the look takes notice of is never
            // overridden by a commit decided before it.
            if !self.commit().await || *self.stop.borrow() {
                return false;
            }
        }
        if look_due {
            match self.look().await {
                Looked::Holding => {}
                Looked::HeldElsewhere => return true,
                Looked::End => return false,
            }
        }
        let Some(mut position) = self.at else {
            return false;
        };
        let pending = match self.read_ahead.take() {
            Some(pending) => pending,
            None => read(
                &self.journal,
                &self.id,
                &self.patterns,
                position.searched_to,
            ),
        };
        position.searched_to = position.searched_to.max(pending.searched_to);
        if pending.events.is_empty() {
            return self.idle(position).await;
        }
        let going = self.deliver(pending.events.into(), &mut position).await;
        self.at = Some(position);
        going
    }

    /// Whether it is time to look for what an operator did (at once before the first round).
    fn look_due(&self) -> bool {
        self.looked
            .is_none_or(|looked| looked.elapsed() >= OPERATOR_LOOK)
    }

    /// Commit the cursor move of everything taken; false (logged) when it cannot be recorded.
    async fn commit(&mut self) -> bool {
        match self.at.as_mut() {
            Some(position) => self.batch.commit(&self.journal, &self.id, position).await,
            None => true,
        }
    }

    /// Renew this host's hold on the subscription, deliver the dead letters an operator asked
    /// to retry, and take notice of a replay or a cursor moved from elsewhere.
    async fn look(&mut self) -> Looked {
        let (journal, id) = (&self.journal, self.id.as_str());
        self.looked = Some(Instant::now());
        // Read from where the look leaves the cursor, never ahead of it.
        self.read_ahead = None;
        // On a journal several hosts share, one delivers to each subscriber: another host
        // holds it, so look again in a while, from the cursor as it is then.
        let held = journal.hold(id).await.unwrap_or_else(|e| {
            tracing::warn!(subscriber = %id, "cannot hold the subscription: {e}");
            false
        });
        if !held {
            self.at = None;
            tokio::select! {
                _ = tokio::time::sleep(OPERATOR_LOOK) => {}
                _ = self.stop.changed() => {}
            }
            return Looked::HeldElsewhere;
        }
        if !redeliver_retries(journal, &*self.subscriber, &mut self.stop).await {
            return Looked::End;
        }
        if let Some(cursor) = take_rewind(journal, id).await {
            self.at = Some(Position {
                cursor,
                searched_to: cursor,
            });
        }
        self.dead_letters.look(journal, id);
        match journal.cursor(id) {
            Ok(Some(stored)) if self.at.is_none_or(|at| at.cursor != stored) => {
                self.at = Some(Position {
                    cursor: stored,
                    searched_to: stored,
                });
                Looked::Holding
            }
            Ok(Some(_)) => Looked::Holding,
            Ok(None) => Looked::End,
            Err(e) => {
                tracing::error!(subscriber = %id, "cannot read its cursor: {e}");
                Looked::End
            }
        }
    }

    /// Nothing to deliver: record what was taken, and wait for an append, the next look or
    /// the stop; false when serving ends.
    async fn idle(&mut self, mut position: Position) -> bool {
        if !self
            .batch
            .commit(&self.journal, &self.id, &mut position)
            .await
        {
            return false;
        }
        // Far behind on events it never takes: move the durable cursor past them, so
        // retention can prune them.
        if position.searched_to - position.cursor >= READ_AHEAD as i64 {
            match self.journal.advance(&self.id, position.searched_to).await {
                Ok(()) => position.cursor = position.searched_to,
                Err(e) => tracing::warn!(subscriber = %self.id, "cannot move the cursor: {e}"),
            }
        }
        self.at = Some(position);
        tokio::select! {
            _ = self.appended.notified() => {}
            _ = tokio::time::sleep(OPERATOR_LOOK) => {}
            _ = self.stop.changed() => {}
        }
        true
    }

    /// Deliver a round's events in runs, each fitting in the cursor batch, so a crash
    /// still redelivers at most this batch and the sealed one committed beside its run;
    /// false when serving ends.
    async fn deliver(&mut self, round: Arc<[Event]>, position: &mut Position) -> bool {
        let mut next = 0;
        while next < round.len() {
            if self.look_due() {
                // A long round: look first (renewing this host's hold on a shared journal,
                // so no other host takes over meanwhile), then search on from the cursor.
                self.read_ahead = None;
                if !self.batch.commit(&self.journal, &self.id, position).await {
                    return false;
                }
                position.searched_to = position.cursor;
                return true;
            }
            let room = CURSOR_EVERY.saturating_sub(self.batch.count).max(1);
            let tried = room.min(round.len() - next);
            let window = EventRun::new(round.clone(), next..next + tried);
            let (moved, run) = self
                .run(window, next + tried == round.len(), position)
                .await;
            if !moved {
                return false;
            }
            let taken = &round[next..next + run.taken.min(tried)];
            taken.iter().for_each(|event| self.batch.took(event.seq));
            self.dead_letters
                .taken(&self.journal, &self.id, taken)
                .await;
            let failed = match run.failure {
                Some(error) if taken.len() < tried => Some(Some(error)),
                // A run that took nothing and did not fail: deliver its first event alone.
                None if taken.is_empty() => Some(None),
                _ => None,
            };
            next += taken.len();
            if let Some(failed) = failed {
                let lone = Lone {
                    event: &round[next],
                    failed,
                };
                if !deliver_alone(
                    &self.journal,
                    &*self.subscriber,
                    lone,
                    &self.dead_letters,
                    &mut self.batch,
                    position,
                    &mut self.stop,
                )
                .await
                {
                    return false;
                }
                next += 1;
            }
            if *self.stop.borrow() {
                self.batch.commit(&self.journal, &self.id, position).await;
                return false;
            }
            if self.batch.due() {
                self.batch.seal();
            }
        }
        true
    }

    /// Deliver `window` while the sealed batch's cursor move is committed and, when the run
    /// ends the round, the next round is read: whether the move was recorded, and the run.
    /// The run is handed over first, so the subscriber works while the dispatcher commits
    /// and reads.
    async fn run(
        &mut self,
        window: EventRun,
        ends_round: bool,
        position: &mut Position,
    ) -> (bool, Run) {
        let (journal, id, patterns) = (&self.journal, self.id.as_str(), &self.patterns);
        let after = position.searched_to;
        let run = self.subscriber.take_run(window);
        let read_next = async { ends_round.then(|| read(journal, id, patterns, after)) };
        let ((moved, run), next) = tokio::join!(
            biased;
            self.batch.commit_beside(journal, id, position, run),
            read_next
        );
        if next.is_some() {
            self.read_ahead = next;
        }
        (moved, run)
    }
}

/// How a look for what an operator did ended.
enum Looked {
    /// This host holds the subscription and knows where it is.
    Holding,
    /// Another host delivers to it for now; looked at again in a while.
    HeldElsewhere,
    /// Serving ends: the host is stopping, or the subscription or its cursor is gone.
    End,
}

/// Up to [`READ_AHEAD`] events after `after` matching `patterns`; none (logged) when the
/// journal cannot be read.
fn read(journal: &Journal, id: &str, patterns: &[String], after: i64) -> Pending {
    journal
        .pending(after, patterns, READ_AHEAD)
        .unwrap_or_else(|e| {
            tracing::error!(subscriber = %id, "cannot read the journal: {e}");
            Pending::default()
        })
}

/// How far a subscriber's dead letters reach, as of the last look. An event at or below
/// that, taken again, was brought back by a replay (`cairn journal replay`), possibly after
/// it was dead-lettered: its dead letter no longer holds. Past that point (every delivery
/// outside a replay) taking an event costs no write.
#[derive(Default)]
struct DeadLetters {
    up_to: Option<i64>,
}

impl DeadLetters {
    /// Read how far `id`'s dead letters reach now (a dead letter recorded while a replay
    /// waited is seen at the look that takes notice of the replay).
    fn look(&mut self, journal: &Journal, id: &str) {
        self.up_to = journal.last_dead_letter(id).unwrap_or_else(|e| {
            tracing::warn!(subscriber = %id, "cannot read its dead letters: {e}");
            None
        });
    }

    /// `id` took `events`: delete the dead letters of those a replay brought back.
    async fn taken(&self, journal: &Journal, id: &str, events: &[Event]) {
        let Some(up_to) = self.up_to else { return };
        let again: Vec<i64> = events
            .iter()
            .map(|event| event.seq)
            .take_while(|seq| *seq <= up_to)
            .collect();
        if again.is_empty() {
            return;
        }
        match journal.clear_dead_letters(id, again).await {
            Ok(0) => {}
            Ok(cleared) => {
                tracing::info!(subscriber = %id, cleared, "dead letters delivered by a replay cleared")
            }
            Err(e) => tracing::warn!(subscriber = %id, "cannot clear replayed dead letters: {e}"),
        }
    }
}

/// Where an operator moved `id`'s cursor (`cairn journal replay`) since the last look, if
/// they did. Until this host has taken notice, its own cursor moves are refused (they were
/// decided before it knew), so a replay is never overridden by the commit that follows it.
async fn take_rewind(journal: &Journal, id: &str) -> Option<i64> {
    match journal.take_rewind(id).await {
        Ok(Some(cursor)) => {
            tracing::info!(subscriber = %id, cursor, "an operator moved its cursor; delivering from there");
            Some(cursor)
        }
        Ok(None) => None,
        Err(e) => {
            // The move stays marked: this host's commits are refused until the next look,
            // so what it delivers meanwhile is delivered again, never skipped.
            tracing::warn!(subscriber = %id, "cannot look for an operator's replay: {e}");
            None
        }
    }
}

/// Register `id` on `patterns`, trying again while the store refuses (hosts starting at the
/// same moment on a shared journal can deadlock each other's registrations), so a passing
/// error never leaves a subscriber unserved; false when the host stops first.
async fn subscribe(
    journal: &Journal,
    id: &str,
    patterns: &[String],
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let mut wait = Duration::from_millis(50);
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        match journal.subscribe(id, patterns).await {
            Ok(_) => return true,
            // Logged at the 1st, 2nd, 4th, 8th... failure: a lasting one is not a flood.
            Err(e) if attempt.is_power_of_two() => {
                tracing::warn!(subscriber = %id, attempt, "cannot subscribe yet: {e}");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return false,
        }
        wait = (wait * 2).min(OPERATOR_LOOK);
    }
}

/// An event delivered on its own, after a run stopped at it: `failed` is the run's attempt.
struct Lone<'a> {
    event: &'a Event,
    failed: Option<Undelivered>,
}

/// Deliver `lone` with retries and record the outcome in `batch` (taken) or the journal
/// (dead-lettered, moving the cursor to `position`); false when serving must end (the host
/// is stopping, or the cursor cannot be moved).
async fn deliver_alone<S: Subscriber>(
    journal: &Journal,
    subscriber: &S,
    lone: Lone<'_>,
    dead_letters: &DeadLetters,
    batch: &mut CursorBatch,
    position: &mut Position,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let (event, id) = (lone.event, subscriber.id());
    match deliver(journal, subscriber, event, lone.failed, stop).await {
        Delivery::Taken => {
            batch.took(event.seq);
            dead_letters
                .taken(journal, id, std::slice::from_ref(event))
                .await;
        }
        Delivery::GaveUp(error, attempts) => {
            tracing::error!(subscriber = %id, seq = event.seq, topic = %event.topic, attempts, "event dead-lettered: {error}");
            // Moves the cursor past this event and every one taken before it.
            if let Err(e) = journal.dead_letter(id, event, &error, attempts).await {
                tracing::error!(subscriber = %id, "cannot move the cursor: {e}");
                return false;
            }
            batch.forget();
            position.cursor = event.seq;
        }
        Delivery::Stopping => {
            batch.commit(journal, id, position).await;
            return false;
        }
    }
    true
}

/// Deliver the dead letters an operator asked to retry; false when the host is stopping.
async fn redeliver_retries<S: Subscriber>(
    journal: &Journal,
    subscriber: &S,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let id = subscriber.id();
    for event in journal.retries(id).unwrap_or_default() {
        let failure = match deliver(journal, subscriber, &event, None, stop).await {
            Delivery::Taken => None,
            Delivery::GaveUp(error, attempts) => Some((error, attempts)),
            Delivery::Stopping => return false,
        };
        if let Err(e) = journal.settle_retry(id, event.seq, failure).await {
            tracing::error!(subscriber = %id, "cannot settle a retried dead letter: {e}");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use cairn_storage::pg::cluster::TestCluster;
    use cairn_storage::pg::journal::PgJournal;

    use super::*;
    use crate::journal::{JournalAdmin, JournalConfig, JournalOperator, NewEvent};

    /// Records the events it takes, as one host's instance of a plugin would.
    struct Recorder {
        taken: Mutex<Vec<i64>>,
    }

    impl Subscriber for Recorder {
        fn id(&self) -> &str {
            "recorder"
        }

        async fn take(&self, event: &Event) -> Result<(), Undelivered> {
            self.taken
                .lock()
                .map_err(|_| "poisoned".to_string())?
                .push(event.seq);
            Ok(())
        }
    }

    /// Append `n` events on `work.item`.
    async fn append_work(journal: &Journal, n: usize) {
        for _ in 0..n {
            journal
                .append(NewEvent {
                    topic: "work.item".into(),
                    payload: "{}".into(),
                    source: "test".into(),
                    ..NewEvent::default()
                })
                .await
                .expect("append");
        }
    }

    /// Serve `subscriber` on `work.*`, append `events` once it has subscribed (a new
    /// subscriber starts at the journal's end), wait (up to 30 s) until `done`, then stop
    /// serving.
    async fn serve_work<S: Subscriber>(
        journal: &Arc<Journal>,
        subscriber: &Arc<S>,
        events: usize,
        done: impl Fn() -> bool,
    ) {
        let (stop, task) = start_serving(journal, subscriber).await;
        append_work(journal, events).await;
        for _ in 0..600 {
            if done() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.send(true).expect("stop");
        task.await.expect("stops");
    }

    /// Serve `subscriber` on `work.*` until the returned sender says stop; returns once it
    /// has had time to subscribe.
    async fn start_serving<S: Subscriber>(
        journal: &Arc<Journal>,
        subscriber: &Arc<S>,
    ) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(
            journal.clone(),
            subscriber.clone(),
            vec!["work.*".to_string()],
            stopped,
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        (stop, task)
    }

    fn seen(recorder: &Recorder) -> Vec<i64> {
        recorder.taken.lock().expect("lock").clone()
    }

    /// Wait (up to a minute, polling) until the two recorders took `count` events in all.
    async fn until_taken(hosts: [&Recorder; 2], count: usize) {
        for _ in 0..600 {
            if hosts.iter().map(|h| seen(h).len()).sum::<usize>() >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{count} deliveries never happened: {:?}", hosts.map(seen));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replay_on_a_busy_subscriber_is_not_overridden_by_its_own_cursor_moves() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = Arc::new(Journal::open(dir.path(), JournalConfig::default()).expect("open"));
        let recorder = Arc::new(Recorder {
            taken: Mutex::new(Vec::new()),
        });
        let (stop, task) = start_serving(&journal, &recorder).await;
        // A steady stream, so the host commits its cursor many times between two looks at
        // what an operator did.
        let appender = {
            let journal = journal.clone();
            tokio::spawn(async move {
                let mut last = 0;
                for _ in 0..300 {
                    append_work(&journal, 1).await;
                    last += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                last
            })
        };
        while seen(&recorder).len() < 40 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let first = seen(&recorder)[0];
        let operator = JournalAdmin::open(dir.path()).expect("operator");
        assert!(operator.replay_from("recorder", first).expect("replay"));
        let last = first - 1 + appender.await.expect("appender");
        let replayed = |seen: &[i64]| seen.iter().filter(|s| **s == first).count() == 2;
        for _ in 0..600 {
            let now = seen(&recorder);
            if replayed(&now) && now.last() == Some(&last) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.send(true).expect("stop");
        task.await.expect("stops");
        let taken = seen(&recorder);
        assert!(
            replayed(&taken),
            "the replay from {first} was never delivered: {taken:?}"
        );
        let again = taken.iter().rposition(|s| *s == first).expect("replayed");
        assert_eq!(
            taken[again..],
            (first..=last).collect::<Vec<_>>(),
            "everything from the replay on, once, in order"
        );
    }

    /// Fails on `bad` until `healed`, and takes every other event.
    struct Flaky {
        taken: Mutex<Vec<i64>>,
        bad: i64,
        healed: AtomicBool,
    }

    impl Subscriber for Flaky {
        fn id(&self) -> &str {
            "flaky"
        }

        async fn take(&self, event: &Event) -> Result<(), Undelivered> {
            if event.seq == self.bad && !self.healed.load(Ordering::SeqCst) {
                return Err("not yet".into());
            }
            self.taken.lock().expect("lock").push(event.seq);
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dead_letter_a_replay_delivers_is_cleared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = JournalConfig {
            max_attempts: 1,
            backoff_initial_ms: 1,
            ..JournalConfig::default()
        };
        let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
        let flaky = Arc::new(Flaky {
            taken: Mutex::new(Vec::new()),
            bad: 3,
            healed: AtomicBool::new(false),
        });
        let taken = || flaky.taken.lock().expect("lock").clone();
        let (stop, task) = start_serving(&journal, &flaky).await;
        append_work(&journal, 5).await;
        let operator = JournalAdmin::open(dir.path()).expect("operator");
        let dead = || operator.dead_letters(10).expect("dead letters");
        for _ in 0..600 {
            if taken().len() == 4 && !dead().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(dead().iter().map(|d| d.seq).collect::<Vec<_>>(), [3]);
        flaky.healed.store(true, Ordering::SeqCst);
        assert!(operator.replay_from("flaky", 1).expect("replay"));
        for _ in 0..600 {
            if taken().len() == 9 && dead().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.send(true).expect("stop");
        task.await.expect("stops");
        assert_eq!(taken(), [1, 2, 4, 5, 1, 2, 3, 4, 5]);
        assert!(dead().is_empty(), "the replay delivered it: {:?}", dead());
    }

    /// Takes events in runs of at most three and never takes `bad`.
    struct Picky {
        taken: Mutex<Vec<i64>>,
        bad: i64,
        tries_of_bad: AtomicUsize,
    }

    impl Subscriber for Picky {
        fn id(&self) -> &str {
            "picky"
        }

        async fn take(&self, event: &Event) -> Result<(), Undelivered> {
            if event.seq == self.bad {
                self.tries_of_bad.fetch_add(1, Ordering::SeqCst);
                return Err("not this one".into());
            }
            self.taken.lock().expect("lock").push(event.seq);
            Ok(())
        }

        async fn take_run(&self, events: EventRun) -> Run {
            let mut taken = 0;
            for event in events.iter().take(3) {
                if let Err(error) = self.take(event).await {
                    return Run {
                        taken,
                        failure: Some(error),
                    };
                }
                taken += 1;
            }
            Run {
                taken,
                failure: None,
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_that_stop_short_or_fail_deliver_every_event_once_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = JournalConfig {
            max_attempts: 2,
            backoff_initial_ms: 1,
            ..JournalConfig::default()
        };
        let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
        let picky = Arc::new(Picky {
            taken: Mutex::new(Vec::new()),
            bad: 5,
            tries_of_bad: AtomicUsize::new(0),
        });
        serve_work(&journal, &picky, 20, || {
            picky.taken.lock().expect("lock").len() >= 19
        })
        .await;
        let expected: Vec<i64> = (1..=20).filter(|seq| *seq != 5).collect();
        assert_eq!(
            *picky.taken.lock().expect("lock"),
            expected,
            "in order, once"
        );
        assert_eq!(
            picky.tries_of_bad.load(Ordering::SeqCst),
            2,
            "the failure in a run is the first of max_attempts"
        );
        assert_eq!(journal.cursor("picky").expect("cursor"), Some(20));
    }

    /// Not ready for its first `down` asks (a plugin restarting), then takes every event.
    struct Restarting {
        down: usize,
        asked: AtomicUsize,
        taken: Mutex<Vec<i64>>,
    }

    impl Subscriber for Restarting {
        fn id(&self) -> &str {
            "restarting"
        }

        async fn take(&self, event: &Event) -> Result<(), Undelivered> {
            if self.asked.fetch_add(1, Ordering::SeqCst) < self.down {
                return Err(Undelivered {
                    error: "plugin restarting is restarting".into(),
                    not_ready: true,
                });
            }
            self.taken.lock().expect("lock").push(event.seq);
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscriber_not_ready_is_waited_for_without_spending_attempts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = JournalConfig {
            max_attempts: 1,
            ..JournalConfig::default()
        };
        let journal = Arc::new(Journal::open(dir.path(), config).expect("open"));
        let restarting = Arc::new(Restarting {
            down: 4,
            asked: AtomicUsize::new(0),
            taken: Mutex::new(Vec::new()),
        });
        serve_work(&journal, &restarting, 3, || {
            restarting.taken.lock().expect("lock").len() >= 3
        })
        .await;
        assert_eq!(
            *restarting.taken.lock().expect("lock"),
            vec![1, 2, 3],
            "one attempt allowed, yet nothing dead-lettered while it was not ready"
        );
        assert_eq!(restarting.asked.load(Ordering::SeqCst), 4 + 3);
        assert_eq!(journal.cursor("restarting").expect("cursor"), Some(3));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_shared_journal_one_host_delivers_and_another_takes_over_when_it_stops() {
        let Some(cluster) = TestCluster::shared() else {
            return;
        };
        let url = cluster.fresh_database();
        let lease = Duration::from_secs(2);
        let open = || {
            let store = PgJournal::connect(&url, lease).expect("connect");
            Arc::new(Journal::over(Box::new(store), JournalConfig::default()))
        };
        let journals = [open(), open()];
        let recorders = [
            Arc::new(Recorder {
                taken: Mutex::new(Vec::new()),
            }),
            Arc::new(Recorder {
                taken: Mutex::new(Vec::new()),
            }),
        ];
        let patterns = vec!["work.*".to_string()];
        let mut hosts = Vec::new();
        for (journal, recorder) in journals.iter().zip(&recorders) {
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(serve(
                journal.clone(),
                recorder.clone(),
                patterns.clone(),
                stopped,
            ));
            hosts.push((stop, task));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        append_work(&journals[0], 10).await;
        append_work(&journals[1], 10).await;
        until_taken([&recorders[0], &recorders[1]], 20).await;
        let holder = usize::from(seen(&recorders[0]).is_empty());
        let other = 1 - holder;
        assert!(
            seen(&recorders[other]).is_empty(),
            "both hosts delivered: {:?}",
            recorders.each_ref().map(|r| seen(r))
        );
        assert_eq!(
            seen(&recorders[holder]),
            (1..=20).collect::<Vec<i64>>(),
            "in order, once"
        );

        // The holding host stops; the other takes over once the lease lapsed and goes on
        // from the cursor.
        let (stop, task) = hosts.swap_remove(holder);
        stop.send(true).expect("stop");
        task.await.expect("the holder stops");
        append_work(&journals[other], 5).await;
        until_taken([&recorders[0], &recorders[1]], 25).await;
        assert_eq!(seen(&recorders[other]), (21..=25).collect::<Vec<i64>>());
    }
}
