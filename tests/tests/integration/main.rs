//! The integration tests, in one test binary so wasmtime and the host link once: each
//! module drives the real `cairn` binary and real plugin components (or, for
//! `supervisor_api`, the in-process plugin host API).

mod channels;
mod cognition;
mod console;
mod examples;
mod failed_work;
mod faults;
mod hostile;
mod journal;
mod llm;
mod memory;
mod operator_input;
mod plugin_dev;
mod plugin_host;
mod postgres;
mod recall_quality;
mod store_away;
mod supervisor_api;
mod time;
