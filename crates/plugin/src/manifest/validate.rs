//! Validating a raw manifest: every problem named by its field, the events, schedules
//! and capabilities checked against the kind.

use super::*;

/// Check a raw manifest, reporting every problem; the manifest when none was found. The
/// component file is checked only when it `must_exist` (a project not built yet has none).
pub(super) fn validate(
    raw: RawManifest,
    problems: &mut Problems<'_>,
    component: ComponentFile,
) -> Option<Manifest> {
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
    // A folded or literal YAML block ends with a line break: that one is not the text's.
    let description = raw.description.as_deref().map(|d| d.trim_end().to_string());
    if let Some(description) = &description {
        validate_description(description, problems);
    }
    let (api, api_version) = validate_api(&raw, problems);
    let component = validate_component(&raw, &file, component, problems);
    let depends_on = validate_dependencies(&raw, problems);
    validate_events(&raw, problems);
    validate_capabilities(&raw, problems);
    validate_limits(&raw.limits, problems);
    let config = config_json(raw.config.as_ref(), problems);
    Some(Manifest {
        file,
        id: raw.id,
        version: version?,
        kind: raw.kind,
        description,
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

/// `description` is the one line `cairn plugins list` prints: a line break or a control
/// character (an escape that colours the operator's terminal) is refused (until 2026-12-04
/// it was printed as it was, breaking the table).
fn validate_description(description: &str, problems: &mut Problems<'_>) {
    let Some(found) = description.chars().find(|c| c.is_control()) else {
        return;
    };
    let what = match found {
        '\n' | '\r' => "a line break".to_string(),
        other => format!("the control character U+{:04X}", u32::from(other)),
    };
    problems.add(
        "description",
        format!("holds {what}; expected one line of text without control characters"),
    );
}

/// The API requirement, and the newest host API version satisfying it.
fn validate_api(
    raw: &RawManifest,
    problems: &mut Problems<'_>,
) -> (Option<VersionReq>, Option<ApiVersion>) {
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
    (api, api_version)
}

/// The component's path, relative to the manifest; it must be a WebAssembly component.
fn validate_component(
    raw: &RawManifest,
    file: &Path,
    expected: ComponentFile,
    problems: &mut Problems<'_>,
) -> PathBuf {
    let base = file.parent().unwrap_or(Path::new("."));
    let component = base.join(&raw.component);
    if raw.component.as_os_str().is_empty() {
        problems.add(
            "component",
            "expected a path to a .wasm component, relative to the manifest",
        );
    } else if expected == ComponentFile::MustExist
        && let Err(message) = check_component_file(&component)
    {
        problems.add("component", message);
    }
    component
}

/// The dependencies: valid ids, not the plugin itself, each once, semver requirements.
fn validate_dependencies(raw: &RawManifest, problems: &mut Problems<'_>) -> Vec<Dependency> {
    let mut depends_on = Vec::new();
    let mut seen = BTreeSet::new();
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
        } else if !seen.insert(dep.id.clone()) {
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
    depends_on
}

/// Memory, time and LLM budget limits within their ranges.
/// One limit: its field, how to read it, and the values it takes (inclusive).
struct LimitRange {
    field: &'static str,
    value: fn(&Limits) -> u64,
    min: u64,
    max: u64,
}

/// Every limit's range, each beside the field it reads, so the two cannot drift apart.
const LIMIT_RANGES: [LimitRange; 8] = [
    LimitRange {
        field: "limits.memory_mb",
        value: |l| l.memory_mb.into(),
        min: 1,
        max: 4096,
    },
    LimitRange {
        field: "limits.timeout_ms",
        value: |l| l.timeout_ms,
        min: 1,
        max: 600_000,
    },
    LimitRange {
        field: "limits.llm_calls_per_hour",
        value: |l| l.llm_calls_per_hour.into(),
        min: 1,
        max: 100_000,
    },
    LimitRange {
        field: "limits.llm_tokens_per_hour",
        value: |l| l.llm_tokens_per_hour,
        min: 1,
        max: 1_000_000_000,
    },
    LimitRange {
        field: "limits.http_timeout_ms",
        value: |l| l.http_timeout_ms,
        min: 1,
        max: 600_000,
    },
    LimitRange {
        field: "limits.http_response_bytes",
        value: |l| l.http_response_bytes,
        min: 1,
        max: 1 << 30,
    },
    LimitRange {
        field: "limits.emits_per_sec",
        value: |l| l.emits_per_sec.into(),
        min: 1,
        max: 100_000,
    },
    LimitRange {
        field: "limits.kv_bytes",
        value: |l| l.kv_bytes,
        min: 1,
        max: 1 << 40,
    },
];

/// The values `field` takes, when it is a limit.
pub(super) fn limit_range(field: &str) -> Option<(u64, u64)> {
    LIMIT_RANGES
        .iter()
        .find(|range| range.field == field)
        .map(|range| (range.min, range.max))
}

fn validate_limits(limits: &Limits, problems: &mut Problems<'_>) {
    for LimitRange {
        field,
        value,
        min,
        max,
    } in &LIMIT_RANGES
    {
        let value = value(limits);
        if !(*min..=*max).contains(&value) {
            problems.add(
                *field,
                format!("{value} is out of range; expected {min} to {max}"),
            );
        }
    }
}

/// The free-form `config` as the JSON handed to `init` (an empty object when absent).
fn config_json(
    config: Option<&serde_yaml::Value>,
    problems: &mut Problems<'_>,
) -> serde_json::Value {
    match config {
        None => serde_json::Value::Object(Default::default()),
        Some(value) => serde_json::to_value(value).unwrap_or_else(|e| {
            problems.add(
                "config",
                format!("expected JSON-compatible YAML (string keys): {e}"),
            );
            serde_json::Value::Null
        }),
    }
}

pub(super) fn validate_events(raw: &RawManifest, problems: &mut Problems<'_>) {
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
        let tick = format!("schedule.{}.{}", raw.id, entry.name);
        if is_topic_segment(&entry.name)
            && !raw
                .events
                .subscribes
                .iter()
                .any(|pattern| topic_matches(pattern, &tick))
        {
            problems.add(
                format!("schedule[{i}]"),
                format!(
                    "its ticks, `{tick}`, would never reach the plugin: expected \
                     `schedule.{}.*` (or `{tick}`) in events.subscribes",
                    raw.id
                ),
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

pub(super) fn validate_capabilities(raw: &RawManifest, problems: &mut Problems<'_>) {
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
        if HttpDestination::parse(target).is_none() {
            problems.add(
                format!("capabilities.http[{i}]"),
                format!(
                    "`{target}` is not a destination; expected `host`, `host:port`, `*.domain` \
                     or `http://host:port` for plain HTTP"
                ),
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
