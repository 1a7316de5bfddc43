//! Moving memory in and out losslessly: JSONL export/import (sessions, entries, audit) and
//! the Markdown snapshot of core memories.

use super::*;

impl LocalMemory {
    /// Every session, entry and audit row as JSONL records (entries and audit rows in the
    /// order they were recorded), so an import restores memory.db losslessly.
    pub fn export(&self, out: &mut dyn std::io::Write) -> Result<u64, MemoryError> {
        let io = |e: std::io::Error| MemoryError::Write(format!("cannot write the export: {e}"));
        let records = self.store.export()?;
        let mut lines = 0;
        for record in records {
            let line =
                serde_json::to_string(&record).map_err(|e| MemoryError::Write(e.to_string()))?;
            writeln!(out, "{line}").map_err(io)?;
            lines += 1;
        }
        Ok(lines)
    }

    /// Import JSONL records. Every line is checked first (see [`import_check`]); one bad
    /// line rejects the whole import (nothing is written) with its line number. Records
    /// whose id exists are skipped, and so are audit rows already present, so importing the
    /// same file twice adds nothing.
    pub fn import(&self, input: &str) -> Result<ImportReport, MemoryError> {
        self.import_checked(CheckedImport::parse(input)?)
    }

    /// Write an import already read and checked (see [`CheckedImport`]), as
    /// [`LocalMemory::import`] does.
    pub fn import_checked(&self, import: CheckedImport) -> Result<ImportReport, MemoryError> {
        import.check_successors(|id| Ok(self.get(id)?.is_some()))?;
        let report = self.store.import(import.records).wait()?;
        if report.entries > 0 {
            self.signal.notify();
        }
        Ok(report)
    }

    /// Write the live core memories to a Markdown snapshot (see [`snapshot`]): readable
    /// prose, with each entry's full record in an HTML comment so hydration restores it.
    pub fn export_snapshot(&self, path: &Path) -> Result<u64, MemoryError> {
        let entries = self.list(&ListFilter {
            kinds: vec![MemoryKind::Core],
            limit: 1_000_000,
            ..ListFilter::default()
        })?;
        let text = snapshot::render(&entries)?;
        replace_durably(path, |out| Ok(out.write_all(text.as_bytes())?))?;
        Ok(entries.len() as u64)
    }

    /// [`LocalMemory::export`] to the file at `path`, replacing it whole (see
    /// [`replace_durably`]); how many records.
    pub fn export_file(&self, path: &Path) -> Result<u64, MemoryError> {
        replace_durably(path, |out| Ok(self.export(out)?))
    }

    /// Restore core memories from a snapshot, as a person may have edited it: a missing
    /// entry is restored with the section's prose as its content (an `edit` audit row notes
    /// a changed text); a present entry whose prose was changed is superseded by the edited
    /// text; a section without a record becomes a new core memory. Unchanged entries that
    /// are present are skipped. Returns how many memories were restored, edited or added.
    pub fn hydrate(&self, path: &Path) -> Result<u64, MemoryError> {
        self.hydrate_checked(CheckedSnapshot::read(path)?)
    }

    /// [`LocalMemory::hydrate`] from a snapshot already read and checked.
    pub fn hydrate_checked(&self, snapshot: CheckedSnapshot) -> Result<u64, MemoryError> {
        let CheckedSnapshot {
            mut records,
            additions,
        } = snapshot;
        // The snapshot lists newest first; restoring oldest first (file order breaking ties
        // in the same millisecond) gives the entries back the order they were listed in.
        records.reverse();
        records.sort_by_key(|(entry, _)| entry.recorded_at);
        for (entry, _) in &mut records {
            (entry.issue_refs, entry.pr_refs) = stream::extract_refs(&entry.content);
        }
        let (restored, edited) = self.store.restore(records).wait()?;
        let edits = edited.into_iter().map(successor_of_edit);
        let mut changed = restored;
        for memory in edits.chain(additions) {
            if let StoreOutcome::Stored { .. } = self.store_blocking(memory)? {
                changed += 1;
            }
        }
        self.signal.notify();
        Ok(changed)
    }
}

/// A snapshot read and checked whole, ready to hydrate: made before memory.db is opened,
/// so a refused snapshot leaves nothing behind.
#[derive(Debug)]
pub struct CheckedSnapshot {
    /// The sections with a record: each entry, and whether its prose was edited.
    records: Vec<(MemoryEntry, bool)>,
    /// The sections a person added, as new core memories.
    additions: Vec<NewMemory>,
}

