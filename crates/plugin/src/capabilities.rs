//! What a plugin's sandbox is granted, and the host side of every import.
//!
//! [`PluginContext`] is the data of a plugin's `Store`: its WASI context (built from the
//! manifest's grants only), its memory limiter, and the host services behind the
//! `cairn:plugin` imports. Each import checks the grant first and answers `denied` without
//! one; interfaces whose subsystem is not part of this host yet answer `unavailable`.

use std::collections::BTreeSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::v0_1::convert::to_wit_error;
use super::bindings::v0_1::convert::{from_wit_kind, from_wit_new, from_wit_scope, to_wit_entry};
use super::bindings::v0_1::handler::cairn::plugin as wit;
use super::bindings::v0_1::types::{Error as WitError, LogLevel};
use super::kv::{KvError, KvStore};
use super::logging::{Level, LogStream, PluginLog};
use super::manifest::{
    FileMode, Manifest, MemoryAccess, PluginKind, ScopeLevel, ScopePattern, is_valid_topic,
    parse_network_target,
};
use super::ports::{EventLog, Inbox, Interrupt, StopRequest};
use cairn_memory::store::ListFilter;
use cairn_memory::{MemoryEntry, MemoryError, MemoryService, RecallQuery, Scope};
use cairn_vocab::buffer::NewMessage;
use cairn_vocab::event::NewEvent;

/// Host services shared by every plugin of a host, behind the `cairn:plugin` imports.
pub struct HostServices {
    /// Plugin key/value state.
    pub kv: Arc<KvStore>,
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
    /// `capabilities.lifecycle`.
    pub lifecycle: bool,
    /// `capabilities.stdio`: the plugin holds the host's terminal (and may end the host).
    pub stdio: bool,
    /// `events.emits`.
    pub emits: BTreeSet<String>,
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
            lifecycle: manifest.capabilities.lifecycle,
            stdio: manifest.capabilities.stdio,
            emits: manifest.events.emits.iter().cloned().collect(),
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
        out.push(format!("network: tcp connect to {}", caps.http.join(", ")));
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
    table: ResourceTable,
    limits: StoreLimits,
    grants: Arc<Grants>,
    services: Arc<HostServices>,
    log: Arc<PluginLog>,
}

/// Everything needed to build a plugin's sandbox, prepared once per plugin.
pub struct Sandbox {
    plugin: Arc<str>,
    grants: Arc<Grants>,
    log: Arc<PluginLog>,
    stdio: bool,
    env: Vec<(String, String)>,
    preopens: Vec<(PathBuf, String, FileMode)>,
    network: Option<Arc<BTreeSet<SocketAddr>>>,
    memory_bytes: usize,
}

impl Sandbox {
    /// Prepare the sandbox of a plugin: create its granted directories, read its granted
    /// environment variables and resolve its allowed network destinations.
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
        let network = (!caps.http.is_empty())
            .then(|| Arc::new(resolve_destinations(&manifest.id, &caps.http)));
        Ok(Self {
            plugin: manifest.id.as_str().into(),
            grants: Arc::new(Grants::from_manifest(manifest)),
            log,
            stdio: caps.stdio,
            env,
            preopens,
            network,
            memory_bytes: (manifest.limits.memory_mb as usize) << 20,
        })
    }

    /// A fresh store state: new WASI context, new resource table, new limiter.
    pub fn new_state(&self, services: Arc<HostServices>) -> Result<PluginContext, SandboxError> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.arg(&*self.plugin);
        if self.stdio {
            wasi.inherit_stdin().inherit_stdout();
        } else {
            wasi.stdout(LogStream::new(self.log.clone(), "stdout", Level::Info));
        }
        wasi.stderr(LogStream::new(self.log.clone(), "stderr", Level::Warn));
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
        match &self.network {
            Some(allowed) => {
                let allowed = allowed.clone();
                wasi.allow_tcp(true)
                    .allow_udp(false)
                    .allow_ip_name_lookup(true);
                wasi.socket_addr_check(move |addr, usage| {
                    // Outbound TCP only: connect to a granted destination, plus the implicit
                    // wildcard bind that precedes a connect. No listening, no UDP.
                    let permitted = match usage {
                        SocketAddrUse::TcpConnect => allowed.contains(&addr),
                        SocketAddrUse::TcpBind => addr.ip().is_unspecified() && addr.port() == 0,
                        _ => false,
                    };
                    Box::pin(async move { permitted })
                });
            }
            None => {
                wasi.allow_tcp(false)
                    .allow_udp(false)
                    .allow_ip_name_lookup(false);
                wasi.socket_addr_check(|_, _| Box::pin(async { false }));
            }
        }
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.memory_bytes)
            .trap_on_grow_failure(true)
            .build();
        Ok(PluginContext {
            plugin: self.plugin.clone(),
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limits,
            grants: self.grants.clone(),
            services,
            log: self.log.clone(),
        })
    }
}

