//! Delivery of journal events to one subscriber — a plugin or a host subsystem such as the
//! session monitor, through the one [`Subscriber`] interface: in journal order, at least
//! once, retried with capped exponential backoff, dead-lettered after `max_attempts`.
//!
//! Each subscriber runs as its own task, so a subscriber that hangs until its deadline or
//! fails every event delays only itself. The cursor moves only after an event was taken (or
//! dead-lettered), so an event being delivered when the host dies is delivered again on the
//! next start.

mod cursor;
mod retry;

use std::future::Future;
use std::ops::{Deref, Range};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use super::{Event, Journal, Pending};
use cursor::{CURSOR_EVERY, CursorBatch};
use retry::{DeadLetters, Lone, deliver_alone, redeliver_retries};

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
    /// Nothing was tried, because the subscriber is not serving; none when it tried.
    pub absent: Option<Absence>,
}

/// Why a subscriber tried nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absence {
    /// Down for a moment and coming back (a plugin waiting out its backoff before a
    /// restart, or a subscriber — the host's own, or a plugin through its host calls — whose
    /// stores are away for a moment: a full disk, a database outage). Delivery waits for it
    /// instead of spending an attempt, so restart timing or an outage never dead-letters an
    /// event.
    Returning,
    /// Down until the host starts again (a quarantined plugin, or one that failed to load). A new
    /// event is dead-lettered at once; a dead letter an operator asked to retry waits, its
    /// error kept, rather than being failed again for the same reason.
    UntilRestart,
}

impl From<String> for Undelivered {
    fn from(error: String) -> Self {
        Self {
            error,
            absent: None,
        }
    }
}

impl From<&str> for Undelivered {
    fn from(error: &str) -> Self {
        error.to_string().into()
    }
}

/// How many events are read per round.
const READ_AHEAD: usize = 256;

/// How often a subscriber looks for what an operator did from another process: dead letters
/// to retry, a cursor moved by `cairn journal replay`.
const OPERATOR_LOOK: Duration = Duration::from_secs(1);

/// Where a subscriber is in the journal.
#[derive(Debug, Clone, Copy)]
pub(super) struct Position {
    /// The last event it consumed, as stored.
    pub(super) cursor: i64,
    /// Every event up to here was searched and none after `cursor` matched.
    pub(super) searched_to: i64,
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
    // Another host may deliver from the committed cursor at once, not after the lease.
    if let Err(e) = serving.journal.release(&serving.id).await {
        tracing::warn!(subscriber = %serving.id, "cannot release the subscription: {e}");
    }
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
    /// The next round, read while the first run of the one before was delivered.
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
            return self.wait_to_look_again().await;
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
            // The database is away for now: look again in a while rather than end serving
            // until the host restarts.
            Err(e) if e.is_passing() => {
                tracing::warn!(subscriber = %id, "cannot read its cursor, looking again: {e}");
                self.wait_to_look_again().await
            }
            Err(e) => {
                tracing::error!(subscriber = %id, "cannot read its cursor: {e}");
                Looked::End
            }
        }
    }

    /// Leave delivery for now and look again after [`OPERATOR_LOOK`] (or at the stop), from
    /// the cursor as it is then.
    async fn wait_to_look_again(&mut self) -> Looked {
        self.at = None;
        tokio::select! {
            _ = tokio::time::sleep(OPERATOR_LOOK) => {}
            _ = self.stop.changed() => {}
        }
        Looked::HeldElsewhere
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
            let (moved, run) = self.run(window, next == 0, position).await;
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
    /// starts the round, the next round is read: whether the move was recorded, and the run.
    /// The run is handed over first, so the subscriber works while the dispatcher commits
    /// and reads; reading beside the round's first run (not its last) lets the read overlap
    /// the subscriber's work on the whole round when the round takes several runs.
    async fn run(
        &mut self,
        window: EventRun,
        starts_round: bool,
        position: &mut Position,
    ) -> (bool, Run) {
        let (journal, id, patterns) = (&self.journal, self.id.as_str(), &self.patterns);
        let after = position.searched_to;
        let run = self.subscriber.take_run(window);
        let read_next = async { starts_round.then(|| read(journal, id, patterns, after)) };
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
/// error never leaves a subscriber unserved; false when the host stops first. A new
/// subscriber's cursor starts at the journal's end, so a host registers its subscribers
/// before it starts any work that journals (see `cairn run`); [`serve`] registers again,
/// which changes nothing but the patterns.
pub async fn subscribe(
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

#[cfg(test)]
mod tests;
