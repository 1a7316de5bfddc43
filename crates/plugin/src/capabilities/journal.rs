//! The host side of `journal`: events a plugin may emit (its manifest's `events.emits`).

use super::*;
use crate::rate::Take;

impl wit::journal::Host for PluginContext {
    fn emit(&mut self, topic: String, payload: String) -> Result<u64, WitError> {
        if !is_valid_topic(&topic) {
            return Err(WitError::InvalidInput(format!(
                "topic: `{topic}` is not a topic; expected dot-separated segments of a-z 0-9 _ -"
            )));
        }
        if !self.grants.emits.contains(&topic) {
            return Err(denied(&format!(
                "journal: `{topic}` is not listed in the manifest's events.emits"
            )));
        }
        let Some(events) = &self.services.events else {
            return Err(unavailable("event journal"));
        };
        match self.grants.emit_rate.take() {
            Take::Taken { refused_before: 0 } => {}
            Take::Taken { refused_before } => tracing::warn!(
                plugin = &*self.plugin,
                refused = refused_before,
                "plugin emits over limits.emits_per_sec: {refused_before} refused"
            ),
            Take::Refused { first } => {
                if first {
                    tracing::warn!(
                        plugin = &*self.plugin,
                        "plugin emits over limits.emits_per_sec: refusing its emits until it slows"
                    );
                }
                return Err(WitError::Unavailable(
                    "journal: over this plugin's limits.emits_per_sec; emit again later".into(),
                ));
            }
        }
        let seq = events
            .append(NewEvent {
                topic,
                payload,
                source: self.plugin.to_string(),
                depth: self
                    .handling_depth
                    .map_or(0, |depth| depth.saturating_add(1)),
                ..NewEvent::default()
            })
            .map_err(|e| self.store_error(e))?;
        Ok(seq as u64)
    }
}
