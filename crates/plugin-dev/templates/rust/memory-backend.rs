//! The `{{id}}` memory backend. Every call answers `unavailable` until you give it a store:
//! Cairn uses it when `cairn.yaml` says `memory: {backend: {{id}}}`. Build with
//! `cairn plugin build .`.

wit_bindgen::generate!({ path: "wit", world: "memory-backend" });

use cairn::plugin::types::{
    Error, MemoryEntry, MemoryKind, MemoryScope, NewMemory, RecallHit, RecallQuery,
};
use exports::cairn::plugin::memory_backend_plugin::Guest;

struct Plugin;

fn not_yet(call: &str) -> Error {
    Error::Unavailable(format!("{{id}} does not implement {call} yet (src/lib.rs)"))
}

impl Guest for Plugin {
    fn init(_config: String) -> Result<(), Error> {
        Ok(())
    }

    fn store_entry(_entry: NewMemory) -> Result<String, Error> {
        Err(not_yet("store-entry"))
    }

    fn recall(_query: RecallQuery) -> Result<Vec<RecallHit>, Error> {
        Err(not_yet("recall"))
    }

    fn get(_id: String) -> Result<MemoryEntry, Error> {
        Err(not_yet("get"))
    }

    fn list_entries(
        _scope: MemoryScope,
        _kinds: Vec<MemoryKind>,
        _limit: u32,
    ) -> Result<Vec<MemoryEntry>, Error> {
        Err(not_yet("list-entries"))
    }

    fn forget(_id: String) -> Result<bool, Error> {
        Err(not_yet("forget"))
    }

    fn count(_scope: MemoryScope) -> Result<u64, Error> {
        Err(not_yet("count"))
    }

    fn health() -> Result<String, Error> {
        Err(not_yet("a store"))
    }
}

export!(Plugin);
