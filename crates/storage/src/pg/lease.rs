//! A host's leases on the buffer work it claimed: renewed every third of the lease while the
//! host lives, and only for claims its callers were given.
//!
//! A claim can commit and still never reach its caller: the connection breaks after the
//! server committed but before its answer arrived, so the caller sees an error. Renewing
//! every running row this host claimed (as until 2026-12-03) kept such work `running` with
//! no one working on it, and its conversation waiting behind it, for as long as the host
//! lived. Renewing only what was handed over lets it lapse after one lease, and any host's
//! next claim (this one's too) takes it over.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::PgPool;
use crate::now_ms;

/// Claimed work: a main batch or a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Work {
    Batch,
    Task,
}

impl Work {
    /// Its table, the column its outcome goes in, and its name in messages.
    pub(super) fn table_outcome_name(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Work::Batch => ("buffer_batches", "reply", "batch"),
            Work::Task => ("buffer_tasks", "result", "task"),
        }
    }
}

/// The claims this host's callers were given, by kind and id, until their work's outcome
/// is recorded: the only ones renewed.
#[derive(Clone, Default)]
pub(super) struct Held(Arc<Mutex<BTreeSet<(Work, i64)>>>);

impl Held {
    /// Hold `work` `id` from now on (its claim committed and reached its caller).
    pub(super) fn insert(&self, work: Work, id: i64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((work, id));
    }

    /// Stop holding `work` `id` (its outcome is recorded, or another host took it over).
    pub(super) fn remove(&self, work: Work, id: i64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(work, id));
    }

    /// The ids of the `work` held now.
    fn ids(&self, work: Work) -> Vec<i64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(kind, _)| *kind == work)
            .map(|(_, id)| *id)
            .collect()
    }
}

/// Renew `holder`'s `held` claims every third of `lease` until `stopped` says stop.
pub(super) fn renew_until_dropped(
    pool: &PgPool,
    holder: &str,
    held: &Held,
    lease: Duration,
    stopped: &mpsc::Receiver<()>,
) {
    let lease_ms = super::millis(lease);
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(lease / 3) {
        let claims = [Work::Batch, Work::Task].map(|work| (work, held.ids(work)));
        if claims.iter().all(|(_, ids)| ids.is_empty()) {
            continue;
        }
        let holder = holder.to_string();
        let renewed = pool
            .submit(move |tx| {
                let until = now_ms() + lease_ms;
                for (work, ids) in &claims {
                    let (table, _, _) = work.table_outcome_name();
                    tx.execute(
                        &format!(
                            "UPDATE {table} SET lease_until = $2
                              WHERE claimed_by = $1 AND status = 'running' AND id = ANY($3)"
                        ),
                        &[&holder, &until, ids],
                    )?;
                }
                Ok(())
            })
            .wait();
        if let Err(e) = renewed {
            tracing::warn!("cannot renew this host's buffer claims: {e}");
        }
    }
}
