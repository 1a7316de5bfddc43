//! Host bindings of the plugin contract, one module per frozen WIT API version.
//!
//! The newest version (`v0_2`) is the one the host implements: its imports in
//! `capabilities/`, its exports called by the runtime, its types converted to the
//! vocabulary in `v0_2/convert.rs`. An older version (`v0_1`) keeps its plugins loading
//! unchanged: its imports convert each call to the newest and back, and its exports are
//! called with the newest types converted down, all in that version's module, the way Zed
//! keeps `since_v0_x`.
//!
//! [`Exports`] hides the version from the runtime: whichever API a plugin was built
//! against, its calls take and return the newest WIT types.

use semver::{Version, VersionReq};
use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::{InstancePre, Linker};

use crate::capabilities::PluginContext;
use crate::manifest::{Manifest, World};
use crate::runtime::world_name;

/// What every version module has alike, for the `handler`, `channel` and `memory_backend`
/// worlds `bindgen!` generated in it: linking its imports, checking that a component
/// implements one of its worlds, and instantiating it as [`Exports`]. How a handler is
/// prepared differs by version, so each module has its own `handler_pre`.
macro_rules! world_glue {
    () => {
        /// Link this version's host interfaces.
        pub(super) fn add_to_linker(
            linker: &mut wasmtime::component::Linker<PluginContext>,
        ) -> wasmtime::Result<()> {
            handler::Handler::add_to_linker::<_, wasmtime::component::HasSelf<PluginContext>>(
                linker,
                |state| state,
            )
        }

        /// Check the component implements `world` of this version.
        pub(super) fn exports_pre(
            world: World,
            pre: wasmtime::component::InstancePre<PluginContext>,
        ) -> wasmtime::Result<Box<dyn ExportsPre>> {
            Ok(match world {
                World::Channel => Box::new(channel::ChannelPre::new(pre)?),
                World::Handler => handler_pre(pre)?,
                World::MemoryBackend => Box::new(memory_backend::MemoryBackendPre::new(pre)?),
            })
        }

        impl ExportsPre for channel::ChannelPre<PluginContext> {
            fn instantiate(&self, store: &mut Store<PluginContext>) -> wasmtime::Result<Exports> {
                let instance = channel::ChannelPre::instantiate(self, store)?;
                Ok(Exports::Channel(Box::new(instance)))
            }
        }

        impl ExportsPre for memory_backend::MemoryBackendPre<PluginContext> {
            fn instantiate(&self, store: &mut Store<PluginContext>) -> wasmtime::Result<Exports> {
                let instance = memory_backend::MemoryBackendPre::instantiate(self, store)?;
                Ok(Exports::MemoryBackend(Box::new(instance)))
            }
        }
    };
}

pub mod v0_1;
pub mod v0_2;

/// The newest API's WIT types, which every call into a plugin speaks.
pub use v0_2::types as latest;
/// A journal event as `on-event` takes it, borrowed rather than copied, and how far a run of
/// them delivered through `on-events` got when one failed.
pub use v0_2::{EventView, RunFailure};

/// A plugin API version this host implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum ApiVersion {
    /// `cairn:plugin@0.1.0`, WIT in `wit/v0.1` (frozen).
    #[serde(rename = "0.1.0")]
    V0_1,
    /// `cairn:plugin@0.2.0`, WIT in `wit/v0.2`: messages with the time they were said,
    /// consolidation tools in their own interface, one `llm.complete` with a response format
    /// and token usage, recall measured from a given "now", memories valid from a given time.
    #[serde(rename = "0.2.0")]
    V0_2,
    /// `cairn:plugin@0.2.1`, WIT in `wit/v0.2.1`: 0.2.0 and, for a handler, `on-events`, a run
    /// of events in one call. Semver-compatible: its imports are 0.2.0's, found by the
    /// linker's semver lookup, and so are its other exports.
    #[serde(rename = "0.2.1")]
    V0_2_1,
}

/// Every API version this host supports, oldest first.
pub const SUPPORTED_APIS: &[ApiVersion] = &[ApiVersion::V0_1, ApiVersion::V0_2, ApiVersion::V0_2_1];

impl ApiVersion {
    /// The semver of the WIT package.
    pub fn version(self) -> Version {
        match self {
            ApiVersion::V0_1 => Version::new(0, 1, 0),
            ApiVersion::V0_2 => Version::new(0, 2, 0),
            ApiVersion::V0_2_1 => Version::new(0, 2, 1),
        }
    }

