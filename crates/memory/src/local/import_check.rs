//! Reading a JSONL import before anything is written: every line must be a whole, consistent
//! record, with no field the store would drop, and no id given twice.

use std::collections::{HashMap, HashSet};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{AuditRow, ExportRecord, MemoryEntry, MemoryError, NewMemory, is_entry_id, validate};
use cairn_vocab::now_ms;
use cairn_vocab::session::Session;
use cairn_vocab::text::is_blank;

/// What the store writes into an audit row's `action`; an import may hold only these.
const AUDIT_ACTIONS: [&str; 6] = [
    "forget",
    "purge",
    "supersede",
    "edit",
    "rescore",
    "reinstate",
];

/// A JSONL import read and checked whole, ready to write: made before memory.db is opened,
/// so a refused import leaves nothing behind, not even an empty memory.db.
#[derive(Debug)]
pub struct CheckedImport {
    /// The records, in file order.
    pub(super) records: Vec<ExportRecord>,
    /// Successors (`superseded_by`) the import names but does not hold: memory must hold
    /// them already (see [`CheckedImport::check_successors`]).
    outside: Vec<OutsideSuccessor>,
}

/// An entry's `superseded_by` naming an entry the import does not hold.
#[derive(Debug)]
struct OutsideSuccessor {
    /// The line of the entry naming it.
    line: usize,
    /// The successor's id.
    id: String,
}

impl CheckedImport {
    /// Whether the file held no record (empty, or blank lines only).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Read `input` (JSONL, as `cairn memory export` writes it); the first bad line is the
    /// error, named by its number.
    pub fn parse(input: &str) -> Result<Self, MemoryError> {
        let (records, lines) = parse_records(input)?;
        let entries: Vec<(&MemoryEntry, usize)> = records
            .iter()
            .zip(lines)
            .filter_map(|(record, line)| match record {
                ExportRecord::Entry(entry) => Some((entry.as_ref(), line)),
                _ => None,
            })
            .collect();
        refuse_successor_loops(&entries)?;
        let held: HashSet<&str> = entries.iter().map(|(entry, _)| entry.id.as_str()).collect();
        let outside = entries
            .iter()
            .filter_map(|(entry, line)| Some((entry.superseded_by.as_ref()?, *line)))
            .filter(|(id, _)| !held.contains(id.as_str()))
            .map(|(id, line)| OutsideSuccessor {
                line,
                id: id.clone(),
            })
            .collect();
        Ok(CheckedImport { records, outside })
    }

    /// Refuse an import whose entry is superseded by one neither the import nor memory holds
    /// (`in_memory` says whether memory holds an id): written, such an entry would be hidden
    /// from recall as replaced by nothing. Purging an entry reinstates what it superseded,
    /// so an export never names a successor it lacks.
    pub fn check_successors(
        &self,
        mut in_memory: impl FnMut(&str) -> Result<bool, MemoryError>,
    ) -> Result<(), MemoryError> {
        for successor in &self.outside {
            if !in_memory(&successor.id)? {
                return Err(MemoryError::InvalidInput(format!(
                    "line {}: superseded_by: {:?} is neither in the import nor in memory: \
                     expected the id of the entry that replaced this one",
                    successor.line, successor.id
                )));
            }
        }
        Ok(())
    }
}

/// Refuse successors (`superseded_by`) within the import that lead back to an entry already
/// on the chain (A by B, B by A): every entry on the loop would be hidden from recall as
/// replaced, with no current one left. The error names the line of the entry the loop
/// returns to and the loop.
fn refuse_successor_loops(entries: &[(&MemoryEntry, usize)]) -> Result<(), MemoryError> {
    let line_of: HashMap<&str, usize> = entries
        .iter()
        .map(|(entry, line)| (entry.id.as_str(), *line))
        .collect();
    let successor: HashMap<&str, &str> = entries
        .iter()
        .filter_map(|(entry, _)| Some((entry.id.as_str(), entry.superseded_by.as_deref()?)))
        .collect();
    // Entries whose chain is known to end at a current entry (or outside the import).
    let mut ending: HashSet<&str> = HashSet::new();
    for (entry, _) in entries {
        let mut chain: Vec<&str> = Vec::new();
        let mut at = entry.id.as_str();
        while !ending.contains(at) {
            if let Some(start) = chain.iter().position(|id| *id == at) {
                let mut lap: Vec<&str> = chain[start..].to_vec();
                lap.push(at);
                return Err(MemoryError::InvalidInput(format!(
                    "line {}: superseded_by: the chain {} comes back to this entry: expected \
                     successors that end at an entry nothing supersedes",
                    line_of.get(at).copied().unwrap_or_default(),
                    lap.join(" → ")
                )));
            }
            chain.push(at);
            match successor.get(at) {
                Some(next) => at = next,
                None => break,
            }
        }
        ending.extend(chain);
    }
    Ok(())
}

