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
pub use cairn_vocab::plugin::PluginKind;
use cairn_vocab::topic::is_topic_segment;
pub use cairn_vocab::topic::{HOST_TOPICS, is_valid_topic, is_valid_topic_pattern};

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
    /// The newest host API version satisfying `api`, which the plugin is bound with.
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
    /// Outbound network destinations, `host` or `host:port` (TCP connect only).
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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: 128,
            timeout_ms: 5000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    id: String,
    version: String,
    kind: PluginKind,
    component: PathBuf,
    api: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    depends_on: Vec<RawDependency>,
    #[serde(default)]
    events: Events,
    #[serde(default)]
    schedule: Vec<ScheduleEntry>,
    #[serde(default)]
    channel: Option<ChannelOptions>,
    #[serde(default)]
    capabilities: Capabilities,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    config: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDependency {
    id: String,
    version: String,
}

/// Collects the problems of one file.
struct Problems<'a> {
    file: &'a Path,
    errors: Vec<ManifestError>,
}

impl Problems<'_> {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ManifestError {
            file: self.file.to_path_buf(),
            field: field.into(),
            message: message.into(),
        });
    }
}

/// Whether `id` is a valid plugin id.
pub fn is_valid_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_lowercase()
        && !id.ends_with('-')
        && !id.contains("--")
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

fn is_valid_env_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && !bytes[0].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
}

fn is_valid_dir_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Parse `host` or `host:port` into its parts; the host is a DNS name or an IP literal.
pub fn parse_network_target(target: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = match target.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            (host, Some(port.parse::<u16>().ok().filter(|p| *p != 0)?))
        }
        Some(_) => return None,
        None => (target, None),
    };
    let host_ok = host.parse::<std::net::IpAddr>().is_ok()
        || (!host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }));
    host_ok.then(|| (host.to_ascii_lowercase(), port))
}

/// Check that a five-field cron expression parses.
pub fn check_cron(expression: &str) -> Result<(), String> {
    if expression.split_whitespace().count() != 5 {
        return Err("expected five fields: minute hour day-of-month month day-of-week".into());
    }
    expression
        .parse::<croner::Cron>()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The first bytes of a WebAssembly component (as opposed to a core module).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

fn check_component_file(path: &Path) -> Result<(), String> {
    let mut header = [0u8; 8];
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(format!("{} is not a file", path.display()));
    }
    file.read_exact(&mut header).map_err(|_| {
        format!(
            "{} is not a WebAssembly component (too short)",
            path.display()
        )
    })?;
    if header == COMPONENT_HEADER {
        Ok(())
    } else if header[..4] == COMPONENT_HEADER[..4] {
        Err(format!(
            "{} is a core WebAssembly module; expected a WASI 0.2 component (build for wasm32-wasip2)",
            path.display()
        ))
    } else {
        Err(format!("{} is not a WebAssembly component", path.display()))
    }
}

/// Parse and validate one manifest file. Every problem found is returned.
pub fn load_file(file: &Path) -> Result<Manifest, Vec<ManifestError>> {
    let mut problems = Problems {
        file,
        errors: Vec::new(),
    };
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            problems.add("", format!("cannot read: {e}"));
            return Err(problems.errors);
        }
    };
    let raw: RawManifest = match serde_yaml::from_str(&text) {
        Ok(raw) => raw,
        Err(e) => {
            let (field, message) = split_serde_error(&e.to_string());
            problems.add(field, message);
            return Err(problems.errors);
        }
    };
    let manifest = validate(raw, &mut problems);
    match manifest {
        Some(manifest) if problems.errors.is_empty() => Ok(manifest),
        _ => Err(problems.errors),
    }
}

/// serde_yaml reports `path.to.field: message at line L column C`; split off the path.
fn split_serde_error(text: &str) -> (String, String) {
    match text.split_once(": ") {
        Some((path, rest))
            if !path.contains(' ')
                && path
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._[]-".contains(c)) =>
        {
            (path.to_string(), rest.to_string())
        }
        _ => (String::new(), text.to_string()),
    }
}

