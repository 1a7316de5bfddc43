//! The host side of `journal`: events a plugin may emit (its manifest's `events.emits`).

use super::*;

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
        let seq = events
            .append(NewEvent {
                topic,
                payload,
                source: self.plugin.to_string(),
                ..NewEvent::default()
            })
            .map_err(to_wit_error)?;
        Ok(seq as u64)
    }
}