/// The records of a JSONL import, each checked, in file order, with the line of each. The
/// first bad line is the error, named by its number, so the caller writes nothing.
fn parse_records(input: &str) -> Result<(Vec<ExportRecord>, Vec<usize>), MemoryError> {
    // An editor's byte-order mark is not part of the first record.
    let input = input.strip_prefix('\u{feff}').unwrap_or(input);
    let mut records = Vec::new();
    let mut lines = Vec::new();
    let mut first_line_of: HashMap<(&'static str, String), usize> = HashMap::new();
    for (index, line) in input.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let at_line = |e: String| MemoryError::InvalidInput(format!("line {number}: {e}"));
        let record = parse_line(line).map_err(at_line)?;
        check_record(&record).map_err(at_line)?;
        if let Some((kind, id)) = identity(&record)
            && let Some(first) = first_line_of.insert((kind, id.to_string()), number)
        {
            return Err(at_line(format!(
                "{kind} id {id:?} was already given on line {first}: expected each id once"
            )));
        }
        records.push(record);
        lines.push(number);
    }
    Ok((records, lines))
}

/// One line as a record. A field no record of its type has is refused, not dropped:
/// an export from a newer Cairn imported here would otherwise lose it without a word.
fn parse_line(line: &str) -> Result<ExportRecord, String> {
    let record: ExportRecord =
        serde_json::from_str(line).map_err(|e| field_error(line).unwrap_or(e.to_string()))?;
    let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(line) else {
        return Err("expected a JSON object".into());
    };
    fields.remove("type");
    let unknown = match &record {
        ExportRecord::Entry(_) => ignored_fields::<MemoryEntry>(fields),
        ExportRecord::Session(_) => ignored_fields::<Session>(fields),
        ExportRecord::Audit(_) => ignored_fields::<AuditRow>(fields),
    };
    match unknown.as_slice() {
        [] => Ok(record),
        names => Err(format!(
            "{} record: unknown field {}: expected only the fields `cairn memory export` writes",
            record_kind(&record),
            names.join(", "),
        )),
    }
}

/// Why a line of a known record type does not read, naming the field (`kind: unknown
/// variant …`): the tagged record's own error cannot say which field it was.
fn field_error(line: &str) -> Option<String> {
    let Value::Object(mut fields) = serde_json::from_str::<Value>(line).ok()? else {
        return None;
    };
    let kind = fields.remove("type")?;
    let fields = Value::Object(fields);
    let error = match kind.as_str()? {
        "entry" => serde_path_to_error::deserialize::<_, MemoryEntry>(fields).err(),
        "session" => serde_path_to_error::deserialize::<_, Session>(fields).err(),
        "audit" => serde_path_to_error::deserialize::<_, AuditRow>(fields).err(),
        _ => None,
    }?;
    let path = error.path().to_string();
    (path != ".").then(|| format!("{path}: {}", error.inner()))
}

/// The paths of the fields in `fields` that `T` does not read (`scope.team`, say).
fn ignored_fields<T: DeserializeOwned>(fields: Map<String, Value>) -> Vec<String> {
    let mut ignored = Vec::new();
    let read: Result<T, _> =
        serde_ignored::deserialize(Value::Object(fields), |path| ignored.push(path.to_string()));
    match read {
        Ok(_) => ignored,
        Err(_) => Vec::new(),
    }
}

fn record_kind(record: &ExportRecord) -> &'static str {
    match record {
        ExportRecord::Entry(_) => "entry",
        ExportRecord::Session(_) => "session",
        ExportRecord::Audit(_) => "audit",
    }
}

