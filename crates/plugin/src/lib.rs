//! Plugins: manifests, dependency resolution, the sandboxed runtime, host imports and
//! supervision. [`PluginHost`] ties them together for `cairn run`.

#![deny(missing_docs)]

pub mod bindings;
pub mod capabilities;
pub mod component;
pub mod config;
pub mod kv;
pub mod llm_gate;
pub mod logging;
pub mod manifest;
pub mod memory_backend;
pub mod ports;
pub mod rate;
pub mod resolve;
pub mod runtime;
pub mod status;
pub mod supervisor;
pub mod write_gate;

use std::sync::Arc;

use capabilities::HostServices;
use config::PluginHostConfig;
use resolve::PluginSet;
use runtime::{Runtime, RuntimeError};
use status::{PluginState, PluginStatus, StatusLog};
use supervisor::{PluginHandle, Supervised};

/// Compile (or load from the cache) and link a plugin off the async runtime. A plugin
/// that cannot be loaded is recorded as failed and `None` returned: the others still start.
async fn load(
    runtime: &Arc<Runtime>,
    manifest: &Arc<manifest::Manifest>,
    config: &PluginHostConfig,
    status: &StatusLog,
) -> Result<Option<runtime::PreparedPlugin>, RuntimeError> {
    let (loader, data_dir, prepare_manifest) =
        (runtime.clone(), config.data_dir.clone(), manifest.clone());
    let prepared = tokio::task::spawn_blocking(move || loader.prepare(prepare_manifest, &data_dir))
        .await
        .map_err(|e| RuntimeError::Component {
            plugin: manifest.id.clone(),
            message: format!("loading panicked: {e}"),
        })?;
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            tracing::error!(plugin = %manifest.id, "cannot load plugin: {error}");
            status.record(&PluginStatus {
                id: manifest.id.clone(),
                version: manifest.version.to_string(),
                kind: manifest.kind,
                state: PluginState::Failed,
                restarts: 0,
                faults: 0,
                last_error: Some(error.to_string()),
                updated_at: cairn_storage::now_ms(),
            });
            return Ok(None);
        }
    };
    let (cache, load_time) = prepared.load_stats();
    let load_ms = load_time.as_millis() as u64;
    let api = prepared.api().version().to_string();
    match cache {
        runtime::CacheOutcome::Compiled => {
            tracing::info!(plugin = %manifest.id, api, load_ms, "component compiled and cached")
        }
        runtime::CacheOutcome::Hit => {
            tracing::info!(plugin = %manifest.id, api, load_ms, "component loaded from cache")
        }
    }
    Ok(Some(prepared))
}

/// Compiled components unused for this long are removed from the cache.
const CACHE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// The running plugins of a host, in start order.
pub struct PluginHost {
    runtime: Arc<Runtime>,
    plugins: Vec<Supervised>,
}

impl PluginHost {
    /// Compile and link every plugin, then start them in dependency order: a plugin's
    /// `init` runs once every plugin it depends on finished (or faulted) its first, and
    /// plugins that do not depend on each other start together, so one `init` that hangs
    /// until its `timeout_ms` delays only its dependents. A plugin that cannot be loaded is
    /// recorded as failed and the others still start.
    pub async fn start(
        set: &PluginSet,
        config: &PluginHostConfig,
        services: Arc<HostServices>,
        status: Arc<StatusLog>,
    ) -> Result<Self, RuntimeError> {
        let max_memory_mb = set
            .start_order()
            .iter()
            .map(|m| m.limits.memory_mb)
            .max()
            .unwrap_or(1);
        let runtime = Arc::new(Runtime::new(
            &config.runtime,
            &config.cache_dir,
            max_memory_mb,
        )?);
        tracing::info!(
            pooling = runtime.pooling(),
            plugins = set.start_order().len(),
            "plugin runtime ready"
        );
        let mut plugins = Vec::new();
        for manifest in set.start_order() {
            let manifest = Arc::new(manifest.clone());
            let Some(prepared) = load(&runtime, &manifest, config, &status).await? else {
                continue;
            };
            let supervised = Supervised::spawn(
                prepared,
                services.clone(),
                status.clone(),
                config.supervisor.clone(),
            )
            .map_err(|e| RuntimeError::Component {
                plugin: manifest.id.clone(),
                message: format!("cannot spawn supervisor thread: {e}"),
            })?;
            if let Some(memory) = &services.memory
                && memory.backend_plugin() == Some(manifest.id.as_str())
            {
                memory.attach_backend(Arc::new(memory_backend::PluginMemoryBackend::new(
                    supervised.handle().clone(),
                )));
            }
            plugins.push((manifest, supervised));
        }
        for level in resolve::start_levels(plugins.iter().map(|(manifest, _)| manifest.as_ref())) {
            let starting: Vec<_> = level
                .iter()
                .map(|&index| (index, plugins[index].1.begin_start()))
                .collect();
            for (index, answer) in starting {
                let state = answer.await.unwrap_or(PluginState::Stopped);
                if state != PluginState::Running {
                    let id = &plugins[index].0.id;
                    let has_dependents = plugins
                        .iter()
                        .any(|(m, _)| m.depends_on.iter().any(|d| &d.id == id));
                    if has_dependents {
                        tracing::warn!(plugin = %id, state = state.as_str(), "plugin did not start cleanly; its dependents start anyway");
                    } else {
                        tracing::warn!(plugin = %id, state = state.as_str(), "plugin did not start cleanly");
                    }
                }
            }
        }
        runtime.prune_cache(CACHE_MAX_AGE);
        let plugins = plugins.into_iter().map(|(_, plugin)| plugin).collect();
        Ok(Self { runtime, plugins })
    }

    /// A handle to a running plugin by id.
    pub fn handle(&self, id: &str) -> Option<&PluginHandle> {
        self.plugins
            .iter()
            .map(Supervised::handle)
            .find(|h| h.id() == id)
    }

    /// Whether the pooling allocator is in use.
    pub fn pooling(&self) -> bool {
        self.runtime.pooling()
    }

    /// Stop every plugin in reverse start order.
    pub async fn stop(mut self) {
        while let Some(plugin) = self.plugins.pop() {
            let id = plugin.handle().id().to_string();
            plugin.stop().await;
            tracing::info!(plugin = %id, "plugin stopped");
        }
    }
}
