//! Host configuration (`cairn.yaml`): documented defaults, a YAML file, and `CAIRN_…`
//! environment overrides for every setting.
//!
//! Every setting has a default, so a host runs with no file at all. A setting at path
//! `section.key` is overridden by the environment variable `CAIRN_SECTION_KEY` (upper case,
//! dots and dashes become underscores); its value is read as a YAML scalar, so
//! `CAIRN_SUPERVISOR_RESTART_BUDGET=3` and `CAIRN_RUNTIME_POOLING=false` work as expected.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::AgentConfig;
use crate::buffer::BufferConfig;
use crate::console::ConsoleConfig;
use crate::journal::JournalConfig;
use crate::lifecycle::LifecycleConfig;
use crate::memory::MemoryConfig;
use crate::plugin::config::PluginHostConfig;
pub use crate::plugin::config::{KvConfig, RuntimeConfig, SupervisorConfig};
use crate::router::RouterConfig;
use crate::webhook::HttpConfig;

/// Why a configuration could not be loaded. Each case names the file or variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("{path}: cannot read config file: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The config file (or the defaults merged with overrides) did not match the schema.
    #[error("{origin}: {message}")]
    Invalid {
        /// The file, or `environment` when an override was at fault.
        origin: String,
        /// What was wrong, naming the field and what was expected.
        message: String,
    },
}

/// The `storage:` value of the embedded default.
pub const SQLITE: &str = "sqlite";

/// Where a host keeps its stores (`storage:` in `cairn.yaml`).
#[derive(Debug, Clone)]
pub enum Storage {
    /// SQLite database files in the data dir: one host.
    Sqlite,
    /// One PostgreSQL database that several hosts share.
    Postgres(Box<cairn_storage::pg::PgUrl>),
}

/// The whole host configuration. Field names are the YAML keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// Where the databases, plugin files and compile cache live (default `.cairn`).
    pub data_dir: PathBuf,
    /// Where the buffer, journal, memory, host state and LLM response cache live:
    /// `sqlite` (the default: database files in `data_dir`) or a PostgreSQL connection
    /// string (`postgres://user:password@host/database`) that several hosts share.
    pub storage: String,
    /// Log filter in `tracing` env-filter syntax (default `info`).
    pub log: String,
    /// Plugin runtime settings.
    pub runtime: RuntimeConfig,
    /// Plugin supervision settings.
    pub supervisor: SupervisorConfig,
    /// Plugin key/value store settings.
    pub kv: KvConfig,
    /// The inbound message buffer.
    pub buffer: BufferConfig,
    /// Batching and routing rules.
    pub router: RouterConfig,
    /// The webhook HTTP server.
    pub http: HttpConfig,
    /// The status console (off unless `console.listen` or `cairn run --console` is set).
    pub console: ConsoleConfig,
    /// The agent and its LLM provider.
    pub agent: AgentConfig,
    /// The event journal and its delivery.
    pub journal: JournalConfig,
    /// Sessions, sleep and schedules.
    pub lifecycle: LifecycleConfig,
    /// Agent memory: backend, embeddings, ranking, maintenance.
    pub memory: MemoryConfig,
    /// Which plugins of the plugin directory run.
    pub plugins: PluginsConfig,
}

/// Which plugins run (`plugins:` in `cairn.yaml`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// Plugin ids left out of the plugin directory, e.g. `[sleeper]` to keep memory as it
    /// is while the agent sleeps (`CAIRN_PLUGINS_DISABLED="[sleeper, fact-extractor]"`).
    pub disabled: Vec<String>,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from(".cairn"),
            storage: SQLITE.to_string(),
            log: "info".to_string(),
            runtime: RuntimeConfig::default(),
            supervisor: SupervisorConfig::default(),
            kv: KvConfig::default(),
            buffer: BufferConfig::default(),
            router: RouterConfig::default(),
            http: HttpConfig::default(),
            console: ConsoleConfig::default(),
            agent: AgentConfig::default(),
            journal: JournalConfig::default(),
            lifecycle: LifecycleConfig::default(),
            memory: MemoryConfig::default(),
            plugins: PluginsConfig::default(),
        }
    }
}

