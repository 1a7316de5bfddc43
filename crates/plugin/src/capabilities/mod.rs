//! What a plugin's sandbox is granted, and the host side of every import.
//!
//! [`PluginContext`] is the data of a plugin's `Store`: its WASI context (built from the
//! manifest's grants only), its memory limiter, and the host services behind the
//! `cairn:plugin` imports. Each import checks the grant first and answers `denied` without
//! one; interfaces whose subsystem is not part of this host yet answer `unavailable`.
//!
//! The imports are implemented once, for the newest API (`cairn:plugin@0.2.0`); older API
//! versions convert their calls to it (`bindings/v0_1.rs`).
//!
//! This file prepares the sandbox from the grants; each host interface has its own file
//! (`log.rs`, `kv.rs`, `buffer.rs`, `journal.rs`, `memory.rs`, `consolidation.rs`,
//! `llm.rs`, `lifecycle.rs`).

mod buffer;
mod consolidation;
mod http;
mod journal;
mod kv;
mod lifecycle;
mod limits;
mod llm;
mod log;
mod memory;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::StoreLimitsBuilder;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::v0_2::convert::to_wit_error;
use super::bindings::v0_2::convert::{
    from_wit_kind, from_wit_new, from_wit_scope, to_wit_entry, to_wit_session,
};
use super::bindings::v0_2::handler::cairn::plugin as wit;
use super::bindings::v0_2::types::{Error as WitError, LogLevel};
use super::kv::{KvError, PluginKv};
use super::logging::{Hush, Level, LogStream, PluginLog};
use super::manifest::{
    FileMode, Manifest, MemoryAccess, PluginKind, ScopeLevel, ScopePattern, is_valid_topic,
};
use super::ports::{EventLog, Inbox, Interrupt, StopRequest};
use crate::llm_gate::{LlmBudget, LlmGate};
use crate::write_gate::{WriteGate, WriteKind};
use cairn_memory::ListFilter;
use cairn_memory::{MemoryEntry, MemoryError, MemoryService, RecallQuery, Scope};
use cairn_vocab::buffer::NewMessage;
use cairn_vocab::event::NewEvent;
use cairn_vocab::session::SessionState;
use http::{Egress, EgressHooks};
use journal::EmitRate;
pub use limits::MemoryLimiter;

/// Host services shared by every plugin of a host, behind the `cairn:plugin` imports.
pub struct HostServices {
    /// Plugin key/value state.
    pub kv: Arc<PluginKv>,
    /// Where channels' messages go, when the host runs a buffer.
    pub inbox: Option<Arc<dyn Inbox>>,
    /// Where events go, when the host runs a journal.
    pub events: Option<Arc<dyn EventLog>>,
    /// The sleep interrupt flag, when the host runs the lifecycle.
    pub interrupt: Option<Arc<Interrupt>>,
    /// Where the terminal's channel asks the host to stop, when the host honours it.
    pub stop: Option<Arc<StopRequest>>,
    /// Agent memory, when the host runs it.
    pub memory: Option<Arc<MemoryService>>,
    /// The autonomy and rate plugins' memory writes pass.
    pub memory_writes: Arc<WriteGate>,
    /// The language model `llm.complete` asks, behind the plugins' budgets, when the host
    /// has one.
    pub llm: Option<Arc<LlmGate>>,
}

/// The import-level grants of a plugin, derived from its manifest.
#[derive(Debug, Clone)]
pub struct Grants {
    /// The plugin's kind (buffer push is for channels, consolidation tools for consolidators).
    pub kind: PluginKind,
    /// `capabilities.kv`.
    pub kv: bool,
    /// `capabilities.memory`: the access and the parsed scope patterns.
    pub memory: Option<(MemoryAccess, Vec<ScopePattern>)>,
    /// `capabilities.llm`.
    pub llm: bool,
    /// `limits.llm_calls_per_hour` and `limits.llm_tokens_per_hour`.
    pub llm_budget: LlmBudget,
    /// `capabilities.lifecycle`.
    pub lifecycle: bool,
    /// `capabilities.stdio`: the plugin holds the host's terminal (and may end the host).
    pub stdio: bool,
    /// `events.emits`.
    pub emits: BTreeSet<String>,
    /// `limits.emits_per_sec`: what is left of it now, shared by every instance.
    pub emit_rate: Arc<EmitRate>,
    /// `limits.kv_bytes`.
    pub kv_bytes: u64,
}

