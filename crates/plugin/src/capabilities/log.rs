//! The host side of `log` (and the shared `types` interface).

use super::*;

impl wit::types::Host for PluginContext {}

impl wit::log::Host for PluginContext {
    fn log(&mut self, level: LogLevel, message: String) {
        let level = match level {
            LogLevel::Trace => Level::Trace,
            LogLevel::Debug => Level::Debug,
            LogLevel::Info => Level::Info,
            LogLevel::Warn => Level::Warn,
            LogLevel::Error => Level::Error,
        };
        if !self.hush.is_on() {
            self.log.write(level, "log", &message);
        }
    }
}
