//! Plugin manifests: the YAML files that declare a plugin, parsed and validated.
//!
//! Parsing is strict (unknown keys and wrong types are errors) and validation collects
//! every problem of a file, each naming the file, the field and what was expected, so an
//! operator fixes a directory in one pass.

use std::collections::BTreeSet;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use semver::{Version, VersionReq};
use serde::{Deserialize, Serialize};

use super::bindings::{ApiVersion, SUPPORTED_APIS};
mod destination;
mod load;
mod validate;

pub use destination::HttpDestination;

pub use cairn_vocab::plugin::PluginKind;
pub use cairn_vocab::topic::{HOST_TOPICS, is_valid_topic, is_valid_topic_pattern};
use cairn_vocab::topic::{is_topic_segment, topic_matches};

/// One problem found in a manifest (or between manifests), with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestError {
    /// The manifest file at fault.
    pub file: PathBuf,
    /// The field at fault as a path (`capabilities.files[0].mode`); empty when the whole file is.
    pub field: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                self.field,
                self.message
            )
        }
    }
}

impl std::error::Error for ManifestError {}

/// The WIT world a plugin's component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    /// `cairn:plugin/channel`.
    Channel,
    /// `cairn:plugin/handler`.
    Handler,
    /// `cairn:plugin/memory-backend`.
    MemoryBackend,
}

impl World {
    /// The world components of `kind` implement.
    pub fn of(kind: PluginKind) -> World {
        match kind {
            PluginKind::Channel => World::Channel,
            PluginKind::MemoryBackend => World::MemoryBackend,
            PluginKind::Consolidator | PluginKind::SleepHandler | PluginKind::Handler => {
                World::Handler
            }
        }
    }
}

/// A validated manifest.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// The file it was read from.
    pub file: PathBuf,
    /// Unique plugin id: lower-case letters, digits and single dashes, starting with a letter.
    pub id: String,
    /// The plugin's own version.
    pub version: Version,
    /// What the plugin is.
    pub kind: PluginKind,
    /// One line saying what the plugin does.
    pub description: Option<String>,
    /// Absolute path of the `.wasm` component.
    pub component: PathBuf,
    /// The API version requirement as written.
    pub api: VersionReq,
    /// The newest host API version satisfying `api` (what `cairn plugin build` writes a
    /// project's WIT in). The runtime binds the version the component was built against
    /// among those `api` allows ([`crate::bindings::bind_api`]).
    pub api_version: ApiVersion,
    /// Plugins that must start before this one.
    pub depends_on: Vec<Dependency>,
    /// Journal topics the plugin receives and may emit.
    pub events: Events,
    /// Cron schedules whose ticks the host emits as `schedule.<id>.<name>`.
    pub schedule: Vec<ScheduleEntry>,
    /// Channel options (channels only).
    pub channel: Option<ChannelOptions>,
    /// What the sandbox grants.
    pub capabilities: Capabilities,
    /// Resource limits.
    pub limits: Limits,
    /// Free-form configuration handed to `init` as JSON.
    pub config: serde_json::Value,
}

impl Manifest {
    /// The plugin's cron schedules, for the scheduler.
    pub fn schedules(&self) -> Vec<cairn_vocab::plugin::Schedule> {
        self.schedule
            .iter()
            .map(|entry| cairn_vocab::plugin::Schedule {
                plugin: self.id.clone(),
                name: entry.name.clone(),
                cron: entry.cron.clone(),
            })
            .collect()
    }
}

/// A dependency on another plugin.
#[derive(Debug, Clone, Serialize)]
pub struct Dependency {
    /// The other plugin's id.
    pub id: String,
    /// The versions of it that satisfy this plugin.
    pub version: VersionReq,
}

/// Journal topics a plugin subscribes to and may emit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Events {
    /// Exact topics (`session.ended`) or prefix patterns (`schedule.*`, `*`).
    #[serde(default)]
    pub subscribes: Vec<String>,
    /// Exact topics the plugin may emit through `journal.emit`.
    #[serde(default)]
    pub emits: Vec<String>,
}

