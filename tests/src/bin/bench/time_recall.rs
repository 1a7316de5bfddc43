//! The time-only recall row: questions that name a time and nothing else ("what happened
//! last week?") for one user holding a busy year of entries, through `LocalMemory::recall`,
//! beside the same read as one SQL query over `user_id = ? OR user_id IS NULL`, which gathers
//! and sorts every entry of the span instead of walking the user's index newest first; and
//! the same on PostgreSQL.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use cairn::memory::timeframe::{self, TimeCue};
use cairn::memory::{ExportRecord, LocalMemory, MemoryConfig, MemoryKind, NewMemory};
use cairn::memory::{RecallQuery, Scope};

use super::{Row, percentile};

/// The busy user's entries, one every two and a half minutes over a year.
const ENTRIES: usize = 200_000;
/// Of them, every this many is shared (no user): recall reads both.
const SHARED_EVERY: usize = 50;
/// Spacing of the entries' valid times.
const SPACING_MS: i64 = 150_000;
/// Rounds over the questions.
const ROUNDS: usize = 50;
/// Questions naming a time and nothing else, of spans from a day to a month.
const QUESTIONS: [&str; 4] = [
    "What happened last week?",
    "What did we talk about yesterday?",
    "What did I say two weeks ago?",
    "What happened last month?",
];

/// Recall's p50/p99 over the questions with the single-query read's beside it, and the same
/// questions on PostgreSQL when a server is at hand.
pub fn time_recall_rows(rows: &mut Vec<Row>, scratch: &Path) -> Result<()> {
    let dir = scratch.join("memory-time");
    std::fs::create_dir_all(&dir)?;
    let store = std::sync::Arc::new(cairn::store::memory::SqliteMemory::open(&dir)?);
    let memory = LocalMemory::over(&dir, MemoryConfig::default(), store)?;
    let now = cairn::store::now_ms();
    let year = a_busy_year(now)?;
    memory.import(&year)?;
    let queries: Vec<RecallQuery> = QUESTIONS.iter().map(|text| question(text, now)).collect();
    let reference = rusqlite::Connection::open_with_flags(
        dir.join(cairn::store::memory::FILE),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )?;
    let (mut recalled, mut single) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for query in &queries {
            recalled.push(time_one(&memory, query)?);
            let started = Instant::now();
            black_box(one_query_read(&reference, query, now)?);
            single.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    memory.stop_embedder();
    recalled.sort_by(|a, b| a.total_cmp(b));
    single.sort_by(|a, b| a.total_cmp(b));
    let name = format!(
        "time-only recall (\"what happened last week?\"), one user of {}k entries",
        ENTRIES / 1000
    );
    rows.push(Row {
        name: name.clone(),
        value: percentile(&recalled, 0.99),
        unit: "ms",
        note: format!(
            "p99; p50 {:.2} ms; {} questions × {ROUNDS}; as read before (one OR query, all the user's entries sorted): p50 {:.2} / p99 {:.1} ms ({:.0}x at p99)",
            percentile(&recalled, 0.5),
            QUESTIONS.len(),
            percentile(&single, 0.5),
            percentile(&single, 0.99),
            percentile(&single, 0.99) / percentile(&recalled, 0.99)
        ),
    });
    if let Some(cluster) = cairn::store::pg::cluster::TestCluster::shared() {
        let store = std::sync::Arc::new(cairn::store::pg::memory::PgMemory::connect(
            &cluster.fresh_database(),
        )?);
        let on_postgres = LocalMemory::over(
            &scratch.join("memory-time-pg"),
            MemoryConfig::default(),
            store,
        )?;
        on_postgres.import(&year)?;
        let mut samples = Vec::new();
        for _ in 0..ROUNDS {
            for query in &queries {
                samples.push(time_one(&on_postgres, query)?);
            }
        }
        on_postgres.stop_embedder();
        samples.sort_by(|a, b| a.total_cmp(b));
        rows.push(Row {
            name: format!("{name}, on PostgreSQL"),
            value: percentile(&samples, 0.99),
            unit: "ms",
            note: format!(
                "p99; p50 {:.2} ms; the same entries and questions",
                percentile(&samples, 0.5)
            ),
        });
    }
    Ok(())
}

/// One recall of `query` (ms), checked to be answered with what was said in its span.
fn time_one(memory: &LocalMemory, query: &RecallQuery) -> Result<f64> {
    let started = Instant::now();
    let hits = memory.recall(query)?;
    let took = started.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(
        hits.len() == query.limit
            && hits.iter().all(|hit| {
                let why = hit.explain.adjusted.as_deref().unwrap_or_default();
                why.contains("names a time and nothing else")
            }),
        "`{}` was not answered with what was said then",
        query.text
    );
    Ok(took)
}

/// A year of the busy user's episodes as an export's lines, the newest a minute ago, every
/// [`SHARED_EVERY`]th shared.
fn a_busy_year(now: i64) -> Result<String> {
    let mut lines = String::new();
    for i in 0..ENTRIES {
        let mut said = NewMemory::new(MemoryKind::Episode, format!("busy day, note number {i}"));
        said.scope = Scope {
            agent_id: Some("main".into()),
            user_id: (i % SHARED_EVERY != 0).then(|| "busy-user".to_string()),
            session_id: Some(format!("bench:{}", i / 100)),
        };
        let mut entry = cairn::memory::record(&said, format!("mem_time{i:07}"), now);
        entry.valid_from = now - 60_000 - (ENTRIES - i) as i64 * SPACING_MS;
        entry.recorded_at = entry.valid_from;
        lines.push_str(&serde_json::to_string(&ExportRecord::Entry(Box::new(
            entry,
        )))?);
        lines.push('\n');
    }
    Ok(lines)
}

fn question(text: &str, now: i64) -> RecallQuery {
    RecallQuery {
        text: text.into(),
        scope: Scope {
            agent_id: Some("main".into()),
            user_id: Some("busy-user".into()),
            session_id: None,
        },
        limit: 5,
        now: Some(now),
        ..RecallQuery::default()
    }
}

/// The span `query` names, read newest first as one query with the scope's `OR`s and the
/// user's index used for the user alone (`+` keeps SQLite from bounding the walk by valid
/// time), as recall read it before the index was ordered by valid time: every entry of the
/// user looked up, filtered and sorted. The reference the row compares with.
fn one_query_read(conn: &rusqlite::Connection, query: &RecallQuery, now: i64) -> Result<usize> {
    let Some(TimeCue::Frame(frame)) = timeframe::read(&query.text, now) else {
        anyhow::bail!("`{}` names no span", query.text);
    };
    let frame = frame.ending_by(now);
    let mut statement = conn.prepare_cached(
        "SELECT e.seq FROM entries e
          WHERE (e.agent_id = ?1 OR e.agent_id IS NULL) AND (e.user_id = ?2 OR e.user_id IS NULL)
            AND +e.valid_from >= ?3 AND +e.valid_from < ?4
            AND e.forgotten_at IS NULL AND e.valid_to IS NULL
          ORDER BY e.valid_from DESC, e.seq DESC LIMIT ?5",
    )?;
    let found = statement
        .query_map(
            rusqlite::params![
                "main",
                "busy-user",
                frame.from.unwrap_or(i64::MIN),
                frame.to.context("a span ending by now")?,
                query.limit as i64
            ],
            |row| row.get::<_, i64>(0),
        )?
        .count();
    Ok(found)
}
