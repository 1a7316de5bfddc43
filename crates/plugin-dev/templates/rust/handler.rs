//! The `{{id}}` plugin ({{kind}}): receives the journal events its manifest subscribes to
//! and counts them in the host's kv store. Build with `cairn plugin build .`.

wit_bindgen::generate!({ path: "wit", world: "handler" });

use cairn::plugin::types::{Error, Event, LogLevel};
use cairn::plugin::{kv, log};
use exports::cairn::plugin::handler_plugin::Guest;

struct Plugin;

impl Guest for Plugin {
    fn init(config: String) -> Result<(), Error> {
        log::log(LogLevel::Info, &format!("{{id}} started with config {config}"));
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        let seen = match kv::get("events")? {
            Some(bytes) => String::from_utf8_lossy(&bytes).parse::<u64>().unwrap_or(0),
            None => 0,
        } + 1;
        kv::set("events", seen.to_string().as_bytes())?;
        log::log(
            LogLevel::Info,
            &format!("event #{seen}: {} (seq {})", event.topic, event.seq),
        );
        Ok(())
    }
}

export!(Plugin);
