//! The WebAssembly runtime: one `Engine`, a disk cache of compiled components, one
//! `InstancePre` per plugin, and instances whose every call runs under a memory limit and
//! an epoch deadline.
//!
//! Knobs, all from [`RuntimeConfig`] and the plugin manifests:
//! - component model on, `component-model-async` off (it doubles the cost of every call);
//! - epoch interruption: a ticker thread advances the epoch every `epoch_tick_ms`, and each
//!   call gets a deadline of `limits.timeout_ms`, so a runaway call traps instead of hanging;
//! - the pooling allocator when `runtime.pooling` is on and the machine accepts its
//!   reservations, on-demand allocation otherwise;
//! - compiled components are cached under `cache_dir`, keyed by the component's SHA-256
//!   and the engine's compatibility hash, so a second start deserialises instead of compiling.

mod instance;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use cairn_vocab::channel::{HttpRequest, HttpResponse, OutboundMessage};
use cairn_vocab::event::Event;
use cairn_vocab::memory::{MemoryEntry, MemoryKind, NewMemory, RecallHit, RecallQuery, Scope};

use super::bindings::v0_2::convert;
use super::bindings::{self, ApiVersion, Exports, ExportsPre};
use super::capabilities::{HostServices, PluginContext, Sandbox, SandboxError};
use super::config::RuntimeConfig;
use super::logging::PluginLog;
use super::manifest::{Manifest, World};

pub use instance::{PluginInstance, RunStopped};

/// Why the runtime or a plugin could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine could not be created.
    #[error("cannot create the wasmtime engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The component file could not be read.
    #[error("{path}: cannot read component: {source}")]
    Read {
        /// The component file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The component did not compile or link against the host's imports.
    #[error("{plugin}: {message}")]
    Component {
        /// The plugin id.
        plugin: String,
        /// What failed, naming the world or import at fault.
        message: String,
    },
    /// The sandbox could not be set up.
    #[error("{plugin}: {source}")]
    Sandbox {
        /// The plugin id.
        plugin: String,
        /// What failed.
        source: SandboxError,
    },
}

/// Whether a component came from the cache or was compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Deserialised from the disk cache.
    Hit,
    /// Compiled now (and written to the cache).
    Compiled,
}

/// What kind of fault ended a call; the store is poisoned after any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The call ran past `limits.timeout_ms`.
    Timeout,
    /// The plugin tried to grow its memory past `limits.memory_mb`.
    MemoryLimit,
    /// Any other trap (unreachable, out-of-bounds, stack overflow, panic, ...).
    Trap,
    /// The plugin could not be instantiated.
    Instantiate,
    /// `init` returned an error.
    InitFailed,
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FaultKind::Timeout => "timeout (limits.timeout_ms)",
            FaultKind::MemoryLimit => "memory limit (limits.memory_mb)",
            FaultKind::Trap => "trap",
            FaultKind::Instantiate => "instantiation failed",
            FaultKind::InitFailed => "init failed",
        })
    }
}

/// A plugin fault: the instance must be dropped and rebuilt.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Fault {
    /// What happened.
    pub kind: FaultKind,
    /// Details for the operator.
    pub message: String,
}

/// How a call into a plugin failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The plugin answered with an error; its instance is still healthy.
    #[error("plugin returned an error: {0}")]
    Plugin(cairn_vocab::Error),
    /// The plugin answered with an error after a host store one of its host calls used was
    /// away for a moment (a full disk, a database outage): the host's outage, not the
    /// plugin's doing, and the same call may succeed once the store is back (see
    /// [`CallError::is_store_away`]). Its instance is still healthy.
    #[error("plugin returned an error: {error} (a host store it called was away: {cause})")]
    StoreAway {
        /// What the plugin answered.
        error: cairn_vocab::Error,
        /// What the store said.
        cause: String,
    },
    /// The plugin faulted; its instance is poisoned.
    #[error(transparent)]
    Fault(#[from] Fault),
    /// The plugin's world has no such export.
    #[error("a {0:?} plugin does not export this function")]
    NotExported(World),
    /// The plugin is not running — restarting after a fault, quarantined or stopped — so
    /// the call was not made. Only `restarting` passes: see [`CallError::is_restarting`].
    #[error("plugin {plugin} is {state}{}", after_fault(.cause.as_deref()))]
    NotRunning {
        /// The plugin's id.
        plugin: String,
        /// Its state when the call came.
        state: cairn_vocab::plugin::PluginState,
        /// When it is quarantined or failed, the fault that put it there: what a dead letter
        /// or a turn's error should say, rather than only the state.
        cause: Option<String>,
    },
}

