//! Rows arriving together stored in one statement: the first caller to wait sends a job
//! to the pool, and the job takes every row waiting by the time it runs. Each PostgreSQL
//! statement is a round trip, so one statement per group is what lets many writers scale.

use std::sync::{Arc, Mutex, PoisonError};

use postgres::Client;
use tokio::sync::oneshot;

use super::PgPool;
use crate::StorageError;
use crate::writer::Receipt;

/// Stores every row of a group in one transaction; the id of each, in order. A row that
/// makes it fail fails the group.
pub(crate) type StoreAll<R> = fn(&mut Client, &[&R]) -> Result<Vec<i64>, StorageError>;

/// Rows of type `R` waiting to be stored by one [`StoreAll`].
pub(crate) struct Batcher<R> {
    waiting: Arc<Mutex<Vec<Waiting<R>>>>,
    store_all: StoreAll<R>,
}

/// A row and who waits for its id.
type Waiting<R> = (R, oneshot::Sender<Result<i64, StorageError>>);

impl<R: Send + 'static> Batcher<R> {
    /// Rows stored by `store_all`.
    pub(crate) fn new(store_all: StoreAll<R>) -> Self {
        Self {
            waiting: Arc::default(),
            store_all,
        }
    }

    /// Queue `row` on `pool`; the receipt resolves to its id once its group committed.
    pub(crate) fn push(&self, pool: &PgPool, row: R) -> Receipt<i64> {
        let (reply, receiver) = oneshot::channel();
        let first = {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.push((row, reply));
            waiting.len() == 1
        };
        if first {
            let (waiting, store_all) = (Arc::clone(&self.waiting), self.store_all);
            if !pool.run(move |client| store_waiting(client, &waiting, store_all)) {
                return Receipt::ready(Err(StorageError::Stopped));
            }
        }
        Receipt::answered_by(receiver)
    }
}

/// Store every row waiting as one group and answer each; when the group fails, each row is
/// tried alone so that one bad row fails only itself.
fn store_waiting<R>(
    client: Result<&mut Client, StorageError>,
    waiting: &Mutex<Vec<Waiting<R>>>,
    store_all: StoreAll<R>,
) {
    let group = std::mem::take(&mut *waiting.lock().unwrap_or_else(PoisonError::into_inner));
    if group.is_empty() {
        return;
    }
    let client = match client {
        Ok(client) => client,
        Err(e) => return answer_all(group, &e),
    };
    let rows: Vec<&R> = group.iter().map(|(row, _)| row).collect();
    match store_all(client, &rows) {
        Ok(ids) => {
            for (id, (_, reply)) in ids.into_iter().zip(group) {
                let _ = reply.send(Ok(id));
            }
        }
        Err(_) if group.len() > 1 => {
            for (row, reply) in group {
                let stored = store_all(client, &[&row]).and_then(|ids| {
                    ids.first()
                        .copied()
                        .ok_or_else(|| StorageError::Postgres("no id was returned".into()))
                });
                let _ = reply.send(stored);
            }
        }
        Err(e) => answer_all(group, &e),
    }
}

fn answer_all<R>(group: Vec<Waiting<R>>, error: &StorageError) {
    for (_, reply) in group {
        let _ = reply.send(Err(error.clone()));
    }
}