/// The id a record claims for itself (audit rows have none of their own).
fn identity(record: &ExportRecord) -> Option<(&'static str, &str)> {
    match record {
        ExportRecord::Entry(entry) => Some(("entry", &entry.id)),
        ExportRecord::Session(session) => Some(("session", &session.id)),
        ExportRecord::Audit(_) => None,
    }
}

fn check_record(record: &ExportRecord) -> Result<(), String> {
    match record {
        ExportRecord::Entry(entry) => check_entry(entry),
        ExportRecord::Session(session) => check_session(session),
        ExportRecord::Audit(row) => check_audit(row),
    }
}

/// Whether `entry` holds what memory.db may keep: ids, scope, times in order, importance and
/// text within limits, a replaced entry with the time it stopped being true. Import checks
/// each record with it, and so does hydration from a snapshot (whose records a person may
/// have edited).
pub(super) fn check_entry(entry: &MemoryEntry) -> Result<(), String> {
    non_empty("id", &entry.id)?;
    if !is_entry_id(&entry.id) {
        return Err(format!(
            "id: {:?} is not an id; expected 1 to 64 ASCII letters, digits, - or _",
            entry.id
        ));
    }
    non_empty("category", &entry.category)?;
    for (field, id) in [
        ("scope.agent_id", &entry.scope.agent_id),
        ("scope.user_id", &entry.scope.user_id),
        ("scope.session_id", &entry.scope.session_id),
    ] {
        if let Some(id) = id {
            non_empty(field, id)?;
        }
    }
    let latest = now_ms().saturating_add(EXPORT_CLOCK_AHEAD_MS);
    for (field, at) in [
        ("valid_from", Some(entry.valid_from)),
        ("recorded_at", Some(entry.recorded_at)),
        ("valid_to", entry.valid_to),
        ("forgotten_at", entry.forgotten_at),
    ] {
        if let Some(at) = at {
            in_time(field, at, latest)?;
        }
    }
    if let Some(forgotten) = entry.forgotten_at
        && forgotten < entry.recorded_at
    {
        return Err(format!(
            "forgotten_at: {forgotten} is before recorded_at {}: expected a time at or after it",
            entry.recorded_at
        ));
    }
    let mut check = NewMemory::new(entry.kind, entry.content.clone());
    check.category = entry.category.clone();
    check.importance = Some(entry.importance);
    check.tags = entry.tags.clone();
    check.subject = entry.subject.clone();
    check.predicate = entry.predicate.clone();
    validate(&check).map_err(|e| e.to_string())?;
    if let Some(valid_to) = entry.valid_to
        && valid_to < entry.valid_from
    {
        return Err(format!(
            "valid_to: {valid_to} is before valid_from {}: expected a time at or after it",
            entry.valid_from
        ));
    }
    if let Some(successor) = &entry.superseded_by {
        non_empty("superseded_by", successor)?;
        if *successor == entry.id {
            return Err("superseded_by: an entry cannot supersede itself".into());
        }
        // Recall takes an entry without `valid_to` as current: a replaced one would be
        // recalled as current and as replaced at once.
        if entry.valid_to.is_none() {
            return Err(format!(
                "superseded_by: {successor:?} replaced this entry, but valid_to is null: \
                 expected valid_to, the time it stopped being true"
            ));
        }
    }
    let named = entry
        .superseded_by
        .iter()
        .map(|id| ("superseded_by".to_string(), id));
    let sources = (entry.sources.iter().enumerate()).map(|(i, id)| (format!("sources[{i}]"), id));
    for (field, id) in named.chain(sources) {
        if !is_entry_id(id) {
            return Err(format!(
                "{field}: {id:?} is not an id; expected 1 to 64 ASCII letters, digits, - or _"
            ));
        }
    }
    Ok(())
}

fn check_session(session: &Session) -> Result<(), String> {
    non_empty("id", &session.id)?;
    let latest = now_ms().saturating_add(EXPORT_CLOCK_AHEAD_MS);
    in_time("started_at", session.started_at, latest)?;
    if let Some(ended) = session.ended_at {
        in_time("ended_at", ended, latest)?;
    }
    match session.ended_at {
        Some(ended) if ended < session.started_at => Err(format!(
            "ended_at: {ended} is before started_at {}: expected a time at or after it",
            session.started_at
        )),
        _ => Ok(()),
    }
}

