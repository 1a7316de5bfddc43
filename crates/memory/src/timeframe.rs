//! Time expressions in a recall query: "last month", "in March", "two weeks ago", "since
//! 2025", "before I moved". Recall reads them so that memories valid in the span the user
//! names rank first (see `LocalMemory::recall`); the rest of the query still decides what
//! is relevant.
//!
//! Calendar spans are in UTC. Every span is measured from the query's "now" (the recall's
//! `now`, else its `as_of`, else the clock), so a question asked "as of" a past day reads
//! "last month" from that day.

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, TimeDelta, Weekday};

const DAY_MS: i64 = 86_400_000;

/// A span of valid time a query names, `[from, to)` in ms; an open end is unbounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeFrame {
    /// The words that named it, as the query wrote them.
    pub phrase: String,
    /// Start (inclusive), or None for "since the beginning".
    pub from: Option<i64>,
    /// End (exclusive), or None for "until now and on".
    pub to: Option<i64>,
}

impl TimeFrame {
    /// Whether `at` (ms) falls inside the span.
    pub fn contains(&self, at: i64) -> bool {
        self.from.is_none_or(|from| at >= from) && self.to.is_none_or(|to| at < to)
    }

    /// The span with nothing after `now` in it: "since April" asked on April 15th ends
    /// then, not at the clock's today.
    pub fn ending_by(self, now: i64) -> TimeFrame {
        let end = now.saturating_add(1);
        TimeFrame {
            to: Some(self.to.map_or(end, |to| to.min(end))),
            ..self
        }
    }

    /// The span in words, for `--explain`.
    pub fn describe(&self) -> String {
        let day = |ms: i64| {
            DateTime::from_timestamp_millis(ms)
                .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_else(|| ms.to_string())
        };
        match (self.from, self.to) {
            (Some(from), Some(to)) => format!("\"{}\": {} – {}", self.phrase, day(from), day(to)),
            (Some(from), None) => format!("\"{}\": from {}", self.phrase, day(from)),
            (None, Some(to)) => format!("\"{}\": before {}", self.phrase, day(to)),
            (None, None) => format!("\"{}\"", self.phrase),
        }
    }
}

/// What a query says about time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeCue {
    /// A span the query names outright.
    Frame(TimeFrame),
    /// Before or after something the user did ("before I moved", "after we got married"):
    /// recall finds that event in memory and takes its time as the edge of the span.
    Anchored {
        /// The words that named it ("before I moved").
        phrase: String,
        /// True for "before", false for "after".
        before: bool,
        /// The event, as words to recall ("I moved").
        event: String,
    },
}

/// The first time expression in `text`, read relative to `now` (ms). None when the text
/// names no time.
pub fn read(text: &str, now: i64) -> Option<TimeCue> {
    let words = words(text);
    let today = DateTime::from_timestamp_millis(now)?.date_naive();
    let calendar = Calendar { now, today };
    (0..words.len()).find_map(|at| calendar.cue_at(&words, at))
}

/// The words of a text, lower-case, with their original spelling kept for phrases.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A length of calendar time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    fn parse(word: &str) -> Option<Unit> {
        Some(match word.trim_end_matches('s') {
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }
}

/// Spans relative to one "now".
struct Calendar {
    now: i64,
    today: NaiveDate,
}

impl Calendar {
    /// A cue starting at word `at`, if one does.
    fn cue_at(&self, words: &[String], at: usize) -> Option<TimeCue> {
        let word = words[at].as_str();
        if let Some(edge) = Edge::parse(word) {
            if let Some((span, used)) = self.span_at(words, at + 1, true) {
                let phrase = words[at..at + 1 + used].join(" ");
                return Some(TimeCue::Frame(edge.apply(span, phrase)));
            }
            return anchored(words, at, edge);
        }
        self.span_at(words, at, false).map(|(span, used)| {
            TimeCue::Frame(TimeFrame {
                phrase: words[at..at + used].join(" "),
                from: Some(span.0),
                to: Some(span.1),
            })
        })
    }

