//! The `counter` example plugin (world `handler`).
//!
//! At `init` it adds one to a start counter kept in the host's `kv` store and logs it, so
//! every `cairn run` visibly shows the count grow; each event it receives bumps an event
//! counter the same way. Its manifest is `manifests/counter.yaml`.
//!
//! Built against API 0.2.1, it takes a backlog of events as runs through `on-events`, one
//! call into the plugin for many events, each counted as `on-event` counts it.

wit_bindgen::generate!({
    path: "../../wit/v0.2.1",
    world: "handler",
});

use cairn::plugin::types::LogLevel;
use cairn::plugin::{kv, log};

use exports::cairn::plugin::handler_plugin::{Guest, RunFailure};
use cairn::plugin::types::{Error, Event};

struct Counter;

/// Add one to the counter under `key` and return the new value.
fn bump(key: &str) -> Result<u64, Error> {
    let current = match kv::get(key)? {
        Some(bytes) => String::from_utf8_lossy(&bytes).parse::<u64>().unwrap_or(0),
        None => 0,
    };
    let next = current + 1;
    kv::set(key, next.to_string().as_bytes())?;
    Ok(next)
}

impl Guest for Counter {
    fn init(config: String) -> Result<(), Error> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| Error::InvalidInput(format!("config: {e}")))?;
        let greeting = config.get("greeting").and_then(|g| g.as_str()).unwrap_or("hello");
        let starts = bump("starts")?;
        log::log(LogLevel::Info, &format!("{greeting} from counter: started {starts} time(s)"));
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        let seen = bump("events")?;
        log::log(
            LogLevel::Info,
            &format!("counter: event #{seen} seq={} topic={}", event.seq, event.topic),
        );
        Ok(())
    }

    fn on_events(events: Vec<Event>) -> Result<(), RunFailure> {
        for (handled, event) in events.into_iter().enumerate() {
            Self::on_event(event).map_err(|error| RunFailure { handled: handled as u32, error })?;
        }
        Ok(())
    }
}

export!(Counter);
