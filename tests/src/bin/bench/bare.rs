//! The floor of a host→guest call: the same component's `on-event`, with the same event,
//! called through wasmtime 48 alone — the `bindgen!` binding on a plain engine (component
//! model on, no pooling, no memory limiter, and no epoch deadline unless asked), WASI linked,
//! every other import a trap (the checksum path calls none). What Cairn's call costs beyond
//! this is the host's own: its deadline, its bookkeeping, its sandbox.

use std::path::Path;

use anyhow::Result;
use cairn::plugin::bindings::v0_2::handler::Handler;
use cairn::plugin::bindings::v0_2::types as wit;
use cairn_vocab::event::Event;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What the plain store holds: WASI and nothing else.
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A handler component instantiated on a plain engine, ready to be called.
pub struct BareHandler {
    store: Store<Bare>,
    handler: Handler,
}

impl BareHandler {
    /// Compile and instantiate `component` and call its `init` with `{}`; with
    /// `epoch_deadline`, the code is compiled with epoch interruption (the check Cairn's
    /// deadlines need at every function entry and loop) under a deadline never reached.
    pub fn new(component: &Path, epoch_deadline: bool) -> Result<Self> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(epoch_deadline);
        let engine = Engine::new(&config)?;
        let component = Component::from_file(&engine, component)
            .map_err(|e| anyhow::anyhow!("compiling {}: {e:#}", component.display()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        linker.define_unknown_imports_as_traps(&component)?;
        let bare = Bare {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&engine, bare);
        if epoch_deadline {
            store.set_epoch_deadline(u64::MAX / 2);
        }
        let handler = Handler::instantiate(&mut store, &component, &linker)?;
        handler
            .cairn_plugin_handler_plugin()
            .call_init(&mut store, &"{}".to_string())?
            .map_err(|e| anyhow::anyhow!("init: {e:?}"))?;
        Ok(Self { store, handler })
    }

    /// Call `on-event` with `event`, already in the binding's type.
    pub fn on_event(&mut self, event: &wit::Event) -> Result<()> {
        self.handler
            .cairn_plugin_handler_plugin()
            .call_on_event(&mut self.store, event)?
            .map_err(|e| anyhow::anyhow!("on-event: {e:?}"))
    }
}

/// `event` in the binding's type (made once, outside any timing).
pub fn wit_event(event: &Event) -> wit::Event {
    wit::Event {
        seq: event.seq as u64,
        topic: event.topic.clone(),
        payload: event.payload.clone(),
        source: event.source.clone(),
        session_id: event.session_id.clone(),
        agent_id: event.agent_id.clone(),
        user_id: event.user_id.clone(),
        created_at: event.created_at,
    }
}
