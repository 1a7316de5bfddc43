//! Delivery of journal events to one subscribing plugin: in journal order, at least once,
//! retried with capped exponential backoff, dead-lettered after `max_attempts`.
//!
//! Each subscriber runs as its own task, so a subscriber that hangs until its deadline or
//! fails every event delays only itself. The cursor moves only after an event was taken (or
//! dead-lettered), so an event being delivered when the host dies is delivered again on the
//! next start.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Event, Journal};
use crate::plugin::bindings::v0_1::types::Event as WitEvent;
use crate::plugin::runtime::CallError;
use crate::plugin::supervisor::PluginHandle;

/// How many events are read per round.
const READ_AHEAD: usize = 256;

fn to_wit(event: &Event) -> WitEvent {
    WitEvent {
        seq: event.seq as u64,
        topic: event.topic.clone(),
        payload: event.payload.clone(),
        source: event.source.clone(),
        session_id: event.session_id.clone(),
        agent_id: event.agent_id.clone(),
        user_id: event.user_id.clone(),
        created_at: event.created_at,
    }
}

/// Deliver matching events to `plugin` until `stop` turns true; an event in flight when
/// the stop comes is finished first (or left for the next start if it is being retried).
pub async fn serve(
    journal: Arc<Journal>,
    plugin: PluginHandle,
    patterns: Vec<String>,
    mut stop: watch::Receiver<bool>,
) {
    let id = plugin.id().to_string();
    let mut cursor = match journal.subscribe(&id, &patterns).await {
        Ok(cursor) => cursor,
        Err(e) => {
            tracing::error!(subscriber = %id, "cannot subscribe: {e}");
            return;
        }
    };
    let config = journal.config().clone();
    loop {
        if *stop.borrow() {
            return;
        }
        let appended = journal.appended();
        let events = match journal.pending(cursor, &patterns, READ_AHEAD) {
            Ok(events) => events,
            Err(e) => {
                tracing::error!(subscriber = %id, "cannot read the journal: {e}");
                Vec::new()
            }
        };
        if events.is_empty() {
            tokio::select! {
                _ = appended => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        for event in events {
            let wit = to_wit(&event);
            let mut attempt = 0u32;
            let outcome = loop {
                attempt += 1;
                let delivered = wit.clone();
                match plugin
                    .call(move |instance| instance.on_event(&delivered))
                    .await
                {
                    Ok(()) => break Ok(()),
                    Err(error) if attempt >= config.max_attempts => break Err(describe(&error)),
                    Err(error) => {
                        let backoff = config
                            .backoff_initial_ms
                            .saturating_mul(1 << (attempt - 1).min(20))
                            .min(config.backoff_max_ms);
                        tracing::warn!(subscriber = %id, seq = event.seq, attempt, backoff_ms = backoff, "delivery failed: {}", describe(&error));
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(backoff)) => {}
                            // Stopping: leave the event for the next start.
                            _ = stop.changed() => return,
                        }
                    }
                }
            };
            let recorded = match &outcome {
                Ok(()) => journal.advance(&id, event.seq).await,
                Err(error) => {
                    tracing::error!(subscriber = %id, seq = event.seq, topic = %event.topic, attempts = attempt, "event dead-lettered: {error}");
                    journal.dead_letter(&id, &event, error, attempt).await
                }
            };
            if let Err(e) = recorded {
                tracing::error!(subscriber = %id, "cannot move the cursor: {e}");
                return;
            }
            cursor = event.seq;
            if *stop.borrow() {
                return;
            }
        }
    }
}

fn describe(error: &CallError) -> String {
    match error {
        CallError::Plugin(error) => format!("the plugin returned {error:?}"),
        other => other.to_string(),
    }
}