/// One cron schedule of a plugin.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    /// Name used in the topic `schedule.<plugin>.<name>`.
    pub name: String,
    /// Five-field cron expression (minute hour day-of-month month day-of-week).
    pub cron: String,
}

/// Options of a channel plugin.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelOptions {
    /// Buffer priority of its messages (lower is served first); the host default applies when unset.
    pub priority: Option<u32>,
    /// Call `poll` this often, in ms; unset means the host never polls it.
    pub poll_interval_ms: Option<u64>,
    /// Serve `/channels/<id>/…` and hand requests to `handle-webhook`.
    #[serde(default)]
    pub webhook: bool,
}

/// Access mode of a granted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileMode {
    /// Read-only.
    Ro,
    /// Read-write.
    Rw,
}

/// A directory granted to a plugin, preopened at `/<name>` from `<data>/plugins/<id>/<name>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGrant {
    /// Directory name: lower-case letters, digits, `-` and `_`.
    pub name: String,
    /// `ro` or `rw`.
    pub mode: FileMode,
}

/// How much of the memory interface a plugin may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryAccess {
    /// get, list, recall, count.
    Read,
    /// Also store and forget (and, for consolidators, the consolidation tools).
    ReadWrite,
}

/// The memory interface a plugin is granted: how much of it, and in which scopes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryGrant {
    /// `read` or `read-write`.
    pub access: MemoryAccess,
    /// Where the plugin may reach: `all`, or patterns `agent:<id>`, `user:<id>`,
    /// `session:<id>` (`*` for any id). Every call must name each declared level and match
    /// one of its patterns.
    pub scopes: Vec<String>,
}

/// One parsed `capabilities.memory.scopes` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopePattern {
    /// Any scope at all.
    All,
    /// `level:id` or `level:*`.
    Level {
        /// `agent`, `user` or `session`.
        level: ScopeLevel,
        /// The id, or none for `*`.
        id: Option<String>,
    },
}

/// A level of memory scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScopeLevel {
    /// `agent:`.
    Agent,
    /// `user:`.
    User,
    /// `session:`.
    Session,
}

impl ScopePattern {
    /// The pattern `text` spells, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        if text == "all" {
            return Some(ScopePattern::All);
        }
        let (level, id) = text.split_once(':')?;
        let level = match level {
            "agent" => ScopeLevel::Agent,
            "user" => ScopeLevel::User,
            "session" => ScopeLevel::Session,
            _ => return None,
        };
        let id = match id {
            "*" => None,
            "" => return None,
            id => Some(id.to_string()),
        };
        Some(ScopePattern::Level { level, id })
    }
}

/// What a plugin's sandbox is granted. Nothing is granted by default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Directories under the plugin's data dir.
    #[serde(default)]
    pub files: Vec<FileGrant>,
    /// Where `wasi:http/outgoing-handler` requests may go ([`HttpDestination`] entries:
    /// `host`, `host:port`, `*.domain`, `http://host:port`); checked on every request. No
    /// other network is reachable.
    #[serde(default)]
    pub http: Vec<String>,
    /// Host environment variables the plugin can read.
    #[serde(default)]
    pub env: Vec<String>,
    /// The host's stdin and stdout (channels only).
    #[serde(default)]
    pub stdio: bool,
    /// The memory interface.
    #[serde(default)]
    pub memory: Option<MemoryGrant>,
    /// The LLM interface.
    #[serde(default)]
    pub llm: bool,
    /// The key/value interface.
    #[serde(default)]
    pub kv: bool,
    /// The lifecycle interface (`interrupted`).
    #[serde(default)]
    pub lifecycle: bool,
}

