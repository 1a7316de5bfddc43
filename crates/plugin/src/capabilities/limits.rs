//! The memory limiter of a plugin's store: wasmtime's [`StoreLimits`], remembering when it
//! refused to grow memory or a table, so a fault is classified as a memory-limit hit by
//! what happened, not by the text of the trap.

use wasmtime::{ResourceLimiter, StoreLimits};

/// [`StoreLimits`] that records its refusals.
pub struct MemoryLimiter {
    limits: StoreLimits,
    refused: bool,
}

impl MemoryLimiter {
    /// A limiter enforcing `limits`.
    pub fn new(limits: StoreLimits) -> Self {
        Self {
            limits,
            refused: false,
        }
    }

    /// Whether a growth was refused since the store was made (the store is then poisoned
    /// and replaced, so the flag never needs clearing).
    pub fn refused(&self) -> bool {
        self.refused
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum);
        self.refused |= !matches!(allowed, Ok(true));
        allowed
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.table_growing(current, desired, maximum);
        self.refused |= !matches!(allowed, Ok(true));
        allowed
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
