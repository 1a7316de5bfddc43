//! What the console shows, read from the running host's stores by one sampler.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::buffer::Buffer;
use crate::memory::LocalMemory;
use crate::plugin::status::{self, HostRun, PluginReport, StatusLog};
use crate::store::journal::JournalOperator;
use cairn_vocab::buffer::BufferStats;
use cairn_vocab::event::{DeadLetter, SubscriberLag};
use cairn_vocab::memory::MemoryStats;

/// How many recent turns the page lists.
const TURNS_SHOWN: usize = 20;
/// How many recent turns the latency figures cover.
const TURNS_MEASURED: usize = 100;
/// How many dead letters the page lists.
const DEAD_LETTERS_SHOWN: usize = 10;
/// Memory's counts scan memory.db: they are read once every this many samples.
const MEMORY_EVERY: u64 = 10;

/// The host's state at one moment, as the page and `/metrics` show it. Field names are the
/// `/api/snapshot` keys.
#[derive(Debug, Default, Serialize)]
pub struct Snapshot {
    /// When it was read (ms since the epoch).
    pub taken_at: i64,
    /// The data dir.
    pub data_dir: String,
    /// `sqlite` or `postgres`.
    pub storage: String,
    /// This host's run.
    pub host: Option<HostRun>,
    /// Depth, batches and tasks.
    pub buffer: Option<BufferStats>,
    /// Buffer depth and oldest age over the last samples, oldest first.
    pub history: Vec<DepthSample>,
    /// Each journal subscriber's cursor, lag and dead letters.
    pub subscribers: Vec<SubscriberLag>,
    /// The newest dead letters.
    pub dead_letters: Vec<DeadLetter>,
    /// Each plugin's state, restarts, faults and last error.
    pub plugins: Vec<PluginReport>,
    /// Memory's counts (refreshed every few samples).
    pub memory: Option<MemoryStats>,
    /// The newest turns, newest first.
    pub turns: Vec<TurnSummary>,
    /// Turn latency over the newest turns.
    pub turn_latency: Option<TurnLatency>,
    /// Reads that failed this time, each naming what could not be read.
    pub errors: Vec<String>,
}

/// One point of the buffer chart.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DepthSample {
    /// When (ms since the epoch).
    pub at: i64,
    /// Messages waiting to be routed.
    pub depth: i64,
    /// Age of the oldest of them, in ms (0 when none waits).
    pub oldest_age_ms: i64,
}

/// One agent turn, from its `turn.completed` event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnSummary {
    /// The event's sequence number.
    #[serde(default)]
    pub seq: i64,
    /// When the turn ended (ms since the epoch).
    #[serde(default)]
    pub at: i64,
    /// The channel it answered.
    #[serde(default)]
    pub channel: String,
    /// The conversation.
    #[serde(default)]
    pub conversation: String,
    /// How many messages the batch held.
    #[serde(default)]
    pub messages: u64,
    /// `done`, `failed`, ….
    #[serde(default)]
    pub status: String,
    /// The turn's wall time.
    #[serde(default)]
    pub duration_ms: u64,
    /// The host's own time on the turn's path, in µs.
    #[serde(default)]
    pub host_us: u64,
    /// Why it failed, if it did.
    #[serde(default)]
    pub error: Option<String>,
}

/// Turn latency percentiles over the newest turns.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TurnLatency {
    /// How many turns they cover.
    pub turns: usize,
    /// Median wall time, ms.
    pub p50_ms: u64,
    /// 99th percentile wall time, ms.
    pub p99_ms: u64,
    /// 99th percentile of the host's own time, µs.
    pub host_p99_us: u64,
}

/// The running host's stores the sampler reads.
pub struct Sources {
    /// The buffer.
    pub buffer: Arc<Buffer>,
    /// The journal's operator view (lags, dead letters, recent events), if it exists yet.
    pub journal: Option<Box<dyn JournalOperator>>,
    /// Plugin states.
    pub status: Arc<StatusLog>,
    /// Memory.
    pub memory: Arc<LocalMemory>,
    /// The data dir, shown on the page.
    pub data_dir: PathBuf,
    /// `sqlite` or `postgres`, shown on the page.
    pub storage: &'static str,
}

/// Reads the stores into snapshots, keeping the buffer's recent history.
pub struct Sampler {
    sources: Sources,
    history: VecDeque<DepthSample>,
    capacity: usize,
    samples: u64,
    memory: Option<MemoryStats>,
}

impl Sampler {
    /// A sampler keeping `history` points of the buffer chart.
    pub fn new(sources: Sources, history: usize) -> Self {
        Self {
            sources,
            history: VecDeque::with_capacity(history),
            capacity: history,
            samples: 0,
            memory: None,
        }
    }