/// Resource limits of a plugin's sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory the plugin may grow to, in MiB (default 128).
    pub memory_mb: u32,
    /// Longest a single call into the plugin may run, in ms (default 5000).
    pub timeout_ms: u64,
    /// `llm.complete` calls the plugin may make in any hour (default 60).
    pub llm_calls_per_hour: u32,
    /// Tokens (prompt and answer) its `llm.complete` calls may use in any hour (default
    /// 200000).
    pub llm_tokens_per_hour: u64,
    /// Longest an outgoing HTTP request may take to connect, and then to send its first
    /// response byte, and then between bytes, in ms (default 10000).
    pub http_timeout_ms: u64,
    /// Largest outgoing HTTP response body the plugin may receive, in bytes (default 4 MiB).
    pub http_response_bytes: u64,
    /// Journal events the plugin may emit per second on average, in bursts of as many
    /// (default 50); over it `emit` answers `unavailable`.
    pub emits_per_sec: u32,
    /// Bytes of keys and values the plugin may keep in its key/value store (default 16 MiB);
    /// a `set` that would go over answers `unavailable` and writes nothing.
    pub kv_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: 128,
            timeout_ms: 5000,
            llm_calls_per_hour: 60,
            llm_tokens_per_hour: 200_000,
            http_timeout_ms: 10_000,
            http_response_bytes: 4 << 20,
            emits_per_sec: 50,
            kv_bytes: 16 << 20,
        }
    }
}

