//! The calls waiting for a plugin's live instance. The instance's executor thread takes them
//! straight from here, so a call costs one hop to that thread and one back; the supervisor
//! opens the queue for each new instance, looks at how long the running call has taken, and
//! closes the queue after a fault, a hang or a stop, answering what was left.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Abandon, CallWork, Job};

/// The calls for one plugin's instance, in the order they were made.
#[derive(Default)]
pub(super) struct CallQueue {
    state: Mutex<Queued>,
    ready: Condvar,
    /// Calls pushed so far, read without the lock while the instance's thread waits
    /// briefly for the next call before it sleeps (see [`SPIN`]).
    pushed: AtomicUsize,
}

/// How long the instance's thread keeps looking for the next call before it sleeps: a
/// caller making calls in turn usually makes the next within this, and a thread that has
/// not slept needs no wake-up (tens of µs on a busy machine; an empty call's round trip
/// fell from 66 to 1–12 µs p50 here). An idle plugin's thread sleeps after it.
const SPIN: Duration = Duration::from_micros(50);

/// Instance threads looking for their next call right now, across every plugin.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// At most half the cores (one at least) look at once, so that threads waiting for calls
/// never crowd out those making them.
fn max_spinning() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)))
}

#[derive(Default)]
struct Queued {
    jobs: VecDeque<Job>,
    /// The instance taking calls, by the number of its start; none while no instance does,
    /// when calls go to the supervisor, which answers them with the plugin's state.
    open_for: Option<u64>,
    /// The call the instance is running: when it began, and how to answer its caller if the
    /// instance hangs.
    running: Option<(Instant, Abandon)>,
    /// The supervisor is looking at the running call's time; when it is not, the next call
    /// taken is reported to it.
    watched: bool,
}

/// A call for the instance to run.
pub(super) struct Next {
    /// The call.
    pub call: CallWork,
    /// The supervisor was not looking at the instance's calls: tell it one is running.
    pub unwatched: bool,
}

/// What a look at the running call found.
pub(super) enum Watched {
    /// It has run past the limit: how to answer its caller, the supervisor's to do now.
    Hung(Abandon),
    /// A call is running within its limit: look again.
    Running,
    /// No call is running: the next one taken is reported.
    Idle,
}

/// What was still queued when the queue closed, and the call that was running.
pub(super) struct Closed {
    /// Calls never begun, for the supervisor to answer with the plugin's state.
    pub left: Vec<Job>,
    /// How to answer the running call's caller, if a call was running.
    pub running: Option<Abandon>,
}

impl CallQueue {
    fn lock(&self) -> MutexGuard<'_, Queued> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `job` for the live instance; it comes back when no instance is taking calls.
    pub(super) fn push(&self, job: Job) -> Result<(), Job> {
        let mut queued = self.lock();
        if queued.open_for.is_none() {
            return Err(job);
        }
        queued.jobs.push_back(job);
        self.pushed.fetch_add(1, Ordering::Release);
        drop(queued);
        self.ready.notify_one();
        Ok(())
    }

    /// Take calls for the instance of start number `start` (calls made while it runs `init`
    /// wait for it); the supervisor looks at its calls from the start.
    pub(super) fn open(&self, start: u64) {
        let mut queued = self.lock();
        queued.open_for = Some(start);
        queued.watched = true;
    }

