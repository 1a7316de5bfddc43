//! Retention: forgetting old entries of categories with a retention, at most once per
//! interval, then refreshing the snapshot.

use std::collections::BTreeMap;

use cairn_storage::memory::RetentionRun;
use serde::Serialize;

use super::*;

impl LocalMemory {
    /// Forget entries past their category's retention (never facts or core memories;
    /// episodes only once their session is consolidated), at most once per
    /// `hygiene_interval_hours` unless `force`; then write the snapshot if configured.
    pub fn hygiene(&self, force: bool) -> Result<HygieneReport, MemoryError> {
        let run = RetentionRun {
            now: now_ms(),
            interval_ms: self.config.hygiene_interval_hours as i64 * 3_600_000,
            force,
            retention_days: self.config.retention_days.clone(),
        };
        let Some(forgotten) = self.store.retention(run).wait()? else {
            return Ok(HygieneReport::default());
        };
        let mut report = HygieneReport {
            ran: true,
            forgotten,
            snapshot_entries: None,
        };
        if self.config.snapshot_on_hygiene {
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

impl HygieneReport {
    /// What was forgotten, for a log line: `daily 3, conversation 1`, or `nothing`.
    pub fn forgotten_in_words(&self) -> String {
        if self.forgotten.is_empty() {
            return "nothing".into();
        }
        let counts: Vec<String> = (self.forgotten.iter())
            .map(|(category, count)| format!("{category} {count}"))
            .collect();
        counts.join(", ")
    }
}
