//! A plugin as a journal subscriber: the events waiting for it are delivered in runs, one hop
//! to its thread per run; a handler of API 0.2.1 takes a run in `on-events` calls sized to its
//! measured time per event, any other one `on-event` call per event.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Event;
use super::dispatch::{Absence, EventRun, Run, Subscriber, Undelivered};
use crate::plugin::runtime::{CallError, PluginInstance};
use crate::plugin::supervisor::PluginHandle;

/// How long a plugin keeps taking one run's events before it hands the rest to the next
/// run: other calls to the plugin wait at most this (plus one event) behind a run, and a run
/// stays far inside the supervisor's hang grace.
const RUN_FOR: Duration = Duration::from_millis(20);

/// A plugin subscribing through its manifest's `events.subscribes`.
pub struct PluginSubscriber {
    plugin: PluginHandle,
    runs: Arc<RunSizing>,
}

impl PluginSubscriber {
    /// Deliver to `plugin`.
    pub fn new(plugin: PluginHandle) -> Self {
        Self {
            plugin,
            runs: Arc::new(RunSizing::default()),
        }
    }
}

impl Subscriber for PluginSubscriber {
    fn id(&self) -> &str {
        self.plugin.id()
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        let delivered = event.clone();
        let sizing = self.runs.clone();
        self.plugin
            .call(move |instance| {
                sizing.reached(delivered.seq);
                instance.on_event(&delivered)
            })
            .await
            .map_err(describe)
    }

    /// The whole run in one hop to the plugin's thread, so the hop is paid once per run
    /// rather than per event. A plugin that takes runs (`on-events`, API 0.2.1) gets them in
    /// calls sized to its measured time per event; otherwise each event is one `on-event`
    /// call under its own epoch deadline.
    async fn take_run(&self, events: EventRun) -> Run {
        let tried = events.len();
        // Counted as they are taken: a run that faults still says how far it got.
        let taken = Arc::new(AtomicUsize::new(0));
        let counter = taken.clone();
        let sizing = self.runs.clone();
        let outcome = self
            .plugin
            .call(move |instance| deliver_run(instance, &events, &sizing, &counter))
            .await;
        Run {
            taken: taken.load(Ordering::Relaxed).min(tried),
            failure: outcome.err().map(describe),
        }
    }
}

/// Deliver `events` on the plugin's thread for up to [`RUN_FOR`], counting in `taken` how
/// many were taken.
fn deliver_run(
    instance: &mut PluginInstance,
    events: &[Event],
    sizing: &RunSizing,
    taken: &AtomicUsize,
) -> Result<(), CallError> {
    let started = Instant::now();
    // A run's call stays well inside the plugin's deadline, which it has once, not per event.
    let budget = RUN_FOR.min(instance.timeout() / 4);
    let mut next = 0;
    while next < events.len() {
        if next > 0 && started.elapsed() >= RUN_FOR {
            break;
        }
        let rest = &events[next..];
        sizing.reached(rest[0].seq);
        if !instance.takes_runs() || sizing.alone(rest[0].seq) {
            instance.on_event(&rest[0])?;
            next += 1;
        } else {
            let run = &rest[..sizing.size(budget).min(sizing.before_fault(rest))];
            let called = Instant::now();
            match instance.on_events(run) {
                Ok(()) => {
                    sizing.measured(called.elapsed(), run.len());
                    next += run.len();
                }
                Err(stopped) => {
                    taken.store(next + stopped.handled, Ordering::Relaxed);
                    if let CallError::Fault(_) = &stopped.error {
                        sizing.faulted(run);
                    }
                    return Err(stopped.error);
                }
            }
        }
        taken.store(next, Ordering::Relaxed);
    }
    Ok(())
}

/// Most events one `on-events` call takes (a cursor batch's worth).
const RUN_MOST: usize = 64;

/// How many events a plugin's `on-events` call gets, from the time its calls took per event,
/// and where delivery goes one event at a time after a run faulted. Only the plugin's thread
/// touches it, one run at a time.
#[derive(Debug)]
struct RunSizing {
    /// Time per event in the plugin's last runs (a moving average), in ns; 0 before the
    /// first run, which takes one event.
    per_event_ns: AtomicU64,
    /// The journal positions of the last run that faulted, given one at a time: a run that
    /// faulted does not say which event faulted, so its events are given one by one, each
    /// under its own deadline, and the one that faults is retried and dead-lettered alone.
    faulted: Mutex<Option<RangeInclusive<i64>>>,
}

impl Default for RunSizing {
    fn default() -> Self {
        Self {
            per_event_ns: AtomicU64::new(0),
            faulted: Mutex::new(None),
        }
    }
}

