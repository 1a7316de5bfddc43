//! Cairn: a host process for AI agents.
//!
//! The host owns durable stores (today: plugin key/value state and status in `host.db`)
//! and runs channels, memory backends, consolidators and sleep handlers as sandboxed
//! WebAssembly components declared by YAML manifests. See `DESIGN.md` for the map.

pub mod cli;
pub mod config;
pub mod plugin;
pub mod store;
