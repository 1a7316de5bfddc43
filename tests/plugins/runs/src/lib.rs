//! A test handler built against API 0.2.1, which takes runs of events in one `on-events`
//! call. It logs each call (`runs: on-events call with N events`) and each event it takes
//! (`runs: took seq=N via on-events|on-event`). An event whose payload contains
//! `please-fail` is answered with an error, one containing `please-trap` traps, wherever
//! it is in a run.

wit_bindgen::generate!({
    path: "../../../wit/v0.2.1",
    world: "handler",
});

use cairn::plugin::log;
use cairn::plugin::types::{Error, Event, LogLevel};
use exports::cairn::plugin::handler_plugin::{Guest, RunFailure};

struct Runs;

/// Take one event, saying which export it came through.
fn take(event: &Event, via: &str) -> Result<(), Error> {
    if event.payload.contains("please-trap") {
        panic!("runs: trapping on seq {} on purpose", event.seq);
    }
    if event.payload.contains("please-fail") {
        return Err(Error::InvalidInput(format!("seq {} asked to fail", event.seq)));
    }
    log::log(LogLevel::Info, &format!("runs: took seq={} via {via}", event.seq));
    Ok(())
}

impl Guest for Runs {
    fn init(_config: String) -> Result<(), Error> {
        Ok(())
    }

    fn on_event(event: Event) -> Result<(), Error> {
        take(&event, "on-event")
    }

    fn on_events(events: Vec<Event>) -> Result<(), RunFailure> {
        log::log(LogLevel::Info, &format!("runs: on-events call with {} events", events.len()));
        for (handled, event) in events.iter().enumerate() {
            take(event, "on-events").map_err(|error| RunFailure { handled: handled as u32, error })?;
        }
        Ok(())
    }
}

export!(Runs);
