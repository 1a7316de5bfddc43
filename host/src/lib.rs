//! Cairn: a host process for AI agents.
//!
//! The host owns durable stores (the message buffer in `buffer.db`, the event journal in
//! `journal.db`, agent memory in `memory.db`; plugin key/value state and status in `host.db`) and runs channels, memory backends, consolidators and sleep handlers as sandboxed
//! WebAssembly components declared by YAML manifests. See `DESIGN.md` for the map.

#![deny(missing_docs)]

pub mod agent;
#[cfg(test)]
mod backends;
pub mod buffer;
pub mod cli;
pub mod config;
pub mod console;
pub mod journal;
pub mod lifecycle;
pub mod periodic;
pub mod ports;
pub mod retry;
pub mod router;
pub mod storage;
pub mod unread_env;
pub mod webhook;

pub use cairn_llm as llm;
pub use cairn_memory as memory;
pub use cairn_plugin as plugin;
pub use cairn_storage as store;