/// ` after: <fault>` when there is one.
fn after_fault(cause: Option<&str>) -> String {
    cause
        .map(|cause| format!(" after: {cause}"))
        .unwrap_or_default()
}

impl CallError {
    /// Whether the call was not made only because the plugin is waiting out its backoff
    /// before a restart: the same call may succeed in a moment, and a caller that can wait
    /// (an event delivery) should not count it as a try.
    pub fn is_restarting(&self) -> bool {
        matches!(
            self,
            CallError::NotRunning {
                state: cairn_vocab::plugin::PluginState::Restarting,
                ..
            }
        )
    }

    /// Whether the plugin failed the call because a host store it called was away for a
    /// moment: a caller that can wait (an event delivery, a reply's delivery) should wait
    /// for the store rather than count it as a try.
    pub fn is_store_away(&self) -> bool {
        matches!(self, CallError::StoreAway { .. })
    }

    /// Whether the call was not made because the plugin will not run again until the host
    /// starts again: quarantined, or failed to load. (A plugin stopped with the host is
    /// not: what was not delivered is left for the next start.)
    pub fn is_down(&self) -> bool {
        use cairn_vocab::plugin::PluginState;
        matches!(
            self,
            CallError::NotRunning {
                state: PluginState::Quarantined | PluginState::Failed,
                ..
            }
        )
    }
}

/// Settings of a plugin's calls derived from the runtime config and its manifest.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    /// Epoch ticks a call may run.
    ticks: u64,
    /// The manifest's `limits.timeout_ms`.
    timeout: Duration,
}

/// A component at least this large (a Python or JavaScript one, with its interpreter) is
/// announced before it is compiled: its first start is otherwise tens of seconds of silence.
const LARGE_COMPONENT_BYTES: usize = 4 << 20;

/// The one wasmtime engine of a host, with its linker and compile cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<PluginContext>,
    cache_dir: PathBuf,
    epoch_tick: Duration,
    pooling: bool,
    ticker_stop: Arc<AtomicBool>,
    config: RuntimeConfig,
    fingerprint: String,
    loaded: Mutex<HashMap<String, Component>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.parallel_compilation(true);
    config
}

fn pooling_config(max_memory_bytes: usize) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(256)
        .total_core_instances(2048)
        .total_memories(512)
        .total_tables(512)
        .max_memory_size(max_memory_bytes)
        .max_core_instances_per_component(64)
        .max_memories_per_component(16)
        .max_tables_per_component(16)
        .table_elements(200_000)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20);
    pool
}

