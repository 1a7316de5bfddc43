//! The vocabulary of Cairn: the records every part of the host speaks, with no behaviour
//! beyond naming and validating them.
//!
//! It depends on serde alone, so every other crate can use it: storage persists these
//! records, memory ranks them, the plugin runtime converts them to and from WIT, and the
//! app moves them between subsystems.

#![deny(missing_docs)]

pub mod buffer;
pub mod channel;
pub mod error;
pub mod event;
pub mod llm;
pub mod memory;
pub mod plain;
pub mod plugin;
pub mod session;
pub mod text;
pub mod time;
pub mod topic;

pub use error::{Error, ErrorKind};
pub use time::now_ms;