    /// A span named by the words from `at` on, and how many words name it; `led`: a word
    /// such as "since" came before them, so a bare month or year names a span.
    fn span_at(&self, words: &[String], at: usize, led: bool) -> Option<((i64, i64), usize)> {
        let word = |i: usize| words.get(at + i).map(String::as_str).unwrap_or("");
        match word(0) {
            "today" | "tonight" => return Some((self.days(self.today, 1), 1)),
            "yesterday" => return Some((self.days(self.today - Days::new(1), 1), 1)),
            "recently" | "lately" => return Some(((self.now - 30 * DAY_MS, self.now + 1), 1)),
            _ => {}
        }
        if let Some(span) = self.relative(word(0), word(1)) {
            return Some((span, 2));
        }
        if let Some((count, used)) = count(word(0), word(1), word(2)) {
            let unit = Unit::parse(word(used));
            if let (Some(unit), "ago") = (unit, word(used + 1)) {
                return Some((self.ago(count, unit), used + 2));
            }
        }
        if matches!(word(0), "past" | "last" | "previous")
            && let Some((count, used)) = count(word(1), word(2), word(3))
            && let Some(unit) = Unit::parse(word(1 + used))
        {
            return Some(((self.back(count, unit), self.now + 1), 2 + used));
        }
        self.named_period(words, at, led)
    }

    /// "last week", "this month", "past year", "last monday", "last summer", …
    fn relative(&self, which: &str, what: &str) -> Option<(i64, i64)> {
        let back = match which {
            "last" | "previous" => true,
            "this" => false,
            "past" => return Unit::parse(what).map(|unit| (self.back(1, unit), self.now + 1)),
            _ => return None,
        };
        if let Some(unit) = Unit::parse(what) {
            let start = self.period_start(unit);
            return Some(if back {
                (self.previous(start, unit), self.midnight(start))
            } else {
                (self.midnight(start), self.now + 1)
            });
        }
        if what == "weekend" {
            let saturday = self.weekday_before(Weekday::Sat, !back);
            return Some(self.days(saturday, 2));
        }
        if let Some(day) = weekday(what) {
            return Some(self.days(self.weekday_before(day, !back), 1));
        }
        if let Some(month) = month(what) {
            let year = self.year_of_last(month, !back);
            return self.month_span(year, month);
        }
        season(what).and_then(|first_month| self.season_span(first_month, !back))
    }

    /// "in March", "March 2025", "during 2024", "on Monday"; `led` as for
    /// [`span_at`](Self::span_at).
    fn named_period(&self, words: &[String], at: usize, led: bool) -> Option<((i64, i64), usize)> {
        let word = |i: usize| words.get(at + i).map(String::as_str).unwrap_or("");
        let (lead, skip) = match word(0) {
            "in" | "during" | "on" | "from" => (true, 1),
            _ => (led, 0),
        };
        let name = word(skip);
        let the_year = year(word(skip + 1));
        if let Some(month) = month(name).filter(|_| lead || the_year.is_some()) {
            let (year, used) = match the_year {
                Some(year) => (year, skip + 2),
                None => (self.year_of_last(month, true), skip + 1),
            };
            return self.month_span(year, month).map(|span| (span, used));
        }
        if lead && let Some(year) = year(name) {
            let from = NaiveDate::from_ymd_opt(year, 1, 1)?;
            let to = NaiveDate::from_ymd_opt(year + 1, 1, 1)?;
            return Some(((self.midnight(from), self.midnight(to)), skip + 1));
        }
        if word(0) == "on"
            && let Some(day) = weekday(name)
        {
            return Some((self.days(self.weekday_before(day, false), 1), 2));
        }
        None
    }

    /// Ms at the start of `date` (UTC).
    fn midnight(&self, date: NaiveDate) -> i64 {
        date.and_hms_opt(0, 0, 0)
            .map_or(self.now, |t| t.and_utc().timestamp_millis())
    }

    /// `count` whole days from `first`.
    fn days(&self, first: NaiveDate, count: i64) -> (i64, i64) {
        let from = self.midnight(first);
        (from, from + count * DAY_MS)
    }

    /// The first day of the unit that holds today (weeks start on Monday).
    fn period_start(&self, unit: Unit) -> NaiveDate {
        let t = self.today;
        match unit {
            Unit::Day => t,
            Unit::Week => t - Days::new(u64::from(t.weekday().num_days_from_monday())),
            Unit::Month => t.with_day(1).unwrap_or(t),
            Unit::Year => t.with_ordinal(1).unwrap_or(t),
        }
    }

    /// Ms at the start of the unit before the one starting on `date`.
    fn previous(&self, date: NaiveDate, unit: Unit) -> i64 {
        let moved = match unit {
            Unit::Day => date.checked_sub_days(Days::new(1)),
            Unit::Week => date.checked_sub_days(Days::new(7)),
            Unit::Month => date.checked_sub_months(Months::new(1)),
            Unit::Year => date.checked_sub_months(Months::new(12)),
        };
        self.midnight(moved.unwrap_or(date))
    }

