//! Cairn: a host process for AI agents.
//!
//! The host owns durable stores (the message buffer in `buffer.db`, the event journal in
//! `journal.db`, agent memory in `memory.db`; plugin key/value state and status in `host.db`) and runs channels, memory backends, consolidators and sleep handlers as sandboxed
//! WebAssembly components declared by YAML manifests. See `DESIGN.md` for the map.

pub mod agent;
pub mod buffer;
pub mod cli;
pub mod config;
pub mod journal;
pub mod lifecycle;
pub mod memory;
pub mod plugin;
pub mod ports;
pub mod router;
pub mod store;
pub mod webhook;