impl Runtime {
    /// Create the engine. `max_memory_mb` is the largest `limits.memory_mb` of the plugins
    /// it will run (the pooling allocator sizes its slots by it).
    pub fn new(
        config: &RuntimeConfig,
        cache_dir: &Path,
        max_memory_mb: u32,
    ) -> Result<Self, RuntimeError> {
        let max_memory_bytes = (max_memory_mb.max(1) as usize) << 20;
        let (engine, pooling) = if config.pooling {
            let mut pooled = base_config();
            pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling_config(
                max_memory_bytes,
            )));
            match Engine::new(&pooled) {
                Ok(engine) => (engine, true),
                Err(e) => {
                    tracing::warn!(
                        "pooling allocator unavailable, using on-demand allocation: {e:#}"
                    );
                    (
                        Engine::new(&base_config()).map_err(RuntimeError::Engine)?,
                        false,
                    )
                }
            }
        } else {
            (
                Engine::new(&base_config()).map_err(RuntimeError::Engine)?,
                false,
            )
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(RuntimeError::Engine)?;
        // wasi:http/outgoing-handler (and its types): what a plugin sends is checked against
        // its manifest per request (capabilities/http.rs).
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)
            .map_err(RuntimeError::Engine)?;
        bindings::add_to_linker(&mut linker).map_err(RuntimeError::Engine)?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let epoch_tick = Duration::from_millis(config.epoch_tick_ms);
        {
            let engine = engine.clone();
            let stop = ticker_stop.clone();
            std::thread::Builder::new()
                .name("cairn-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(epoch_tick);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| {
                    RuntimeError::Engine(wasmtime::Error::msg(format!(
                        "cannot start epoch ticker: {e}"
                    )))
                })?;
        }
        Ok(Self {
            linker,
            cache_dir: cache_dir.to_path_buf(),
            epoch_tick,
            pooling,
            ticker_stop,
            config: config.clone(),
            fingerprint: Self::engine_fingerprint(&engine),
            loaded: Mutex::new(HashMap::new()),
            engine,
        })
    }

    /// Whether the pooling allocator is in use.
    pub fn pooling(&self) -> bool {
        self.pooling
    }

    /// Load a component, from this run's memory or the disk cache when they hold a
    /// compiled copy of the same bytes for this engine; compile it otherwise.
    pub fn load_component(&self, path: &Path) -> Result<(Component, CacheOutcome), RuntimeError> {
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let digest = hex::encode(Sha256::digest(&bytes));
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(component) = loaded.get(&digest) {
            return Ok((component.clone(), CacheOutcome::Hit));
        }
        let cached = self
            .cache_dir
            .join(format!("{digest}-{}.cwasm", self.fingerprint));
        if cached.is_file() {
            // SAFETY: the cache holds only files this function wrote with `serialize` for an
            // engine of the same compatibility hash (part of the name), renamed into place
            // whole; wasmtime re-checks the header and rejects incompatible artifacts.
            match unsafe { Component::deserialize_file(&self.engine, &cached) } {
                Ok(component) => {
                    touch(&cached);
                    loaded.insert(digest, component.clone());
                    return Ok((component, CacheOutcome::Hit));
                }
                Err(e) => {
                    tracing::warn!(file = %cached.display(), "discarding unusable cached component: {e:#}")
                }
            }
        }
        if bytes.len() >= LARGE_COMPONENT_BYTES {
            tracing::info!(
                component = %path.display(),
                mb = format!("{:.1}", bytes.len() as f64 / 1_048_576.0),
                "compiling a large component: its first start takes a while (tens of seconds \
                 for a Python or JavaScript one); later starts load it from the cache"
            );
        }
        let component = Component::new(&self.engine, &bytes).map_err(|e| RuntimeError::Read {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a valid component: {e:#}"),
            ),
        })?;
        self.write_cache(&cached, &component);
        loaded.insert(digest, component.clone());
        Ok((component, CacheOutcome::Compiled))
    }

    /// Store a compiled component; a failure only costs a recompile next time.
    fn write_cache(&self, cached: &Path, component: &Component) {
        let result = (|| -> Result<(), Box<dyn std::error::Error>> {
            std::fs::create_dir_all(&self.cache_dir)?;
            let serialized = component.serialize()?;
            let temp = cached.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&temp, serialized)?;
            std::fs::rename(&temp, cached)?;
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(dir = %self.cache_dir.display(), "cannot write component cache: {e}");
        }
    }

    /// Remove cached compilations unused for `max_age`, or made by another engine build.
    pub fn prune_cache(&self, max_age: Duration) {
        let Ok(entries) = std::fs::read_dir(&self.cache_dir) else {
            return;
        };
        let suffix = format!("-{}.cwasm", self.fingerprint);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".cwasm") {
                continue;
            }
            let stale = !name.ends_with(&suffix)
                || entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|modified| modified.elapsed().ok())
                    .is_some_and(|age| age > max_age);
            if stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    fn engine_fingerprint(engine: &Engine) -> String {
        struct Sha(Sha256);
        impl Hasher for Sha {
            fn finish(&self) -> u64 {
                let digest = self.0.clone().finalize();
                u64::from_le_bytes(digest[..8].try_into().unwrap_or([0; 8]))
            }
            fn write(&mut self, bytes: &[u8]) {
                self.0.update(bytes);
            }
        }
        let mut hasher = Sha(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        format!("{:016x}", hasher.finish())
    }

    /// Compile (or load) a plugin's component, link it against the host imports and check
    /// it implements its kind's world.
    pub fn prepare(
        &self,
        manifest: Arc<Manifest>,
        data_dir: &Path,
    ) -> Result<PreparedPlugin, RuntimeError> {
        let started = Instant::now();
        let (component, cache) = self.load_component(&manifest.component)?;
        let load_time = started.elapsed();
        let component_error = |message: String| RuntimeError::Component {
            plugin: manifest.id.clone(),
            message,
        };
        let world = World::of(manifest.kind);
        let exported: Vec<String> = component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let api = bindings::bind_api(&exported, &manifest).map_err(component_error)?;
        let instance_pre = self.linker.instantiate_pre(&component).map_err(|e| {
            component_error(format!(
                "{} needs imports this host does not provide: {e:#}",
                manifest.component.display()
            ))
        })?;
        let exports = bindings::exports_pre(api, world, instance_pre).map_err(|e| {
            component_error(format!(
                "{} does not implement the `{}` world of cairn:plugin@{} that kind {} requires: {e:#}",
                manifest.component.display(),
                world_name(world),
                api.version(),
                manifest.kind
            ))
        })?;
        let log = Arc::new(PluginLog::new(
            manifest.id.as_str().into(),
            self.config.log_rate_per_sec,
            self.config.log_burst,
            self.config.log_line_max_bytes,
        ));
        let sandbox =
            Sandbox::prepare(&manifest, data_dir, log).map_err(|source| RuntimeError::Sandbox {
                plugin: manifest.id.clone(),
                source,
            })?;
        let tick_ms = self.epoch_tick.as_millis().max(1) as u64;
        let deadline = Deadline {
            ticks: manifest.limits.timeout_ms.div_ceil(tick_ms) + 1,
            timeout: Duration::from_millis(manifest.limits.timeout_ms),
        };
        Ok(PreparedPlugin {
            engine: self.engine.clone(),
            api,
            manifest,
            sandbox,
            exports,
            deadline,
            cache,
            load_time,
        })
    }
}