    /// Ms `count` units before now.
    fn back(&self, count: u32, unit: Unit) -> i64 {
        self.now - count as i64 * unit_ms(unit)
    }

    /// "`count` units ago": the span of one unit centred on that moment (a day ago is the
    /// whole of yesterday).
    fn ago(&self, count: u32, unit: Unit) -> (i64, i64) {
        if unit == Unit::Day {
            let day = self.today - Days::new(u64::from(count));
            return self.days(day, 1);
        }
        let centre = self.back(count, unit);
        let half = unit_ms(unit) / 2;
        (centre - half, centre + half)
    }

    /// The latest `day` before today (`or_today`: today counts).
    fn weekday_before(&self, day: Weekday, or_today: bool) -> NaiveDate {
        let today = self.today.weekday().num_days_from_monday() as i64;
        let mut back = (today - day.num_days_from_monday() as i64).rem_euclid(7);
        if back == 0 && !or_today {
            back = 7;
        }
        self.today - TimeDelta::days(back)
    }

    /// The year of the latest `month` that has begun (`or_this`: the current month counts).
    fn year_of_last(&self, month: u32, or_this: bool) -> i32 {
        let current = self.today.month();
        if month < current || (month == current && or_this) {
            self.today.year()
        } else {
            self.today.year() - 1
        }
    }

    fn month_span(&self, year: i32, month: u32) -> Option<(i64, i64)> {
        self.months_span(year, month, 1)
    }

    /// `count` whole months from the first of `month` in `year`.
    fn months_span(&self, year: i32, month: u32, count: u32) -> Option<(i64, i64)> {
        let from = NaiveDate::from_ymd_opt(year, month, 1)?;
        let to = from.checked_add_months(Months::new(count))?;
        Some((self.midnight(from), self.midnight(to)))
    }

    /// The three months of the latest season starting in `first_month` (northern
    /// hemisphere: spring is March to May); `or_this`: one still under way counts.
    fn season_span(&self, first_month: u32, or_this: bool) -> Option<(i64, i64)> {
        let year = self.year_of_last(first_month, true);
        let latest = self.months_span(year, first_month, 3)?;
        if !or_this && latest.1 > self.now {
            return self.months_span(year - 1, first_month, 3);
        }
        Some(latest)
    }
}

/// How a span word bounds what follows it.
#[derive(Debug, Clone, Copy)]
enum Edge {
    Since,
    Before,
    After,
    Until,
}

impl Edge {
    fn parse(word: &str) -> Option<Edge> {
        Some(match word {
            "since" => Edge::Since,
            "before" => Edge::Before,
            "after" => Edge::After,
            "until" | "till" => Edge::Until,
            _ => return None,
        })
    }

    fn apply(self, (from, to): (i64, i64), phrase: String) -> TimeFrame {
        let (from, to) = match self {
            Edge::Since => (Some(from), None),
            Edge::Before => (None, Some(from)),
            Edge::After => (Some(to), None),
            Edge::Until => (None, Some(to)),
        };
        TimeFrame { phrase, from, to }
    }
}

/// Words that open a clause about the user's own life ("before *I* moved", "after *my*
/// son was born"): what follows is an event to find in memory, not a date.
const PERSONAL: &[&str] = &[
    "i", "we", "my", "our", "me", "us", "i'd", "i've", "we'd", "we've",
];

/// "before I moved": the event is the clause after the word, up to the end of the text.
fn anchored(words: &[String], at: usize, edge: Edge) -> Option<TimeCue> {
    let before = match edge {
        Edge::Before | Edge::Until => true,
        Edge::After | Edge::Since => false,
    };
    let clause = words.get(at + 1..)?;
    if !clause
        .first()
        .is_some_and(|w| PERSONAL.contains(&w.as_str()))
        || clause.len() < 2
    {
        return None;
    }
    Some(TimeCue::Anchored {
        phrase: words[at..].join(" "),
        before,
        event: clause.join(" "),
    })
}

/// Words that make a question about two things a question about their order or distance
/// in time ("which came *first*", "how *long* between", "did it happen *before*").
const COMPARING: &[&str] = &[
    "first", "earlier", "later", "sooner", "before", "after", "between", "order", "long", "time",
    "since", "last", "previous", "next",
];

