//! Reading manifests: YAML into the raw schema (unknown keys are errors), the component
//! file check, and a directory at a time with every problem reported together.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    pub(super) id: String,
    pub(super) version: String,
    pub(super) kind: PluginKind,
    pub(super) component: PathBuf,
    pub(super) api: String,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) depends_on: Vec<RawDependency>,
    #[serde(default)]
    pub(super) events: Events,
    #[serde(default)]
    pub(super) schedule: Vec<ScheduleEntry>,
    #[serde(default)]
    pub(super) channel: Option<ChannelOptions>,
    #[serde(default)]
    pub(super) capabilities: Capabilities,
    #[serde(default)]
    pub(super) limits: Limits,
    #[serde(default)]
    pub(super) config: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDependency {
    pub(super) id: String,
    pub(super) version: String,
}

/// Whether validation checks the component file (`load_file`) or leaves it to a build
/// (`load_unbuilt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ComponentFile {
    /// It must be there and be a component.
    MustExist,
    /// It is the output of a build about to run.
    NotBuiltYet,
}

/// Collects the problems of one file.
pub(super) struct Problems<'a> {
    pub(super) file: &'a Path,
    pub(super) errors: Vec<ManifestError>,
}

impl Problems<'_> {
    pub(super) fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
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

pub(super) fn is_valid_env_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && !bytes[0].is_ascii_digit()
        && bytes
            .iter()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
}

pub(super) fn is_valid_dir_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Check that a five-field cron expression parses.
pub fn check_cron(expression: &str) -> Result<(), String> {
    if expression.split_whitespace().count() != 5 {
        return Err("expected five fields: minute hour day-of-month month day-of-week".into());
    }
    // croner takes an empty list item (`,`, `1,,2`) for a field no value matches, and then
    // searches for a next firing for ever (found by `cargo xtask fuzz`, target `cron`).
    if let Some(field) = expression
        .split_whitespace()
        .find(|field| field.split(',').any(str::is_empty))
    {
        return Err(format!(
            "`{field}` has an empty list item; expected values separated by single commas"
        ));
    }
    let cron = expression
        .parse::<croner::Cron>()
        .map_err(|e| explain_cron_error(expression, &e.to_string()))?;
    // Cron has no year field, so an expression that fires at all fires again after now.
    if cron
        .find_next_occurrence(&chrono::Utc::now(), false)
        .is_err()
    {
        return Err("it never fires (no day matches it, as on 31 February)".into());
    }
    Ok(())
}

/// The five fields' names and the values each takes.
const CRON_FIELDS: [(&str, &str); 5] = [
    ("minute", "0–59"),
    ("hour", "0–23"),
    ("day-of-month", "1–31"),
    ("month", "1–12 or JAN–DEC"),
    ("day-of-week", "0–7 or SUN–SAT"),
];

/// croner's error for `expression`, with the field it is about and what that field takes:
/// each field is tried alone (the others `*`) to find the first croner refuses.
fn explain_cron_error(expression: &str, error: &str) -> String {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let refused = (0..fields.len()).find(|&at| {
        let alone: Vec<&str> = (0..fields.len())
            .map(|i| if i == at { fields[i] } else { "*" })
            .collect();
        alone.join(" ").parse::<croner::Cron>().is_err()
    });
    match refused.and_then(|at| Some((fields[at], CRON_FIELDS.get(at)?))) {
        Some((field, (name, takes))) => {
            format!("{name} `{field}`: {error}; expected {takes}, `*`, ranges, lists and steps")
        }
        None => error.to_string(),
    }
}

/// The first bytes of a WebAssembly component (as opposed to a core module).
pub(super) const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