    /// The newest supported version matching a manifest's requirement.
    pub fn newest_matching(requirement: &VersionReq) -> Option<Self> {
        SUPPORTED_APIS
            .iter()
            .rev()
            .copied()
            .find(|api| requirement.matches(&api.version()))
    }

    /// The oldest supported version matching a manifest's requirement: what a plugin is
    /// built against, so that every host version the requirement allows can load it (`^0.2`
    /// builds against 0.2.0; a plugin asks for 0.2.1's `on-events` with `^0.2.1`).
    pub fn oldest_matching(requirement: &VersionReq) -> Option<Self> {
        SUPPORTED_APIS
            .iter()
            .copied()
            .find(|api| requirement.matches(&api.version()))
    }

    /// The name a component exports the interface of `world` under in this version, e.g.
    /// `cairn:plugin/channel-plugin@0.2.0`.
    pub fn export_name(self, world: World) -> String {
        let interface = match world {
            World::Channel => "channel-plugin",
            World::Handler => "handler-plugin",
            World::MemoryBackend => "memory-backend-plugin",
        };
        format!("cairn:plugin/{interface}@{}", self.version())
    }
}

/// The API version a plugin is bound with, given the names its component exports: the
/// newest version that satisfies the manifest's `api` and whose interface of the kind's
/// world the component exports. Otherwise a message naming the export it lacks, the ones it
/// has, and the version it was built against when that is another.
pub fn bind_api(exported: &[String], manifest: &Manifest) -> Result<ApiVersion, String> {
    let world = World::of(manifest.kind);
    let built_for = |api: &ApiVersion| exported.contains(&api.export_name(world));
    let matching: Vec<ApiVersion> = SUPPORTED_APIS
        .iter()
        .rev()
        .copied()
        .filter(|api| manifest.api.matches(&api.version()))
        .collect();
    if let Some(api) = matching.iter().copied().find(built_for) {
        return Ok(api);
    }
    let wanted: Vec<String> = matching.iter().map(|api| api.export_name(world)).collect();
    let found: Vec<&str> = exported
        .iter()
        .map(String::as_str)
        .filter(|name| name.starts_with("cairn:plugin/"))
        .collect();
    let mut message = format!(
        "{} does not implement the `{}` world that kind {} requires under `api: {}`: it lacks \
         the export {}, and exports {}",
        manifest.component.display(),
        world_name(world),
        manifest.kind,
        manifest.api,
        wanted.join(" or "),
        if found.is_empty() {
            "no cairn:plugin interface".to_string()
        } else {
            found.join(", ")
        }
    );
    if let Some(other) = SUPPORTED_APIS.iter().find(|api| built_for(api)) {
        let version = other.version();
        message.push_str(&format!(
            " (it was built against cairn:plugin@{version}: say `api: ^{}.{}` in {} or rebuild it)",
            version.major,
            version.minor,
            manifest.file.display()
        ));
    }
    Err(message)
}

/// Link the imports of every supported version: a component finds the version it was
/// built against.
pub fn add_to_linker(linker: &mut Linker<PluginContext>) -> wasmtime::Result<()> {
    v0_1::add_to_linker(linker)?;
    v0_2::add_to_linker(linker)
}

/// The result of a call into a plugin: a trap, or the plugin's own answer.
pub type Call<T> = wasmtime::Result<Result<T, latest::Error>>;

/// The result of `on-events`: a trap, or every event handled, or how far the run got.
pub type RunCall = wasmtime::Result<Result<(), RunFailure>>;

/// A plugin's component, checked to implement one world of one API version, ready to be
/// instantiated.
pub trait ExportsPre: Send + Sync {
    /// Instantiate it in `store`.
    fn instantiate(&self, store: &mut Store<PluginContext>) -> wasmtime::Result<Exports>;
}

/// Check that `pre`'s component implements `world` of `api`.
pub fn exports_pre(
    api: ApiVersion,
    world: World,
    pre: InstancePre<PluginContext>,
) -> wasmtime::Result<Box<dyn ExportsPre>> {
    match api {
        ApiVersion::V0_1 => v0_1::exports_pre(world, pre),
        ApiVersion::V0_2 => v0_2::exports_pre(world, pre),
        ApiVersion::V0_2_1 => v0_2::exports_pre_0_2_1(world, pre),
    }
}