fn validate(raw: RawManifest, problems: &mut Problems<'_>) -> Option<Manifest> {
    let file = problems.file.to_path_buf();
    if !is_valid_id(&raw.id) {
        problems.add(
            "id",
            format!(
                "`{}` is not a valid plugin id; expected lower-case letters, digits and single dashes, starting with a letter, at most 64 characters",
                raw.id
            ),
        );
    }
    let version = Version::parse(&raw.version)
        .map_err(|e| {
            problems.add(
                "version",
                format!("`{}` is not a semver version like 1.2.3: {e}", raw.version),
            )
        })
        .ok();
    let api = VersionReq::parse(&raw.api)
        .map_err(|e| {
            problems.add(
                "api",
                format!("`{}` is not a semver requirement like ^0.1: {e}", raw.api),
            )
        })
        .ok();
    let api_version = api.as_ref().and_then(|req| {
        let found = ApiVersion::newest_matching(req);
        if found.is_none() {
            let supported: Vec<String> = SUPPORTED_APIS
                .iter()
                .map(|a| a.version().to_string())
                .collect();
            problems.add(
                "api",
                format!(
                    "`{}` matches no API this host supports (supported: {})",
                    raw.api,
                    supported.join(", ")
                ),
            );
        }
        found
    });

    let base = file.parent().unwrap_or(Path::new("."));
    let component = base.join(&raw.component);
    if raw.component.as_os_str().is_empty() {
        problems.add(
            "component",
            "expected a path to a .wasm component, relative to the manifest",
        );
    } else if let Err(message) = check_component_file(&component) {
        problems.add("component", message);
    }

    let mut depends_on = Vec::new();
    let mut seen_deps = BTreeSet::new();
    for (i, dep) in raw.depends_on.iter().enumerate() {
        if !is_valid_id(&dep.id) {
            problems.add(
                format!("depends_on[{i}].id"),
                format!("`{}` is not a valid plugin id", dep.id),
            );
        } else if dep.id == raw.id {
            problems.add(
                format!("depends_on[{i}].id"),
                "a plugin cannot depend on itself",
            );
        } else if !seen_deps.insert(dep.id.clone()) {
            problems.add(
                format!("depends_on[{i}].id"),
                format!("`{}` is listed twice", dep.id),
            );
        }
        match VersionReq::parse(&dep.version) {
            Ok(req) => depends_on.push(Dependency {
                id: dep.id.clone(),
                version: req,
            }),
            Err(e) => problems.add(
                format!("depends_on[{i}].version"),
                format!(
                    "`{}` is not a semver requirement like ^1.2: {e}",
                    dep.version
                ),
            ),
        }
    }

    validate_events(&raw, problems);
    validate_capabilities(&raw, problems);

    if raw.limits.memory_mb == 0 || raw.limits.memory_mb > 4096 {
        problems.add(
            "limits.memory_mb",
            format!(
                "{} is out of range; expected 1 to 4096",
                raw.limits.memory_mb
            ),
        );
    }
    if raw.limits.timeout_ms == 0 || raw.limits.timeout_ms > 600_000 {
        problems.add(
            "limits.timeout_ms",
            format!(
                "{} is out of range; expected 1 to 600000",
                raw.limits.timeout_ms
            ),
        );
    }

    let config = match raw.config {
        None => serde_json::Value::Object(Default::default()),
        Some(value) => match serde_json::to_value(&value) {
            Ok(json) => json,
            Err(e) => {
                problems.add(
                    "config",
                    format!("expected JSON-compatible YAML (string keys): {e}"),
                );
                serde_json::Value::Null
            }
        },
    };

    Some(Manifest {
        file,
        id: raw.id,
        version: version?,
        kind: raw.kind,
        description: raw.description,
        component,
        api: api?,
        api_version: api_version?,
        depends_on,
        events: raw.events,
        schedule: raw.schedule,
        channel: raw.channel,
        capabilities: raw.capabilities,
        limits: raw.limits,
        config,
    })
}