impl Grants {
    /// The grants a manifest declares.
    pub fn from_manifest(manifest: &Manifest) -> Self {
        Self {
            kind: manifest.kind,
            kv: manifest.capabilities.kv,
            memory: manifest.capabilities.memory.as_ref().map(|grant| {
                let patterns = grant
                    .scopes
                    .iter()
                    .filter_map(|s| ScopePattern::parse(s))
                    .collect();
                (grant.access, patterns)
            }),
            llm: manifest.capabilities.llm,
            llm_budget: LlmBudget {
                calls_per_hour: manifest.limits.llm_calls_per_hour,
                tokens_per_hour: manifest.limits.llm_tokens_per_hour,
            },
            lifecycle: manifest.capabilities.lifecycle,
            stdio: manifest.capabilities.stdio,
            emits: manifest.events.emits.iter().cloned().collect(),
            emit_rate: Arc::new(EmitRate::new(
                manifest.id.as_str().into(),
                manifest.limits.emits_per_sec,
            )),
            kv_bytes: manifest.limits.kv_bytes,
        }
    }
}

/// A human-readable list of everything a manifest grants, for `cairn plugins check`.
pub fn describe_grants(manifest: &Manifest, data_dir: &Path) -> Vec<String> {
    let caps = &manifest.capabilities;
    let mut out = Vec::new();
    for grant in &caps.files {
        let mode = match grant.mode {
            FileMode::Ro => "read-only",
            FileMode::Rw => "read-write",
        };
        out.push(format!(
            "files: /{} -> {} ({mode})",
            grant.name,
            plugin_dir(data_dir, &manifest.id)
                .join(&grant.name)
                .display()
        ));
    }
    if !caps.http.is_empty() {
        out.push(format!(
            "http: outgoing requests to {} ({} ms timeout, {} byte responses)",
            caps.http.join(", "),
            manifest.limits.http_timeout_ms,
            manifest.limits.http_response_bytes
        ));
    }
    if !caps.env.is_empty() {
        out.push(format!("env: {}", caps.env.join(", ")));
    }
    if caps.stdio {
        out.push("stdio: host stdin and stdout; may stop the host at end of input".into());
    }
    if manifest.kind == PluginKind::Channel {
        out.push("buffer: push".into());
    }
    if let Some(grant) = &caps.memory {
        let access = match grant.access {
            MemoryAccess::Read => "read",
            MemoryAccess::ReadWrite if manifest.kind == PluginKind::Consolidator => {
                "read-write + consolidation tools"
            }
            MemoryAccess::ReadWrite => "read-write",
        };
        out.push(format!("memory: {access} in {}", grant.scopes.join(", ")));
    }
    if caps.llm {
        out.push("llm: complete".into());
    }
    if caps.kv {
        out.push("kv: private key/value state".into());
    }
    if caps.lifecycle {
        out.push("lifecycle: interrupted".into());
    }
    if !manifest.events.emits.is_empty() {
        out.push(format!(
            "journal: emit {}",
            manifest.events.emits.join(", ")
        ));
    }
    if !manifest.events.subscribes.is_empty() {
        out.push(format!(
            "events: receive {}",
            manifest.events.subscribes.join(", ")
        ));
    }
    out.push(format!(
        "limits: {} MiB memory, {} ms per call",
        manifest.limits.memory_mb, manifest.limits.timeout_ms
    ));
    out
}

/// The directory holding a plugin's granted directories: `<data>/plugins/<id>`.
pub fn plugin_dir(data_dir: &Path, plugin_id: &str) -> PathBuf {
    data_dir.join("plugins").join(plugin_id)
}