/// The two events a question compares in time ("Which came first, the move or the
/// wedding?", "How long between the race and the surgery?", "Did the race happen before
/// the surgery?"), each as words to recall; None when the question compares nothing.
/// Recall makes sure the best match of each is among its hits.
pub fn compared_events(text: &str) -> Option<[String; 2]> {
    let lower = text.to_lowercase();
    let cued = words(&lower)
        .iter()
        .any(|w| COMPARING.contains(&w.as_str()));
    if !cued {
        return None;
    }
    let clean = |part: &str| {
        part.trim_matches(|c: char| !c.is_alphanumeric())
            .to_string()
    };
    let split = |text: &str, connector: &str| {
        let (left, right) = text.split_once(connector)?;
        let left = left.rsplit([',', ':', ';']).next().unwrap_or(left);
        Some([clean(left), clean(right)])
    };
    let parts = match lower.split_once(" between ") {
        Some((_, rest)) => split(rest, " and "),
        None => [" or ", " before ", " after ", " and "]
            .iter()
            .find_map(|connector| split(&lower, connector)),
    }?;
    let meaningful = |part: &String| !crate::recall::terms(part).is_empty();
    parts.iter().all(meaningful).then_some(parts)
}

/// Words that ask for whatever was said or done, not about something: "what *happened*",
/// "did we *talk* about *anything*", "*tell* me what was *new*".
const WHATEVER: &[&str] = &[
    "anything",
    "chat",
    "chatted",
    "discuss",
    "discussed",
    "done",
    "doing",
    "everything",
    "go",
    "going",
    "happen",
    "happened",
    "happening",
    "happens",
    "mention",
    "mentioned",
    "new",
    "news",
    "recap",
    "remind",
    "said",
    "say",
    "something",
    "stuff",
    "talk",
    "talked",
    "talking",
    "tell",
    "thing",
    "things",
    "told",
    "up",
    "went",
];

/// Question words that ask for one thing of a kind ("*where* did I go last weekend?"),
/// which relevance still picks out among what was said then.
const SPECIFIC: &[&str] = &["how", "where", "which", "who", "whom", "whose", "why"];

/// Whether `text` asks about nothing but the time `frame` names ("what happened last
/// week?", "anything new lately?", "what did we talk about yesterday?"): it asks for no
/// one thing of a kind, and once the span's own words, stop words and the words asking
/// for whatever was said are taken away, nothing is left for relevance to measure.
pub fn names_only_a_time(text: &str, frame: &TimeFrame) -> bool {
    if words(text)
        .iter()
        .any(|word| SPECIFIC.contains(&word.as_str()))
    {
        return false;
    }
    let spanned = crate::recall::terms(&frame.phrase);
    crate::recall::terms(text)
        .iter()
        .all(|word| spanned.contains(word) || WHATEVER.contains(&word.as_str()))
}

/// A count in words or digits ("two", "twenty-one", "a couple of", "3"), and how many words
/// it took.
fn count(first: &str, second: &str, third: &str) -> Option<(u32, usize)> {
    if let Ok(n) = first.parse::<u32>() {
        return (1..=1000).contains(&n).then_some((n, 1));
    }
    if first == "a" && second == "couple" && third == "of" {
        return Some((2, 3));
    }
    if first == "a" && second == "few" {
        return Some((3, 2));
    }
    if let Some(tens) = tens(first) {
        // "twenty-one" and "twenty one" alike (a hyphen splits words): read as one count,
        // never as "one" alone.
        return Some(match number_word(second) {
            Some(ones) if (1..10).contains(&ones) => (tens + ones, 2),
            _ => (tens, 1),
        });
    }
    match first {
        "a" | "an" => Some((1, 1)),
        "few" | "several" => Some((3, 1)),
        _ => number_word(first).map(|n| (n, 1)),
    }
}

/// The number words "one" to "nineteen", in order.
const UNITS_AND_TEENS: [&str; 19] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];