fn validate_events(raw: &RawManifest, problems: &mut Problems<'_>) {
    let world = World::of(raw.kind);
    for (i, pattern) in raw.events.subscribes.iter().enumerate() {
        if !is_valid_topic_pattern(pattern) {
            problems.add(
                format!("events.subscribes[{i}]"),
                format!("`{pattern}` is not a topic; expected dot-separated segments of a-z 0-9 _ -, optionally ending in `.*`"),
            );
        }
    }
    if !raw.events.subscribes.is_empty() && world != World::Handler {
        problems.add(
            "events.subscribes",
            format!("a {} cannot subscribe to events; expected kind handler, consolidator or sleep-handler", raw.kind),
        );
    }
    for (i, topic) in raw.events.emits.iter().enumerate() {
        if !is_valid_topic(topic) {
            problems.add(
                format!("events.emits[{i}]"),
                format!("`{topic}` is not a topic; expected dot-separated segments of a-z 0-9 _ - (no patterns)"),
            );
        } else if HOST_TOPICS.contains(&topic.as_str())
            || topic.starts_with("schedule.")
            || topic.starts_with("plugin.")
        {
            problems.add(
                format!("events.emits[{i}]"),
                format!("`{topic}` is a host topic; plugins may subscribe to it but not emit it"),
            );
        }
    }
    let mut names = BTreeSet::new();
    for (i, entry) in raw.schedule.iter().enumerate() {
        if !is_topic_segment(&entry.name) {
            problems.add(
                format!("schedule[{i}].name"),
                format!("`{}` is not a valid name; expected a-z 0-9 _ -", entry.name),
            );
        } else if !names.insert(entry.name.as_str()) {
            problems.add(
                format!("schedule[{i}].name"),
                format!("`{}` is used twice", entry.name),
            );
        }
        if let Err(message) = check_cron(&entry.cron) {
            problems.add(
                format!("schedule[{i}].cron"),
                format!("`{}` is not a valid cron expression: {message}", entry.cron),
            );
        }
    }
    if !raw.schedule.is_empty() && world != World::Handler {
        problems.add(
            "schedule",
            format!(
                "a {} cannot have schedules; expected kind handler, consolidator or sleep-handler",
                raw.kind
            ),
        );
    }
}

fn validate_capabilities(raw: &RawManifest, problems: &mut Problems<'_>) {
    let caps = &raw.capabilities;
    if raw.channel.is_some() && raw.kind != PluginKind::Channel {
        problems.add(
            "channel",
            format!("channel options are for kind channel, not {}", raw.kind),
        );
    }
    if let Some(channel) = &raw.channel
        && channel.poll_interval_ms == Some(0)
    {
        problems.add(
            "channel.poll_interval_ms",
            "expected a positive number of milliseconds",
        );
    }
    if caps.stdio && raw.kind != PluginKind::Channel {
        problems.add(
            "capabilities.stdio",
            format!("only channels may use the host's stdio, not a {}", raw.kind),
        );
    }
    if caps.memory.is_some() && raw.kind == PluginKind::MemoryBackend {
        problems.add(
            "capabilities.memory",
            "a memory-backend is the memory; it cannot be granted the memory interface",
        );
    }
    if let Some(grant) = &caps.memory {
        if grant.scopes.is_empty() {
            problems.add(
                "capabilities.memory.scopes",
                "expected at least one scope: `all`, or `agent:<id>`, `user:<id>`, `session:<id>` (`*` for any id)",
            );
        }
        for (i, scope) in grant.scopes.iter().enumerate() {
            if ScopePattern::parse(scope).is_none() {
                problems.add(
                    format!("capabilities.memory.scopes[{i}]"),
                    format!("`{scope}` is not a scope; expected `all`, `agent:<id>`, `user:<id>` or `session:<id>` (`*` for any id)"),
                );
            }
        }
    }
    let mut dir_names = BTreeSet::new();
    for (i, grant) in caps.files.iter().enumerate() {
        if !is_valid_dir_name(&grant.name) {
            problems.add(
                format!("capabilities.files[{i}].name"),
                format!(
                    "`{}` is not a directory name; expected a-z 0-9 - _ (no slashes or dots)",
                    grant.name
                ),
            );
        } else if !dir_names.insert(grant.name.as_str()) {
            problems.add(
                format!("capabilities.files[{i}].name"),
                format!("`{}` is granted twice", grant.name),
            );
        }
    }
    for (i, target) in caps.http.iter().enumerate() {
        if parse_network_target(target).is_none() {
            problems.add(
                format!("capabilities.http[{i}]"),
                format!("`{target}` is not a destination; expected `host` or `host:port`"),
            );
        }
    }
    for (i, name) in caps.env.iter().enumerate() {
        if !is_valid_env_name(name) {
            problems.add(
                format!("capabilities.env[{i}]"),
                format!("`{name}` is not an environment variable name; expected A-Z 0-9 _"),
            );
        }
    }
}