pub(super) fn check_component_file(path: &Path) -> Result<(), String> {
    let mut header = [0u8; 8];
    // Looked at before it is opened: opening a FIFO waits for a writer (until 2026-12-04
    // `cairn plugins check` hung on one).
    let metadata =
        std::fs::metadata(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    file.read_exact(&mut header).map_err(|_| {
        format!(
            "{} is not a WebAssembly component (too short)",
            path.display()
        )
    })?;
    if header == COMPONENT_HEADER {
        // A cut-short copy has the right header: walk its top-level sections too.
        crate::component::exported_names(path).map(|_| ())
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
    load_checked(file, ComponentFile::MustExist)
}

/// Read and validate the manifest of a plugin project about to be built: everything is
/// checked but the component, which the build is to write.
pub fn load_unbuilt(file: &Path) -> Result<Manifest, Vec<ManifestError>> {
    load_checked(file, ComponentFile::NotBuiltYet)
}

fn load_checked(file: &Path, component: ComponentFile) -> Result<Manifest, Vec<ManifestError>> {
    let mut problems = Problems {
        file,
        errors: Vec::new(),
    };
    let text = match std::fs::read(file) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => {
                problems.add("", not_utf8(e.as_bytes(), e.utf8_error().valid_up_to()));
                return Err(problems.errors);
            }
        },
        Err(e) => {
            problems.add("", format!("cannot read: {e}"));
            return Err(problems.errors);
        }
    };
    // An editor's byte-order mark is not part of the YAML.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let (mended_text, huge) = mend_huge_integers(text);
    for (field, number) in &huge {
        problems.add(
            field.clone(),
            format!(
                "`{number}` is too large a number for any field (at most 18446744073709551615)"
            ),
        );
    }
    let text = mended_text.as_str();
    let outcome = parse_and_validate(text, &mut problems, component);
    if huge.is_empty() {
        return outcome;
    }
    // What the stand-in numbers caused is not the file's problem: theirs is said above.
    let errors = outcome.err().unwrap_or_default();
    let (said, rest) = errors.split_at(huge.len().min(errors.len()));
    let caused = |e: &ManifestError| huge.iter().any(|(field, _)| within(&e.field, field));
    Err(said
        .iter()
        .chain(rest.iter().filter(|e| !caused(e)))
        .cloned()
        .collect())
}

/// Parse the manifest `text` and validate it, adding to `problems` (which may hold
/// problems already): the manifest when none was found.
fn parse_and_validate(
    text: &str,
    problems: &mut Problems<'_>,
    component: ComponentFile,
) -> Result<Manifest, Vec<ManifestError>> {
    let document = match check_yaml_shape(text) {
        Ok(document) => document,
        Err(message) => {
            problems.add("", message);
            return Err(std::mem::take(&mut problems.errors));
        }
    };
    let raw: RawManifest = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let error = e.to_string();
            add_parse_error(&error, problems);
            report_further_parse_errors(document, &error, component, problems);
            return Err(std::mem::take(&mut problems.errors));
        }
    };
    let manifest = validate(raw, problems, component);
    match manifest {
        Some(manifest) if problems.errors.is_empty() => Ok(manifest),
        _ => Err(std::mem::take(&mut problems.errors)),
    }
}

/// The manifest `text` with each integer too large for YAML's values (2⁶⁴ or more, which
/// serde_yaml cannot hold, so the whole file read as "not valid YAML" and hid every other
/// problem; until 2026-12-04) replaced by `0`, and each such field with its number.
fn mend_huge_integers(text: &str) -> (String, Vec<(String, String)>) {
    let mut text = text.to_string();
    let mut huge = Vec::new();
    for _ in 0..FURTHER_PARSE_ERRORS {
        let Err(error) = serde_yaml::from_str::<serde_yaml::Value>(&text) else {
            break;
        };
        let message = error.to_string();
        let Some(at) = error.location().map(|l| l.index()) else {
            break;
        };
        if !(message.contains(" as u128") || message.contains(" as i128")) {
            break;
        }
        // Where the parser says the number starts (checked: never cut inside a character).
        let Some(rest) = text.get(at..) else {
            break;
        };
        let length = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '+' || c == '_'))
            .unwrap_or(rest.len());
        if !rest[..length].bytes().any(|b| b.is_ascii_digit()) {
            break;
        }
        let (field, _) = split_serde_error(&message);
        huge.push((field, text[at..at + length].to_string()));
        text.replace_range(at..at + length, "0");
    }
    (text, huge)
}

/// Where a manifest stops being UTF-8: its first bad byte's line and column.
fn not_utf8(bytes: &[u8], valid_up_to: usize) -> String {
    let before = &bytes[..valid_up_to];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    format!(
        "not UTF-8 text: byte 0x{:02x} at line {line} column {column}; expected a YAML file \
         saved as UTF-8",
        bytes[valid_up_to]
    )
}

/// Where `key` is given in `text` (lines holding `key:`), for a duplicate-key error, which
/// the YAML parser reports without a position.
fn lines_of_key(text: &str, key: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            let unquoted = line.trim_start_matches(['"', '\'']);
            unquoted.strip_prefix(key).is_some_and(|rest| {
                rest.trim_start_matches(['"', '\''])
                    .trim_start()
                    .starts_with(':')
            })
        })
        .map(|(at, _)| at + 1)
        .collect()
}

/// A parser's error as the problem of the field it names, in plain words.
fn add_parse_error(error: &str, problems: &mut Problems<'_>) {
    let (field, mut message) = split_serde_error(error);
    // A limit takes a narrower range than its type: say that one.
    if let Some((min, max)) = super::validate::limit_range(&field) {
        let takes = format!("expected a whole number from {min} to {max}");
        message = message
            .replace("expected u64", &takes)
            .replace("expected u32", &takes);
    }
    problems.add(
        field,
        cairn_vocab::plain::type_names_in_plain_words(&message),
    );
}

