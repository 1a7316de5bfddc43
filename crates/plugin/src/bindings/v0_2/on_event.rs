//! A v0.2 handler's `on-event`, called with the journal's event borrowed.
//!
//! The generated binding takes the WIT `event` record, which owns its strings, so every
//! delivery first copied the event's strings on the host and then again into the guest.
//! [`EventView`] is the same record with borrowed strings: a delivery copies each string
//! once, straight into the guest's memory. The export's type is checked against the view
//! when an instance is made, as the generated binding checks its own.
//!
//! A 0.2.1 handler also exports `on-events`, typed here the same way with a slice of views:
//! a run of events costs one call into the plugin instead of one per event.

use wasmtime::Store;
use wasmtime::component::{
    ComponentExportIndex, ComponentType, InstancePre, Lift, Lower, TypedFunc,
};

use super::handler::{Handler, HandlerIndices};
use super::{Call, Exports, ExportsPre, latest};
use crate::bindings::{ApiVersion, HandlerExports, RunCall};
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

/// The WIT record `handler-plugin.run-failure` (0.2.1): how far a run of events got.
#[derive(Debug, Clone, ComponentType, Lift)]
#[component(record)]
pub struct RunFailure {
    /// How many events, from the first, the plugin handled.
    pub handled: u32,
    /// Why the next one failed.
    pub error: latest::Error,
}

/// `on-event` typed with the borrowed event; covariant in its parameters, so one typed
/// function takes views of any lifetime.
type OnEvent = TypedFunc<(EventView<'static>,), (Result<(), latest::Error>,)>;

/// `on-events` typed with a slice of borrowed events, likewise.
type OnEvents = TypedFunc<(&'static [EventView<'static>],), (Result<(), RunFailure>,)>;

/// A v0.2 handler component checked to export the handler world, with where its exports
/// are (looked up once, not per instance).
struct V0_2HandlerPre {
    pre: InstancePre<PluginContext>,
    bindings: HandlerIndices,
    on_event: ComponentExportIndex,
    on_events: Option<ComponentExportIndex>,
}

/// Check that `pre`'s component implements the handler world of `api` (0.2.0 or 0.2.1), and
/// find its `on-event` and, from 0.2.1 on, its `on-events`.
pub(super) fn handler_pre_of(
    pre: InstancePre<PluginContext>,
    api: ApiVersion,
) -> wasmtime::Result<Box<dyn ExportsPre>> {
    let interface = api.export_name(World::Handler);
    let bindings = HandlerIndices::new(&pre)?;
    let component = pre.component();
    let find = |name: &str| {
        component
            .get_export_index(None, &interface)
            .and_then(|exported| component.get_export_index(Some(&exported), name))
            .ok_or_else(|| wasmtime::format_err!("no `{name}` exported in `{interface}`"))
    };
    let on_event = find("on-event")?;
    let on_events = (api >= ApiVersion::V0_2_1)
        .then(|| find("on-events"))
        .transpose()?;
    Ok(Box::new(V0_2HandlerPre {
        pre,
        bindings,
        on_event,
        on_events,
    }))
}

impl ExportsPre for V0_2HandlerPre {
    fn instantiate(&self, store: &mut Store<PluginContext>) -> wasmtime::Result<Exports> {
        let instance = self.pre.instantiate(&mut *store)?;
        let bindings = self.bindings.load(&mut *store, &instance)?;
        let on_event = instance.get_typed_func(&mut *store, self.on_event)?;
        let on_events = self
            .on_events
            .map(|index| instance.get_typed_func(&mut *store, index))
            .transpose()?;
        Ok(Exports::Handler(Box::new(V0_2Handler {
            bindings,
            on_event,
            on_events,
        })))
    }
}

/// A live v0.2 handler.
struct V0_2Handler {
    bindings: Handler,
    on_event: OnEvent,
    on_events: Option<OnEvents>,
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

    fn on_events(
        &self,
        store: &mut Store<PluginContext>,
        events: &[EventView<'_>],
    ) -> Option<RunCall> {
        let on_events = self.on_events.as_ref()?;
        Some(on_events.call(store, (events,)).map(|(outcome,)| outcome))
    }

    fn takes_runs(&self) -> bool {
        self.on_events.is_some()
    }
}
