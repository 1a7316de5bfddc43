//! Plugins as the rest of the host sees them: their kind and their supervised state.

use serde::{Deserialize, Serialize};

/// One cron schedule of a plugin, as the scheduler fires it: `schedule.<plugin>.<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The plugin it belongs to.
    pub plugin: String,
    /// Its name in the topic.
    pub name: String,
    /// Five-field cron expression (UTC).
    pub cron: String,
}

/// What a plugin is, which decides its WIT world and what it may be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// Brings messages in and delivers replies (world `channel`).
    Channel,
    /// Stores and recalls memories for the host (world `memory-backend`).
    MemoryBackend,
    /// Turns ended sessions into facts; may use the consolidation tools (world `handler`).
    Consolidator,
    /// Works while the agent sleeps (world `handler`).
    SleepHandler,
    /// Any other event subscriber (world `handler`).
    Handler,
}

impl PluginKind {
    /// The kind named `name`, as written in manifests.
    pub fn parse(name: &str) -> Option<Self> {
        [
            PluginKind::Channel,
            PluginKind::MemoryBackend,
            PluginKind::Consolidator,
            PluginKind::SleepHandler,
            PluginKind::Handler,
        ]
        .into_iter()
        .find(|k| k.as_str() == name)
    }

    /// The kind as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Channel => "channel",
            PluginKind::MemoryBackend => "memory-backend",
            PluginKind::Consolidator => "consolidator",
            PluginKind::SleepHandler => "sleep-handler",
            PluginKind::Handler => "handler",
        }
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Lifecycle state of a supervised plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginState {
    /// Being instantiated and initialised.
    Starting,
    /// Initialised and serving calls.
    Running,
    /// Faulted; waiting out its backoff before the next start.
    Restarting,
    /// Faulted more often than the restart budget allows; no longer started.
    Quarantined,
    /// Its component could not be loaded or linked; it is never started.
    Failed,
    /// Stopped with the host.
    Stopped,
    /// Seen from outside: its host ended without a clean stop while the plugin was
    /// starting, running or restarting (never recorded by a running host).
    Down,
}

impl PluginState {
    /// The state as stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginState::Starting => "starting",
            PluginState::Running => "running",
            PluginState::Restarting => "restarting",
            PluginState::Quarantined => "quarantined",
            PluginState::Failed => "failed",
            PluginState::Stopped => "stopped",
            PluginState::Down => "down",
        }
    }

    /// The state named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [
            PluginState::Starting,
            PluginState::Running,
            PluginState::Restarting,
            PluginState::Quarantined,
            PluginState::Failed,
            PluginState::Stopped,
            PluginState::Down,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// Whether a live host would still be driving it (starting, running or restarting).
    pub fn is_live(self) -> bool {
        matches!(
            self,
            PluginState::Starting | PluginState::Running | PluginState::Restarting
        )
    }
}

impl std::fmt::Display for PluginState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One plugin's row in `cairn status`. Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PluginStatus {
    /// Plugin id.
    pub id: String,
    /// Plugin version.
    pub version: String,
    /// Plugin kind.
    pub kind: PluginKind,
    /// Where it is in its life.
    pub state: PluginState,
    /// How many times the supervisor restarted it since the host started.
    pub restarts: u32,
    /// How many faults (traps, timeouts, memory-limit hits, failed inits) it had.
    pub faults: u32,
    /// The last fault or load error, if any.
    pub last_error: Option<String>,
    /// When this row last changed (ms since the epoch).
    pub updated_at: i64,
}

/// The host process that last ran on a data dir. Field names are the `--json` keys.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HostRun {
    /// Its process id.
    pub pid: u32,
    /// The plugin directory it ran.
    pub plugins_dir: String,
    /// When it started (ms since the epoch).
    pub started_at: i64,
    /// When it stopped cleanly; none while running or after a crash.
    pub stopped_at: Option<i64>,
    /// When it began stopping, while it stops (none while it runs normally, and once it
    /// stopped).
    pub stopping_since: Option<i64>,
    /// When it last said it was alive (ms since the epoch): hosts sharing a database renew
    /// it every few seconds; none where the data dir's lock tells whether it runs.
    pub last_seen: Option<i64>,
}

/// What `cairn status` reads from a data dir: the host that last ran there, its plugins
/// and their use of the LLM.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// The host that last ran here, if any.
    pub host: Option<HostRun>,
    /// Its plugins, by id.
    pub plugins: Vec<PluginStatus>,
    /// The plugins' `llm.complete` use since that host started, by id.
    pub llm_usage: Vec<LlmUsage>,
}

impl StatusReport {
    /// The ids of the channel plugins the host ran: the channels whose main batches it
    /// answers (it could deliver no other's reply).
    pub fn channels(&self) -> Vec<&str> {
        self.plugins
            .iter()
            .filter(|p| p.kind == PluginKind::Channel)
            .map(|p| p.id.as_str())
            .collect()
    }
}

/// A plugin's `llm.complete` use since its host started. Field names are the `--json` keys.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LlmUsage {
    /// Plugin id.
    #[serde(skip)]
    pub plugin_id: String,
    /// Calls answered or failed by the provider.
    pub calls: u64,
    /// Prompt and answer tokens, as the provider counted them.
    pub tokens: u64,
    /// Calls refused for being over the plugin's budget.
    pub refused: u64,
    /// When this row last changed (ms since the epoch).
    pub updated_at: i64,
}