/// Most parse errors of one file reported after the first.
const FURTHER_PARSE_ERRORS: usize = 32;

/// After a first parse error, the file's others: the parse stops at the first, so each is
/// mended in `document` — an unknown field or a value of the wrong type taken out, a missing
/// field given a stand-in — and the rest parsed again, so a person fixing a file sees every
/// problem in one check. (Their messages come without a line: the parse of what is left has
/// none.) Once what is left parses, it is validated too (ranges, ids, the component file,
/// dependencies), and every problem is reported but those of the mended fields and of the
/// checks that read a stand-in: a file with parse errors is still refused whole.
fn report_further_parse_errors(
    mut document: serde_yaml::Value,
    first: &str,
    component: ComponentFile,
    problems: &mut Problems<'_>,
) {
    let (mut path, mut message) = split_serde_error(first);
    // serde_yaml names the mapping holding an unknown field; serde_path_to_error, used
    // from then on, the field itself.
    let mut unknown_at_field = false;
    let mut mended = Vec::new();
    for _ in 0..FURTHER_PARSE_ERRORS {
        let Some(mend) = mend(&mut document, &path, &message, unknown_at_field) else {
            return;
        };
        mended.push(mend);
        unknown_at_field = true;
        let next = match serde_path_to_error::deserialize::<_, RawManifest>(document.clone()) {
            Ok(raw) => return report_validation_past_mends(raw, &mended, component, problems),
            Err(next) => next,
        };
        message = next.inner().to_string();
        path = next.path().to_string();
        if path == "." {
            path.clear();
        }
        let shown = match (unknown_field(&message), path.rsplit_once('.')) {
            (Some(_), Some((parent, _))) => parent.to_string(),
            (Some(key), None) if path == key => String::new(),
            _ => path.clone(),
        };
        let field = if shown.is_empty() {
            String::new()
        } else {
            format!("{shown}: ")
        };
        add_parse_error(&format!("{field}{message}"), problems);
    }
}

/// A field mended to parse past its problem: its path, and whether it was given a stand-in
/// (else it was taken out, and its default applies).
struct Mended {
    path: String,
    stand_in: bool,
}

/// The problems validation finds in a manifest parsed after `mended`, but those about a
/// mended field (its problem was reported already) and those a stand-in value caused.
fn report_validation_past_mends(
    raw: RawManifest,
    mended: &[Mended],
    component: ComponentFile,
    problems: &mut Problems<'_>,
) {
    let mut further = Problems {
        file: problems.file,
        errors: Vec::new(),
    };
    validate(raw, &mut further, component);
    let stood_in = |name: &str| mended.iter().any(|m| m.stand_in && m.path == name);
    for error in further.errors {
        let field = error.field.as_str();
        let about_mended = mended.iter().any(|m| within(field, &m.path));
        // The checks that compare the kind or the id with other fields.
        let reads_kind = KIND_CHECKED.contains(&field);
        let reads_id = field.starts_with("schedule[") && !field.contains('.')
            || field.starts_with("depends_on[") && field.ends_with(".id");
        if !(about_mended || stood_in("kind") && reads_kind || stood_in("id") && reads_id) {
            problems.errors.push(error);
        }
    }
}

/// The fields whose check depends on the plugin's kind (see `validate_events` and
/// `validate_capabilities`).
const KIND_CHECKED: [&str; 5] = [
    "events.subscribes",
    "schedule",
    "channel",
    "capabilities.stdio",
    "capabilities.memory",
];

