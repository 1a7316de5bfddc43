//! Memory in and out: retention passes, the lossless JSONL export and import, and restoring
//! a snapshot's core memories.

use rusqlite::{Connection, OptionalExtension, params};

use super::entries::{
    AUDIT_COLUMNS, ENTRY_COLUMNS, audit, forget, insert_row, last_hygiene, row_to_audit,
    row_to_entry,
};
use super::sessions::{SESSION_COLUMNS, insert_session, row_to_session};
use super::*;
use crate::now_ms;

impl SqliteMemory {
    pub(super) fn run_retention(
        &self,
        run: RetentionRun,
    ) -> Receipt<Option<BTreeMap<String, u64>>> {
        self.submit(move |conn| {
            let last = last_hygiene(conn)?;
            if !run.force && last.is_some_and(|last| run.now - last < run.interval_ms) {
                return Ok(None);
            }
            let mut forgotten = BTreeMap::new();
            for (category, days) in &run.retention_days {
                let cutoff = run.now - i64::from(*days) * 86_400_000;
                let ids: Vec<String> = conn
                    .prepare(
                        "SELECT e.id FROM entries e LEFT JOIN sessions s ON s.id = e.session_id
                         WHERE e.category = ?1 AND e.recorded_at < ?2 AND e.forgotten_at IS NULL
                           AND e.kind NOT IN ('fact', 'core')
                           AND (e.kind != 'episode' OR e.session_id IS NULL OR s.state = 'consolidated')",
                    )?
                    .query_map(params![category, cutoff], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                for id in &ids {
                    forget(conn, id, "hygiene")?;
                }
                if !ids.is_empty() {
                    forgotten.insert(category.clone(), ids.len() as u64);
                }
            }
            conn.execute(
                "INSERT INTO maintenance (key, value) VALUES ('hygiene_last_run', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![run.now.to_string()],
            )?;
            Ok(Some(forgotten))
        })
    }

    pub(super) fn export_all(&self) -> Result<Vec<ExportRecord>, StorageError> {
        self.read(|conn| {
            let sessions: Vec<Session> = conn
                .prepare(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY started_at, id"
                ))?
                .query_map([], row_to_session)?
                .collect::<Result<_, _>>()?;
            let entries: Vec<MemoryEntry> = conn
                .prepare(&format!(
                    "SELECT {ENTRY_COLUMNS} FROM entries e ORDER BY e.seq"
                ))?
                .query_map([], row_to_entry)?
                .collect::<Result<_, _>>()?;
            let audit: Vec<AuditRow> = conn
                .prepare(&format!("SELECT {AUDIT_COLUMNS} FROM audit ORDER BY seq"))?
                .query_map([], row_to_audit)?
                .collect::<Result<_, _>>()?;
            Ok(sessions
                .into_iter()
                .map(ExportRecord::Session)
                .chain(
                    entries
                        .into_iter()
                        .map(|e| ExportRecord::Entry(Box::new(e))),
                )
                .chain(audit.into_iter().map(ExportRecord::Audit))
                .collect())
        })
    }

    pub(super) fn import_records(&self, records: Vec<ExportRecord>) -> Receipt<ImportReport> {
        self.submit(move |conn| {
            let mut report = ImportReport::default();
            for record in &records {
                let added = match record {
                    ExportRecord::Session(session) => {
                        let added = insert_session(conn, session)?;
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
        })
    }

    pub(super) fn hydration_pending(&self) -> Result<bool, StorageError> {
        self.read(|conn| {
            conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM maintenance WHERE key = 'hydration')",
                [],
                |r| r.get(0),
            )
        })
    }

    pub(super) fn hydration_done(&self) -> Receipt<()> {
        self.submit(|conn| {
            conn.execute("DELETE FROM maintenance WHERE key = 'hydration'", [])
                .map(|_| ())
        })
    }

    pub(super) fn restore_records(
        &self,
        records: Vec<(MemoryEntry, bool)>,
    ) -> Receipt<(u64, Vec<MemoryEntry>)> {
        self.submit(move |conn| restore_snapshot_records(conn, records))
    }
}

fn restore_snapshot_records(
    conn: &Connection,
    records: Vec<(MemoryEntry, bool)>,
) -> rusqlite::Result<(u64, Vec<MemoryEntry>)> {
    let mut restored = 0;
    let mut edited_texts = Vec::new();
    for (entry, edited) in records {
        let present: Option<(String, bool)> = conn
            .query_row(
                "SELECT content, valid_to IS NULL AND forgotten_at IS NULL FROM entries WHERE id = ?1",
                params![entry.id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match present {
            None => {
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
            Some((stored, true)) if stored != entry.content => edited_texts.push(entry),
            Some(_) => {}
        }
    }
    Ok((restored, edited_texts))
}

/// Insert an imported audit row unless the same row is already there; returns 1 if added.
fn insert_audit_once(conn: &Connection, row: &AuditRow) -> rusqlite::Result<usize> {
    conn.execute(
        "INSERT INTO audit (entry_id, action, actor, at, detail)
         SELECT ?1, ?2, ?3, ?4, ?5
         WHERE NOT EXISTS (SELECT 1 FROM audit WHERE entry_id = ?1 AND action = ?2 AND actor = ?3
                             AND at = ?4 AND detail IS ?5)",
        params![row.entry_id, row.action, row.actor, row.at, row.detail],
    )
}
