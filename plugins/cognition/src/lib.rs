//! What Cairn's bundled cognitive plugins share (`episode-summarizer`, `fact-extractor`,
//! `memory-consolidator`, `sleeper`): the WIT bindings of the `handler` world, the prompts
//! they send, the parsing of what a model answers, and the pipeline that turns a session
//! into a stored summary and facts.
//!
//! Every model call goes through [`model::ask`]: JSON mode, the answer checked against the
//! shape the prompt asked for, one retry with a reminder when it is not, and then a
//! [`model::Garbage`] the caller records in the journal — a model's bad answer never
//! becomes half-saved memory. Host failures (the provider down, the budget spent) are
//! returned as errors, so the host retries the event later and the session stays pending.

pub mod facts;
pub mod model;
pub mod pipeline;
pub mod prompts;
pub mod summary;
pub mod text;

/// The bindings of the `handler` world; plugins export with `cognition::bindings::export_handler!`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.2",
        world: "handler",
        default_bindings_module: "cognition::bindings",
        pub_export_macro: true,
        export_macro_name: "export_handler",
    });
}

pub use bindings::cairn::plugin::types::{
    Error, Event, MemoryEntry, MemoryKind, MemoryScope, NewMemory,
};
pub use bindings::cairn::plugin::{consolidation, journal, kv, lifecycle, llm, log, memory};
pub use bindings::exports::cairn::plugin::handler_plugin::Guest;

/// Log a line at `info` under the plugin's name.
pub fn info(message: &str) {
    log::log(bindings::cairn::plugin::types::LogLevel::Info, message);
}

/// Log a line at `warn` under the plugin's name.
pub fn warn(message: &str) {
    log::log(bindings::cairn::plugin::types::LogLevel::Warn, message);
}

/// Append an event to the journal (the topic must be in the manifest's `events.emits`).
pub fn emit(topic: &str, payload: serde_json::Value) -> Result<u64, Error> {
    journal::emit(topic, &payload.to_string())
}

/// A plugin's `config` as JSON (`{}` when empty), or `invalid-input` naming the problem.
pub fn parse_config(config: &str) -> Result<serde_json::Value, Error> {
    if config.trim().is_empty() {
        return Ok(serde_json::json!({}));
    }
    serde_json::from_str(config).map_err(|e| Error::InvalidInput(format!("config: {e}")))
}

/// A number from a plugin's config, or `default` when absent; `invalid-input` naming the
/// key when it is not a number in `range`.
pub fn config_number(
    config: &serde_json::Value,
    key: &str,
    default: f64,
    range: std::ops::RangeInclusive<f64>,
) -> Result<f64, Error> {
    match config.get(key) {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(value) => value.as_f64().filter(|n| range.contains(n)).ok_or_else(|| {
            Error::InvalidInput(format!(
                "config.{key}: expected a number from {} to {}, got {value}",
                range.start(),
                range.end()
            ))
        }),
    }
}
