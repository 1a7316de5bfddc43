//! A channel's failing polls in the log: said when the error changes (at most once a second)
//! and otherwise at most once a minute with how many failed meanwhile, so a poll failing
//! every few milliseconds cannot flood the log (or hide everything else in it), even when
//! its error text changes every time.

use std::time::{Duration, Instant};

/// How often a poll that keeps failing the same way is reported.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// How soon after a report a different error is reported.
const CHANGED_REPORT_GAP: Duration = Duration::from_secs(1);

/// What the log was last told about a channel's polls.
#[derive(Debug, Default)]
pub(super) struct PollFailures {
    /// The error last reported, while polls fail.
    failing: Option<String>,
    /// Failed polls since that report.
    unreported: u64,
    /// When it was reported.
    reported_at: Option<Instant>,
}

impl PollFailures {
    /// A poll of `plugin` failed with `error`.
    pub(super) fn failed(&mut self, plugin: &str, error: String) {
        let changed = self.failing.as_deref() != Some(error.as_str());
        let since = self.reported_at.map(|at| at.elapsed());
        let due = since.is_none_or(|since| since >= REPORT_EVERY);
        let changed_and_due = changed && since.is_none_or(|since| since >= CHANGED_REPORT_GAP);
        if !(changed_and_due || due) {
            self.unreported += 1;
            return;
        }
        match self.unreported {
            0 => tracing::warn!(plugin, "poll failed: {error}"),
            more => tracing::warn!(
                plugin,
                "poll failed: {error} ({more} more failed polls since the last report)"
            ),
        }
        self.failing = Some(error);
        self.unreported = 0;
        self.reported_at = Some(Instant::now());
    }

    /// A poll of `plugin` succeeded.
    pub(super) fn succeeded(&mut self, plugin: &str) {
        if self.failing.take().is_some() {
            tracing::info!(
                plugin,
                failed_since_report = self.unreported,
                "poll works again"
            );
            self.unreported = 0;
            self.reported_at = None;
        }
    }

    /// Whether the last poll failed (for tests).
    #[cfg(test)]
    fn is_failing(&self) -> bool {
        self.failing.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_failure_is_counted_not_logged_each_time() {
        let mut polls = PollFailures::default();
        polls.failed("ch", "upstream down".into());
        for _ in 0..1000 {
            polls.failed("ch", "upstream down".into());
        }
        assert_eq!(polls.unreported, 1000, "the same error again is counted");
        for n in 0..1000 {
            polls.failed("ch", format!("error number {n}"));
        }
        assert_eq!(
            polls.unreported, 2000,
            "errors that change every time are counted within a second of a report"
        );
        polls.reported_at = polls
            .reported_at
            .and_then(|at| at.checked_sub(CHANGED_REPORT_GAP));
        polls.failed("ch", "another error".into());
        assert_eq!(
            polls.unreported, 0,
            "a new error a second later is reported"
        );
        polls.succeeded("ch");
        assert!(!polls.is_failing());
    }
}
