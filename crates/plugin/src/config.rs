//! The plugin host's settings (`runtime:`, `supervisor:` and `kv:` in `cairn.yaml`), owned
//! here so the plugin runtime never reaches up into the host's configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// What [`super::PluginHost::start`] needs: where plugins keep their files and compiled
/// components, and how the runtime and the supervisor behave.
#[derive(Debug, Clone)]
pub struct PluginHostConfig {
    /// The host's data dir (plugin files live under `<data>/plugins/<id>/`).
    pub data_dir: PathBuf,
    /// Where compiled components are cached.
    pub cache_dir: PathBuf,
    /// Runtime settings.
    pub runtime: RuntimeConfig,
    /// Supervision settings.
    pub supervisor: SupervisorConfig,
}

/// Settings of the WebAssembly runtime shared by all plugins.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Use wasmtime's pooling allocator when the machine allows it (default true).
    pub pooling: bool,
    /// How often the epoch advances, in ms; deadlines are rounded up to it (default 10).
    pub epoch_tick_ms: u64,
    /// Where compiled components are cached; relative paths are under `data_dir`
    /// (default `cache`).
    pub cache_dir: PathBuf,
    /// Log lines per second a plugin may write before lines are dropped (default 50).
    pub log_rate_per_sec: u32,
    /// Log lines a plugin may write in a burst above the rate (default 200).
    pub log_burst: u32,
    /// Longest log line kept, in bytes; longer lines are cut (default 4096).
    pub log_line_max_bytes: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            pooling: true,
            epoch_tick_ms: 10,
            cache_dir: PathBuf::from("cache"),
            log_rate_per_sec: 50,
            log_burst: 200,
            log_line_max_bytes: 4096,
        }
    }
}

/// How failing plugins are restarted and when they are given up on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SupervisorConfig {
    /// Restarts allowed inside `restart_window_secs` before a plugin is quarantined (default 5).
    pub restart_budget: u32,
    /// The window the restart budget counts over, in seconds (default 60).
    pub restart_window_secs: u64,
    /// Delay before the first restart, in ms; doubled on each further restart (default 100).
    pub backoff_initial_ms: u64,
    /// Cap of the restart delay, in ms (default 10000).
    pub backoff_max_ms: u64,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            restart_budget: 5,
            restart_window_secs: 60,
            backoff_initial_ms: 100,
            backoff_max_ms: 10_000,
        }
    }
}

/// Limits of the plugin key/value store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KvConfig {
    /// Largest value a plugin may store under one key, in bytes (default 1 MiB).
    pub max_value_bytes: usize,
    /// Longest key, in bytes (default 512).
    pub max_key_bytes: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        Self {
            max_value_bytes: 1 << 20,
            max_key_bytes: 512,
        }
    }
}
