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

/// Ticks of a schedule that came due while the host was down.
#[derive(Debug, PartialEq)]
pub(super) struct Missed {
    /// The first of them.
    pub(super) first: DateTime<Utc>,
    /// The last of them: the one a catch-up fires for.
    pub(super) last: DateTime<Utc>,
    /// How many there were, counted up to [`MOST_COUNTED`].
    pub(super) count: u32,
}

/// Most missed ticks counted one by one (an every-minute schedule down for ten weeks): the
/// count stops there.
pub(super) const MOST_COUNTED: u32 = 100_000;

impl Entry {
    /// The ticks after `last` and by `now` that were missed, if any.
    pub(super) fn missed(&self, last: DateTime<Utc>, now: DateTime<Utc>) -> Option<Missed> {
        let first = next_after(&self.cron, last).filter(|at| *at <= now)?;
        let latest = self.last_by(now).filter(|at| *at >= first).unwrap_or(first);
        let mut count = 1;
        let mut at = first;
        while at < latest && count < MOST_COUNTED {
            match next_after(&self.cron, at) {
                Some(next) if next <= latest => {
                    at = next;
                    count += 1;
                }
                _ => break,
            }
        }
        Some(Missed {
            first,
            last: latest,
            count,
        })
    }

    /// The schedule's last tick by `now`, looked for backwards from it.
    fn last_by(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_previous_occurrence(&now, true).ok()
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
    fn ticks_missed_while_down_are_counted_and_the_last_is_the_one_fired() {
        let timetable = Timetable::new(vec![schedule("a", "even", "*/2 * * * *")], |_| at(9, 0, 0));
        let entry = &timetable.entries()[0];
        assert_eq!(
            entry.missed(at(10, 0, 30), at(10, 1, 59)),
            None,
            "none due yet"
        );
        assert_eq!(
            entry.missed(at(10, 0, 30), at(10, 9, 10)),
            Some(Missed {
                first: at(10, 2, 0),
                last: at(10, 8, 0),
                count: 4,
            })
        );
        assert_eq!(
            entry.missed(at(10, 0, 30), at(10, 2, 0)),
            Some(Missed {
                first: at(10, 2, 0),
                last: at(10, 2, 0),
                count: 1,
            }),
            "a tick due at the very moment counts"
        );
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