/// The WIT name of a world.
pub fn world_name(world: World) -> &'static str {
    match world {
        World::Channel => "channel",
        World::Handler => "handler",
        World::MemoryBackend => "memory-backend",
    }
}

/// A plugin ready to be instantiated any number of times: its `InstancePre` and sandbox.
pub struct PreparedPlugin {
    engine: Engine,
    api: ApiVersion,
    manifest: Arc<Manifest>,
    sandbox: Sandbox,
    exports: Box<dyn ExportsPre>,
    deadline: Deadline,
    cache: CacheOutcome,
    load_time: Duration,
}

impl PreparedPlugin {
    /// The plugin's manifest.
    pub fn manifest(&self) -> &Arc<Manifest> {
        &self.manifest
    }

    /// The API version the component was built against.
    pub fn api(&self) -> ApiVersion {
        self.api
    }

    /// Whether the component came from the cache, and how long loading it took.
    pub fn load_stats(&self) -> (CacheOutcome, Duration) {
        (self.cache, self.load_time)
    }

    /// A fresh instance in a fresh store (the only way back from a fault).
    pub fn instantiate(&self, services: Arc<HostServices>) -> Result<PluginInstance, Fault> {
        let state = self.sandbox.new_state(services).map_err(|e| Fault {
            kind: FaultKind::Instantiate,
            message: e.to_string(),
        })?;
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| state.limiter());
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.deadline.ticks);
        store.data().log().forget_stderr();
        let exports = self.exports.instantiate(&mut store).map_err(|e| {
            let mut fault = classify(&e, store.data());
            if fault.kind == FaultKind::Trap {
                fault.kind = FaultKind::Instantiate;
            }
            fault
        })?;
        Ok(PluginInstance {
            store,
            exports,
            deadline: self.deadline,
        })
    }
}

/// Mark a cached file as used now, so pruning keeps it.
fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// Turn a wasmtime call error into a fault: a timeout when the epoch deadline interrupted
/// it, a memory-limit hit when the store's limiter refused a growth. The message is the
/// root cause, then what the plugin last said on stderr during the call (an interpreter's
/// exception, a panic message): a trap alone says only `unreachable`. The wasm backtrace
/// goes to the debug log.
fn classify(error: &wasmtime::Error, state: &PluginContext) -> Fault {
    tracing::debug!("plugin fault: {error:?}");
    let mut message = error.root_cause().to_string();
    if let Some(said) = state.log().stderr_tail() {
        message.push_str("; stderr: ");
        message.push_str(&said);
    }
    let kind = if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        FaultKind::Timeout
    } else if state.hit_memory_limit() {
        FaultKind::MemoryLimit
    } else {
        FaultKind::Trap
    };
    Fault { kind, message }
}