    /// Read everything once (blocking: call off the async threads). A read that fails is
    /// named in `errors` and the rest is still shown.
    pub fn sample(&mut self) -> Snapshot {
        let mut errors = Vec::new();
        let taken_at = crate::store::now_ms();
        let buffer = noted(&mut errors, "buffer", self.sources.buffer.stats());
        if let Some(stats) = &buffer {
            self.remember_depth(taken_at, stats);
        }
        let report = noted(&mut errors, "plugin status", self.sources.status.report());
        let (host, plugins) = match report {
            Some(report) => (report.host.clone(), status::as_seen_now(report, true)),
            None => (None, Vec::new()),
        };
        if self.samples.is_multiple_of(MEMORY_EVERY)
            && let Some(stats) = noted(&mut errors, "memory", self.sources.memory.stats())
        {
            self.memory = Some(stats);
        }
        self.samples += 1;
        let journal = self.read_journal(&mut errors);
        let turn_latency = latency(&journal.turns);
        let mut turns = journal.turns;
        turns.truncate(TURNS_SHOWN);
        Snapshot {
            taken_at,
            data_dir: self.sources.data_dir.display().to_string(),
            storage: self.sources.storage.to_string(),
            host,
            buffer,
            history: self.history.iter().copied().collect(),
            subscribers: journal.subscribers,
            dead_letters: journal.dead_letters,
            plugins,
            memory: self.memory.clone(),
            turns,
            turn_latency,
            errors,
        }
    }

    fn remember_depth(&mut self, at: i64, stats: &BufferStats) {
        if self.history.len() == self.capacity {
            self.history.pop_front();
        }
        self.history.push_back(DepthSample {
            at,
            depth: stats.depth,
            oldest_age_ms: stats.oldest_unrouted_age_ms.unwrap_or(0),
        });
    }

    fn read_journal(&self, errors: &mut Vec<String>) -> JournalView {
        let Some(journal) = &self.sources.journal else {
            return JournalView::default();
        };
        let turns = noted(
            errors,
            "recent turns",
            journal.recent(&["turn.completed".to_string()], TURNS_MEASURED),
        )
        .unwrap_or_default();
        JournalView {
            subscribers: noted(errors, "journal subscribers", journal.subscriber_lags())
                .unwrap_or_default(),
            dead_letters: noted(
                errors,
                "dead letters",
                journal.dead_letters(DEAD_LETTERS_SHOWN),
            )
            .unwrap_or_default(),
            turns: turns.iter().rev().filter_map(turn_summary).collect(),
        }
    }

    /// Sample every `period` into `latest` until `stopping` turns true.
    pub async fn run(
        mut self,
        period: Duration,
        latest: watch::Sender<Arc<Snapshot>>,
        mut stopping: watch::Receiver<bool>,
    ) {
        loop {
            let sampled = tokio::task::spawn_blocking(move || {
                let snapshot = self.sample();
                (self, snapshot)
            })
            .await;
            let Ok((sampler, snapshot)) = sampled else {
                tracing::error!(
                    "the console's sampler panicked; the console shows its last sample"
                );
                return;
            };
            self = sampler;
            latest.send_replace(Arc::new(snapshot));
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stopping.wait_for(|stop| *stop) => return,
            }
        }
    }
}

/// What the journal tells the console.
#[derive(Default)]
struct JournalView {
    subscribers: Vec<SubscriberLag>,
    dead_letters: Vec<DeadLetter>,
    turns: Vec<TurnSummary>,
}

/// The value, or `None` with the failure noted under `what`.
fn noted<T, E: std::fmt::Display>(
    errors: &mut Vec<String>,
    what: &str,
    read: Result<T, E>,
) -> Option<T> {
    read.map_err(|e| errors.push(format!("cannot read {what}: {e}")))
        .ok()
}

fn turn_summary(event: &cairn_vocab::event::Event) -> Option<TurnSummary> {
    let mut turn: TurnSummary = serde_json::from_str(&event.payload).ok()?;
    turn.seq = event.seq;
    turn.at = event.created_at;
    Some(turn)
}

/// Nearest-rank percentiles of the turns' wall and host times.
fn latency(turns: &[TurnSummary]) -> Option<TurnLatency> {
    if turns.is_empty() {
        return None;
    }
    let mut wall: Vec<u64> = turns.iter().map(|t| t.duration_ms).collect();
    let mut host: Vec<u64> = turns.iter().map(|t| t.host_us).collect();
    wall.sort_unstable();
    host.sort_unstable();
    Some(TurnLatency {
        turns: turns.len(),
        p50_ms: percentile(&wall, 50),
        p99_ms: percentile(&wall, 99),
        host_p99_us: percentile(&host, 99),
    })
}

fn percentile(sorted: &[u64], p: usize) -> u64 {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(duration_ms: u64) -> TurnSummary {
        TurnSummary {
            seq: 0,
            at: 0,
            channel: "c".into(),
            conversation: "x".into(),
            messages: 1,
            status: "done".into(),
            duration_ms,
            host_us: duration_ms * 10,
            error: None,
        }
    }

    #[test]
    fn latency_takes_nearest_rank_percentiles() {
        let turns: Vec<_> = (1..=100).map(turn).collect();
        let figures = latency(&turns).unwrap();
        assert_eq!((figures.p50_ms, figures.p99_ms), (50, 99));
        assert_eq!(figures.host_p99_us, 990);
        assert_eq!(latency(&[turn(7)]).unwrap().p99_ms, 7);
        assert!(latency(&[]).is_none());
    }
}