impl RunSizing {
    /// Events for one call expected to take about `budget`, from 1 to [`RUN_MOST`].
    fn size(&self, budget: Duration) -> usize {
        match self.per_event_ns.load(Ordering::Relaxed) {
            0 => 1,
            per_event => {
                (budget.as_nanos() / u128::from(per_event)).clamp(1, RUN_MOST as u128) as usize
            }
        }
    }

    /// A run of `events` took `took`.
    fn measured(&self, took: Duration, events: usize) {
        let this_run =
            (took.as_nanos() / events.max(1) as u128).clamp(1, u128::from(u64::MAX)) as u64;
        let average = match self.per_event_ns.load(Ordering::Relaxed) {
            0 => this_run,
            before => before - before / 4 + this_run / 4,
        };
        self.per_event_ns.store(average.max(1), Ordering::Relaxed);
    }

    /// Whether the event at `seq` goes alone: it was in the run that faulted.
    fn alone(&self, seq: i64) -> bool {
        self.fault().as_ref().is_some_and(|run| run.contains(&seq))
    }

    /// Delivery, in a run or alone, reached the event at `seq`: once past the faulted run,
    /// runs resume.
    fn reached(&self, seq: i64) {
        let mut fault = self.fault();
        if fault.as_ref().is_some_and(|run| seq > *run.end()) {
            *fault = None;
        }
    }

    /// How many of `events`, from the first, come before the faulted run (at least one; all
    /// when none faulted): a replay from before it goes in runs that stop short of it.
    fn before_fault(&self, events: &[Event]) -> usize {
        let before = match self.fault().as_ref() {
            Some(run) => events.iter().take_while(|e| e.seq < *run.start()).count(),
            None => events.len(),
        };
        before.max(1)
    }

    /// The run of `events` faulted: give them one at a time.
    fn faulted(&self, events: &[Event]) {
        if let (Some(first), Some(last)) = (events.first(), events.last()) {
            let mut fault = self.fault();
            *fault = Some(match fault.take() {
                Some(run) => (*run.start()).min(first.seq)..=(*run.end()).max(last.seq),
                None => first.seq..=last.seq,
            });
        }
    }

    fn fault(&self) -> MutexGuard<'_, Option<RangeInclusive<i64>>> {
        self.faulted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A failed plugin call as a delivery failure.
fn describe(error: CallError) -> Undelivered {
    let absent = if error.is_restarting() || error.is_store_away() {
        Some(Absence::Returning)
    } else if error.is_down() {
        Some(Absence::UntilRestart)
    } else {
        None
    };
    let error = match error {
        CallError::Plugin(error) => format!("the plugin returned {error}"),
        CallError::StoreAway { error, cause } => {
            format!("the plugin returned {error} while a host store was away ({cause})")
        }
        other => other.to_string(),
    };
    Undelivered { error, absent }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> Event {
        Event {
            seq,
            topic: "t".into(),
            payload: "{}".into(),
            source: "host".into(),
            session_id: None,
            agent_id: None,
            user_id: None,
            created_at: 0,
            depth: 0,
        }
    }

    #[test]
    fn a_run_is_sized_from_the_time_per_event_and_goes_one_by_one_past_a_fault() {
        let sizing = RunSizing::default();
        let budget = Duration::from_millis(20);
        assert_eq!(
            sizing.size(budget),
            1,
            "one event before anything is measured"
        );
        sizing.measured(Duration::from_millis(4), 4);
        assert_eq!(sizing.size(budget), 20, "1 ms an event: 20 in 20 ms");
        sizing.measured(Duration::from_micros(8), 8);
        assert_eq!(
            sizing.per_event_ns.load(Ordering::Relaxed),
            750_250,
            "a moving average"
        );
        for _ in 0..100 {
            sizing.measured(Duration::from_micros(64), 64);
        }
        assert_eq!(
            sizing.size(budget),
            RUN_MOST,
            "never more than a cursor batch"
        );
        sizing.measured(Duration::from_secs(400), 1);
        assert_eq!(sizing.size(budget), 1, "never fewer than one");

        let events: Vec<Event> = (1..=14).map(event).collect();
        assert!(!sizing.alone(10));
        assert_eq!(sizing.before_fault(&events), 14, "no fault: all in runs");
        sizing.faulted(&events[10..12]);
        assert!(sizing.alone(11) && sizing.alone(12));
        assert!(!sizing.alone(10) && !sizing.alone(13));
        assert_eq!(
            sizing.before_fault(&events),
            10,
            "a replay from before the fault goes in runs that stop short of it"
        );
        sizing.reached(12);
        assert!(sizing.alone(11), "not past the faulted run yet");
        sizing.reached(13);
        assert!(!sizing.alone(11), "past it, a replay goes in runs again");
        assert_eq!(sizing.before_fault(&events), 14);
    }
}
