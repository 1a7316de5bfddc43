//! Moving memory in and out losslessly: JSONL export/import (sessions, entries, audit) and
//! the Markdown snapshot of core memories.

use super::*;

impl MemoryStore {
    /// Every session, entry and audit row as JSONL records (entries and audit rows in the
    /// order they were recorded), so an import restores memory.db losslessly.
    pub fn export(&self, out: &mut dyn std::io::Write) -> Result<u64, MemoryError> {
        let io = |e: std::io::Error| MemoryError::Storage(format!("cannot write the export: {e}"));
        let (entries, sessions, audit) = self.read(|conn| {
            let mut statement = conn.prepare(&format!("SELECT {ENTRY_COLUMNS} FROM entries e ORDER BY e.seq"))?;
            let entries: Vec<MemoryEntry> = statement.query_map([], row_to_entry)?.collect::<Result<_, _>>()?;
            let mut statement = conn.prepare(
                "SELECT id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity FROM sessions ORDER BY started_at, id",
            )?;
            let sessions: Vec<Session> = statement.query_map([], row_to_session)?.collect::<Result<_, _>>()?;
            let mut statement = conn.prepare(&format!("SELECT {AUDIT_COLUMNS} FROM audit ORDER BY seq"))?;
            let audit: Vec<AuditRow> = statement.query_map([], row_to_audit)?.collect::<Result<_, _>>()?;
            Ok((entries, sessions, audit))
        })?;
        let mut lines = 0;
        let records = sessions
            .into_iter()
            .map(ExportRecord::Session)
            .chain(
                entries
                    .into_iter()
                    .map(|e| ExportRecord::Entry(Box::new(e))),
            )
            .chain(audit.into_iter().map(ExportRecord::Audit));
        for record in records {
            let line =
                serde_json::to_string(&record).map_err(|e| MemoryError::Storage(e.to_string()))?;
            writeln!(out, "{line}").map_err(io)?;
            lines += 1;
        }
        Ok(lines)
    }

    /// Import JSONL records. Every line is checked first; one bad line rejects the whole
    /// import (nothing is written) with its line number. Records whose id exists are skipped,
    /// and so are audit rows already present, so importing the same file twice adds nothing.
    pub fn import(&self, input: &str) -> Result<ImportReport, MemoryError> {
        let mut records = Vec::new();
        for (n, line) in input.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record: ExportRecord = serde_json::from_str(line)
                .map_err(|e| MemoryError::InvalidInput(format!("line {}: {e}", n + 1)))?;
            match &record {
                ExportRecord::Entry(entry) => validate_entry(entry),
                ExportRecord::Audit(row) => validate_audit(row),
                ExportRecord::Session(_) => Ok(()),
            }
            .map_err(|e| MemoryError::InvalidInput(format!("line {}: {e}", n + 1)))?;
            records.push(record);
        }
        let report = self.writer.write_blocking(move |conn| {
            let mut report = ImportReport::default();
            for record in &records {
                let added = match record {
                    ExportRecord::Session(s) => {
                        let added = conn.execute(
                            "INSERT OR IGNORE INTO sessions (id, user_id, agent_id, started_at, ended_at, state, conversation, last_activity)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                            params![s.id, s.user_id, s.agent_id, s.started_at, s.ended_at, s.state, s.conversation, s.last_activity],
                        )?;
                        report.sessions += added as u64;
                        added
                    }
                    ExportRecord::Entry(entry) => {
                        let added = insert_row(conn, entry, true)?;
                        report.entries += added as u64;
                        added
                    }
                    ExportRecord::Audit(row) => {
                        let added = insert_audit_once(conn, row)?;
                        report.audit += added as u64;
                        added
                    }
                };
                if added == 0 {
                    report.skipped += 1;
                }
            }
            Ok(report)
        })?;
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
        let temporary = path.with_extension("md.tmp");
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| MemoryError::Storage(format!("{}: {e}", path.display())))?;
        Ok(entries.len() as u64)
    }

    /// Restore core memories from a snapshot, as a person may have edited it: a missing
    /// entry is restored with the section's prose as its content (an `edit` audit row notes
    /// a changed text); a present entry whose prose was changed is superseded by the edited
    /// text; a section without a record becomes a new core memory. Unchanged entries that
    /// are present are skipped. Returns how many memories were restored, edited or added.
    pub fn hydrate(&self, path: &Path) -> Result<u64, MemoryError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| MemoryError::InvalidInput(format!("{}: {e}", path.display())))?;
        let mut records = Vec::new();
        let mut additions = Vec::new();
        for section in snapshot::parse(&text, path)? {
            let at = |e: MemoryError| {
                MemoryError::InvalidInput(format!("{} line {}: {e}", path.display(), section.line))
            };
            match section.record {
                Some(entry) => {
                    validate(&NewMemory::new(MemoryKind::Core, entry.content.clone()))
                        .map_err(at)?;
                    records.push((entry, section.edited));
                }
                None => {
                    let mut memory = NewMemory::new(MemoryKind::Core, section.content());
                    memory.scope.user_id = section.user();
                    validate(&memory).map_err(at)?;
                    additions.push(memory);
                }
            }
        }
        records.sort_by(|a, b| (a.0.recorded_at, &a.0.id).cmp(&(b.0.recorded_at, &b.0.id)));
        let (restored, edits) = self
            .writer
            .write_blocking(move |conn| restore_snapshot_records(conn, records))?;
        let mut changed = restored;
        for memory in edits.into_iter().chain(additions) {
            if let StoreOutcome::Stored { .. } = self.store_blocking(memory)? {
                changed += 1;
            }
        }
        self.signal.notify();
        Ok(changed)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// Entries added.
    pub entries: u64,
    /// Sessions added.
    pub sessions: u64,
    /// Audit rows added.
    pub audit: u64,
    /// Records already present (same id), left as they were.
    pub skipped: u64,
}

