//! The memory a `cairn memory` command talks to, as `cairn.yaml` configures it: memory.db,
//! or — with `memory.backend` naming a plugin — that `memory-backend` plugin, started in
//! its sandbox for the command's duration. Either way the command goes through the same
//! [`MemoryService`] the host uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use super::super::plugins::manifest_errors;
use super::super::{BadInput, storage_unusable};
use crate::config::HostConfig;
use crate::config::Storage;
use crate::memory::{LocalMemory, MemoryService};
use crate::plugin::PluginHost;
use crate::plugin::capabilities::HostServices;
use crate::plugin::kv::PluginKv;
use crate::plugin::resolve;
use crate::plugin::status::{PluginState, StatusLog};
use crate::store::host::SqliteHost;
use cairn_vocab::plugin::PluginKind;

/// Memory opened for one command.
pub(super) struct CommandMemory {
    /// The built-in backend over memory.db (maintenance commands work on it).
    pub local: Arc<LocalMemory>,
    /// What the host's memory interface serves: memory.db or the backend plugin.
    pub service: Arc<MemoryService>,
    backend: Option<(tokio::runtime::Runtime, PluginHost)>,
}

impl CommandMemory {
    /// Open memory.db and, when `memory.backend` names a plugin, start it from `plugins`
    /// (or from the plugin directory the last host on this data dir ran).
    pub fn open(config: &HostConfig, plugins: Option<&Path>) -> Result<Self> {
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
        let storage = config.storage().map_err(storage_unusable)?;
        let memory_db = storage
            .memory(&config.data_dir)
            .map_err(storage_unusable)
            .with_context(|| format!("cannot open memory ({})", where_memory_is(config)))?;
        let local = LocalMemory::over(&config.data_dir, config.memory.clone(), memory_db.entries)?;
        if let (_, Some(warning)) = local.embeddings_in_use() {
            eprintln!("warning: memory embeddings: {warning}");
        }
        let service = Arc::new(MemoryService::new(local.clone(), memory_db.sessions));
        let backend = match service.backend_plugin() {
            Some(id) => Some(start_backend(config, plugins, id, &service)?),
            None => None,
        };
        Ok(Self {
            local,
            service,
            backend,
        })
    }

    /// Stop the embedder and the backend plugin.
    pub fn close(self) {
        self.local.stop_embedder();
        if let Some((runtime, host)) = self.backend {
            runtime.block_on(host.stop());
        }
    }
}

/// Start the backend plugin `id` alone, attached to `service`.
fn start_backend(
    config: &HostConfig,
    plugins: Option<&Path>,
    id: &str,
    service: &Arc<MemoryService>,
) -> Result<(tokio::runtime::Runtime, PluginHost)> {
    let dir = plugins_dir(config, plugins, id)?;
    let set = resolve::load(&dir).map_err(|errors| manifest_errors(&dir, &errors))?;
    let manifest = set
        .start_order()
        .iter()
        .find(|m| m.id == id && m.kind == PluginKind::MemoryBackend)
        .ok_or_else(|| {
            BadInput(format!(
                "memory.backend: no memory-backend plugin `{id}` in {}",
                dir.display()
            ))
        })?;
    let alone = resolve::resolve(vec![manifest.clone()])
        .map_err(|errors| manifest_errors(&dir, &errors))?;
    let storage = config.storage().map_err(storage_unusable)?;
    let host_db = storage.host(&config.data_dir).map_err(storage_unusable)?;
    let services = Arc::new(HostServices {
        kv: Arc::new(PluginKv::new(host_db.kv, config.kv.clone())),
        inbox: None,
        events: None,
        interrupt: None,
        stop: None,
        memory: Some(service.clone()),
        llm: None,
        memory_writes: Default::default(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let status = Arc::new(StatusLog::detached());
    let host = runtime.block_on(PluginHost::start(
        &alone,
        &config.plugin_host(),
        services,
        status.clone(),
    ))?;
    if let Some(cause) = failed_to_start(&status, id) {
        return Err(BadInput(format!(
            "memory.backend: the plugin `{id}` ({}) did not start: {cause}",
            manifest.file.display()
        ))
        .into());
    }
    Ok((runtime, host))
}

/// Why plugin `id` failed as it started, when it did (its component would not load, or
/// its `init` faulted), as `status` recorded it.
fn failed_to_start(status: &StatusLog, id: &str) -> Option<String> {
    let report = status.report().ok()?;
    let plugin = report.plugins.into_iter().find(|p| p.id == id)?;
    (plugin.state == PluginState::Failed).then(|| {
        plugin
            .last_error
            .unwrap_or_else(|| "no cause was recorded".into())
    })
}

/// Where the backend plugin is: `--plugins`, else the directory the last host ran.
fn plugins_dir(config: &HostConfig, plugins: Option<&Path>, id: &str) -> Result<PathBuf> {
    if let Some(dir) = plugins {
        return Ok(dir.to_path_buf());
    }
    let last_run = match config.storage().map_err(storage_unusable)? {
        Storage::Sqlite => SqliteHost::read_status(&config.data_dir)?,
        storage => Some(storage.host(&config.data_dir)?.status.report()?),
    }
    .and_then(|report| report.host);
    match last_run {
        Some(run) => Ok(PathBuf::from(run.plugins_dir)),
        None => Err(BadInput(format!(
            "memory.backend is the plugin `{id}`: pass --plugins DIR (no host has run on {} to \
             say where its plugins are)",
            config.data_dir.display()
        ))
        .into()),
    }
}

/// Where memory is kept, for messages: `<data>/memory.db` or the database's URL.
fn where_memory_is(config: &HostConfig) -> String {
    match config.storage() {
        Ok(Storage::Postgres(url)) => url.redacted().to_string(),
        _ => config.data_dir.join("memory.db").display().to_string(),
    }
}