fn check_audit(row: &AuditRow) -> Result<(), String> {
    non_empty("entry_id", &row.entry_id)?;
    non_empty("actor", &row.actor)?;
    if !AUDIT_ACTIONS.contains(&row.action.as_str()) {
        return Err(format!(
            "action: {:?} is not an action memory records: expected one of {}",
            row.action,
            AUDIT_ACTIONS.join(", ")
        ));
    }
    Ok(())
}

fn non_empty(field: &str, value: &str) -> Result<(), String> {
    if is_blank(value) {
        return Err(format!(
            "{field}: expected text that shows (not only blanks or invisible characters)"
        ));
    }
    Ok(())
}

/// How far past this host's clock an exported time may be: the exporting host's clock may
/// have run ahead of this one's by a little, never by more.
const EXPORT_CLOCK_AHEAD_MS: i64 = 24 * 3_600_000;

/// `at` (ms since 1970) is a time memory can hold: not before 1970, not later than `latest`.
fn in_time(field: &str, at: i64, latest: i64) -> Result<(), String> {
    if (0..=latest).contains(&at) {
        return Ok(());
    }
    let shown = chrono::DateTime::from_timestamp_millis(at)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| "out of any calendar".into());
    Err(format!(
        "{field}: {at} ({shown}) is not a time memory holds; expected milliseconds since 1970, \
         up to a day past now"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = r#"{"type":"entry","id":"m1","kind":"fact","content":"I like tea","category":"core","scope":{"agent_id":null,"user_id":"ana","session_id":null},"importance":5,"tags":[],"issue_refs":[],"pr_refs":[],"sources":[],"subject":null,"predicate":null,"valid_from":10,"valid_to":null,"recorded_at":10,"superseded_by":null,"forgotten_at":null}"#;

    fn error_of(input: &str) -> String {
        match parse_records(input) {
            Ok((records, _)) => panic!("accepted {} records", records.len()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn an_exported_entry_is_read_back() {
        let (records, _) = parse_records(ENTRY).expect("the entry");
        assert!(matches!(&records[..], [ExportRecord::Entry(e)] if e.id == "m1"));
        let marked = format!("\u{feff}{ENTRY}");
        let (records, _) = parse_records(&marked).expect("an editor's byte-order mark");
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn a_successor_neither_imported_nor_in_memory_is_refused_naming_its_line() {
        let superseded = ENTRY.replace(
            r#""valid_to":null,"recorded_at":10,"superseded_by":null"#,
            r#""valid_to":20,"recorded_at":10,"superseded_by":"m2""#,
        );
        let successor = ENTRY.replace(r#""id":"m1""#, r#""id":"m2""#);
        let both = CheckedImport::parse(&format!("{superseded}\n{successor}\n")).expect("read");
        both.check_successors(|_| Ok(false))
            .expect("the successor is in the import");
        let other = ENTRY.replace(r#""id":"m1""#, r#""id":"m0""#);
        let alone = CheckedImport::parse(&format!("{other}\n\n{superseded}\n")).expect("read");
        alone
            .check_successors(|id| Ok(id == "m2"))
            .expect("the successor is in memory");
        let error = alone
            .check_successors(|_| Ok(false))
            .expect_err("a successor nowhere")
            .to_string();
        assert!(
            error.contains(r#"line 3: superseded_by: "m2" is neither in the import nor in memory"#),
            "{error}"
        );
    }

    #[test]
    fn successors_that_loop_back_are_refused_naming_the_loop() {
        let entry = |id: &str, by: &str| {
            ENTRY
                .replace(r#""id":"m1""#, &format!(r#""id":"{id}""#))
                .replace(
                    r#""valid_to":null,"recorded_at":10,"superseded_by":null"#,
                    &format!(r#""valid_to":20,"recorded_at":10,"superseded_by":"{by}""#),
                )
        };
        let looped = [entry("m0", "m1"), entry("m1", "m2"), entry("m2", "m1")].join("\n");
        let error = CheckedImport::parse(&looped)
            .expect_err("a loop")
            .to_string();
        assert!(
            error
                .contains("line 2: superseded_by: the chain m1 → m2 → m1 comes back to this entry"),
            "{error}"
        );
        let chain = [
            entry("m0", "m1"),
            entry("m1", "m2"),
            ENTRY.replace("m1", "m2"),
        ]
        .join("\n");
        CheckedImport::parse(&chain).expect("a chain ending at a current entry");
    }

    #[test]
    fn a_field_the_store_would_drop_is_refused_with_its_path() {
        let extra = ENTRY.replace(r#""importance":5"#, r#""importance":5,"mood":"calm""#);
        assert!(error_of(&extra).contains("line 1: entry record: unknown field mood:"));
        let nested = ENTRY.replace(r#""session_id":null}"#, r#""session_id":null,"team":"x"}"#);
        assert!(error_of(&nested).contains("scope.team"));
    }

    #[test]
    fn a_value_of_the_wrong_kind_names_its_field() {
        let banana = ENTRY.replace(r#""kind":"fact""#, r#""kind":"banana""#);
        let error = error_of(&banana);
        assert!(
            error.contains("line 1: kind: unknown variant `banana`"),
            "{error}"
        );
        let source = ENTRY.replace(r#""sources":[]"#, r#""sources":["nope nope"]"#);
        let error = error_of(&source);
        assert!(
            error.contains("line 1: sources[0]: \"nope nope\" is not an id"),
            "{error}"
        );
        let nested = ENTRY.replace(r#""user_id":"ana""#, r#""user_id":7"#);
        let error = error_of(&nested);
        assert!(
            error.contains("line 1: scope.user_id: invalid type"),
            "{error}"
        );
    }

    #[test]
    fn an_id_given_twice_names_both_lines() {
        let twice = format!("{ENTRY}\n\n{ENTRY}");
        let error = error_of(&twice);
        assert!(error.contains("line 3") && error.contains("already given on line 1"));
    }

    #[test]
    fn inconsistent_times_and_unknown_actions_are_refused() {
        let backwards = ENTRY.replace(r#""valid_to":null"#, r#""valid_to":5"#);
        assert!(error_of(&backwards).contains("valid_to: 5 is before valid_from 10"));
        let own = ENTRY.replace(r#""superseded_by":null"#, r#""superseded_by":"m1""#);
        assert!(error_of(&own).contains("cannot supersede itself"));
        let still_current = ENTRY.replace(r#""superseded_by":null"#, r#""superseded_by":"m2""#);
        assert!(
            error_of(&still_current).contains(
                r#"line 1: superseded_by: "m2" replaced this entry, but valid_to is null"#
            )
        );
        let session = r#"{"type":"session","id":"cli:a","user_id":null,"agent_id":null,"started_at":10,"ended_at":3,"state":"ended"}"#;
        assert!(error_of(session).contains("ended_at: 3 is before started_at 10"));
        let audit = r#"{"type":"audit","entry_id":"m1","action":"rename","actor":"cli","at":1,"detail":null}"#;
        assert!(error_of(audit).contains("action: \"rename\""));
        let empty_id = r#"{"type":"session","id":" ","user_id":null,"agent_id":null,"started_at":1,"ended_at":null,"state":"active"}"#;
        assert!(error_of(empty_id).contains("id: expected text that shows"));
    }

    #[test]
    fn times_ids_and_text_no_memory_could_hold_are_refused_naming_the_field() {
        let refused = |from: &str, to: &str, expected: &str| {
            let error = error_of(&ENTRY.replace(from, to));
            assert!(error.contains(expected), "{to}: {error}");
        };
        let valid_from = r#""valid_from":10"#;
        refused(
            valid_from,
            r#""valid_from":-9223372036854775808"#,
            "valid_from: -9223372036854775808 (out of any calendar)",
        );
        refused(valid_from, r#""valid_from":-5"#, "valid_from: -5");
        refused(
            r#""recorded_at":10"#,
            r#""recorded_at":1999999999999"#,
            "recorded_at: 1999999999999 (2033-05-18",
        );
        refused(
            r#""forgotten_at":null"#,
            r#""forgotten_at":5"#,
            "forgotten_at: 5 is before recorded_at 10",
        );
        refused(
            r#""id":"m1""#,
            r#""id":"m x\n""#,
            r#"id: "m x\n" is not an id"#,
        );
        refused(
            r#""category":"core""#,
            r#""category":" ""#,
            "category: expected text that shows",
        );
        refused(
            r#""user_id":"ana""#,
            r#""user_id":"\u200b""#,
            "scope.user_id: expected text that shows",
        );
        refused(
            r#""I like tea""#,
            r#""\u200b\u200b""#,
            "content: expected text that shows",
        );
    }
}