/// Resolve `host[:port]` destinations to socket addresses; a bare host allows 80 and 443.
fn resolve_destinations(plugin: &str, targets: &[String]) -> BTreeSet<SocketAddr> {
    let mut allowed = BTreeSet::new();
    for target in targets {
        let Some((host, port)) = parse_network_target(target) else {
            continue;
        };
        let ports = port.map(|p| vec![p]).unwrap_or_else(|| vec![80, 443]);
        for port in ports {
            match (host.as_str(), port).to_socket_addrs() {
                Ok(addrs) => allowed.extend(addrs),
                Err(e) => {
                    tracing::warn!(plugin, destination = %target, "cannot resolve granted destination: {e}")
                }
            }
        }
    }
    allowed
}

impl PluginContext {
    /// The store's memory limiter.
    pub fn limiter(&mut self) -> &mut StoreLimits {
        &mut self.limits
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

impl From<KvError> for WitError {
    fn from(error: KvError) -> Self {
        match error {
            KvError::InvalidInput(message) => WitError::InvalidInput(message),
            KvError::Storage(e) => WitError::Internal(format!("kv store: {e}")),
        }
    }
}

impl wit::types::Host for PluginContext {}

impl wit::log::Host for PluginContext {
    fn log(&mut self, level: LogLevel, message: String) {
        let level = match level {
            LogLevel::Trace => Level::Trace,
            LogLevel::Debug => Level::Debug,
            LogLevel::Info => Level::Info,
            LogLevel::Warn => Level::Warn,
            LogLevel::Error => Level::Error,
        };
        self.log.write(level, "log", &message);
    }
}

impl wit::kv::Host for PluginContext {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, WitError> {
        self.require_kv()?;
        Ok(self.services.kv.get(&self.plugin, &key)?)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), WitError> {
        self.require_kv()?;
        Ok(self.services.kv.set(&self.plugin, &key, &value)?)
    }

    fn delete(&mut self, key: String) -> Result<bool, WitError> {
        self.require_kv()?;
        Ok(self.services.kv.delete(&self.plugin, &key)?)
    }

    fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, WitError> {
        self.require_kv()?;
        Ok(self.services.kv.list_keys(&self.plugin, &prefix)?)
    }
}

impl PluginContext {
    fn require_kv(&self) -> Result<(), WitError> {
        if self.grants.kv {
            Ok(())
        } else {
            Err(denied("kv: the manifest does not grant capabilities.kv"))
        }
    }

    fn require_memory(&self, write: bool) -> Result<&MemoryService, WitError> {
        match &self.grants.memory {
            Some((MemoryAccess::ReadWrite, _)) => {}
            Some((MemoryAccess::Read, _)) if !write => {}
            Some((MemoryAccess::Read, _)) => {
                return Err(denied(
                    "memory: the manifest grants capabilities.memory.access: read, not read-write",
                ));
            }
            None => {
                return Err(denied(
                    "memory: the manifest does not grant capabilities.memory",
                ));
            }
        }
        self.services
            .memory
            .as_deref()
            .ok_or_else(|| unavailable("agent memory"))
    }

    fn require_consolidation(&self) -> Result<&MemoryService, WitError> {
        if self.grants.kind != PluginKind::Consolidator {
            return Err(denied(
                "memory: consolidation tools are only for plugins of kind consolidator",
            ));
        }
        self.require_memory(true)
    }

    fn scope_patterns(&self) -> &[ScopePattern] {
        self.grants
            .memory
            .as_ref()
            .map(|(_, patterns)| patterns.as_slice())
            .unwrap_or_default()
    }

    /// A call may address `scope` when it names every level the manifest declares, each
    /// matching one of that level's patterns (or the manifest declares `all`).
    fn check_scope(&self, scope: &Scope, what: &str) -> Result<(), WitError> {
        let patterns = self.scope_patterns();
        if patterns.contains(&ScopePattern::All) {
            return Ok(());
        }
        for level in [ScopeLevel::Agent, ScopeLevel::User, ScopeLevel::Session] {
            let allowed: Vec<&Option<String>> = patterns
                .iter()
                .filter_map(|p| match p {
                    ScopePattern::Level { level: l, id } if *l == level => Some(id),
                    _ => None,
                })
                .collect();
            if allowed.is_empty() {
                continue;
            }
            let (name, value) = level_value(scope, level);
            let Some(value) = value else {
                return Err(denied(&format!(
                    "memory: {what} must name {name} (the manifest's capabilities.memory.scopes limit it)"
                )));
            };
            if !allowed
                .iter()
                .any(|id| id.as_ref().is_none_or(|id| id == value))
            {
                return Err(denied(&format!(
                    "memory: {name} `{value}` is outside the manifest's capabilities.memory.scopes"
                )));
            }
        }
        Ok(())
    }

    /// An existing entry is reachable when every declared level matches it; entries shared at
    /// a declared level (no id there) are readable but not writable.
    fn check_entry(&self, entry: &MemoryEntry, write: bool) -> Result<(), WitError> {
        let patterns = self.scope_patterns();
        if patterns.contains(&ScopePattern::All) {
            return Ok(());
        }
        let outside = || WitError::NotFound(format!("memory `{}` does not exist", entry.id));
        for pattern in patterns {
            let ScopePattern::Level { level, .. } = pattern else {
                continue;
            };
            match level_value(&entry.scope, *level).1 {
                None if write => return Err(outside()),
                None => {}
                Some(_) => {
                    let mut probe = Scope::default();
                    match level {
                        ScopeLevel::Agent => probe.agent_id = entry.scope.agent_id.clone(),
                        ScopeLevel::User => probe.user_id = entry.scope.user_id.clone(),
                        ScopeLevel::Session => probe.session_id = entry.scope.session_id.clone(),
                    }
                    if self.check_level(&probe, *level).is_err() {
                        return Err(outside());
                    }
                }
            }
        }
        Ok(())
    }

    fn check_level(&self, scope: &Scope, level: ScopeLevel) -> Result<(), ()> {
        let value = level_value(scope, level).1.ok_or(())?;
        let matched = self.scope_patterns().iter().any(|p| match p {
            ScopePattern::All => true,
            ScopePattern::Level { level: l, id } => {
                *l == level && id.as_ref().is_none_or(|id| id == value)
            }
        });
        if matched { Ok(()) } else { Err(()) }
    }

    fn entry_in_scope(
        &self,
        memory: &MemoryService,
        id: &str,
        write: bool,
    ) -> Result<MemoryEntry, WitError> {
        let entry = memory
            .get(id)
            .map_err(memory_error)?
            .filter(|e| e.forgotten_at.is_none())
            .ok_or_else(|| WitError::NotFound(format!("memory `{id}` does not exist")))?;
        self.check_entry(&entry, write)?;
        Ok(entry)
    }
}

/// The name and value of one level of a scope.
fn level_value(scope: &Scope, level: ScopeLevel) -> (&'static str, Option<&String>) {
    match level {
        ScopeLevel::Agent => ("agent-id", scope.agent_id.as_ref()),
        ScopeLevel::User => ("user-id", scope.user_id.as_ref()),
        ScopeLevel::Session => ("session-id", scope.session_id.as_ref()),
    }
}

fn memory_error(error: MemoryError) -> WitError {
    match error {
        MemoryError::InvalidInput(text) => WitError::InvalidInput(text),
        MemoryError::NotFound(text) => WitError::NotFound(text),
        MemoryError::Unavailable(text) => WitError::Unavailable(text),
        MemoryError::Storage(text) => WitError::Internal(text),
    }
}

impl wit::buffer::Host for PluginContext {
    fn push(&mut self, message: wit::types::InboundMessage) -> Result<u64, WitError> {
        if self.grants.kind != PluginKind::Channel {
            return Err(denied("buffer: only channels may push messages"));
        }
        let Some(inbox) = &self.services.inbox else {
            return Err(unavailable("message buffer"));
        };
        let id = inbox
            .push(NewMessage {
                channel: self.plugin.to_string(),
                sender: message.sender,
                conversation: message.conversation,
                payload: message.payload,
                priority: message.priority,
                dedup_key: message.dedup_key,
            })
            .map_err(to_wit_error)?;
        Ok(id as u64)
    }
}

impl wit::journal::Host for PluginContext {
    fn emit(&mut self, topic: String, payload: String) -> Result<u64, WitError> {
        if !is_valid_topic(&topic) {
            return Err(WitError::InvalidInput(format!(
                "topic: `{topic}` is not a topic; expected dot-separated segments of a-z 0-9 _ -"
            )));
        }
        if !self.grants.emits.contains(&topic) {
            return Err(denied(&format!(
                "journal: `{topic}` is not listed in the manifest's events.emits"
            )));
        }
        let Some(events) = &self.services.events else {
            return Err(unavailable("event journal"));
        };
        let seq = events
            .append(NewEvent {
                topic,
                payload,
                source: self.plugin.to_string(),
                ..NewEvent::default()
            })
            .map_err(to_wit_error)?;
        Ok(seq as u64)
    }
}

impl wit::memory::Host for PluginContext {
    fn store(&mut self, entry: wit::types::NewMemory) -> Result<String, WitError> {
        let memory = self.require_memory(true)?;
        let entry = from_wit_new(entry);
        self.check_scope(&entry.scope, "the memory's scope")?;
        if let Some(target) = &entry.supersedes {
            self.entry_in_scope(memory, target, true)?;
        }
        let outcome = memory.save(entry).map_err(memory_error)?;
        Ok(outcome.id().to_string())
    }

    fn recall(
        &mut self,
        query: wit::types::RecallQuery,
    ) -> Result<Vec<wit::types::RecallHit>, WitError> {
        let memory = self.require_memory(false)?;
        let scope = from_wit_scope(query.scope);
        self.check_scope(&scope, "the query's scope")?;
        let hits = memory
            .recall(&RecallQuery {
                text: query.text,
                scope,
                kinds: query.kinds.into_iter().map(from_wit_kind).collect(),
                limit: query.limit.clamp(1, 100) as usize,
                as_of: query.as_of,
                exclude_session: query.exclude_session,
                ..RecallQuery::default()
            })
            .map_err(memory_error)?;
        Ok(hits
            .into_iter()
            .map(|hit| wit::types::RecallHit {
                entry: to_wit_entry(hit.entry),
                score: hit.score,
            })
            .collect())
    }

    fn get(&mut self, id: String) -> Result<wit::types::MemoryEntry, WitError> {
        let memory = self.require_memory(false)?;
        Ok(to_wit_entry(self.entry_in_scope(memory, &id, false)?))
    }

    fn list_entries(
        &mut self,
        scope: wit::types::MemoryScope,
        kinds: Vec<wit::types::MemoryKind>,
        limit: u32,
    ) -> Result<Vec<wit::types::MemoryEntry>, WitError> {
        let memory = self.require_memory(false)?;
        let scope = from_wit_scope(scope);
        self.check_scope(&scope, "the scope")?;
        let entries = memory
            .list(&ListFilter {
                scope,
                kinds: kinds.into_iter().map(from_wit_kind).collect(),
                limit: limit.clamp(1, 1000) as usize,
                ..ListFilter::default()
            })
            .map_err(memory_error)?;
        Ok(entries.into_iter().map(to_wit_entry).collect())
    }

    fn forget(&mut self, id: String) -> Result<bool, WitError> {
        let memory = self.require_memory(true)?;
        match self.entry_in_scope(memory, &id, true) {
            Ok(_) => {}
            Err(WitError::NotFound(_)) => return Ok(false),
            Err(denial) => return Err(denial),
        }
        memory
            .forget(&id, &format!("plugin:{}", self.plugin))
            .map_err(memory_error)
    }

    fn count(&mut self, scope: wit::types::MemoryScope) -> Result<u64, WitError> {
        let memory = self.require_memory(false)?;
        let scope = from_wit_scope(scope);
        self.check_scope(&scope, "the scope")?;
        memory.count(&scope).map_err(memory_error)
    }

    fn pending_sessions(&mut self, limit: u32) -> Result<Vec<wit::memory::Session>, WitError> {
        let memory = self.require_consolidation()?;
        let sessions = memory
            .store()
            .pending_sessions(limit.clamp(1, 1000) as usize)
            .map_err(memory_error)?;
        Ok(sessions
            .into_iter()
            .filter(|s| self.check_scope(&session_scope(s), "the session").is_ok())
            .map(|s| wit::memory::Session {
                id: s.id,
                user_id: s.user_id,
                started_at: s.started_at,
                ended_at: s.ended_at,
                state: s.state,
            })
            .collect())
    }

    fn session_episodes(
        &mut self,
        session_id: String,
    ) -> Result<Vec<wit::types::MemoryEntry>, WitError> {
        let memory = self.require_consolidation()?;
        self.session_in_scope(memory, &session_id)?;
        let episodes = memory.session_episodes(&session_id).map_err(memory_error)?;
        Ok(episodes.into_iter().map(to_wit_entry).collect())
    }

    fn save_facts(
        &mut self,
        session_id: String,
        facts: Vec<wit::types::NewMemory>,
    ) -> Result<Vec<String>, WitError> {
        let memory = self.require_consolidation()?;
        self.session_in_scope(memory, &session_id)?;
        let facts: Vec<_> = facts.into_iter().map(from_wit_new).collect();
        for (i, fact) in facts.iter().enumerate() {
            self.check_scope(&fact.scope, &format!("facts[{i}]'s scope"))?;
        }
        memory.save_facts(&session_id, facts).map_err(memory_error)
    }

    fn mark_consolidated(&mut self, session_id: String) -> Result<(), WitError> {
        let memory = self.require_consolidation()?;
        self.session_in_scope(memory, &session_id)?;
        memory
            .store()
            .mark_consolidated(&session_id)
            .map_err(memory_error)
    }

    fn is_consolidated(&mut self, session_id: String) -> Result<bool, WitError> {
        let memory = self.require_consolidation()?;
        let session = self.session_in_scope(memory, &session_id)?;
        Ok(session.state == "consolidated")
    }
}

impl PluginContext {
    fn session_in_scope(
        &self,
        memory: &MemoryService,
        id: &str,
    ) -> Result<cairn_memory::Session, WitError> {
        let session = memory
            .store()
            .session(id)
            .map_err(memory_error)?
            .ok_or_else(|| WitError::NotFound(format!("session `{id}` does not exist")))?;
        self.check_scope(&session_scope(&session), "the session")
            .map_err(|_| WitError::NotFound(format!("session `{id}` does not exist")))?;
        Ok(session)
    }
}

/// The scope a session's memories carry.
fn session_scope(session: &cairn_memory::Session) -> Scope {
    Scope {
        agent_id: session.agent_id.clone(),
        user_id: session.user_id.clone(),
        session_id: Some(session.id.clone()),
    }
}

impl wit::llm::Host for PluginContext {
    fn complete(
        &mut self,
        _request: wit::types::CompletionRequest,
    ) -> Result<wit::types::Completion, WitError> {
        if !self.grants.llm {
            return Err(denied("llm: the manifest does not grant capabilities.llm"));
        }
        Err(unavailable("LLM provider"))
    }
}

impl wit::lifecycle::Host for PluginContext {
    fn interrupted(&mut self) -> bool {
        // Without the lifecycle grant (or a lifecycle), nothing interrupts.
        self.grants.lifecycle
            && self
                .services
                .interrupt
                .as_ref()
                .is_some_and(|flag| flag.is_set())
    }

    fn request_stop(&mut self, reason: String) -> Result<(), WitError> {
        if !self.grants.stdio {
            return Err(denied(
                "lifecycle: request-stop is for the plugin holding the host's terminal (capabilities.stdio)",
            ));
        }
        let Some(stop) = &self.services.stop else {
            return Err(unavailable("host stop requests"));
        };
        stop.request(&self.plugin, &reason);
        Ok(())
    }
}
