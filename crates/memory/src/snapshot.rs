//! `MEMORY_SNAPSHOT.md`: the core memories as Markdown a person can read and edit.
//!
//! Each memory is a section: a `## <id>` heading, its text as prose, and an HTML comment
//! holding the rest of its record. Hydration restores the record with the prose as its content,
//! so an edit to the prose is an edit to the memory; a section a person adds without a
//! record (`## Prefers tea (user ada)` and optional prose) becomes a new core memory; a
//! section deleted from the file is simply not restored.

use std::path::Path;

use super::{MemoryEntry, MemoryError, content_hash};

/// The comment that opens a section's record.
const RECORD_OPEN: &str = "<!-- cairn:entry ";

/// The record field holding the SHA-256 of the text as written, to tell an edited one.
const HASH_FIELD: &str = "content_sha256";

/// The file's preamble: what it is and how to edit it.
const PREAMBLE: &str = "# Cairn memory snapshot\n\n\
Core memories, newest first. Cairn rebuilds them from this file when memory.db is missing \
(or on `cairn memory snapshot --hydrate`). Edit a memory's prose to change it; add a \
section `## <what to remember> (user <id>)`, prose optional, to add one; delete a section \
to leave it out. Keep the `cairn:entry` comments: they hold each memory's other fields.\n";

/// One `## ` section of a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// 1-based line of its heading, for error messages.
    pub line: usize,
    /// The heading text after `## `.
    pub heading: String,
    /// The prose between the heading and the record, trimmed.
    pub prose: String,
    /// The record comment's entry, when the section has one, with the prose as content.
    pub record: Option<MemoryEntry>,
    /// Whether the prose differs from the text the snapshot was written with.
    pub edited: bool,
}

