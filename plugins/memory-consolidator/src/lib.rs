//! `memory-consolidator` (kind `consolidator`, manifest `manifests/memory-consolidator.yaml`).
//!
//! On `memory.session_completed` (a user moved on to a new session) and on its nightly
//! schedule (`0 3 * * *`, `schedule.memory-consolidator.nightly`) it consolidates every
//! session still waiting: the one the event names (the user left it), and those that
//! ended more than `grace_secs` (600) ago without the summarizer and fact extractor
//! finishing them.
//! For each: summary, facts, marked consolidated — each step safe to repeat, so a crash
//! half-way is finished by the next run and nothing is consolidated twice. Emits
//! `memory.consolidated` with what each run did (also when it found nothing to do, and
//! `stopped` with the reason when the host's write rate or LLM budget ended it early: the
//! sessions left stay pending for the next trigger), and `memory.consolidation_failed` for a session
//! whose model answers were unusable (it stays pending for the next run).

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use cognition::bindings::cairn::plugin::types::Session as PendingSession;
use cognition::model::Garbage;
use cognition::pipeline::{self, FactPolicy, Session};
use cognition::{Error, Event, Guest, consolidation, emit, info, warn};

struct MemoryConsolidator;

/// The settings `init` read from the config.
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// Idle-ended sessions younger than this are left to the summarizer path, in ms.
    grace_ms: i64,
    /// Sessions taken per run.
    batch: u32,
    facts: FactPolicy,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

impl Guest for MemoryConsolidator {
    fn init(config: String) -> Result<(), Error> {
        let config = cognition::parse_config(&config)?;
        let settings = Settings {
            grace_ms: (cognition::config_number(&config, "grace_secs", 600.0, 0.0..=604_800.0)?
                * 1000.0) as i64,
            batch: cognition::config_number(&config, "batch", 50.0, 1.0..=1000.0)? as u32,
            facts: FactPolicy::from_config(&config)?,
        };
        let _ = SETTINGS.set(settings);
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        let settings = *SETTINGS.get_or_init(|| Settings {
            grace_ms: 600_000,
            batch: 50,
            facts: FactPolicy::default(),
        });
        let now = now_ms();
        let left = left_by_user(&event);
        let mut report = Report::default();
        for session in consolidation::pending_sessions(settings.batch)? {
            let named = left.as_deref() == Some(session.id.as_str());
            if !named && !ended_long_ago(&session, now, settings.grace_ms) {
                report.waiting += 1;
                continue;
            }
            match consolidate(&session, settings.facts, &mut report) {
                Ok(()) => {}
                // The host's write gate or the LLM budget said "not now": what is done stays
                // done, the rest waits for the next trigger (the next event, or tonight).
                Err(Error::Unavailable(reason)) => {
                    report.stopped = Some(reason);
                    break;
                }
                Err(other) => return Err(other),
            }
        }
        let done = format!(
            "consolidated {} session(s) on {} ({} fact(s), {} failed, {} waiting)",
            report.consolidated.len(),
            event.topic,
            report.facts,
            report.failed,
            report.waiting
        );
        match &report.stopped {
            None => info(&done),
            Some(reason) => warn(&format!(
                "{done}; stopped early: {reason} (the rest waits for the next trigger)"
            )),
        }
        emit(
            "memory.consolidated",
            serde_json::json!({
                "trigger": event.topic, "sessions": report.consolidated, "facts": report.facts,
                "summaries": report.summaries, "failed": report.failed, "waiting": report.waiting,
                "stopped": report.stopped,
            }),
        )?;
        Ok(())
    }
}

/// What one run did.
#[derive(Debug, Default)]
struct Report {
    consolidated: Vec<String>,
    summaries: usize,
    facts: usize,
    failed: usize,
    waiting: usize,
    /// Why the run stopped early, if it did.
    stopped: Option<String>,
}

/// The session a `memory.session_completed` event names: the user left it for a new one.
fn left_by_user(event: &Event) -> Option<String> {
    if event.topic != "memory.session_completed" {
        return None;
    }
    let payload: serde_json::Value = serde_json::from_str(&event.payload).ok()?;
    payload["session_id"].as_str().map(str::to_string)
}

/// Whether a waiting session ended longer ago than the grace period (the summarizer path
/// had its chance).
fn ended_long_ago(session: &PendingSession, now: i64, grace_ms: i64) -> bool {
    session
        .ended_at
        .is_some_and(|ended| now - ended >= grace_ms)
}

/// Summarise a session, save its facts and mark it consolidated.
fn consolidate(
    pending: &PendingSession,
    policy: FactPolicy,
    report: &mut Report,
) -> Result<(), Error> {
    let session = Session::load(&pending.id, pending.user_id.clone())?;
    if session.episodes.is_empty() {
        consolidation::mark_consolidated(&session.id)?;
        report.consolidated.push(session.id);
        return Ok(());
    }
    let summary = match pipeline::summarize(&session.lines())? {
        Some(Err(garbage)) => {
            failed(report, &session.id, &garbage)?;
            return Ok(());
        }
        Some(Ok(summary)) => Some(summary),
        None => None,
    };
    if let Some(summary) = &summary {
        pipeline::store_summary(&session, summary)?;
        report.summaries += 1;
    }
    match pipeline::extract_and_save(&session, summary.as_ref(), policy)? {
        Ok(extraction) => {
            report.facts += extraction.saved.len();
            report.consolidated.push(session.id);
        }
        Err(garbage) => {
            failed(report, &session.id, &garbage)?;
        }
    }
    Ok(())
}

/// Count a session whose model answers were unusable and record it (it stays pending).
fn failed(report: &mut Report, session: &str, garbage: &Garbage) -> Result<(), Error> {
    report.failed += 1;
    let about = format!("consolidating session {session}");
    emit(
        "memory.consolidation_failed",
        garbage.report(session, &about),
    )
    .map(|_| ())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

cognition::bindings::export_handler!(MemoryConsolidator);
