//! A v0.2 handler's `on-event`, called with the journal's event borrowed.
//!
//! The generated binding takes the WIT `event` record, which owns its strings, so every
//! delivery first copied the event's strings on the host and then again into the guest.
//! [`EventView`] is the same record with borrowed strings: a delivery copies each string
//! once, straight into the guest's memory. The export's type is checked against the view
//! when an instance is made, as the generated binding checks its own.

use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, ComponentType, InstancePre, Lower, TypedFunc};

use super::handler::{Handler, HandlerIndices};
use super::{Call, Exports, ExportsPre, latest};
use crate::bindings::{ApiVersion, HandlerExports};
use crate::capabilities::PluginContext;
use crate::manifest::World;

/// The WIT record `cairn:plugin/types.event`, field for field, borrowing its strings.
#[derive(Debug, Clone, Copy, ComponentType, Lower)]
#[component(record)]
pub struct EventView<'a> {
    /// Position in the journal.
    pub seq: u64,
    /// Dot-separated topic.
    pub topic: &'a str,
    /// The event body as JSON.
    pub payload: &'a str,
    /// Who appended it.
    pub source: &'a str,
    /// Session the event belongs to, if any.
    #[component(name = "session-id")]
    pub session_id: Option<&'a str>,
    /// Agent the event belongs to, if any.
    #[component(name = "agent-id")]
    pub agent_id: Option<&'a str>,
    /// User the event belongs to, if any.
    #[component(name = "user-id")]
    pub user_id: Option<&'a str>,
    /// When it was appended (ms since the epoch).
    #[component(name = "created-at")]
    pub created_at: i64,
}

/// `on-event` typed with the borrowed event; covariant in its parameters, so one typed
/// function takes views of any lifetime.
type OnEvent = TypedFunc<(EventView<'static>,), (Result<(), latest::Error>,)>;

/// A v0.2 handler component checked to export the handler world, with where its exports
/// are (looked up once, not per instance).
struct V0_2HandlerPre {
    pre: InstancePre<PluginContext>,
    bindings: HandlerIndices,
    on_event: ComponentExportIndex,
}

/// Check that `pre`'s component implements v0.2's handler world, and find its `on-event`.
pub(super) fn handler_pre(
    pre: InstancePre<PluginContext>,
) -> wasmtime::Result<Box<dyn ExportsPre>> {
    let interface = ApiVersion::V0_2.export_name(World::Handler);
    let bindings = HandlerIndices::new(&pre)?;
    let component = pre.component();
    let on_event = component
        .get_export_index(None, &interface)
        .and_then(|exported| component.get_export_index(Some(&exported), "on-event"))
        .ok_or_else(|| wasmtime::format_err!("no `on-event` exported in `{interface}`"))?;
    Ok(Box::new(V0_2HandlerPre {
        pre,
        bindings,
        on_event,
    }))
}

impl ExportsPre for V0_2HandlerPre {
    fn instantiate(&self, store: &mut Store<PluginContext>) -> wasmtime::Result<Exports> {
        let instance = self.pre.instantiate(&mut *store)?;
        let bindings = self.bindings.load(&mut *store, &instance)?;
        let on_event = instance.get_typed_func(&mut *store, self.on_event)?;
        Ok(Exports::Handler(Box::new(V0_2Handler {
            bindings,
            on_event,
        })))
    }
}

/// A live v0.2 handler.
struct V0_2Handler {
    bindings: Handler,
    on_event: OnEvent,
}

impl HandlerExports for V0_2Handler {
    fn init(&self, store: &mut Store<PluginContext>, config: &str) -> Call<()> {
        self.bindings
            .cairn_plugin_handler_plugin()
            .call_init(store, &config.to_string())
    }

    fn on_event(&self, store: &mut Store<PluginContext>, event: &EventView<'_>) -> Call<()> {
        let (outcome,) = self.on_event.call(store, (*event,))?;
        Ok(outcome)
    }
}