impl HostConfig {
    /// Load the configuration: defaults, then `file` if given (or `./cairn.yaml` if it
    /// exists), then `CAIRN_…` environment overrides, then `data_dir_override`.
    pub fn load(
        file: Option<&Path>,
        data_dir_override: Option<&Path>,
    ) -> Result<Self, ConfigError> {
        let default_file = Path::new("cairn.yaml");
        let file = match file {
            Some(path) => Some(path),
            None if default_file.is_file() => Some(default_file),
            None => None,
        };
        let mut value =
            serde_yaml::to_value(HostConfig::default()).map_err(|e| invalid("defaults", e))?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            let origin = path.display().to_string();
            // Parse into the typed schema first so unknown keys and wrong types are reported
            // against the file, then merge the file's keys over the defaults.
            let from_file: serde_yaml::Value =
                serde_yaml::from_str(&text).map_err(|e| invalid(&origin, e))?;
            if !from_file.is_null() {
                typed(from_file.clone()).map_err(|e| invalid(&origin, field_error(&e)))?;
                merge(&mut value, from_file);
            }
        }
        refuse_variables_not_utf8()?;
        // Names that are not UTF-8 are no setting's (std::env::vars() panics on them:
        // until 2026-12-04 any such variable, `FOO=$'\xff'`, stopped every command).
        let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        add_keys_named_by_variables(&mut value, names);
        apply_env_overrides(&mut value, "CAIRN", "", &|name| std::env::var(name).ok());
        let mut config = typed(value).map_err(|e| {
            let variable = variable_of(&e.path().to_string());
            let origin = match std::env::var_os(&variable) {
                Some(_) => variable,
                None => "environment (CAIRN_… variables)".to_string(),
            };
            invalid(&origin, field_error(&e))
        })?;
        if let Some(dir) = data_dir_override {
            config.data_dir = dir.to_path_buf();
        }
        config
            .validate()
            .map_err(|error| with_origin(error, file))?;
        Ok(config)
    }

    /// Check values that parse but make no sense.
    fn validate(&self) -> Result<(), ConfigError> {
        let problem = |message: &str| {
            Err(ConfigError::Invalid {
                origin: "config".into(),
                message: message.into(),
            })
        };
        if let Err(e) = self.storage() {
            return problem(&e.to_string());
        }
        // An empty path is the working directory to the file system: the stores would be
        // made there (until 2026-12-02 from `data_dir: ''` in cairn.yaml; found by an
        // operator's test), and `cairn status` could not find them.
        if self.data_dir.as_os_str().is_empty() {
            return problem("data_dir: expected a directory, not an empty path");
        }
        if self.buffer.claim_lease_ms < 300 || self.journal.subscription_lease_ms < 300 {
            return problem(
                "buffer.claim_lease_ms / journal.subscription_lease_ms: expected at least 300 ms",
            );
        }
        if self.runtime.epoch_tick_ms == 0 {
            return problem("runtime.epoch_tick_ms: expected a positive number of milliseconds");
        }
        if self.supervisor.backoff_initial_ms == 0
            || self.supervisor.backoff_max_ms < self.supervisor.backoff_initial_ms
        {
            return problem(
                "supervisor.backoff_initial_ms / backoff_max_ms: expected 0 < initial <= max",
            );
        }
        if self.runtime.log_rate_per_sec == 0 {
            return problem("runtime.log_rate_per_sec: expected a positive number");
        }
        if self.journal.max_attempts == 0 {
            return problem("journal.max_attempts: expected at least 1");
        }
        if self.router.batch_window_ms == 0 {
            return problem("router.batch_window_ms: expected a positive number of milliseconds");
        }
        if self.http.max_body_bytes == 0 {
            return problem("http.max_body_bytes: expected a positive number of bytes");
        }
        if self.http.request_timeout_ms == 0 {
            return problem("http.request_timeout_ms: expected a positive number of milliseconds");
        }
        if self.agent.deliver_attempts == 0 {
            return problem("agent.deliver_attempts: expected at least 1");
        }
        if self.lifecycle.session_timeout_secs == 0 || self.lifecycle.sleep_timeout_secs == 0 {
            return problem(
                "lifecycle.session_timeout_secs / sleep_timeout_secs: expected a positive number of seconds",
            );
        }
        if self.buffer.max_payload_bytes == 0 {
            return problem("buffer.max_payload_bytes: expected a positive number of bytes");
        }
        if let Err(e) = crate::router::validate_rules(&self.router.rules) {
            return problem(&e.to_string());
        }
        if let Err(e) = self.console.validate() {
            return problem(&e.to_string());
        }
        if let Err(message) = self.memory.validate() {
            return problem(&message);
        }
        if let Err(message) = self.agent.llm.validate() {
            return problem(&message);
        }
        Ok(())
    }

    /// The storage `storage:` names.
    pub fn storage(&self) -> Result<Storage, cairn_storage::StorageError> {
        let text = self.storage.trim();
        if text.is_empty() || text == SQLITE {
            return Ok(Storage::Sqlite);
        }
        text.parse().map(|url| Storage::Postgres(Box::new(url)))
    }

    /// Where compiled components are cached.
    pub fn cache_dir(&self) -> PathBuf {
        self.data_dir.join(&self.runtime.cache_dir)
    }

    /// What the plugin host takes from this configuration.
    pub fn plugin_host(&self) -> PluginHostConfig {
        PluginHostConfig {
            data_dir: self.data_dir.clone(),
            cache_dir: self.cache_dir(),
            runtime: self.runtime.clone(),
            supervisor: self.supervisor.clone(),
        }
    }

    /// The `(environment variable, YAML path, current value)` of every setting, for docs
    /// and `--help` (no variable for a [`KEYED_SETTINGS`] one); the storage URL's password
    /// is shown as `***`.
    pub fn settings(&self) -> Vec<(Option<String>, String, String)> {
        let mut out = Vec::new();
        if let Ok(value) = serde_yaml::to_value(self) {
            collect_settings(&value, "CAIRN", "", &mut out);
        }
        for (_, path, value) in &mut out {
            if path == "storage" {
                *value = cairn_storage::pg::url::redact(value);
            }
            if path == "agent.llm.base_url" {
                *value = crate::llm::http::shown_url(value);
            }
            if path.ends_with(".api_key_env") {
                *value = crate::llm::shown_briefly(value).replace('`', "");
            }
            if path == "console.token" && value != "null" {
                *value = "***".to_string();
            }
        }
        out
    }
}