/// Why a plugin's sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A granted directory could not be created or opened.
    #[error("capabilities.files: cannot prepare {path}: {message}")]
    Files {
        /// The host directory.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

/// The data of a plugin's `Store`.
pub struct PluginContext {
    plugin: Arc<str>,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    egress: EgressHooks,
    table: ResourceTable,
    limits: MemoryLimiter,
    grants: Arc<Grants>,
    services: Arc<HostServices>,
    log: Arc<PluginLog>,
    /// Holds this instance's lines back from the log while it is on.
    hush: Hush,
    /// The depth of the event an `on-event` call is handling, while it runs.
    handling_depth: Option<u32>,
    /// Why a host store a host call of the running guest call used was away for a moment (a
    /// full disk, a database outage), the first time it was: a call that then fails is the
    /// host's outage, not the plugin's fault (see [`PluginContext::take_store_away`]). A
    /// cell, as the host calls note it while they borrow the services.
    store_away: std::cell::Cell<Option<String>>,
}

/// Everything needed to build a plugin's sandbox, prepared once per plugin.
pub struct Sandbox {
    plugin: Arc<str>,
    grants: Arc<Grants>,
    log: Arc<PluginLog>,
    stdio: bool,
    env: Vec<(String, String)>,
    preopens: Vec<(PathBuf, String, FileMode)>,
    egress: Arc<Egress>,
    memory_bytes: usize,
}

impl Sandbox {
    /// Prepare the sandbox of a plugin: create its granted directories, read its granted
    /// environment variables and take its outgoing HTTP policy.
    pub fn prepare(
        manifest: &Manifest,
        data_dir: &Path,
        log: Arc<PluginLog>,
    ) -> Result<Self, SandboxError> {
        let caps = &manifest.capabilities;
        let mut preopens = Vec::new();
        for grant in &caps.files {
            let path = plugin_dir(data_dir, &manifest.id).join(&grant.name);
            std::fs::create_dir_all(&path).map_err(|e| SandboxError::Files {
                path: path.clone(),
                message: e.to_string(),
            })?;
            preopens.push((path, format!("/{}", grant.name), grant.mode));
        }
        let env = caps
            .env
            .iter()
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        Ok(Self {
            plugin: manifest.id.as_str().into(),
            grants: Arc::new(Grants::from_manifest(manifest)),
            log,
            stdio: caps.stdio,
            env,
            preopens,
            egress: Arc::new(Egress::from_manifest(manifest)),
            memory_bytes: (manifest.limits.memory_mb as usize) << 20,
        })
    }

    /// A fresh store state: new WASI context, new resource table, new limiter.
    pub fn new_state(&self, services: Arc<HostServices>) -> Result<PluginContext, SandboxError> {
        let mut wasi = WasiCtxBuilder::new();
        let hush = Hush::default();
        wasi.arg(&*self.plugin);
        if self.stdio {
            wasi.inherit_stdin().inherit_stdout();
        } else {
            let stdout = LogStream::new(self.log.clone(), "stdout", Level::Info, hush.clone());
            wasi.stdout(stdout);
        }
        wasi.stderr(LogStream::new(
            self.log.clone(),
            "stderr",
            Level::Warn,
            hush.clone(),
        ));
        wasi.envs(&self.env);
        for (host, guest, mode) in &self.preopens {
            let perms = match mode {
                FileMode::Ro => FsPerms::ReadOnly,
                FileMode::Rw => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(host, guest, perms)
                .map_err(|e| SandboxError::Files {
                    path: host.clone(),
                    message: e.to_string(),
                })?;
        }
        // No sockets: the only network is wasi:http, checked per request by `egress`.
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        wasi.socket_addr_check(|_, _| Box::pin(async { false }));
        let limits = MemoryLimiter::new(
            StoreLimitsBuilder::new()
                .memory_size(self.memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
        );
        Ok(PluginContext {
            plugin: self.plugin.clone(),
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            egress: EgressHooks(self.egress.clone()),
            table: ResourceTable::new(),
            limits,
            grants: self.grants.clone(),
            services,
            log: self.log.clone(),
            hush,
            handling_depth: None,
            store_away: std::cell::Cell::new(None),
        })
    }
}

impl PluginContext {
    /// The store's memory limiter.
    pub fn limiter(&mut self) -> &mut MemoryLimiter {
        &mut self.limits
    }

    /// Whether the memory limiter refused a growth in this store.
    pub fn hit_memory_limit(&self) -> bool {
        self.limits.refused()
    }

    /// The plugin's log, whose stderr tail a fault quotes.
    pub fn log(&self) -> &PluginLog {
        &self.log
    }

    /// This instance's switch for holding its lines back from the log.
    pub fn hush(&self) -> &Hush {
        &self.hush
    }

    /// `error` from a host store (the buffer, the journal, memory, kv) as the plugin gets it;
    /// one saying the store is away for a moment (`unavailable`) is also noted for the call.
    pub(crate) fn store_error(&self, error: cairn_vocab::Error) -> WitError {
        if error.kind == cairn_vocab::ErrorKind::Unavailable {
            let first = self
                .store_away
                .take()
                .unwrap_or_else(|| error.message.clone());
            self.store_away.set(Some(first));
        }
        to_wit_error(error)
    }

    /// Why a host store was away during the guest call that just ended, if one was; clears
    /// it for the next call.
    pub fn take_store_away(&self) -> Option<String> {
        self.store_away.take()
    }

    /// Record which event's depth the running `on-event` call handles (`None` after it):
    /// what it emits meanwhile is one deeper.
    pub fn set_handling_depth(&mut self, depth: Option<u32>) {
        self.handling_depth = depth;
    }
}

impl WasiHttpView for PluginContext {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

impl WasiView for PluginContext {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn denied(what: &str) -> WitError {
    WitError::Denied(what.to_string())
}

fn unavailable(subsystem: &str) -> WitError {
    WitError::Unavailable(format!("the {subsystem} is not available in this host"))
}