impl CheckedSnapshot {
    /// Whether the snapshot holds no core memory (its sections, if any, all empty).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.additions.is_empty()
    }

    /// Read the snapshot at `path`; every section is checked, and the first bad one is the
    /// error, naming the file and line. A file with no section that does not begin as a
    /// snapshot does (`# …`) is refused: it is most likely another file.
    pub fn read(path: &Path) -> Result<Self, MemoryError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| MemoryError::InvalidInput(format!("{}: {e}", path.display())))?;
        let sections = snapshot::parse(&text, path)?;
        if sections.is_empty() && !text.trim_start().starts_with("# ") && !text.trim().is_empty() {
            return Err(MemoryError::InvalidInput(format!(
                "{}: holds no `## ` section and no `# ` title: expected a memory snapshot \
                 (`cairn memory snapshot` writes one)",
                path.display()
            )));
        }
        let mut records = Vec::new();
        let mut additions = Vec::new();
        for section in sections {
            let at = |e: MemoryError| {
                MemoryError::InvalidInput(format!("{} line {}: {e}", path.display(), section.line))
            };
            match section.record {
                Some(entry) => {
                    validate(&NewMemory::new(MemoryKind::Core, entry.content.clone()))
                        .map_err(at)?;
                    // A record memory.db cannot keep (an importance out of range, times out
                    // of order) was dropped on restore without a word; it is refused here,
                    // as import refuses it.
                    import_check::check_entry(&entry)
                        .map_err(|e| at(MemoryError::InvalidInput(e)))?;
                    records.push((entry, section.edited));
                }
                None => {
                    let (content, user) = section
                        .addition()
                        .map_err(|e| at(MemoryError::InvalidInput(e)))?;
                    let mut memory = NewMemory::new(MemoryKind::Core, content);
                    memory.scope.user_id = user;
                    validate(&memory).map_err(at)?;
                    additions.push(memory);
                }
            }
        }
        Ok(Self { records, additions })
    }
}

/// Why a durable replacement failed: the writer's own error, or the file's.
enum ReplaceError {
    Memory(MemoryError),
    Io(std::io::Error),
}

impl From<MemoryError> for ReplaceError {
    fn from(error: MemoryError) -> Self {
        ReplaceError::Memory(error)
    }
}

impl From<std::io::Error> for ReplaceError {
    fn from(error: std::io::Error) -> Self {
        ReplaceError::Io(error)
    }
}

/// The file `path` names once symbolic links are followed (itself when it is none, or
/// when nothing is there), so a file written through a link replaces what it points to,
/// not the link (until 2026-12-04 the link itself was replaced). A loop of links is an
/// error.
pub fn link_target(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        let is_link = std::fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok(current);
        }
        let named = std::fs::read_link(&current)?;
        current = match current.parent() {
            Some(parent) if named.is_relative() => parent.join(named),
            _ => named,
        };
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

/// Replace the file at `path` (see [`link_target`]) with what `write` writes, so that a crash or power loss at
/// any moment leaves the old file or the new one, whole: written beside it, flushed,
/// renamed over it, and the directory flushed so the rename itself is durable. A failure
/// leaves no temporary file behind.
fn replace_durably<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> Result<T, ReplaceError>,
) -> Result<T, MemoryError> {
    let path =
        &link_target(path).map_err(|e| MemoryError::Write(format!("{}: {e}", path.display())))?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let temporary = path.with_file_name(name);
    let written = (|| {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&temporary)?);
        let value = write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&temporary, path)?;
        let directory = path.parent().filter(|p| !p.as_os_str().is_empty());
        std::fs::File::open(directory.unwrap_or(Path::new(".")))?.sync_all()?;
        Ok(value)
    })();
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        match error {
            ReplaceError::Memory(error) => error,
            ReplaceError::Io(e) => MemoryError::Write(format!("{}: {e}", path.display())),
        }
    })
}

/// The memory that supersedes `entry` with the text a person edited in the snapshot.
fn successor_of_edit(entry: MemoryEntry) -> NewMemory {
    NewMemory {
        kind: entry.kind,
        content: entry.content,
        category: entry.category,
        scope: entry.scope,
        importance: Some(entry.importance),
        tags: entry.tags,
        sources: entry.sources,
        subject: entry.subject,
        predicate: entry.predicate,
        supersedes: Some(entry.id),
        valid_from: None,
        id: None,
    }
}
