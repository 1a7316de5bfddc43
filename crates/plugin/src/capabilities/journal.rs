//! The host side of `journal`: events a plugin may emit (its manifest's `events.emits`).

use super::*;
use crate::rate::{Take, TokenBucket};

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
        match self.grants.emit_rate.bucket.take() {
            Take::Taken { refused_before: 0 } => {}
            Take::Taken { refused_before } => report_refused(&self.plugin, refused_before),
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

/// A plugin's `limits.emits_per_sec`, shared by its instances: how many emits it refused is
/// logged at the next emit it takes, or when the plugin goes (until 2026-12-02 a flood that
/// ended with the plugin's last emit was never counted, though the log said it would be).
#[derive(Debug)]
pub struct EmitRate {
    plugin: Arc<str>,
    bucket: TokenBucket,
}

impl EmitRate {
    /// `per_sec` emits a second on average for `plugin`, in bursts of as many.
    pub fn new(plugin: Arc<str>, per_sec: u32) -> Self {
        Self {
            plugin,
            bucket: TokenBucket::new(per_sec, per_sec),
        }
    }
}

impl Drop for EmitRate {
    fn drop(&mut self) {
        let refused = self.bucket.take_refused();
        if refused > 0 {
            report_refused(&self.plugin, refused);
        }
    }
}

/// Log that `plugin` had `refused` emits refused since its last one taken.
fn report_refused(plugin: &str, refused: u64) {
    tracing::warn!(
        plugin,
        refused,
        "plugin emits over limits.emits_per_sec: {refused} refused"
    );
}
