//! The persisted state of a host's plugins (`host.db` tables `plugin_status` and
//! `host_run`), written by the running host and read by `cairn status`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use cairn_storage::StorageError;
use cairn_storage::host::{SqliteHost, StatusStore};
use cairn_storage::writer::Receipt;
pub use cairn_vocab::plugin::{HostRun, LlmUsage, PluginState, PluginStatus, StatusReport};

/// Where the supervisors of a host record their plugins' states, over a [`StatusStore`].
pub struct StatusLog {
    store: Arc<dyn StatusStore>,
}

impl StatusLog {
    /// Record into `store`.
    pub fn new(store: Arc<dyn StatusStore>) -> Self {
        Self { store }
    }

    /// A log that keeps its plugins' states in this process only, for plugins started
    /// outside a host (a CLI command serving memory from a backend plugin must not
    /// overwrite the states the host on the same data dir records, yet must be able to say
    /// why its plugin did not start).
    pub fn detached() -> Self {
        Self::new(Arc::new(Detached::default()))
    }

    /// Forget the plugins of an earlier run and record this process as the running host.
    pub fn begin_run(&self, plugins_dir: &Path) -> Result<(), StorageError> {
        self.store
            .begin_run(std::process::id(), &plugins_dir.display().to_string())
            .wait()
    }

    /// Record that this host began stopping: `cairn status` says so until it stopped.
    pub fn begin_stop(&self) -> Result<(), StorageError> {
        self.store.begin_stop().wait()
    }

    /// Record a clean stop.
    pub fn end_run(&self) -> Result<(), StorageError> {
        self.store.end_run().wait()
    }

    /// The recorded run and plugin states, as `cairn status` and the console show them.
    pub fn report(&self) -> Result<StatusReport, StorageError> {
        self.store.report()
    }

    /// Write one plugin's status. Failures are logged, never fatal: status is advisory.
    pub fn record(&self, status: &PluginStatus) {
        if let Err(e) = self.store.record(status).wait() {
            tracing::warn!(plugin = %status.id, "cannot record plugin status: {e}");
        }
    }
}

/// Keeps the latest status of each plugin in memory; see [`StatusLog::detached`].
#[derive(Default)]
struct Detached {
    plugins: Mutex<HashMap<String, PluginStatus>>,
}

impl StatusStore for Detached {
    fn begin_run(&self, _pid: u32, _plugins_dir: &str) -> Receipt<()> {
        Receipt::ready(Ok(()))
    }

    fn begin_stop(&self) -> Receipt<()> {
        Receipt::ready(Ok(()))
    }

    fn end_run(&self) -> Receipt<()> {
        Receipt::ready(Ok(()))
    }

    fn record(&self, status: &PluginStatus) -> Receipt<()> {
        let mut plugins = self.plugins.lock().unwrap_or_else(|p| p.into_inner());
        plugins.insert(status.id.clone(), status.clone());
        Receipt::ready(Ok(()))
    }

    fn record_llm_usage(&self, _usage: &LlmUsage) -> Receipt<()> {
        Receipt::ready(Ok(()))
    }

    fn report(&self) -> Result<StatusReport, StorageError> {
        let plugins = self.plugins.lock().unwrap_or_else(|p| p.into_inner());
        let mut plugins: Vec<PluginStatus> = plugins.values().cloned().collect();
        plugins.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(StatusReport {
            host: None,
            plugins,
            llm_usage: Vec::new(),
        })
    }
}

/// Read the recorded host run and plugin statuses; `None` when no host has run here.
pub fn read(data_dir: &Path) -> Result<Option<StatusReport>, StorageError> {
    SqliteHost::read_status(data_dir)
}

/// A plugin's row in `cairn status`: its state now, and the state its host last recorded.
/// Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PluginReport {
    /// The recorded row, with `state` as it is now: while no host runs, a plugin its host
    /// last saw `starting`, `running` or `restarting` is `down` (the host ended without a
    /// clean stop); `stopped`, `quarantined` and `failed` stay as recorded.
    #[serde(flatten)]
    pub status: PluginStatus,
    /// The state the host last recorded.
    pub last_state: PluginState,
    /// Its `llm.complete` use since the host started, if it called at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmUsage>,
}

/// The plugins' states as they are now, given whether their host is running, each with its
/// LLM use.
pub fn as_seen_now(report: StatusReport, host_running: bool) -> Vec<PluginReport> {
    let mut usage = report.llm_usage;
    report
        .plugins
        .into_iter()
        .map(|mut status| {
            let last_state = status.state;
            if !host_running && last_state.is_live() {
                status.state = PluginState::Down;
            }
            let llm = usage
                .iter()
                .position(|u| u.plugin_id == status.id)
                .map(|i| usage.swap_remove(i));
            PluginReport {
                status,
                last_state,
                llm,
            }
        })
        .collect()
}
