//! `episode-summarizer` (kind `consolidator`, manifest `manifests/episode-summarizer.yaml`).
//!
//! On `session.ended` it asks the host's model for a JSON summary of the session's
//! transcript (`{title, summary, key_points, outcome, topics}`; transcripts under 50
//! characters are skipped, over 8,000 keep their head and tail), stores it as the session's
//! `summary` memory and emits `episode.summarized` with the summary and its memory id. A
//! model that twice answers something unusable is recorded as `episode.summary_failed`; a
//! provider that is down makes the event fail, so the host retries it later.

use cognition::pipeline::{self, Session};
use cognition::summary::lines_of_transcript;
use cognition::{Error, Event, Guest, emit, info};

struct EpisodeSummarizer;

impl Guest for EpisodeSummarizer {
    fn init(config: String) -> Result<(), Error> {
        cognition::parse_config(&config).map(|_| ())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        let payload: serde_json::Value = serde_json::from_str(&event.payload)
            .map_err(|e| Error::InvalidInput(format!("event {}: payload: {e}", event.seq)))?;
        let Some(session_id) = payload["session_id"]
            .as_str()
            .or(event.session_id.as_deref())
        else {
            return Err(Error::InvalidInput(format!(
                "event {}: no session_id",
                event.seq
            )));
        };
        let user = payload["user_id"]
            .as_str()
            .map(str::to_string)
            .or(event.user_id.clone());
        let session = Session::load(session_id, user)?;
        let lines = match lines_of_transcript(&payload["transcript"]) {
            from_event if !from_event.is_empty() => from_event,
            _ => session.lines(),
        };
        let summary = match pipeline::summarize(&lines)? {
            None => {
                info(&format!(
                    "session {session_id}: transcript too short to summarise"
                ));
                return Ok(());
            }
            Some(Err(garbage)) => {
                emit(
                    "episode.summary_failed",
                    garbage.report(session_id, &format!("summarising session {session_id}")),
                )?;
                return Ok(());
            }
            Some(Ok(summary)) => summary,
        };
        let summary_id = pipeline::store_summary(&session, &summary)?;
        emit(
            "episode.summarized",
            serde_json::json!({
                "session_id": session.id, "user_id": session.user_id, "agent_id": session.agent_id,
                "summary_id": summary_id, "title": summary.title, "summary": summary.summary,
                "key_points": summary.key_points, "outcome": summary.outcome, "topics": summary.topics,
            }),
        )?;
        info(&format!(
            "session {session_id}: summarised as {summary_id} ({})",
            summary.title
        ));
        Ok(())
    }
}

cognition::bindings::export_handler!(EpisodeSummarizer);
