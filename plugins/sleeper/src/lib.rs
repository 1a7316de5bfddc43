//! `sleeper` (kind `sleep-handler`, manifest `manifests/sleeper.yaml`).
//!
//! On `sleep.started` it works through five phases, each real work on memory (see
//! [`phases`]): review (re-score importance), prune (forget stale low-value episodes),
//! compress (forget the weaker of near-duplicate facts), reflect (insights from a user's
//! facts) and generalize (procedures from repeated requests). It checks
//! `lifecycle.interrupted()` between phases and inside them; an interrupted sleep keeps its
//! place in kv and the next sleep resumes at the phase it stopped in. Emits
//! `sleep.phase_completed` per phase and `sleep.completed {phases_completed, interrupted,
//! resumed_from, next_phase, changes, proposed}` at the end (`proposed`: what prune and
//! compress would forget where the host's autonomy lets plugins add but not forget).

mod phases;

use std::sync::OnceLock;

use cognition::{Error, Event, Guest, emit, info, kv, lifecycle};
use phases::{Outcome, PHASES, Settings};

struct Sleeper;

/// Where the next sleep starts.
const NEXT_PHASE_KEY: &str = "next_phase";

static SETTINGS: OnceLock<Settings> = OnceLock::new();

impl Guest for Sleeper {
    fn init(config: String) -> Result<(), Error> {
        let _ = SETTINGS.set(Settings::from_config(&cognition::parse_config(&config)?)?);
        Ok(())
    }

    fn on_event(_event: Event) -> Result<(), Error> {
        let settings = SETTINGS.get_or_init(Settings::default);
        let start = next_phase()?;
        let mut completed = Vec::new();
        let mut changes = serde_json::Map::new();
        let mut interrupted = false;
        let mut proposed = serde_json::Map::new();
        for (index, (name, run)) in PHASES.iter().enumerate().skip(start) {
            if index > start && !settings.pause(lifecycle::interrupted) {
                interrupted = true;
                break;
            }
            let mut proposals = Vec::new();
            let outcome = run(settings, &mut proposals)?;
            if !proposals.is_empty() {
                proposed.insert(name.to_string(), proposals.into());
            }
            match outcome {
                Outcome::Done(changed) => {
                    kv::set(NEXT_PHASE_KEY, (index + 1).to_string().as_bytes())?;
                    emit(
                        "sleep.phase_completed",
                        serde_json::json!({"phase": name, "changed": changed}),
                    )?;
                    changes.insert(name.to_string(), changed.into());
                    completed.push(*name);
                }
                Outcome::Interrupted => {
                    interrupted = true;
                    break;
                }
            }
        }
        let next = start + completed.len();
        if !interrupted {
            kv::set(NEXT_PHASE_KEY, b"0")?;
        }
        info(&format!(
            "sleep: {} phase(s) done from {}{}",
            completed.len(),
            PHASES[start].0,
            if interrupted { ", interrupted" } else { "" }
        ));
        emit(
            "sleep.completed",
            serde_json::json!({
                "phases_completed": completed, "interrupted": interrupted,
                "resumed_from": PHASES[start].0,
                "next_phase": if interrupted { Some(PHASES[next].0) } else { None },
                "changes": changes, "proposed": proposed,
            }),
        )?;
        Ok(())
    }
}

/// The phase the last sleep stopped before (0 after a full sleep or none yet).
fn next_phase() -> Result<usize, Error> {
    let saved = kv::get(NEXT_PHASE_KEY)?.unwrap_or_default();
    let index = String::from_utf8_lossy(&saved)
        .parse::<usize>()
        .unwrap_or(0);
    Ok(if index < PHASES.len() { index } else { 0 })
}

cognition::bindings::export_handler!(Sleeper);
