//! The cursor batch: the events a subscriber took whose durable cursor move is not committed
//! yet, committed together while the next run is delivered.

use std::future::Future;
use std::time::{Duration, Instant};

use super::Position;
use crate::journal::{Journal, JournalError};

/// Taken events whose cursor move is committed together. A batch's move is committed while
/// the next run is delivered, so a crash redelivers at most twice this many (each event is
/// delivered at least once).
pub(super) const CURSOR_EVERY: usize = 64;

/// The longest a taken event waits for its cursor move to be committed.
const CURSOR_AFTER: Duration = Duration::from_millis(100);

/// Events a subscriber took whose cursor move is not committed yet. Committing one cursor
/// move per batch instead of per event takes a durable commit off each delivery; committing
/// it while the next run is delivered takes the commit's wait off the subscriber's path.
pub(super) struct CursorBatch {
    /// A batch's last event, sealed when the batch was due: its move is committed beside the
    /// next run, or with the rest when no run follows.
    pub(super) sealed: Option<i64>,
    /// The last event taken, if any since the last commit or seal.
    taken: Option<i64>,
    /// How many were taken since the last commit or seal.
    pub(super) count: usize,
    /// When the first of them was taken.
    since: Instant,
}

impl CursorBatch {
    pub(super) fn new() -> Self {
        Self {
            sealed: None,
            taken: None,
            count: 0,
            since: Instant::now(),
        }
    }

    pub(super) fn took(&mut self, seq: i64) {
        if self.count == 0 {
            self.since = Instant::now();
        }
        self.taken = Some(seq);
        self.count += 1;
    }

    /// Whether enough were taken, or the first waited long enough, to commit now.
    pub(super) fn due(&self) -> bool {
        self.count >= CURSOR_EVERY || (self.count > 0 && self.since.elapsed() >= CURSOR_AFTER)
    }

    /// Set the batch aside for its move to be committed beside the next run; the events
    /// taken from now on make a new batch.
    pub(super) fn seal(&mut self) {
        if let Some(seq) = self.taken.take() {
            self.sealed = Some(seq);
            self.count = 0;
        }
    }

    /// Drop the batch: a dead letter moved the cursor past it already.
    pub(super) fn forget(&mut self) {
        self.sealed = None;
        self.taken = None;
        self.count = 0;
    }

    /// Commit the cursor move of everything taken and record it in `position`; false
    /// (logged) when it cannot be recorded.
    pub(super) async fn commit(
        &mut self,
        journal: &Journal,
        id: &str,
        position: &mut Position,
    ) -> bool {
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
    pub(super) async fn commit_beside<T>(
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

/// Move `id`'s durable cursor to `seq` and record it in `position`, waiting out a full disk
/// or a database outage (serving would otherwise end until the host restarts); false
/// (logged) when it cannot be recorded.
async fn advance(journal: &Journal, id: &str, seq: i64, position: &mut Position) -> bool {
    let moved = crate::retry::while_passing(
        "move a subscriber's cursor",
        JournalError::is_passing,
        || journal.advance(id, seq),
    )
    .await;
    match moved {
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