/// `value` read as the configuration, a mismatch reported with the path of its field.
fn typed(value: serde_yaml::Value) -> Result<HostConfig, PathError> {
    serde_path_to_error::deserialize(value)
}

/// A configuration value that does not fit its field, and where that field is.
type PathError = serde_path_to_error::Error<serde_yaml::Error>;

/// `memory.recall.time_boost: invalid type: …` — the field, then what was wrong.
fn field_error(error: &PathError) -> String {
    format!("{}: {}", error.path(), error.inner())
}

/// The environment variable that overrides the field at `path` (`memory.recall.time_boost`
/// → `CAIRN_MEMORY_RECALL_TIME_BOOST`); a list item's path names its list's variable.
fn variable_of(path: &str) -> String {
    let fields = path.split('[').next().unwrap_or_default();
    fields
        .split('.')
        .filter(|key| !key.is_empty())
        .fold("CAIRN".to_string(), |prefix, key| env_name(&prefix, key))
}

/// Name where a value that failed [`HostConfig::validate`] came from: the `CAIRN_…`
/// variable that set its field, else the config file, else the defaults.
fn with_origin(error: ConfigError, file: Option<&Path>) -> ConfigError {
    let ConfigError::Invalid { message, .. } = error else {
        return error;
    };
    // The variable of a setting the message names (a range check names one, a check across
    // settings several, a top-level one such as `storage` leads the message), if that
    // variable is what set it.
    let leading = message
        .split_once(':')
        .map(|(setting, _)| setting)
        .filter(|setting| setting.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
    let dotted = message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter(|word| word.contains('.') && !word.starts_with('.') && !word.ends_with('.'));
    let set_by_variable = leading
        .into_iter()
        .chain(dotted)
        .map(variable_of)
        .find(|variable| std::env::var_os(variable).is_some());
    let origin = if let Some(variable) = set_by_variable {
        variable
    } else if let Some(path) = file {
        path.display().to_string()
    } else {
        "config".to_string()
    };
    ConfigError::Invalid { origin, message }
}

fn invalid(origin: &str, error: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.to_string(),
        message: in_plain_words(&error.to_string()),
    }
}