/// Whether `field` is `path` or lies inside it (`limits` holds `limits.timeout_ms`, and
/// `schedule[0]` holds `schedule[0].cron`).
fn within(field: &str, path: &str) -> bool {
    field
        .strip_prefix(path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// Mend `document` past the parse error `message` at `path` (see
/// [`report_further_parse_errors`]): the field mended, if it could be.
fn mend(
    document: &mut serde_yaml::Value,
    path: &str,
    message: &str,
    unknown_at_field: bool,
) -> Option<Mended> {
    let joined = |mapping: &str, key: &str| match mapping {
        "" => key.to_string(),
        _ => format!("{mapping}.{key}"),
    };
    if let Some(key) = unknown_field(message) {
        let mapping = match path.rsplit_once('.') {
            _ if !unknown_at_field => path,
            Some((parent, _)) => parent,
            None => "",
        };
        return remove_key(document, mapping, key).then(|| Mended {
            path: joined(mapping, key),
            stand_in: false,
        });
    }
    if let Some(key) = missing_field(message) {
        let value = stand_in(key)?;
        return insert_key(document, path, key, value.into()).then(|| Mended {
            path: joined(path, key),
            stand_in: true,
        });
    }
    let wrong = [
        "invalid type",
        "invalid value",
        "unknown variant",
        "invalid length",
    ];
    if wrong.iter().any(|start| message.starts_with(start)) && !path.is_empty() {
        let (mapping, key) = path.rsplit_once('.').unwrap_or(("", path));
        // A required field's wrong value gives way to a stand-in: taken out, it would be
        // reported missing next, though it is there (until 2026-12-02 `kind: handlr` read
        // as an unknown variant and then as a missing `kind`; found by an operator's test).
        let stand_in = stand_in(key);
        let mended = match stand_in {
            Some(value) => insert_key(document, mapping, key, value.into()),
            None => remove_key(document, mapping, key),
        };
        return mended.then(|| Mended {
            path: path.to_string(),
            stand_in: stand_in.is_some(),
        });
    }
    None
}

/// The field a parser's "missing field `x`" message names.
fn missing_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("missing field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

/// A value of the right type for a required field, to parse past its absence.
fn stand_in(key: &str) -> Option<&'static str> {
    Some(match key {
        "id" => "stand-in",
        "version" => "0.0.0",
        "kind" => "handler",
        "component" => "stand-in.wasm",
        "api" => "^0.2",
        "name" => "stand-in",
        "cron" => "* * * * *",
        // Inside `capabilities` (until 2026-12-04 a bad `access` or `mode` was reported
        // missing too, and hid every further problem of the file).
        "access" => "read",
        "mode" => "ro",
        _ => return None,
    })
}

/// Set `key` to `value` in the mapping at `path` (as [`remove_key`] finds it); whether the
/// mapping was there.
fn insert_key(
    document: &mut serde_yaml::Value,
    path: &str,
    key: &str,
    value: serde_yaml::Value,
) -> bool {
    let Some(mapping) = mapping_at(document, path) else {
        return false;
    };
    mapping.insert(key.into(), value);
    true
}

/// The field a parser's "unknown field `x`, expected …" message names.
pub(super) fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

/// Remove `key` from the mapping at `path` (`limits`, `schedule[0]`, or the top when empty);
/// whether it was there.
fn remove_key(document: &mut serde_yaml::Value, path: &str, key: &str) -> bool {
    mapping_at(document, path).is_some_and(|mapping| mapping.remove(key).is_some())
}

/// The mapping at `path` (`limits`, `schedule[0]`, or the top when empty), if there is one.
fn mapping_at<'a>(
    document: &'a mut serde_yaml::Value,
    path: &str,
) -> Option<&'a mut serde_yaml::Mapping> {
    let mut at = document;
    for step in path.split('.').filter(|step| !step.is_empty()) {
        let (name, index) = match step.split_once('[') {
            Some((name, index)) => (name, index.trim_end_matches(']').parse::<usize>().ok()),
            None => (step, None),
        };
        let next = at.get_mut(name)?;
        at = match index {
            Some(i) => next.get_mut(i)?,
            None => next,
        };
    }
    at.as_mapping_mut()
}

/// A YAML syntax error, or a document that is not a mapping of fields, said as such (a
/// typed parse would report either as a type mismatch, in the parser's own terms); the
/// document when it is a mapping.
fn check_yaml_shape(text: &str) -> Result<serde_yaml::Value, String> {
    let document: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        let message = e.to_string();
        let duplicate = message
            .strip_prefix("duplicate entry with key \"")
            .and_then(|rest| rest.split_once('"'))
            .map(|(key, _)| (key, lines_of_key(text, key)))
            .filter(|(_, lines)| lines.len() > 1);
        match duplicate {
            Some((key, lines)) => format!(
                "not valid YAML: {message} (`{key}:` appears on lines {}); expected each key \
                 once in a mapping",
                lines
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
            None => format!("not valid YAML: {message}"),
        }
    })?;
    let found = match document {
        serde_yaml::Value::Mapping(_) => return Ok(document),
        serde_yaml::Value::Null => "an empty document",
        serde_yaml::Value::Sequence(_) => "a list",
        serde_yaml::Value::Tagged(_) => "a tagged value",
        _ => "a single value",
    };
    Err(format!(
        "expected a mapping of fields (`id: ...`, `version: ...`), found {found}"
    ))
}

/// serde_yaml reports `path.to.field: message at line L column C`; split off the path.
pub(super) fn split_serde_error(text: &str) -> (String, String) {
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

/// The manifest files (`*.yaml`, `*.yml`, in any case — `PAGER.YAML` too — and not hidden)
/// of a directory, sorted by file name.
pub fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, std::io::Error> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            // A hidden file (`.old.yaml`, an editor's or a backup's) is not a plugin.
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            !hidden
                && path.is_file()
                && path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                    e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml")
                })
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Read every manifest of a directory, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<(Vec<Manifest>, Vec<ManifestError>), std::io::Error> {
    let files = manifest_files(dir)?;
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
