//! `fact-extractor` (kind `consolidator`, manifest `manifests/fact-extractor.yaml`, after
//! `episode-summarizer`).
//!
//! On `episode.summarized` it asks the host's model for the facts the session states, keeps
//! at most five with confidence ≥ `min_confidence` (0.6) that are not more than
//! `max_similarity` (0.85) alike to a fact the user already has, saves them together with
//! the session's episodes as sources, and marks the session consolidated. A fact naming the
//! same subject and predicate as a current one supersedes it (the host keeps the old one,
//! with `valid_to` and `superseded_by`). Emits `facts.extracted`, or
//! `facts.extraction_failed` after two unusable answers (the session then stays pending for
//! the consolidator).

use cognition::pipeline::{self, FactPolicy, Session};
use cognition::summary::Summary;
use std::sync::OnceLock;

use cognition::{Error, Event, Guest, emit, info};

struct FactExtractor;

/// The policy `init` read from the config (one instance serves every event).
static POLICY: OnceLock<FactPolicy> = OnceLock::new();

impl Guest for FactExtractor {
    fn init(config: String) -> Result<(), Error> {
        let policy = FactPolicy::from_config(&cognition::parse_config(&config)?)?;
        let _ = POLICY.set(policy);
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        let payload: serde_json::Value = serde_json::from_str(&event.payload)
            .map_err(|e| Error::InvalidInput(format!("event {}: payload: {e}", event.seq)))?;
        let Some(session_id) = payload["session_id"].as_str() else {
            return Err(Error::InvalidInput(format!(
                "event {}: no session_id",
                event.seq
            )));
        };
        if cognition::consolidation::is_consolidated(session_id)? {
            info(&format!("session {session_id}: already consolidated"));
            return Ok(());
        }
        let summary = Summary::from_answer(&payload).ok();
        let user = payload["user_id"].as_str().map(str::to_string);
        let session = Session::load(session_id, user)?;
        match pipeline::extract_and_save(
            &session,
            summary.as_ref(),
            *POLICY.get_or_init(FactPolicy::default),
        )? {
            Ok(extraction) => {
                emit(
                    "facts.extracted",
                    serde_json::json!({
                        "session_id": session_id, "facts": extraction.saved,
                        "unsure": extraction.selection.unsure,
                        "duplicates": extraction.selection.duplicates,
                    }),
                )?;
                info(&format!(
                    "session {session_id}: {} fact(s) saved",
                    extraction.saved.len()
                ));
            }
            Err(garbage) => {
                emit(
                    "facts.extraction_failed",
                    garbage.report(
                        session_id,
                        &format!("extracting the facts of session {session_id}"),
                    ),
                )?;
            }
        }
        Ok(())
    }
}

cognition::bindings::export_handler!(FactExtractor);
