//! Retention: forgetting old entries of categories with a retention, at most once per
//! interval, then refreshing the snapshot.

use super::*;

impl MemoryStore {
    /// Forget entries past their category's retention (never facts or core memories;
    /// episodes only once their session is consolidated), at most once per
    /// `hygiene_interval_hours` unless `force`; then write the snapshot if configured.
    pub fn hygiene(&self, force: bool) -> Result<HygieneReport, MemoryError> {
        let now = now_ms();
        let interval = self.config.hygiene_interval_hours as i64 * 3_600_000;
        let retention = self.config.retention_days.clone();
        let report = self.writer.write_blocking(move |conn| {
            let last: Option<i64> = conn
                .query_row("SELECT value FROM maintenance WHERE key = 'hygiene_last_run'", [], |r| r.get::<_, String>(0))
                .optional()?
                .and_then(|v| v.parse().ok());
            let mut report = HygieneReport::default();
            if !force && last.is_some_and(|last| now - last < interval) {
                return Ok(report);
            }
            report.ran = true;
            for (category, days) in &retention {
                let cutoff = now - i64::from(*days) * 86_400_000;
                let mut statement = conn.prepare(
                    "SELECT e.id FROM entries e LEFT JOIN sessions s ON s.id = e.session_id
                     WHERE e.category = ?1 AND e.recorded_at < ?2 AND e.forgotten_at IS NULL
                       AND e.kind NOT IN ('fact', 'core')
                       AND (e.kind != 'episode' OR e.session_id IS NULL OR s.state = 'consolidated')",
                )?;
                let ids: Vec<String> = statement.query_map(params![category, cutoff], |r| r.get(0))?.collect::<Result<_, _>>()?;
                for id in &ids {
                    forget(conn, id, "hygiene")?;
                }
                if !ids.is_empty() {
                    report.forgotten.insert(category.clone(), ids.len() as u64);
                }
            }
            conn.execute(
                "INSERT INTO maintenance (key, value) VALUES ('hygiene_last_run', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![now.to_string()],
            )?;
            Ok(report)
        })?;
        let mut report = report;
        if report.ran && self.config.snapshot_on_hygiene {
            report.snapshot_entries =
                Some(self.export_snapshot(&self.data_dir.join(SNAPSHOT_FILE))?);
        }
        Ok(report)
    }
}

/// What a hygiene run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HygieneReport {
    /// False when the last run was too recent (nothing was done).
    pub ran: bool,
    /// Entries forgotten per category.
    pub forgotten: BTreeMap<String, u64>,
    /// Core memories written to the snapshot, when one was written.
    pub snapshot_entries: Option<u64>,
}