/// Insert the snapshot records missing from memory.db (an `edit` audit row notes a text
/// edited in the snapshot); returns how many were inserted, and the edited texts of present
/// live entries, to be stored as their successors.
pub(super) fn restore_snapshot_records(
    conn: &Connection,
    records: Vec<(MemoryEntry, bool)>,
) -> rusqlite::Result<(u64, Vec<NewMemory>)> {
    let mut restored = 0;
    let mut edits = Vec::new();
    for (mut entry, edited) in records {
        let present: Option<(String, bool)> = conn
            .query_row(
                "SELECT content, valid_to IS NULL AND forgotten_at IS NULL FROM entries WHERE id = ?1",
                params![entry.id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match present {
            None => {
                (entry.issue_refs, entry.pr_refs) = stream::extract_refs(&entry.content);
                let inserted = insert_row(conn, &entry, true)?;
                restored += inserted as u64;
                if edited && inserted > 0 {
                    audit(
                        conn,
                        &entry.id,
                        "edit",
                        "snapshot",
                        now_ms(),
                        Some("text edited in the snapshot"),
                    )?;
                }
            }
            Some((stored, true)) if stored != entry.content => edits.push(NewMemory {
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
            }),
            Some(_) => {}
        }
    }
    Ok((restored, edits))
}

/// Insert an imported audit row unless the same row is already there; returns 1 if added.
pub(super) fn insert_audit_once(conn: &Connection, row: &AuditRow) -> rusqlite::Result<usize> {
    conn.execute(
        "INSERT INTO audit (entry_id, action, actor, at, detail)
         SELECT ?1, ?2, ?3, ?4, ?5
         WHERE NOT EXISTS (SELECT 1 FROM audit WHERE entry_id = ?1 AND action = ?2 AND actor = ?3
                             AND at = ?4 AND detail IS ?5)",
        params![row.entry_id, row.action, row.actor, row.at, row.detail],
    )
}

pub(super) fn validate_audit(row: &AuditRow) -> Result<(), MemoryError> {
    for (field, value) in [
        ("entry_id", &row.entry_id),
        ("action", &row.action),
        ("actor", &row.actor),
    ] {
        if value.trim().is_empty() {
            return Err(MemoryError::InvalidInput(format!(
                "{field}: expected non-empty text"
            )));
        }
    }
    Ok(())
}