    /// The next call for the instance of start `start`, waiting for one; none once the queue
    /// is closed to it. How to answer its caller is kept until [`CallQueue::finished`].
    pub(super) fn next(&self, start: u64) -> Option<Next> {
        let mut queued = self.lock();
        loop {
            if queued.open_for != Some(start) {
                return None;
            }
            if let Some(job) = queued.jobs.pop_front() {
                queued.running = Some((Instant::now(), job.abandon));
                let unwatched = !std::mem::replace(&mut queued.watched, true);
                return Some(Next {
                    call: job.run,
                    unwatched,
                });
            }
            let seen = self.pushed.load(Ordering::Acquire);
            drop(queued);
            self.spin_for_push(seen);
            queued = self.lock();
            if queued.jobs.is_empty() && queued.open_for == Some(start) {
                queued = self.ready.wait(queued).unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// Look for a call pushed after the `seen`th for up to [`SPIN`], giving the core away
    /// between looks.
    fn spin_for_push(&self, seen: usize) {
        if SPINNING.fetch_add(1, Ordering::AcqRel) < max_spinning() {
            let since = Instant::now();
            while self.pushed.load(Ordering::Acquire) == seen && since.elapsed() < SPIN {
                std::thread::yield_now();
            }
        }
        SPINNING.fetch_sub(1, Ordering::AcqRel);
    }

    /// The instance of start `start` finished its call.
    pub(super) fn finished(&self, start: u64) {
        let mut queued = self.lock();
        if queued.open_for == Some(start) {
            queued.running = None;
        }
    }

    /// Look at the running call: past `limit`, how to answer its caller (the supervisor's to
    /// do from then on); none running, stop looking until the next call is taken.
    pub(super) fn watch(&self, limit: Duration) -> Watched {
        let mut queued = self.lock();
        match queued.running.take() {
            Some((since, abandon)) if since.elapsed() >= limit => Watched::Hung(abandon),
            Some(running) => {
                queued.running = Some(running);
                Watched::Running
            }
            None => {
                queued.watched = false;
                Watched::Idle
            }
        }
    }

    /// Stop taking calls; the instance's thread ends after its current call.
    pub(super) fn close(&self) -> Closed {
        let mut queued = self.lock();
        queued.open_for = None;
        let closed = Closed {
            left: queued.jobs.drain(..).collect(),
            running: queued.running.take().map(|(_, abandon)| abandon),
        };
        drop(queued);
        self.ready.notify_all();
        closed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A job that counts, in `answered`, the callers it answered with a state or a hang.
    fn job(answered: &Arc<AtomicUsize>) -> Job {
        let (by_state, by_hang) = (answered.clone(), answered.clone());
        Job {
            run: Box::new(move |instance| {
                if instance.is_err() {
                    by_state.fetch_add(1, Ordering::Relaxed);
                }
                None
            }),
            abandon: Box::new(move |_| {
                by_hang.fetch_add(1, Ordering::Relaxed);
            }),
        }
    }

    #[test]
    fn a_call_made_while_the_thread_looks_or_sleeps_is_taken() {
        let queue = Arc::new(CallQueue::default());
        let answered = Arc::new(AtomicUsize::new(0));
        queue.open(1);
        for pause in [Duration::ZERO, Duration::from_millis(20)] {
            let taker = {
                let queue = queue.clone();
                std::thread::spawn(move || queue.next(1).is_some())
            };
            std::thread::sleep(pause);
            assert!(queue.push(job(&answered)).is_ok());
            assert!(
                taker.join().expect("the taking thread"),
                "taken after {pause:?}"
            );
        }
        let taker = {
            let queue = queue.clone();
            std::thread::spawn(move || queue.next(1).is_none())
        };
        std::thread::sleep(Duration::from_millis(20));
        queue.close();
        assert!(
            taker.join().expect("the taking thread"),
            "a sleeping thread ends when the queue closes"
        );
    }

    #[test]
    fn calls_go_to_the_open_instance_and_a_closed_queue_hands_back_what_was_left() {
        let queue = CallQueue::default();
        let answered = Arc::new(AtomicUsize::new(0));
        assert!(
            queue.push(job(&answered)).is_err(),
            "no instance takes calls before the first opens the queue"
        );
        queue.open(1);
        for _ in 0..3 {
            assert!(queue.push(job(&answered)).is_ok());
        }
        let first = queue.next(1).expect("the first call");
        assert!(!first.unwatched, "watched from the start");
        assert!(
            matches!(queue.watch(Duration::from_secs(60)), Watched::Running),
            "not hung yet"
        );
        let Watched::Hung(abandon) = queue.watch(Duration::ZERO) else {
            panic!("past a zero limit");
        };
        abandon(crate::runtime::Fault {
            kind: crate::runtime::FaultKind::Timeout,
            message: "hung".into(),
        });
        assert_eq!(answered.load(Ordering::Relaxed), 1, "its caller answered");
        drop(first);
        let closed = queue.close();
        assert_eq!(closed.left.len(), 2, "the two calls never begun");
        assert!(
            closed.running.is_none(),
            "the hung call was answered already"
        );
        assert!(queue.next(1).is_none(), "the closed instance takes no more");
        queue.open(2);
        assert!(queue.push(job(&answered)).is_ok());
        assert!(
            queue.next(1).is_none(),
            "an abandoned instance never takes the next one's calls"
        );
        assert!(queue.next(2).is_some());
        queue.finished(1);
        assert!(
            matches!(queue.watch(Duration::ZERO), Watched::Hung(_)),
            "a late finish of the abandoned instance does not clear the live one's call"
        );
        queue.finished(2);
        assert!(matches!(queue.watch(Duration::ZERO), Watched::Idle));
        for _ in 0..2 {
            assert!(queue.push(job(&answered)).is_ok());
        }
        let after_idle = queue.next(2).expect("the call after an idle look");
        assert!(after_idle.unwatched, "is reported to the supervisor");
        queue.finished(2);
        let then = queue.next(2).expect("the call after it");
        assert!(!then.unwatched, "and only the first is");
    }
}