use load::*;
pub use load::{check_cron, is_valid_id, load_dir, load_file, load_unbuilt, manifest_files};
use validate::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cron_field_with_an_empty_list_item_is_refused_before_it_can_hang_the_scheduler() {
        for expression in [", * * * */2", "1,,2 * * * *", "0 9 * * MON,"] {
            let refused = check_cron(expression).expect_err(expression);
            assert!(
                refused.contains("empty list item"),
                "{expression}: {refused}"
            );
        }
        check_cron("0,30 9-17 * * MON-FRI").expect("a list with every item");
    }

    #[test]
    fn a_cron_error_names_its_field_and_a_schedule_that_never_fires_is_refused() {
        let refused = check_cron("0 25 * * *").expect_err("hour 25");
        assert!(
            refused.starts_with("hour `25`: ") && refused.contains("expected 0–23"),
            "{refused}"
        );
        let refused = check_cron("0 0 31 2 *").expect_err("31 February");
        assert!(refused.contains("never fires"), "{refused}");
        check_cron("0 0 29 2 *").expect("29 February comes every four years");
    }

    #[test]
    fn a_duplicate_key_and_a_byte_that_is_not_utf8_are_placed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let twice = write_manifest(dir.path(), "p.yaml", "id: a\nversion: 1.0.0\nid: b\n");
        let errors = load_file(&twice).expect_err("a key twice");
        assert!(
            errors[0]
                .message
                .contains("(`id:` appears on lines 1 and 3)"),
            "{errors:?}"
        );
        let latin1 = dir.path().join("latin1.yaml");
        std::fs::write(&latin1, b"id: a\ndescription: caf\xe9\n").expect("write");
        let errors = load_file(&latin1).expect_err("not UTF-8");
        assert!(
            errors[0]
                .message
                .contains("not UTF-8 text: byte 0xe9 at line 2 column 17"),
            "{errors:?}"
        );
    }

    #[test]
    fn every_unknown_field_of_a_file_is_reported_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: typo\nversion: 1.0.0\nkind: handler\ncomponent: ok.wasm\napi: ^0.2\n\
                    event: {subscribes: [x]}\ncapabilites: {kv: true}\n\
                    limits: {memroy_mb: 4, timeot_ms: 5}\n";
        let path = write_manifest(dir.path(), "p.yaml", body);
        let errors = load_file(&path).expect_err("typos");
        let named: Vec<(String, String)> = errors
            .iter()
            .map(|e| {
                (
                    e.field.clone(),
                    unknown_field(&e.message).unwrap_or("?").to_string(),
                )
            })
            .collect();
        for expected in [
            ("", "event"),
            ("", "capabilites"),
            ("limits", "memroy_mb"),
            ("limits", "timeot_ms"),
        ] {
            assert!(
                named.contains(&(expected.0.to_string(), expected.1.to_string())),
                "{expected:?} in {named:?}"
            );
        }
        assert_eq!(named.len(), 4, "{errors:?}");
    }

    #[test]
    fn a_schedule_the_plugin_does_not_subscribe_to_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: ticker\nversion: 1.0.0\nkind: handler\ncomponent: ok.wasm\napi: ^0.2\n\
                    events:\n  subscribes: [schedule.other.*]\n\
                    schedule:\n  - name: nightly\n    cron: '0 3 * * *'\n";
        let path = write_manifest(dir.path(), "p.yaml", body);
        let errors = load_file(&path).expect_err("never delivered");
        assert_eq!(errors[0].field, "schedule[0]", "{errors:?}");
        assert!(
            errors[0]
                .message
                .contains("`schedule.ticker.nightly`, would never reach the plugin"),
            "{errors:?}"
        );
        let subscribed = body.replace("schedule.other.*", "schedule.ticker.*");
        load_file(&write_manifest(dir.path(), "p.yaml", &subscribed)).expect("subscribed");
    }

    fn write_manifest(dir: &Path, name: &str, body: &str) -> PathBuf {
        std::fs::write(dir.join("ok.wasm"), COMPONENT_HEADER).expect("component");
        let path = dir.join(name);
        std::fs::write(&path, body).expect("manifest");
        path
    }

    const GOOD: &str =
        "id: counter\nversion: 1.0.0\nkind: handler\ncomponent: ok.wasm\napi: ^0.1\n";

    #[test]
    fn a_bad_access_or_mode_is_named_once_and_hides_no_other_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = format!(
            "{GOOD}capabilities:\n  memory: {{access: write, scopes: [user:*]}}\n  \
             files: [{{name: ws, mode: rx}}]\n  env: [lower]\n  llm: yes\n"
        );
        let errors = load_file(&write_manifest(dir.path(), "p.yaml", &body)).expect_err("refused");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert!(
            errors.iter().all(|e| !e.message.contains("missing field")),
            "{errors:?}"
        );
        for field in [
            "capabilities.memory.access",
            "capabilities.files[0].mode",
            "capabilities.llm",
            "capabilities.env[0]",
        ] {
            assert!(
                fields.iter().any(|f| f.starts_with(field)),
                "{field}: {errors:?}"
            );
        }
    }

    #[test]
    fn a_number_too_large_for_yaml_is_named_by_its_field_and_hides_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: Bad_Id\nversion: 1.0.0\nkind: handler\ncomponent: ok.wasm\napi: ^0.2\n\
                    limits:\n  memory_mb: 18446744073709551616\n  timeout_ms: 0\n\
                    config: {big: 99999999999999999999999}\n";
        let errors = load_file(&write_manifest(dir.path(), "p.yaml", body)).expect_err("refused");
        let said = |field: &str, text: &str| {
            errors
                .iter()
                .any(|e| e.field == field && e.message.contains(text))
        };
        assert!(
            said(
                "limits.memory_mb",
                "`18446744073709551616` is too large a number"
            ),
            "{errors:?}"
        );
        assert!(
            said("config.big", "`99999999999999999999999` is too large"),
            "{errors:?}"
        );
        assert!(said("id", "not a valid plugin id"), "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.field.starts_with("limits.timeout_ms")),
            "{errors:?}"
        );
        assert_eq!(errors.len(), 4, "nothing about the stand-ins: {errors:?}");
    }

    #[test]
    fn a_description_is_one_line_without_control_characters() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (description, found) in [
            ("\"two\\nlines\"", "holds a line break"),
            ("\"\\e[31mred\"", "holds the control character U+001B"),
        ] {
            let body = format!("{GOOD}description: {description}\n");
            let path = write_manifest(dir.path(), "p.yaml", &body);
            let errors = load_file(&path).expect_err("refused");
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert_eq!(errors[0].field, "description");
            assert!(errors[0].message.contains(found), "{errors:?}");
        }
        // A folded block's closing line break is the block's, not the text's.
        let body = format!("{GOOD}description: >\n  one line\n  folded\n");
        let manifest = load_file(&write_manifest(dir.path(), "p.yaml", &body)).expect("valid");
        assert_eq!(manifest.description.as_deref(), Some("one line folded"));
    }

    #[test]
    fn a_fifo_as_the_component_is_no_file_and_is_not_waited_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo.wasm");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let body = GOOD.replace("ok.wasm", "fifo.wasm");
        let errors = load_file(&write_manifest(dir.path(), "p.yaml", &body)).expect_err("a fifo");
        assert_eq!(errors[0].field, "component", "{errors:?}");
        assert!(errors[0].message.contains("is not a file"), "{errors:?}");
    }

    #[test]
    fn a_good_manifest_loads_with_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_manifest(dir.path(), "counter.yaml", GOOD);
        let manifest = load_file(&path).expect("valid");
        assert_eq!(manifest.id, "counter");
        assert_eq!(manifest.limits.memory_mb, 128);
        assert_eq!(manifest.api_version, ApiVersion::V0_1);
        assert_eq!(manifest.config, serde_json::json!({}));
    }

    #[test]
    fn every_parse_problem_of_a_file_is_reported_in_one_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_manifest(dir.path(), "few.yaml", "id: x\n");
        let errors = load_file(&path).expect_err("missing fields");
        let missing: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        for field in ["version", "kind", "component", "api"] {
            assert!(
                missing
                    .iter()
                    .any(|m| m.contains(&format!("missing field `{field}`"))),
                "{field}: {missing:?}"
            );
        }
        let body = "id: alpha\nversion: 0.1.0\nkind: handler\ncomponent: a.wasm\ncolour: blue\n\
                    limits:\n  memory_mb: lots\n  timeout_ms: -1\n";
        let path = write_manifest(dir.path(), "many.yaml", body);
        let errors = load_file(&path).expect_err("several problems");
        let said = |text: &str, field: &str| {
            errors
                .iter()
                .any(|e| e.message.contains(text) && e.field.starts_with(field))
        };
        assert!(said("unknown field `colour`", ""), "{errors:?}");
        assert!(said("invalid type", "limits.memory_mb"), "{errors:?}");
        assert!(
            said("timeout_ms", "limits.timeout_ms") || said("-1", "limits.timeout_ms"),
            "{errors:?}"
        );
        assert!(said("missing field `api`", ""), "{errors:?}");
    }

    #[test]
    fn a_required_field_of_the_wrong_value_is_not_also_reported_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: alpha\nversion: 0.1.0\nkind: handlr\ncomponent: ok.wasm\napi: [1]\n";
        let path = write_manifest(dir.path(), "p.yaml", body);
        let errors = load_file(&path).expect_err("a bad kind and api");
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].message.contains("unknown variant `handlr`"),
            "{errors:?}"
        );
        assert!(
            errors[1].field.starts_with("api") && errors[1].message.contains("invalid type"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_file_with_parse_problems_is_validated_too_but_not_on_its_stand_ins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: Bad_Id\nversion: 1.0.0\nkind: chanel\ncomponent: gone.wasm\napi: ^0.2\n\
                    channel: {poll_interval_ms: 5}\nlimits:\n  memory_mb: lots\n  timeout_ms: 0\n";
        let path = write_manifest(dir.path(), "p.yaml", body);
        let errors = load_file(&path).expect_err("problems of both kinds");
        let said = |field: &str, text: &str| {
            errors
                .iter()
                .any(|e| e.field == field && e.message.contains(text))
        };
        // The parse problems, then what validation finds in the rest, in one check.
        assert!(said("kind", "unknown variant `chanel`"), "{errors:?}");
        assert!(said("limits.memory_mb", "invalid type"), "{errors:?}");
        assert!(said("limits.timeout_ms", "0 is out of range"), "{errors:?}");
        assert!(
            said("id", "`Bad_Id` is not a valid plugin id"),
            "{errors:?}"
        );
        assert!(said("component", "gone.wasm"), "{errors:?}");
        // Never what the stand-in kind or the taken-out limit would cause.
        assert_eq!(errors.len(), 5, "{errors:?}");
    }

    #[test]
    fn unknown_keys_name_the_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = format!("{GOOD}capabilities:\n  files:\n    - name: notes\n      mod: rw\n");
        let path = write_manifest(dir.path(), "p.yaml", &body);
        let errors = load_file(&path).expect_err("unknown key");
        // The misspelt key, then the key it left out: every problem, in one check.
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[1].message.contains("missing field `mode`")
                && errors[1].field.starts_with("capabilities.files[0]"),
            "{:?}",
            errors[1]
        );
        assert!(
            errors[0].field.starts_with("capabilities.files[0]"),
            "{:?}",
            errors[0]
        );
        assert!(
            errors[0].message.contains("unknown field `mod`"),
            "{:?}",
            errors[0]
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_said_in_plain_words() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = format!("{GOOD}limits:\n  timeout_ms: -1\n");
        let path = write_manifest(dir.path(), "p.yaml", &body);
        let errors = load_file(&path).expect_err("a negative timeout");
        assert_eq!(errors[0].field, "limits.timeout_ms", "{errors:?}");
        assert!(
            errors[0]
                .message
                .contains("expected a whole number from 1 to 600000")
                && !errors[0].message.contains("u64"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_syntax_error_or_a_document_of_the_wrong_shape_is_said_as_such() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (body, expected) in [
            ("id: [unclosed\n", "not valid YAML: "),
            ("- id: counter\n", "expected a mapping of fields"),
            ("", "found an empty document"),
        ] {
            let path = write_manifest(dir.path(), "p.yaml", body);
            let errors = load_file(&path).expect_err(body);
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0].message.contains(expected),
                "{body:?}: {:?}",
                errors[0]
            );
            assert!(
                !errors[0].message.contains("RawManifest"),
                "{:?}",
                errors[0]
            );
        }
        let with_mark = write_manifest(dir.path(), "bom.yaml", &format!("\u{feff}{GOOD}"));
        load_file(&with_mark).expect("a byte-order mark is not YAML");
    }

    #[test]
    fn every_semantic_problem_of_a_file_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: Bad_Id\nversion: one\nkind: channel\ncomponent: missing.wasm\napi: ^9\n\
                    events:\n  subscribes: [session.ended]\n  emits: [session.ended, 'bad topic']\n\
                    schedule:\n  - name: nightly\n    cron: '61 * * * *'\n\
                    capabilities:\n  env: [lower]\n  http: ['exa mple.com']\n  files: [{name: '../x', mode: ro}]\n\
                    limits:\n  memory_mb: 0\n  http_timeout_ms: 0\n  http_response_bytes: 0\n";
        let path = write_manifest(dir.path(), "p.yaml", body);
        let errors = load_file(&path).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for expected in [
            "id",
            "version",
            "api",
            "component",
            "events.subscribes",
            "events.emits[0]",
            "events.emits[1]",
            "schedule[0].cron",
            "schedule",
            "capabilities.env[0]",
            "capabilities.http[0]",
            "capabilities.files[0].name",
            "limits.memory_mb",
            "limits.http_timeout_ms",
            "limits.http_response_bytes",
        ] {
            assert!(
                fields.contains(&expected),
                "missing {expected} in {fields:?}"
            );
        }
        assert!(errors.iter().all(|e| e.file == path));
    }

    #[test]
    fn a_core_module_is_not_a_component() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("core.wasm"),
            [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
        )
        .expect("write");
        let path = write_manifest(dir.path(), "p.yaml", &GOOD.replace("ok.wasm", "core.wasm"));
        let errors = load_file(&path).expect_err("core module");
        assert!(
            errors[0].message.contains("core WebAssembly module"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_component_cut_short_is_refused_though_its_header_is_right() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A nested core module section that claims 100 bytes and holds 3.
        let mut cut = COMPONENT_HEADER.to_vec();
        cut.extend_from_slice(&[0x01, 100, 0x00, 0x61, 0x73]);
        std::fs::write(dir.path().join("cut.wasm"), cut).expect("write");
        let path = write_manifest(dir.path(), "p.yaml", &GOOD.replace("ok.wasm", "cut.wasm"));
        let errors = load_file(&path).expect_err("cut short");
        assert!(
            errors[0]
                .message
                .contains("cut.wasm is not a valid component"),
            "{errors:?}"
        );
    }

    #[test]
    fn topic_patterns() {
        assert!(is_valid_topic_pattern("schedule.*"));
        assert!(is_valid_topic_pattern("*"));
        assert!(is_valid_topic_pattern("session.ended"));
        assert!(!is_valid_topic_pattern("session..ended"));
        assert!(!is_valid_topic_pattern("session.*.ended"));
        assert!(!is_valid_topic("a.*"));
    }
}
