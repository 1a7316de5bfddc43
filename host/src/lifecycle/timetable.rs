//! The scheduler's timetable: each manifest schedule keeps its own next tick, so every
//! schedule due at the same moment fires, not only the first found.

use cairn_vocab::plugin::Schedule;
use chrono::{DateTime, Utc};

/// One schedule with its parsed expression and the tick it waits for.
pub(super) struct Entry {
    /// The schedule as the manifest gave it.
    pub(super) schedule: Schedule,
    cron: croner::Cron,
    /// Its next tick; none when the expression has no further one.
    next: Option<DateTime<Utc>>,
}

/// A tick that came due: the schedule and the moment it was due at.
pub(super) struct Due<'a> {
    /// The schedule.
    pub(super) schedule: &'a Schedule,
    /// The moment the expression named (not when the scheduler woke).
    pub(super) at: DateTime<Utc>,
}

/// The schedules and their next ticks.
pub(super) struct Timetable {
    entries: Vec<Entry>,
}

impl Timetable {
    /// Parse each schedule (one that does not parse is logged and left out) and find its
    /// first tick after `after(schedule)`.
    pub(super) fn new(
        schedules: Vec<Schedule>,
        mut after: impl FnMut(&Schedule) -> DateTime<Utc>,
    ) -> Self {
        let entries = schedules
            .into_iter()
            .filter_map(|schedule| match schedule.cron.parse::<croner::Cron>() {
                Ok(cron) => {
                    let next = next_after(&cron, after(&schedule));
                    Some(Entry {
                        schedule,
                        cron,
                        next,
                    })
                }
                Err(e) => {
                    tracing::error!(plugin = %schedule.plugin, schedule = %schedule.name, "bad cron: {e}");
                    None
                }
            })
            .collect();
        Self { entries }
    }

    /// The schedules, with their parsed expressions.
    pub(super) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The earliest tick of any schedule; none when no schedule has another.
    pub(super) fn next_tick(&self) -> Option<DateTime<Utc>> {
        self.entries.iter().filter_map(|entry| entry.next).min()
    }

    /// Every tick due by `now`, each schedule's once, and each schedule moved on to its first
    /// tick after `now` (ticks the scheduler slept through are not fired again one by one).
    pub(super) fn take_due(&mut self, now: DateTime<Utc>) -> Vec<Due<'_>> {
        let mut due = Vec::new();
        for entry in &mut self.entries {
            if let Some(at) = entry.next.filter(|at| *at <= now) {
                entry.next = next_after(&entry.cron, now);
                due.push(Due {
                    schedule: &entry.schedule,
                    at,
                });
            }
        }
        due
    }
}

impl Entry {
    /// The schedule's first tick after `after`, if it has one.
    pub(super) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        next_after(&self.cron, after)
    }
}

fn next_after(cron: &croner::Cron, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    cron.find_next_occurrence(&after, false).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn schedule(plugin: &str, name: &str, cron: &str) -> Schedule {
        Schedule {
            plugin: plugin.into(),
            name: name.into(),
            cron: cron.into(),
        }
    }

    fn at(hour: u32, minute: u32, millis: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, hour, minute, 0)
            .single()
            .expect("a time")
            + chrono::Duration::milliseconds(millis.into())
    }

    fn names(due: &[Due<'_>]) -> Vec<String> {
        due.iter()
            .map(|d| {
                format!(
                    "{}.{}@{}",
                    d.schedule.plugin,
                    d.schedule.name,
                    d.at.format("%H:%M")
                )
            })
            .collect()
    }

    #[test]
    fn every_schedule_due_at_the_same_moment_fires() {
        let start = at(10, 0, 30);
        let mut timetable = Timetable::new(
            vec![
                schedule("a", "every", "* * * * *"),
                schedule("a", "also", "* * * * *"),
                schedule("b", "even", "*/2 * * * *"),
                schedule("c", "nightly", "0 3 * * *"),
            ],
            |_| start,
        );
        assert_eq!(timetable.next_tick(), Some(at(10, 1, 0)));
        assert!(timetable.take_due(at(10, 0, 59_999)).is_empty());
        // The scheduler wakes a little late: the first minute's two ticks fire, for 10:01.
        assert_eq!(
            names(&timetable.take_due(at(10, 1, 5))),
            ["a.every@10:01", "a.also@10:01"]
        );
        assert_eq!(timetable.next_tick(), Some(at(10, 2, 0)));
        assert_eq!(
            names(&timetable.take_due(at(10, 2, 0))),
            ["a.every@10:02", "a.also@10:02", "b.even@10:02"]
        );
        // Asleep for five minutes: each schedule fires once, then waits for its next tick.
        assert_eq!(
            names(&timetable.take_due(at(10, 7, 10))),
            ["a.every@10:03", "a.also@10:03", "b.even@10:04"]
        );
        assert_eq!(timetable.next_tick(), Some(at(10, 8, 0)));
    }

    #[test]
    fn a_schedule_that_does_not_parse_or_never_fires_again_is_left_out() {
        let start = at(10, 0, 0);
        let timetable = Timetable::new(
            vec![
                schedule("a", "bad", "61 * * * *"),
                schedule("a", "february", "0 0 31 2 *"),
            ],
            |_| start,
        );
        assert_eq!(timetable.entries().len(), 1);
        assert_eq!(timetable.next_tick(), None);
    }
}
