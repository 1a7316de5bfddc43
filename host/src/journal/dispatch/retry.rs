//! One event delivered on its own: retried with capped exponential backoff, waited for while
//! the subscriber is not ready, dead-lettered after `max_attempts`; and the dead letters an
//! operator asked to retry, or a replay brought back.

use std::time::Duration;

use tokio::sync::watch;

use super::cursor::CursorBatch;
use super::{Absence, Position, Subscriber, Undelivered};
use crate::journal::{Event, Journal, JournalError};

/// How long a delivery first waits before it asks a subscriber that was not ready again;
/// the wait doubles up to [`NOT_READY_MAX_WAIT`] (a plugin's restart often takes a few ms,
/// a long backoff seconds).
const NOT_READY_FIRST_WAIT: Duration = Duration::from_millis(1);

/// The longest wait between asks of a subscriber that is not ready.
const NOT_READY_MAX_WAIT: Duration = Duration::from_millis(100);

/// How a delivery with retries ended.
enum Delivery {
    /// The subscriber took the event.
    Taken,
    /// Every attempt failed; the last error and the number of attempts.
    GaveUp(String, u32),
    /// Nothing was tried: the subscriber will not serve until the host starts again.
    Absent(String),
    /// The host is stopping; the event is left for the next start.
    Stopping,
}

/// Deliver one event, retrying with capped exponential backoff up to `max_attempts`;
/// `failed` is how an attempt already made (in a run) ended, which counts as the first.
/// While the subscriber is returning, no attempt is spent: it is asked again shortly; one
/// absent until the host starts again is not asked again.
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
            Err(undelivered) if undelivered.absent == Some(Absence::UntilRestart) => {
                return Delivery::Absent(undelivered.error);
            }
            Err(undelivered) if undelivered.absent == Some(Absence::Returning) => {
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

/// How far a subscriber's dead letters reach, as of the last look. An event at or below
/// that, taken again, was brought back by a replay (`cairn journal replay`), possibly after
/// it was dead-lettered: its dead letter no longer holds. Past that point (every delivery
/// outside a replay) taking an event costs no write.
#[derive(Default)]
pub(super) struct DeadLetters {
    up_to: Option<i64>,
}

impl DeadLetters {
    /// Read how far `id`'s dead letters reach now (a dead letter recorded while a replay
    /// waited is seen at the look that takes notice of the replay).
    pub(super) fn look(&mut self, journal: &Journal, id: &str) {
        self.up_to = journal.last_dead_letter(id).unwrap_or_else(|e| {
            tracing::warn!(subscriber = %id, "cannot read its dead letters: {e}");
            None
        });
    }

    /// `id` took `events`: delete the dead letters of those a replay brought back.
    pub(super) async fn taken(&self, journal: &Journal, id: &str, events: &[Event]) {
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

/// An event delivered on its own, after a run stopped at it: `failed` is the run's attempt.
pub(super) struct Lone<'a> {
    pub(super) event: &'a Event,
    pub(super) failed: Option<Undelivered>,
}

/// Deliver `lone` with retries and record the outcome in `batch` (taken) or the journal
/// (dead-lettered, moving the cursor to `position`); false when serving must end (the host
/// is stopping, or the cursor cannot be moved).
pub(super) async fn deliver_alone<S: Subscriber>(
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
            true
        }
        Delivery::GaveUp(error, attempts) => {
            dead_letter(journal, event, id, &error, attempts, batch, position).await
        }
        // Retrying would only meet the same absence: the event waits as a dead letter.
        Delivery::Absent(error) => {
            dead_letter(journal, event, id, &error, 1, batch, position).await
        }
        Delivery::Stopping => {
            batch.commit(journal, id, position).await;
            false
        }
    }
}

/// Dead-letter `event` after `attempts`, moving the cursor past it and every one taken before
/// it; false when the cursor cannot be moved.
async fn dead_letter(
    journal: &Journal,
    event: &Event,
    id: &str,
    error: &str,
    attempts: u32,
    batch: &mut CursorBatch,
    position: &mut Position,
) -> bool {
    tracing::error!(subscriber = %id, seq = event.seq, topic = %event.topic, attempts, "event dead-lettered: {error}");
    // The dead letter and the cursor move are one write: waited out through a full disk or
    // a database outage, so the event is recorded as dead-lettered, never left behind.
    let recorded =
        crate::retry::while_passing("record a dead letter", JournalError::is_passing, || {
            journal.dead_letter(id, event, error, attempts)
        })
        .await;
    if let Err(e) = recorded {
        tracing::error!(subscriber = %id, "cannot move the cursor: {e}");
        return false;
    }
    batch.forget();
    position.cursor = event.seq;
    true
}

/// Deliver the dead letters an operator asked to retry; false when the host is stopping.
pub(super) async fn redeliver_retries<S: Subscriber>(
    journal: &Journal,
    subscriber: &S,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let id = subscriber.id();
    for event in journal.retries(id).unwrap_or_default() {
        let failure = match deliver(journal, subscriber, &event, None, stop).await {
            Delivery::Taken => None,
            Delivery::GaveUp(error, attempts) => Some((error, attempts)),
            // The letters stay marked, their errors as they were, until the host starts
            // again and the subscriber with it.
            Delivery::Absent(error) => {
                tracing::debug!(subscriber = %id, "dead letters to retry wait: {error}");
                return true;
            }
            Delivery::Stopping => return false,
        };
        if let Err(e) = journal.settle_retry(id, event.seq, failure).await {
            tracing::error!(subscriber = %id, "cannot settle a retried dead letter: {e}");
        }
    }
    true
}