/// Read every `*.yaml` / `*.yml` manifest of a directory, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<(Vec<Manifest>, Vec<ManifestError>), std::io::Error> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.is_file()
                && matches!(
                    path.extension().and_then(|e| e.to_str()),
                    Some("yaml") | Some("yml")
                )
        })
        .collect();
    files.sort();
    let mut manifests = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        match load_file(&file) {
            Ok(manifest) => manifests.push(manifest),
            Err(mut problems) => errors.append(&mut problems),
        }
    }
    Ok((manifests, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_manifest(dir: &Path, name: &str, body: &str) -> PathBuf {
        std::fs::write(dir.join("ok.wasm"), COMPONENT_HEADER).expect("component");
        let path = dir.join(name);
        std::fs::write(&path, body).expect("manifest");
        path
    }

    const GOOD: &str =
        "id: counter\nversion: 1.0.0\nkind: handler\ncomponent: ok.wasm\napi: ^0.1\n";

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
    fn unknown_keys_name_the_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = format!("{GOOD}capabilities:\n  files:\n    - name: notes\n      mod: rw\n");
        let path = write_manifest(dir.path(), "p.yaml", &body);
        let errors = load_file(&path).expect_err("unknown key");
        assert_eq!(errors.len(), 1);
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
    fn every_semantic_problem_of_a_file_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "id: Bad_Id\nversion: one\nkind: channel\ncomponent: missing.wasm\napi: ^9\n\
                    events:\n  subscribes: [session.ended]\n  emits: [session.ended, 'bad topic']\n\
                    schedule:\n  - name: nightly\n    cron: '61 * * * *'\n\
                    capabilities:\n  env: [lower]\n  http: ['exa mple.com']\n  files: [{name: '../x', mode: ro}]\n\
                    limits:\n  memory_mb: 0\n";
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
    fn topic_patterns() {
        assert!(is_valid_topic_pattern("schedule.*"));
        assert!(is_valid_topic_pattern("*"));
        assert!(is_valid_topic_pattern("session.ended"));
        assert!(!is_valid_topic_pattern("session..ended"));
        assert!(!is_valid_topic_pattern("session.*.ended"));
        assert!(!is_valid_topic("a.*"));
    }

    #[test]
    fn network_targets() {
        assert_eq!(
            parse_network_target("api.example.com"),
            Some(("api.example.com".into(), None))
        );
        assert_eq!(
            parse_network_target("127.0.0.1:8080"),
            Some(("127.0.0.1".into(), Some(8080)))
        );
        assert_eq!(parse_network_target("host:0"), None);
        assert_eq!(parse_network_target("-bad.com"), None);
    }
}