/// The number words "twenty" to "ninety", in order.
const TENS: [&str; 8] = [
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// "one" to "nineteen".
fn number_word(word: &str) -> Option<u32> {
    place(&UNITS_AND_TEENS, word)
}

/// "twenty" to "ninety".
fn tens(word: &str) -> Option<u32> {
    place(&TENS, word).map(|n| (n + 1) * 10)
}

/// Where `word` stands in `words`, counting from 1.
fn place(words: &[&str], word: &str) -> Option<u32> {
    words.iter().position(|w| *w == word).map(|i| i as u32 + 1)
}

fn unit_ms(unit: Unit) -> i64 {
    match unit {
        Unit::Day => DAY_MS,
        Unit::Week => 7 * DAY_MS,
        Unit::Month => 30 * DAY_MS + DAY_MS / 2,
        Unit::Year => 365 * DAY_MS + DAY_MS / 4,
    }
}

fn weekday(word: &str) -> Option<Weekday> {
    Some(match word {
        "monday" => Weekday::Mon,
        "tuesday" => Weekday::Tue,
        "wednesday" => Weekday::Wed,
        "thursday" => Weekday::Thu,
        "friday" => Weekday::Fri,
        "saturday" => Weekday::Sat,
        "sunday" => Weekday::Sun,
        _ => return None,
    })
}

/// A month's number from its name or a three-letter abbreviation ("may" only as a name).
fn month(word: &str) -> Option<u32> {
    const NAMES: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    NAMES
        .iter()
        .position(|name| *name == word || (word.len() == 3 && name.starts_with(word)))
        .map(|i| i as u32 + 1)
}

/// The first month of a season.
fn season(word: &str) -> Option<u32> {
    Some(match word {
        "spring" => 3,
        "summer" => 6,
        "autumn" | "fall" => 9,
        "winter" => 12,
        _ => return None,
    })
}

/// A plausible calendar year.
fn year(word: &str) -> Option<i32> {
    let year = word.parse::<i32>().ok()?;
    (word.len() == 4 && (1900..=2200).contains(&year)).then_some(year)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-25 (a Wednesday) at 12:00 UTC.
    const NOW: i64 = 1_795_608_000_000;

    fn ms(date: &str) -> i64 {
        NaiveDate::parse_from_str(date, "%Y-%m-%d")
            .expect("a date")
            .and_hms_opt(0, 0, 0)
            .expect("midnight")
            .and_utc()
            .timestamp_millis()
    }

    fn frame(text: &str) -> TimeFrame {
        match read(text, NOW) {
            Some(TimeCue::Frame(frame)) => frame,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_question_about_a_time_alone_is_told_from_one_about_something_then() {
        for only_time in [
            "What happened last week?",
            "anything new lately",
            "What did we talk about yesterday?",
            "Remind me what I said two weeks ago",
            "what's been going on recently",
        ] {
            assert!(
                names_only_a_time(only_time, &frame(only_time)),
                "{only_time}"
            );
        }
        for about_something in [
            "What did I say about the dentist last week?",
            "Which restaurant did we try yesterday?",
            "Where did I go last weekend?",
            "anything new about the move lately",
        ] {
            assert!(
                !names_only_a_time(about_something, &frame(about_something)),
                "{about_something}"
            );
        }
    }

    #[test]
    fn now_is_a_wednesday_in_november() {
        let now = DateTime::from_timestamp_millis(NOW).expect("now");
        assert_eq!(
            now.format("%Y-%m-%d %a %H").to_string(),
            "2026-11-25 Wed 12"
        );
    }

    #[test]
    fn calendar_periods() {
        let last_month = frame("What did I cook last month?");
        assert_eq!(last_month.phrase, "last month");
        assert_eq!(
            (last_month.from, last_month.to),
            (Some(ms("2026-10-01")), Some(ms("2026-11-01")))
        );
        let last_week = frame("anything from last week");
        assert_eq!(
            (last_week.from, last_week.to),
            (Some(ms("2026-11-16")), Some(ms("2026-11-23")))
        );
        let this_year = frame("books I read this year");
        assert_eq!(
            (this_year.from, this_year.to),
            (Some(ms("2026-01-01")), Some(NOW + 1))
        );
        let yesterday = frame("Who called me yesterday?");
        assert_eq!(
            (yesterday.from, yesterday.to),
            (Some(ms("2026-11-24")), Some(ms("2026-11-25")))
        );
    }

    #[test]
    fn named_months_and_years() {
        let march = frame("Where did I travel in March?");
        assert_eq!(
            (march.from, march.to),
            (Some(ms("2026-03-01")), Some(ms("2026-04-01")))
        );
        let december = frame("during December");
        assert_eq!(december.from, Some(ms("2025-12-01")), "the last December");
        let dated = frame("the trip of May 2024");
        assert_eq!(
            (dated.from, dated.to),
            (Some(ms("2024-05-01")), Some(ms("2024-06-01")))
        );
        let year = frame("what happened in 2025");
        assert_eq!(
            (year.from, year.to),
            (Some(ms("2025-01-01")), Some(ms("2026-01-01")))
        );
        assert_eq!(read("I may go", NOW), None, "'may' alone is a verb");
        assert_eq!(read("March on", NOW), None, "'march' alone is a verb");
    }

    #[test]
    fn counts_ago_and_rolling_windows() {
        let two_weeks = frame("What did I buy two weeks ago?");
        assert_eq!(two_weeks.phrase, "two weeks ago");
        let centre = NOW - 14 * DAY_MS;
        assert_eq!(
            (two_weeks.from, two_weeks.to),
            (Some(centre - 7 * DAY_MS / 2), Some(centre + 7 * DAY_MS / 2))
        );
        let three_days = frame("3 days ago");
        assert_eq!(three_days.from, Some(ms("2026-11-22")));
        let compound = frame("What did I sign up for twenty-one days ago?");
        assert_eq!(
            compound.phrase, "twenty one days ago",
            "not \"one days ago\""
        );
        assert!(compound.contains(NOW - 21 * DAY_MS) && !compound.contains(NOW - DAY_MS));
        assert_eq!(frame("thirty two days ago").phrase, "thirty two days ago");
        assert_eq!(frame("fifteen days ago").phrase, "fifteen days ago");
        assert_eq!(frame("in the last twenty days").phrase, "last twenty days");
        let couple = frame("a couple of months ago");
        assert!(couple.contains(NOW - 61 * DAY_MS) && !couple.contains(NOW - 20 * DAY_MS));
        let past = frame("in the past 10 days");
        assert_eq!(past.phrase, "past 10 days");
        assert_eq!(
            (past.from, past.to),
            (Some(NOW - 10 * DAY_MS), Some(NOW + 1))
        );
        let recently = frame("what have I done lately");
        assert!(recently.contains(NOW - 5 * DAY_MS) && !recently.contains(NOW - 40 * DAY_MS));
    }

    #[test]
    fn edges_and_weekdays() {
        let since = frame("what changed since March");
        assert_eq!((since.from, since.to), (Some(ms("2026-03-01")), None));
        let asked = ms("2026-04-15");
        let ended = since.clone().ending_by(asked);
        assert_eq!(
            (ended.from, ended.to),
            (Some(ms("2026-03-01")), Some(asked + 1))
        );
        let earlier = TimeFrame {
            to: Some(ms("2026-04-01")),
            ..since
        };
        assert_eq!(
            earlier.ending_by(asked).to,
            Some(ms("2026-04-01")),
            "an end before now stays"
        );
        let before = frame("before last week");
        assert_eq!((before.from, before.to), (None, Some(ms("2026-11-16"))));
        let after = frame("after 2025");
        assert_eq!((after.from, after.to), (Some(ms("2026-01-01")), None));
        let monday = frame("on Monday");
        assert_eq!(monday.from, Some(ms("2026-11-23")));
        let last_wednesday = frame("last Wednesday");
        assert_eq!(last_wednesday.from, Some(ms("2026-11-18")), "not today");
        let weekend = frame("last weekend");
        assert_eq!(
            (weekend.from, weekend.to),
            (Some(ms("2026-11-21")), Some(ms("2026-11-23")))
        );
        let summer = frame("last summer");
        assert_eq!(
            (summer.from, summer.to),
            (Some(ms("2026-06-01")), Some(ms("2026-09-01")))
        );
    }

    #[test]
    fn before_an_event_of_the_users_life() {
        assert_eq!(
            read("Where did I live before I moved?", NOW),
            Some(TimeCue::Anchored {
                phrase: "before i moved".into(),
                before: true,
                event: "i moved".into(),
            })
        );
        assert_eq!(
            read("Did the dental surgery happen before the race?", NOW),
            None,
            "a comparison of two events names no span"
        );
        assert_eq!(read("What is my pet called?", NOW), None);
    }

    #[test]
    fn questions_comparing_two_events() {
        let parts = |text: &str| compared_events(text).map(|p| p.map(|s| s.to_string()));
        assert_eq!(
            parts("Which came first, the dental surgery or the long-distance race?"),
            Some(["the dental surgery".into(), "the long-distance race".into()])
        );
        assert_eq!(
            parts("How much time passed between buying our home and the wedding?"),
            Some(["buying our home".into(), "the wedding".into()])
        );
        assert_eq!(
            parts("Did the marathon happen before the surgery?"),
            Some(["did the marathon happen".into(), "the surgery".into()])
        );
        assert_eq!(
            parts("Do I prefer tea or coffee?"),
            None,
            "no word about time"
        );
        assert_eq!(parts("What did I do first?"), None, "nothing to split");
    }
}
