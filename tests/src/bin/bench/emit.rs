//! Emit → on-event latency at 1k events/s: how long an event waits, from the moment it is
//! emitted (the append is called) until the subscribed WASM plugin's `on-event` returned.
//! Each event's stages are timed, so a slow one shows whether it waited for its own durable
//! append or for the delivery after it.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cairn::journal::dispatch::{EventRun, Run, Subscriber, Undelivered};
use cairn::journal::plugin_subscriber::PluginSubscriber;
use cairn::journal::{Event, Journal, JournalConfig};

/// Events appended, one a millisecond.
const EVENTS: usize = 2_000;

/// Per-event latencies in ms, each sorted.
pub struct EmitLatency {
    /// From the append's call until the plugin's `on-event` for the event returned.
    pub emit_to_taken: Vec<f64>,
    /// From the append's call until it returned (the event durable, the subscriber woken).
    pub append: Vec<f64>,
}

/// The plugin subscriber, noting when each event's `on-event` returned (the end of the run
/// that took it: a run of several is at most one event's work late for the first).
struct Timed {
    plugin: PluginSubscriber,
    taken: Mutex<Vec<(i64, Instant)>>,
}

impl Timed {
    fn note(&self, seqs: impl Iterator<Item = i64>) {
        let now = Instant::now();
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        taken.extend(seqs.map(|seq| (seq, now)));
    }
}

impl Subscriber for Timed {
    fn id(&self) -> &str {
        self.plugin.id()
    }

    async fn take(&self, event: &Event) -> Result<(), Undelivered> {
        self.plugin.take(event).await?;
        self.note(std::iter::once(event.seq));
        Ok(())
    }

    async fn take_run(&self, events: EventRun) -> Run {
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        let run = self.plugin.take_run(events).await;
        self.note(seqs.into_iter().take(run.taken));
        run
    }
}

/// Append [`EVENTS`] bench events at 1k/s to a journal in `scratch` with the bench plugin
/// (`component`) subscribed, served by the journal's dispatcher.
pub async fn measure(scratch: &Path, component: &Path) -> Result<EmitLatency> {
    let dir = scratch.join("emit-latency");
    std::fs::create_dir_all(&dir)?;
    let journal = Arc::new(Journal::open(&dir, JournalConfig::default())?);
    let (host, handles) = super::journal::bench_subscribers(
        &dir,
        component,
        &["sub0".to_string()],
        false,
        journal.clone(),
    )
    .await?;
    let patterns = vec!["bench.*".to_string()];
    let handle = handles.into_iter().next().context("a subscriber")?;
    journal.subscribe(handle.id(), &patterns).await?;
    let timed = Arc::new(Timed {
        plugin: PluginSubscriber::new(handle),
        taken: Mutex::default(),
    });
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(cairn::journal::dispatch::serve(
        journal.clone(),
        timed.clone(),
        patterns,
        stopping,
    ));
    let mut emitted = Vec::with_capacity(EVENTS);
    let start = Instant::now();
    for i in 0..EVENTS {
        tokio::time::sleep_until((start + Duration::from_millis(i as u64)).into()).await;
        let called = Instant::now();
        let seq = journal.append(super::journal::bench_event(i)).await?;
        emitted.push((seq, called, called.elapsed()));
    }
    let all_taken = || timed.taken.lock().map_or(0, |t| t.len()) >= EVENTS;
    let waited = Instant::now();
    while !all_taken() && waited.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop.send(true);
    let _ = worker.await;
    host.stop().await;
    let taken: std::collections::HashMap<i64, Instant> = timed
        .taken
        .lock()
        .map_err(|_| anyhow::anyhow!("lock"))?
        .iter()
        .copied()
        .collect();
    anyhow::ensure!(
        taken.len() == EVENTS,
        "the plugin took {} of {EVENTS} events",
        taken.len()
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut emit_to_taken = Vec::with_capacity(EVENTS);
    let mut append = Vec::with_capacity(EVENTS);
    for (seq, called, appended) in emitted {
        let at = taken.get(&seq).context("an event the plugin never took")?;
        emit_to_taken.push(ms(at.saturating_duration_since(called)));
        append.push(ms(appended));
    }
    emit_to_taken.sort_by(|a, b| a.total_cmp(b));
    append.sort_by(|a, b| a.total_cmp(b));
    Ok(EmitLatency {
        emit_to_taken,
        append,
    })
}
