//! The host side of `lifecycle`: the sleep interrupt flag, and the terminal's stop request.

use super::*;

impl wit::lifecycle::Host for PluginContext {
    fn interrupted(&mut self) -> bool {
        // Without the lifecycle grant (or a lifecycle), nothing interrupts.
        self.grants.lifecycle
            && self
                .services
                .interrupt
                .as_ref()
                .is_some_and(|flag| flag.is_set())
    }

    fn request_stop(&mut self, reason: String) -> Result<(), WitError> {
        if !self.grants.stdio {
            return Err(denied(
                "lifecycle: request-stop is for the plugin holding the host's terminal (capabilities.stdio)",
            ));
        }
        let Some(stop) = &self.services.stop else {
            return Err(unavailable("host stop requests"));
        };
        stop.request(&self.plugin, &reason);
        Ok(())
    }
}
