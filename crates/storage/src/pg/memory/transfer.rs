//! Memory in and out on PostgreSQL: retention passes, the lossless export and import, and
//! restoring a snapshot's core memories.

use std::collections::BTreeMap;

use cairn_vocab::memory::{AuditRow, ExportRecord, MemoryEntry};
use cairn_vocab::session::Session;
use postgres::Transaction;

use super::PgMemory;
use super::entries::{
    AUDIT_COLUMNS, ENTRY_COLUMNS, audit, forget, insert_row, last_hygiene, row_to_audit,
    row_to_entry,
};
use super::sessions::{SESSION_COLUMNS, insert_session, row_to_session};
use crate::memory::{ImportReport, RetentionRun};
use crate::writer::Receipt;
use crate::{StorageError, now_ms};

impl PgMemory {
    pub(super) fn run_retention(
        &self,
        run: RetentionRun,
    ) -> Receipt<Option<BTreeMap<String, u64>>> {
        self.writes.submit_alone(move |tx| {
            // Hosts sharing the database take turns: one pass per interval, not one each.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('memory_retention', 7))",
                &[],
            )?;
            let last = last_hygiene(tx)?;
            if !run.force && last.is_some_and(|last| run.now - last < run.interval_ms) {
                return Ok(None);
            }
            let mut forgotten = BTreeMap::new();
            for (category, days) in &run.retention_days {
                let cutoff = run.now - i64::from(*days) * 86_400_000;
                let ids: Vec<String> = tx
                    .query(
                        "SELECT e.id FROM memory_entries e
                         LEFT JOIN memory_sessions s ON s.id = e.session_id
                         WHERE e.category = $1 AND e.recorded_at < $2 AND e.forgotten_at IS NULL
                           AND e.kind NOT IN ('fact', 'core')
                           AND (e.kind != 'episode' OR e.session_id IS NULL
                                OR s.state = 'consolidated')",
                        &[category, &cutoff],
                    )?
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                for id in &ids {
                    forget(tx, id, "hygiene")?;
                }
                if !ids.is_empty() {
                    forgotten.insert(category.clone(), ids.len() as u64);
                }
            }
            tx.execute(
                "INSERT INTO memory_maintenance (key, value) VALUES ('hygiene_last_run', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&run.now.to_string()],
            )?;
            Ok(Some(forgotten))
        })
    }

    pub(super) fn export_all(&self) -> Result<Vec<ExportRecord>, StorageError> {
        self.reads.read(|client| {
            // One snapshot for the three reads, so the records agree with each other.
            let mut tx = client
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let sessions: Vec<Session> = tx
                .query(
                    &format!(
                        "SELECT {SESSION_COLUMNS} FROM memory_sessions ORDER BY started_at, id"
                    ),
                    &[],
                )?
                .iter()
                .map(row_to_session)
                .collect::<Result<_, _>>()?;
            let entries: Vec<MemoryEntry> = tx
                .query(
                    &format!("SELECT {ENTRY_COLUMNS} FROM memory_entries e ORDER BY e.seq"),
                    &[],
                )?
                .iter()
                .map(row_to_entry)
                .collect::<Result<_, _>>()?;
            let audit: Vec<AuditRow> = tx
                .query(
                    &format!("SELECT {AUDIT_COLUMNS} FROM memory_audit ORDER BY seq"),
                    &[],
                )?
                .iter()
                .map(row_to_audit)
                .collect();
            tx.commit()?;
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
        self.writes.submit(move |tx| {
            let mut report = ImportReport::default();
            for record in &records {
                let added = match record {
                    ExportRecord::Session(session) => {
                        let added = insert_session(tx, session)?;
                        report.sessions += added;
                        added
                    }
                    ExportRecord::Entry(entry) => {
                        let added = insert_row(tx, entry, true)?;
                        report.entries += added;
                        added
                    }
                    ExportRecord::Audit(row) => {
                        let added = insert_audit_once(tx, row)?;
                        report.audit += added;
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
        self.reads.read(|client| {
            Ok(client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM memory_maintenance WHERE key = 'hydration')",
                    &[],
                )?
                .get(0))
        })
    }

    pub(super) fn hydration_done(&self) -> Receipt<()> {
        self.writes.submit(|tx| {
            tx.execute(
                "DELETE FROM memory_maintenance WHERE key = 'hydration'",
                &[],
            )?;
            Ok(())
        })
    }

    pub(super) fn restore_records(
        &self,
        records: Vec<(MemoryEntry, bool)>,
    ) -> Receipt<(u64, Vec<MemoryEntry>)> {
        self.writes
            .submit(move |tx| restore_snapshot_records(tx, &records))
    }
}

fn restore_snapshot_records(
    tx: &mut Transaction<'_>,
    records: &[(MemoryEntry, bool)],
) -> Result<(u64, Vec<MemoryEntry>), StorageError> {
    let mut restored = 0;
    let mut edited_texts = Vec::new();
    for (entry, edited) in records {
        let present = tx.query_opt(
            "SELECT content, valid_to IS NULL AND forgotten_at IS NULL FROM memory_entries
             WHERE id = $1",
            &[&entry.id],
        )?;
        match present.map(|row| (row.get::<_, String>(0), row.get::<_, bool>(1))) {
            None => {
                let inserted = insert_row(tx, entry, true)?;
                restored += inserted;
                if *edited && inserted > 0 {
                    audit(
                        tx,
                        &entry.id,
                        "edit",
                        "snapshot",
                        now_ms(),
                        Some("text edited in the snapshot"),
                    )?;
                }
            }
            Some((stored, true)) if stored != entry.content => edited_texts.push(entry.clone()),
            Some(_) => {}
        }
    }
    Ok((restored, edited_texts))
}

/// Insert an imported audit row unless the same row is already there; returns 1 if added.
fn insert_audit_once(tx: &mut Transaction<'_>, row: &AuditRow) -> Result<u64, StorageError> {
    Ok(tx.execute(
        "INSERT INTO memory_audit (entry_id, action, actor, at, detail)
         SELECT $1, $2, $3, $4, $5
         WHERE NOT EXISTS (SELECT 1 FROM memory_audit WHERE entry_id = $1 AND action = $2
                             AND actor = $3 AND at = $4 AND detail IS NOT DISTINCT FROM $5)",
        &[&row.entry_id, &row.action, &row.actor, &row.at, &row.detail],
    )?)
}