/// A text as a snapshot holds it: line endings and trailing blanks of lines dropped, and
/// surrounding blank space trimmed.
fn normal(text: &str) -> String {
    text.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

impl Section {
    /// What a section added by hand holds: the heading's text (what to remember) with any
    /// prose after it as detail, and the user a trailing `(user <id>)` names. A heading with
    /// nothing to remember, or an empty `(user )`, is the error.
    pub fn addition(&self) -> Result<(String, Option<String>), String> {
        let (text, user) = split_user(&self.heading)?;
        if text.is_empty() {
            return Err(format!(
                "`## {}` holds nothing to remember: expected `## <what to remember> (user <id>)`",
                self.heading
            ));
        }
        let content = if self.prose.is_empty() {
            text.to_string()
        } else {
            format!("{text}\n\n{}", self.prose)
        };
        Ok((content, user.map(str::to_string)))
    }
}

/// `"Prefers tea (user ada)"` → `("Prefers tea", Some("ada"))`; `(user )` names nobody.
fn split_user(heading: &str) -> Result<(&str, Option<&str>), String> {
    let heading = heading.trim();
    let opened = heading
        .rfind("(user ")
        .filter(|&open| heading.ends_with(')') && (open == 0 || heading[..open].ends_with(' ')));
    let Some(open) = opened else {
        return Ok((heading, None));
    };
    let user = heading[open + "(user ".len()..heading.len() - 1].trim();
    if user.is_empty() {
        return Err(format!(
            "`## {heading}` names no user: expected `(user <id>)` or none"
        ));
    }
    Ok((heading[..open].trim(), Some(user)))
}

/// Render core memories (newest first) as a snapshot.
pub fn render(entries: &[MemoryEntry]) -> Result<String, MemoryError> {
    let mut text = String::from(PREAMBLE);
    for entry in entries {
        // The prose is the content: the record holds every other field, so there is one
        // place to edit the text.
        let mut record =
            serde_json::to_value(entry).map_err(|e| MemoryError::Write(e.to_string()))?;
        if let Some(fields) = record.as_object_mut() {
            fields.remove("content");
            fields.insert(
                HASH_FIELD.into(),
                content_hash(&normal(&entry.content)).into(),
            );
        }
        let record = record.to_string();
        let who = entry
            .scope
            .user_id
            .as_deref()
            .map(|u| format!(" (user {u})"))
            .unwrap_or_default();
        text.push_str(&format!(
            "\n## {}{who}\n\n{}\n\n{RECORD_OPEN}{} -->\n",
            entry.id,
            escape_prose(&entry.content),
            // `--` would end the comment early.
            record.replace("--", "\\u002d\\u002d")
        ));
    }
    Ok(text)
}

/// Prose lines starting with `#` get a backslash, so they never read as a heading.
fn escape_prose(content: &str) -> String {
    content
        .lines()
        .map(|line| {
            if line.starts_with('#') || line.starts_with("\\#") {
                format!("\\{line}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn unescape_line(line: &str) -> &str {
    match line.strip_prefix('\\') {
        Some(rest) if rest.starts_with('#') || rest.starts_with("\\#") => rest,
        _ => line,
    }
}

/// Parse a snapshot into its sections; text before the first heading is the preamble.
/// A record comment that is not a valid entry is an error naming the file and line.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Section>, MemoryError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut prose_lines: Vec<&str> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("## ") {
            finish(&mut sections, &mut prose_lines);
            sections.push(Section {
                line: index + 1,
                heading: heading.trim().to_string(),
                prose: String::new(),
                record: None,
                edited: false,
            });
            continue;
        }
        let Some(section) = sections.last_mut() else {
            continue;
        };
        if let Some(record) = line.trim().strip_prefix(RECORD_OPEN) {
            let bad = |what: String| {
                MemoryError::InvalidInput(format!("{} line {}: {what}", path.display(), index + 1))
            };
            let record = record.strip_suffix("-->").ok_or_else(|| {
                bad("the cairn:entry comment must end with `-->` on the same line".into())
            })?;
            let prose = prose_text(&prose_lines);
            prose_lines.clear();
            let (entry, edited) = read_record(record, &prose).map_err(bad)?;
            section.prose = prose;
            section.record = Some(entry);
            section.edited = edited;
        } else if section.record.is_none() {
            prose_lines.push(unescape_line(line));
        }
    }
    finish(&mut sections, &mut prose_lines);
    Ok(sections)
}

/// The entry a record comment holds, with `prose` as its content, and whether the prose
/// was edited since the snapshot was written.
fn read_record(record: &str, prose: &str) -> Result<(MemoryEntry, bool), String> {
    let mut fields: serde_json::Value = serde_json::from_str(record.trim())
        .map_err(|e| format!("the cairn:entry record is not JSON: {e}"))?;
    let Some(object) = fields.as_object_mut() else {
        return Err("the cairn:entry record is not a JSON object".into());
    };
    let written = object.remove(HASH_FIELD);
    let (content, edited) = match object.get("content").and_then(|c| c.as_str()) {
        // Written before the prose became the content: the record holds the text too.
        Some(original) if prose.is_empty() || normal(original) == prose => {
            (original.to_string(), false)
        }
        Some(_) => (prose.to_string(), true),
        None if prose.is_empty() => {
            return Err("this memory has no text; delete its whole section to leave it out".into());
        }
        None => {
            let edited = written
                .as_ref()
                .and_then(|hash| hash.as_str())
                .is_some_and(|hash| hash != content_hash(prose));
            (prose.to_string(), edited)
        }
    };
    object.insert("content".into(), content.into());
    let entry = serde_json::from_value(fields)
        .map_err(|e| format!("the cairn:entry record is not a memory: {e}"))?;
    Ok((entry, edited))
}

fn prose_text(lines: &[&str]) -> String {
    normal(&lines.join("\n"))
}

/// Close the last section: one without a record takes the prose read since its heading.
fn finish(sections: &mut [Section], prose_lines: &mut Vec<&str>) {
    if let Some(section) = sections.last_mut()
        && section.record.is_none()
    {
        section.prose = prose_text(prose_lines);
    }
    prose_lines.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryKind, NewMemory, Scope};

    fn entry(id: &str, content: &str, user: Option<&str>) -> MemoryEntry {
        let mut memory = NewMemory::new(MemoryKind::Core, content);
        memory.scope = Scope {
            user_id: user.map(str::to_string),
            ..Scope::default()
        };
        crate::record(&memory, id.to_string(), 1_700_000_000_000)
    }

    #[test]
    fn a_rendered_snapshot_parses_back_to_its_entries() {
        let entries = [
            entry("mem_a", "Ada prefers tea.\n# not a heading", Some("ada")),
            entry("mem_b", "The vault code -- never share it.", None),
        ];
        let text = render(&entries).expect("render");
        let sections = parse(&text, Path::new("s.md")).expect("parse");
        assert_eq!(sections.len(), 2);
        for (section, entry) in sections.iter().zip(&entries) {
            assert_eq!(section.record.as_ref(), Some(entry));
            assert!(!section.edited, "{section:?}");
        }
    }

    #[test]
    fn edited_prose_and_added_sections_are_read_as_written() {
        let text = render(&[entry("mem_a", "Ada prefers tea.", Some("ada"))]).expect("render");
        let edited = text.replace("Ada prefers tea.", "Ada prefers green tea, no sugar.")
            + "\n## Ada's cat is called Turing (user ada)\n";
        let sections = parse(&edited, Path::new("s.md")).expect("parse");
        assert!(sections[0].edited);
        let record = sections[0].record.as_ref().expect("record");
        assert_eq!(record.content, "Ada prefers green tea, no sugar.");
        assert_eq!(record.scope.user_id.as_deref(), Some("ada"));
        assert_eq!(sections[1].record, None);
        assert_eq!(
            sections[1].addition(),
            Ok(("Ada's cat is called Turing".into(), Some("ada".into())))
        );
    }

    #[test]
    fn an_added_sections_heading_is_what_to_remember_and_its_prose_the_detail() {
        let text = "# x\n\n## Carol owns the release calendar (user carol)\n\nShe updates it every Monday.\n\n## Deploys happen on Tuesdays\n";
        let sections = parse(text, Path::new("s.md")).expect("parse");
        assert_eq!(
            sections[0].addition(),
            Ok((
                "Carol owns the release calendar\n\nShe updates it every Monday.".into(),
                Some("carol".into())
            ))
        );
        assert_eq!(
            sections[1].addition(),
            Ok(("Deploys happen on Tuesdays".into(), None))
        );
        for (heading, expected) in [
            ("(user ann)", "holds nothing to remember"),
            ("Deploys happen on Tuesdays (user )", "names no user"),
        ] {
            let text = format!("# x\n\n## {heading}\n");
            let sections = parse(&text, Path::new("s.md")).expect("parse");
            let error = sections[0].addition().expect_err(heading);
            assert!(error.contains(expected), "{heading}: {error}");
        }
    }

    #[test]
    fn a_broken_record_names_the_file_and_line() {
        for broken in [
            "<!-- cairn:entry {oops} -->",
            "<!-- cairn:entry {\"id\": \"mem_a\"",
        ] {
            let text = format!("# x\n\n## mem_a\n\ntext\n\n{broken}\n");
            let error = parse(&text, Path::new("s.md")).expect_err("broken record");
            assert!(error.to_string().contains("s.md line 7"), "{error}");
        }
    }
}