/// A live instance's exports, by world.
pub enum Exports {
    /// A channel.
    Channel(Box<dyn ChannelExports>),
    /// A handler (kinds handler, consolidator, sleep-handler).
    Handler(Box<dyn HandlerExports>),
    /// A memory backend.
    MemoryBackend(Box<dyn MemoryBackendExports>),
}

/// A channel's exports in the newest API's types.
pub trait ChannelExports: Send {
    /// `init`.
    fn init(&self, store: &mut Store<PluginContext>, config: &str) -> Call<()>;
    /// `poll`.
    fn poll(&self, store: &mut Store<PluginContext>) -> Call<()>;
    /// `deliver`.
    fn deliver(
        &self,
        store: &mut Store<PluginContext>,
        message: &latest::OutboundMessage,
    ) -> Call<()>;
    /// `handle-webhook`.
    fn handle_webhook(
        &self,
        store: &mut Store<PluginContext>,
        request: &latest::HttpRequest,
    ) -> wasmtime::Result<latest::HttpResponse>;
}

/// A handler's exports in the newest API's types.
pub trait HandlerExports: Send {
    /// `init`.
    fn init(&self, store: &mut Store<PluginContext>, config: &str) -> Call<()>;
    /// `on-event`.
    fn on_event(&self, store: &mut Store<PluginContext>, event: &EventView<'_>) -> Call<()>;
    /// `on-events`, when the plugin's API has it (0.2.1 and later); `None` otherwise.
    fn on_events(
        &self,
        _store: &mut Store<PluginContext>,
        _events: &[EventView<'_>],
    ) -> Option<RunCall> {
        None
    }
    /// Whether `on_events` answers: the plugin takes a run of events in one call.
    fn takes_runs(&self) -> bool {
        false
    }
}

/// A memory backend's exports in the newest API's types.
pub trait MemoryBackendExports: Send {
    /// `init`.
    fn init(&self, store: &mut Store<PluginContext>, config: &str) -> Call<()>;
    /// `store-entry`.
    fn store_entry(
        &self,
        store: &mut Store<PluginContext>,
        entry: &latest::NewMemory,
    ) -> Call<String>;
    /// `recall`.
    fn recall(
        &self,
        store: &mut Store<PluginContext>,
        query: &latest::RecallQuery,
    ) -> Call<Vec<latest::RecallHit>>;
    /// `get`.
    fn get(&self, store: &mut Store<PluginContext>, id: &str) -> Call<latest::MemoryEntry>;
    /// `list-entries`.
    fn list_entries(
        &self,
        store: &mut Store<PluginContext>,
        scope: &latest::MemoryScope,
        kinds: &[latest::MemoryKind],
        limit: u32,
    ) -> Call<Vec<latest::MemoryEntry>>;
    /// `forget`.
    fn forget(&self, store: &mut Store<PluginContext>, id: &str) -> Call<bool>;
    /// `count`.
    fn count(&self, store: &mut Store<PluginContext>, scope: &latest::MemoryScope) -> Call<u64>;
    /// `health`.
    fn health(&self, store: &mut Store<PluginContext>) -> Call<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requirement_runs_on_its_newest_version_and_builds_against_its_oldest() {
        let cases = [
            ("^0.1", ApiVersion::V0_1, ApiVersion::V0_1),
            ("^0.2", ApiVersion::V0_2_1, ApiVersion::V0_2),
            ("^0.2.1", ApiVersion::V0_2_1, ApiVersion::V0_2_1),
            (">=0.1", ApiVersion::V0_2_1, ApiVersion::V0_1),
        ];
        for (requirement, newest, oldest) in cases {
            let requirement = VersionReq::parse(requirement).expect("a requirement");
            assert_eq!(ApiVersion::newest_matching(&requirement), Some(newest));
            assert_eq!(ApiVersion::oldest_matching(&requirement), Some(oldest));
        }
        let none = VersionReq::parse("^0.3").expect("a requirement");
        assert_eq!(ApiVersion::oldest_matching(&none), None);
        assert_eq!(
            ApiVersion::V0_2_1.export_name(World::Handler),
            "cairn:plugin/handler-plugin@0.2.1"
        );
    }
}