/// A parser's message with Rust's type names said as what they mean to an operator, and
/// the config's own types too.
fn in_plain_words(message: &str) -> String {
    const WORDS: [(&str, &str); 3] = [
        (
            "expected struct HostConfig",
            "expected a mapping of settings",
        ),
        (
            "expected a sequence",
            "expected a list, written [a, b] (in a variable too: CAIRN_PLUGINS_DISABLED=\"[sleeper]\")",
        ),
        (
            "invalid socket address syntax",
            "expected IP:PORT, such as 127.0.0.1:8787",
        ),
    ];
    WORDS.iter().fold(
        cairn_vocab::plain::type_names_in_plain_words(message),
        |text, (rust, plain)| text.replace(rust, plain),
    )
}

/// Overlay `overlay`'s mapping keys onto `base`, recursively.
fn merge(base: &mut serde_yaml::Value, overlay: serde_yaml::Value) {
    match (base, overlay) {
        (serde_yaml::Value::Mapping(base), serde_yaml::Value::Mapping(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

/// Settings whose keys are the operator's own (channel ids), not fields: each is one
/// setting, set in the config file only, with no environment variable for it or its keys.
const KEYED_SETTINGS: [&str; 1] = ["buffer.channel_priority"];

/// Settings whose keys are names the operator chooses (memory categories): a variable can
/// set a key the file and the defaults do not have, `CAIRN_MEMORY_RETENTION_DAYS_MYCAT` the
/// key `mycat` (a name's `-` cannot be written in a variable: set such a key in the file).
const OPEN_SETTINGS: [(&str, &str); 1] =
    [("memory.retention_days", "CAIRN_MEMORY_RETENTION_DAYS_")];

/// Refuse a `CAIRN_…` variable whose value is not UTF-8 text, naming it: no setting can
/// take such a value, and ignoring it would run with a setting the operator meant to change.
fn refuse_variables_not_utf8() -> Result<(), ConfigError> {
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CAIRN_") && value.to_str().is_none() {
            return Err(ConfigError::Invalid {
                origin: name.to_string(),
                message: format!(
                    "its value is not UTF-8 text ({}); expected the setting as text",
                    value.to_string_lossy()
                ),
            });
        }
    }
    Ok(())
}

/// Give each [`OPEN_SETTINGS`] mapping the keys set variables name, so that
/// [`apply_env_overrides`] fills them in.
fn add_keys_named_by_variables(value: &mut serde_yaml::Value, names: impl Iterator<Item = String>) {
    let names: Vec<String> = names.collect();
    for (path, prefix) in OPEN_SETTINGS {
        let mut map = Some(&mut *value);
        for key in path.split('.') {
            map = map.and_then(|at| at.get_mut(key));
        }
        let Some(serde_yaml::Value::Mapping(map)) = map else {
            continue;
        };
        for key in names.iter().filter_map(|name| name.strip_prefix(prefix)) {
            let key = serde_yaml::Value::String(key.to_lowercase());
            if !key.as_str().is_some_and(str::is_empty) && !map.contains_key(&key) {
                map.insert(key, serde_yaml::Value::Null);
            }
        }
    }
}

/// `path`'s child `key` as a setting path (`buffer` + `max_payload_bytes`).
fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn env_name(prefix: &str, key: &str) -> String {
    format!("{prefix}_{}", key.to_uppercase().replace(['-', '.'], "_"))
}

/// Replace every scalar leaf of `value` (at setting `path`) whose environment variable is
/// set; a [`KEYED_SETTINGS`] mapping has none.
fn apply_env_overrides(
    value: &mut serde_yaml::Value,
    prefix: &str,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) {
    if let serde_yaml::Value::Mapping(map) = value {
        for (key, child) in map.iter_mut() {
            let Some(key) = key.as_str() else { continue };
            let name = env_name(prefix, key);
            let path = child_path(path, key);
            if KEYED_SETTINGS.contains(&path.as_str()) {
                continue;
            }
            if child.is_mapping() {
                apply_env_overrides(child, &name, &path, lookup);
            } else if let Some(raw) = lookup(&name) {
                *child = serde_yaml::from_str(&raw).unwrap_or(serde_yaml::Value::String(raw));
            }
        }
    }
}

fn collect_settings(
    value: &serde_yaml::Value,
    prefix: &str,
    path: &str,
    out: &mut Vec<(Option<String>, String, String)>,
) {
    if let serde_yaml::Value::Mapping(map) = value {
        for (key, child) in map {
            let Some(key) = key.as_str() else { continue };
            let name = env_name(prefix, key);
            let child_path = child_path(path, key);
            if KEYED_SETTINGS.contains(&child_path.as_str()) {
                let shown = serde_json::to_string(child).unwrap_or_default();
                out.push((None, child_path, shown));
            } else if child.is_mapping() {
                collect_settings(child, &name, &child_path, out);
            } else {
                let shown = serde_yaml::to_string(child)
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                out.push((Some(name), child_path, shown));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsers_type_names_are_said_in_plain_words() {
        assert_eq!(
            in_plain_words("buffer.max_payload_bytes: invalid type: unit value, expected usize"),
            "buffer.max_payload_bytes: invalid type: an empty value, expected a whole number (0 to 18446744073709551615)"
        );
        assert_eq!(
            in_plain_words("http.listen: invalid socket address syntax"),
            "http.listen: expected IP:PORT, such as 127.0.0.1:8787"
        );
    }

    #[test]
    fn a_variable_sets_the_retention_of_a_category_nothing_else_names() {
        let mut value = serde_yaml::to_value(HostConfig::default()).expect("defaults serialise");
        let names = ["CAIRN_MEMORY_RETENTION_DAYS_MYCAT".to_string()];
        add_keys_named_by_variables(&mut value, names.into_iter());
        let env = |name: &str| (name == "CAIRN_MEMORY_RETENTION_DAYS_MYCAT").then(|| "5".into());
        apply_env_overrides(&mut value, "CAIRN", "", &env);
        let config = typed(value).expect("typed");
        assert_eq!(config.memory.retention_days.get("mycat"), Some(&5));
        let listed = config.settings();
        assert!(
            listed
                .iter()
                .any(|(variable, path, shown)| variable.as_deref()
                    == Some("CAIRN_MEMORY_RETENTION_DAYS_MYCAT")
                    && path == "memory.retention_days.mycat"
                    && shown == "5"),
            "{listed:?}"
        );
    }

    #[test]
    fn a_keyed_setting_has_no_variable_even_for_a_key_the_file_sets() {
        let mut value = serde_yaml::to_value(HostConfig::default()).expect("defaults serialise");
        let file: serde_yaml::Value =
            serde_yaml::from_str("buffer:\n  channel_priority: {cli: 50}\n").expect("yaml");
        merge(&mut value, file);
        let env =
            |name: &str| (name == "CAIRN_BUFFER_CHANNEL_PRIORITY_CLI").then(|| "7".to_string());
        apply_env_overrides(&mut value, "CAIRN", "", &env);
        let config: HostConfig = serde_yaml::from_value(value).expect("schema");
        assert_eq!(config.buffer.channel_priority.get("cli"), Some(&50));
    }

    #[test]
    fn env_overrides_reach_nested_settings_with_typed_values() {
        let mut value = serde_yaml::to_value(HostConfig::default()).expect("defaults serialise");
        let env = |name: &str| match name {
            "CAIRN_SUPERVISOR_RESTART_BUDGET" => Some("2".to_string()),
            "CAIRN_RUNTIME_POOLING" => Some("false".to_string()),
            "CAIRN_DATA_DIR" => Some("/tmp/x".to_string()),
            _ => None,
        };
        apply_env_overrides(&mut value, "CAIRN", "", &env);
        let config: HostConfig = serde_yaml::from_value(value).expect("overrides keep the schema");
        assert_eq!(config.supervisor.restart_budget, 2);
        assert!(!config.runtime.pooling);
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.supervisor.backoff_max_ms, 10_000);
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_field_and_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cairn.yaml");
        std::fs::write(&path, "memory:\n  recall:\n    time_boost: lots\n").expect("write");
        let text = HostConfig::load(Some(&path), None)
            .expect_err("a word is no number")
            .to_string();
        assert!(
            text.starts_with(&format!("{}: memory.recall.time_boost: ", path.display())),
            "{text}"
        );
        assert_eq!(
            variable_of("memory.recall.time_boost"),
            "CAIRN_MEMORY_RECALL_TIME_BOOST"
        );
        assert_eq!(variable_of("plugins.disabled[0]"), "CAIRN_PLUGINS_DISABLED");
    }

    #[test]
    fn unknown_keys_in_the_file_name_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cairn.yaml");
        std::fs::write(&path, "supervisor:\n  restart_budgt: 3\n").expect("write");
        let err = HostConfig::load(Some(&path), None).expect_err("typo is rejected");
        let text = err.to_string();
        assert!(text.contains("restart_budgt"), "{text}");
        assert!(text.contains("cairn.yaml"), "{text}");
    }

    #[test]
    fn a_lone_value_where_a_list_belongs_shows_how_a_list_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cairn.yaml");
        std::fs::write(&path, "plugins:\n  disabled: sleeper\n").expect("write");
        let text = HostConfig::load(Some(&path), None)
            .expect_err("not a list")
            .to_string();
        assert!(
            text.contains("plugins.disabled: ")
                && text.contains("expected a list, written [a, b] (in a variable too: CAIRN_PLUGINS_DISABLED=\"[sleeper]\")"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_data_dir_in_the_file_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cairn.yaml");
        std::fs::write(&path, "data_dir: ''\n").expect("write");
        let text = HostConfig::load(Some(&path), None)
            .expect_err("an empty path")
            .to_string();
        assert!(
            text.contains("cairn.yaml") && text.contains("data_dir: expected a directory"),
            "{text}"
        );
    }

    #[test]
    fn file_values_merge_over_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cairn.yaml");
        std::fs::write(&path, "supervisor:\n  restart_budget: 9\n").expect("write");
        let config = HostConfig::load(Some(&path), Some(dir.path())).expect("loads");
        assert_eq!(config.supervisor.restart_budget, 9);
        assert_eq!(config.supervisor.restart_window_secs, 60);
        assert_eq!(config.data_dir, dir.path());
    }

    #[test]
    fn every_setting_has_an_environment_name() {
        let settings = HostConfig::default().settings();
        let names: Vec<String> = settings.iter().filter_map(|(n, _, _)| n.clone()).collect();
        let keyed: Vec<&(Option<String>, String, String)> =
            settings.iter().filter(|(n, _, _)| n.is_none()).collect();
        assert_eq!(
            keyed,
            [&(
                None,
                "buffer.channel_priority".to_string(),
                "{}".to_string()
            )],
            "keyed by channel ids: one setting, no variable"
        );
        assert!(
            names.contains(&"CAIRN_RUNTIME_EPOCH_TICK_MS".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"CAIRN_KV_MAX_VALUE_BYTES".to_string()),
            "{names:?}"
        );
    }
}
