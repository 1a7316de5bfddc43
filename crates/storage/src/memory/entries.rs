//! Entry rows: inserting with the duplicate and supersede rules, forgetting, purging, the
//! reads that inspect them, the audit trail, and the scoped WHERE clauses reads share.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use serde::Serialize;

use super::*;
use crate::now_ms;
use cairn_vocab::memory::MemoryKind;

/// The columns [`row_to_entry`] reads, with `e` the entries table.
pub(super) const ENTRY_COLUMNS: &str = "e.seq, e.id, e.kind, e.content, e.category, e.agent_id, \
    e.user_id, e.session_id, e.importance, e.tags, e.issue_refs, e.pr_refs, e.sources, \
    e.subject, e.predicate, e.valid_from, e.valid_to, e.recorded_at, e.superseded_by, \
    e.forgotten_at";

/// The columns [`row_to_audit`] reads.
pub(super) const AUDIT_COLUMNS: &str = "entry_id, action, actor, at, detail";

impl SqliteMemory {
    pub(super) fn insert_entry(
        &self,
        entry: MemoryEntry,
        supersedes: Option<String>,
        actor: &str,
    ) -> Receipt<Insertion> {
        let actor = actor.to_string();
        self.submit(move |conn| insert(conn, &entry, supersedes.as_deref(), &actor))
    }

    pub(super) fn forget_entry(&self, id: &str, actor: &str) -> Receipt<bool> {
        let (id, actor) = (id.to_string(), actor.to_string());
        self.submit(move |conn| forget(conn, &id, &actor))
    }

    pub(super) fn rescore_entry(&self, id: &str, importance: u8, actor: &str) -> Receipt<bool> {
        let (id, actor) = (id.to_string(), actor.to_string());
        self.submit(move |conn| rescore(conn, &id, importance, &actor))
    }

    pub(super) fn purge_entries(&self, ids: Vec<String>, actor: &str) -> Receipt<Vec<i64>> {
        let actor = actor.to_string();
        self.submit(move |conn| {
            let targets: Vec<(i64, String)> = if ids.is_empty() {
                conn.prepare_cached("SELECT seq, id FROM entries WHERE forgotten_at IS NOT NULL")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()?
            } else {
                let mut found = Vec::new();
                // An id named twice is purged (and counted) once.
                let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
                for id in unique {
                    let seq: Option<i64> = conn
                        .prepare_cached("SELECT seq FROM entries WHERE id = ?1")?
                        .query_row(params![id], |r| r.get(0))
                        .optional()?;
                    found.extend(seq.map(|seq| (seq, id.clone())));
                }
                found
            };
            let now = now_ms();
            for (seq, id) in &targets {
                // Read now, not with the targets: purging an earlier one may have changed it.
                let successor: Option<String> = conn
                    .prepare_cached("DELETE FROM entries WHERE seq = ?1 RETURNING superseded_by")?
                    .query_row(params![seq], |r| r.get(0))?;
                audit(conn, id, "purge", &actor, now, None)?;
                for (older, action, why) in heal_chain(conn, id, successor.as_deref())? {
                    audit(conn, &older, action, &actor, now, Some(&why))?;
                }
            }
            Ok(targets.into_iter().map(|(seq, _)| seq).collect())
        })
    }

    pub(super) fn get_entry(&self, id: &str) -> Result<Option<MemoryEntry>, StorageError> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {ENTRY_COLUMNS} FROM entries e WHERE e.id = ?1"
            ))?
            .query_row(params![id], row_to_entry)
            .optional()
        })
    }

    pub(super) fn list_entries(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<MemoryEntry>, StorageError> {
        let mut sql = Filters::default();
        sql.scope(&filter.scope);
        sql.kinds(&filter.kinds);
        if let Some(category) = &filter.category {
            sql.push("e.category = ?", Value::Text(category.clone()));
        }
        if !filter.include_superseded {
            sql.clauses.push("e.valid_to IS NULL".into());
        }
        if !filter.include_forgotten {
            sql.clauses.push("e.forgotten_at IS NULL".into());
        }
        let query = format!(
            "SELECT {ENTRY_COLUMNS} FROM entries e WHERE {} ORDER BY e.seq DESC LIMIT {}",
            sql.clause(),
            filter.limit.max(1)
        );
        self.read(|conn| {
            conn.prepare_cached(&query)?
                .query_map(params_from_iter(sql.values.iter()), row_to_entry)?
                .collect()
        })
    }

    pub(super) fn count_entries(&self, scope: &Scope) -> Result<u64, StorageError> {
        let mut sql = Filters::default();
        sql.scope(scope);
        sql.clauses
            .push("e.valid_to IS NULL AND e.forgotten_at IS NULL".into());
        let query = format!("SELECT count(*) FROM entries e WHERE {}", sql.clause());
        self.read(|conn| {
            conn.prepare_cached(&query)?
                .query_row(params_from_iter(sql.values.iter()), |r| r.get::<_, i64>(0))
        })
        .map(|n| n as u64)
    }

    pub(super) fn entry_audit_trail(&self, id: &str) -> Result<Vec<AuditRow>, StorageError> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {AUDIT_COLUMNS} FROM audit WHERE entry_id = ?1 ORDER BY seq"
            ))?
            .query_map(params![id], row_to_audit)?
            .collect()
        })
    }

    pub(super) fn same_subject(
        &self,
        entry: &MemoryEntry,
    ) -> Result<Vec<(i64, String, String)>, StorageError> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT seq, id, content FROM entries
                 WHERE subject = ?1 AND kind = ?2 AND valid_to IS NULL AND forgotten_at IS NULL
                   AND agent_id IS ?3 AND user_id IS ?4 AND predicate IS NOT ?5
                 ORDER BY seq DESC LIMIT 50",
            )?
            .query_map(
                params![
                    entry.subject,
                    entry.kind.as_str(),
                    entry.scope.agent_id,
                    entry.scope.user_id,
                    entry.predicate
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?
            .collect()
        })
    }

    pub(super) fn entry_stats(
        &self,
        model: Option<(&str, &str)>,
    ) -> Result<MemoryStats, StorageError> {
        let mut stats = self.read(read_stats)?;
        if let Some((provider, model)) = model {
            stats.embedded = self.read(|conn| {
                conn.query_row(
                    "SELECT count(*) FROM embeddings WHERE provider = ?1 AND model = ?2",
                    params![provider, model],
                    |r| r.get::<_, i64>(0),
                )
            })? as u64;
            stats.embedding_backlog = self.backlog(provider, model)?;
        }
        stats.database_bytes = ["", "-wal"]
            .iter()
            .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", self.path.display())).ok())
            .map(|m| m.len())
            .sum();
        Ok(stats)
    }
}

fn read_stats(conn: &Connection) -> rusqlite::Result<MemoryStats> {
    let mut stats = MemoryStats::default();
    let count = |sql: &str| {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
    };
    let mut statement = conn.prepare_cached(
        "SELECT kind, category, count(*) FROM entries
         WHERE valid_to IS NULL AND forgotten_at IS NULL GROUP BY kind, category",
    )?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let (kind, category, n): (String, String, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        *stats.live_by_kind.entry(kind).or_default() += n as u64;
        *stats.live_by_category.entry(category).or_default() += n as u64;
    }
    stats.superseded =
        count("SELECT count(*) FROM entries WHERE valid_to IS NOT NULL AND forgotten_at IS NULL")?;
    stats.forgotten = count("SELECT count(*) FROM entries WHERE forgotten_at IS NOT NULL")?;
    stats.embedding_cache = count("SELECT count(*) FROM embedding_cache")?;
    let mut statement =
        conn.prepare_cached("SELECT state, count(*) FROM sessions GROUP BY state")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        stats
            .sessions
            .insert(row.get(0)?, row.get::<_, i64>(1)? as u64);
    }
    stats.hygiene_last_run = last_hygiene(conn)?;
    Ok(stats)
}

/// When retention last ran.
pub(super) fn last_hygiene(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    Ok(conn
        .query_row(
            "SELECT value FROM maintenance WHERE key = 'hygiene_last_run'",
            [],
            |r| r.get::<_, String>(0),
        )
        .optional()?
        .and_then(|v| v.parse().ok()))
}

fn insert(
    conn: &Connection,
    entry: &MemoryEntry,
    supersedes: Option<&str>,
    actor: &str,
) -> rusqlite::Result<Insertion> {
    if entry_exists(conn, &entry.id)? {
        // Its caller chose the id (see `NewMemory::id`): this memory is stored already.
        return Ok(Insertion::Duplicate {
            existing: entry.id.clone(),
        });
    }
    if entry.kind != MemoryKind::Episode
        && let Some(existing) = live_duplicate(conn, entry)?
    {
        return Ok(Insertion::Duplicate { existing });
    }
    let mut replaced: Vec<String> = Vec::new();
    if let Some(target) = supersedes {
        if let Some(refusal) = supersede_refusal(conn, target)? {
            return Ok(Insertion::Refused(refusal));
        }
        replaced.push(target.to_string());
    }
    let live = same_predicate_facts(conn, entry)?;
    if supersedes.is_none()
        && let Some((newer, since)) = super::newer_than(&live, entry.valid_from)
    {
        // Said before the current fact about the same thing (history replayed out of
        // order): it is that fact's past, stored replaced by it, which stays current.
        let mut past = entry.clone();
        (past.valid_to, past.superseded_by) = (Some(since), Some(newer.clone()));
        insert_row(conn, &past, false)?;
        audit(
            conn,
            &entry.id,
            "supersede",
            actor,
            entry.recorded_at,
            Some(&newer),
        )?;
        return Ok(Insertion::Stored { superseded: vec![] });
    }
    for (id, _) in live {
        if !replaced.contains(&id) {
            replaced.push(id);
        }
    }
    insert_row(conn, entry, false)?;
    for old in &replaced {
        conn.prepare_cached(
            "UPDATE entries SET valid_to = max(valid_from, ?2), superseded_by = ?3 WHERE id = ?1",
        )?
        .execute(params![old, entry.valid_from, entry.id])?;
        audit(
            conn,
            old,
            "supersede",
            actor,
            entry.recorded_at,
            Some(&entry.id),
        )?;
    }
    Ok(Insertion::Stored {
        superseded: replaced,
    })
}

/// Whether an entry (live, superseded or forgotten) has `id`.
fn entry_exists(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM entries WHERE id = ?1)")?
        .query_row(params![id], |r| r.get(0))
}

/// A live entry with the same content, kind, scope, subject and predicate.
fn live_duplicate(conn: &Connection, entry: &MemoryEntry) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT id FROM entries WHERE content_hash = ?1 AND kind = ?2 AND valid_to IS NULL
           AND forgotten_at IS NULL AND agent_id IS ?3 AND user_id IS ?4 AND session_id IS ?5
           AND subject IS ?6 AND predicate IS ?7",
    )?
    .query_row(
        params![
            content_hash(&entry.content),
            entry.kind.as_str(),
            entry.scope.agent_id,
            entry.scope.user_id,
            entry.scope.session_id,
            entry.subject,
            entry.predicate
        ],
        |r| r.get(0),
    )
    .optional()
}

/// Why `target` may not be superseded (missing, forgotten or already superseded), if so.
fn supersede_refusal(conn: &Connection, target: &str) -> rusqlite::Result<Option<String>> {
    let live: Option<Option<i64>> = conn
        .prepare_cached("SELECT valid_to FROM entries WHERE id = ?1 AND forgotten_at IS NULL")?
        .query_row(params![target], |r| r.get(0))
        .optional()?;
    Ok(match live {
        None => Some(format!("supersedes: no memory `{target}` to supersede")),
        Some(Some(_)) => Some(format!("supersedes: `{target}` was already superseded")),
        Some(None) => None,
    })
}

/// The live facts a fact with a subject and predicate replaces (same agent and user).
fn same_predicate_facts(
    conn: &Connection,
    entry: &MemoryEntry,
) -> rusqlite::Result<Vec<(String, i64)>> {
    let (MemoryKind::Fact, Some(subject), Some(predicate)) =
        (entry.kind, &entry.subject, &entry.predicate)
    else {
        return Ok(Vec::new());
    };
    conn.prepare_cached(
        "SELECT id, valid_from FROM entries WHERE kind = 'fact' AND subject = ?1 AND predicate = ?2
           AND valid_to IS NULL AND forgotten_at IS NULL AND agent_id IS ?3 AND user_id IS ?4",
    )?
    .query_map(
        params![
            subject,
            predicate,
            entry.scope.agent_id,
            entry.scope.user_id
        ],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?
    .collect()
}

/// Insert a full record; with `ignore_existing`, an existing id is left alone (returns 0).
pub(super) fn insert_row(
    conn: &Connection,
    entry: &MemoryEntry,
    ignore_existing: bool,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(&format!(
            "INSERT {} INTO entries (id, kind, content, content_hash, category, agent_id, user_id, session_id,
                 importance, tags, issue_refs, pr_refs, sources, subject, predicate, valid_from, valid_to,
                 recorded_at, superseded_by, forgotten_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            if ignore_existing { "OR IGNORE" } else { "" }
        ))?.execute(params![
            entry.id,
            entry.kind.as_str(),
            entry.content,
            content_hash(&entry.content),
            entry.category,
            entry.scope.agent_id,
            entry.scope.user_id,
            entry.scope.session_id,
            entry.importance,
            to_json(&entry.tags),
            to_json(&entry.issue_refs),
            to_json(&entry.pr_refs),
            to_json(&entry.sources),
            entry.subject,
            entry.predicate,
            entry.valid_from,
            entry.valid_to,
            entry.recorded_at,
            entry.superseded_by,
            entry.forgotten_at,
        ])
}

/// A list column as JSON text.
fn to_json<T: Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".into())
}

/// Soft-delete a live entry with an audit row; whether there was one.
pub(super) fn forget(conn: &Connection, id: &str, actor: &str) -> rusqlite::Result<bool> {
    let now = now_ms();
    let changed = conn
        .prepare_cached(
            "UPDATE entries SET forgotten_at = ?2 WHERE id = ?1 AND forgotten_at IS NULL",
        )?
        .execute(params![id, now])?;
    if changed > 0 {
        audit(conn, id, "forget", actor, now, None)?;
    }
    Ok(changed > 0)
}

/// Set a live entry's importance with an audit row (`old -> new`); whether there was one.
fn rescore(conn: &Connection, id: &str, importance: u8, actor: &str) -> rusqlite::Result<bool> {
    let old: Option<i64> = conn
        .prepare_cached("SELECT importance FROM entries WHERE id = ?1 AND forgotten_at IS NULL")?
        .query_row(params![id], |r| r.get(0))
        .optional()?;
    let Some(old) = old else {
        return Ok(false);
    };
    if old != i64::from(importance) {
        conn.prepare_cached("UPDATE entries SET importance = ?2 WHERE id = ?1")?
            .execute(params![id, importance])?;
        let detail = format!("{old} -> {importance}");
        audit(conn, id, "rescore", actor, now_ms(), Some(&detail))?;
    }
    Ok(true)
}

/// Add a row to an entry's audit trail.
pub(super) fn audit(
    conn: &Connection,
    id: &str,
    action: &str,
    actor: &str,
    at: i64,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO audit (entry_id, action, actor, at, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, action, actor, at, detail])?;
    Ok(())
}

/// An audit row as read with [`AUDIT_COLUMNS`].
pub(super) fn row_to_audit(row: &Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        entry_id: row.get(0)?,
        action: row.get(1)?,
        actor: row.get(2)?,
        at: row.get(3)?,
        detail: row.get(4)?,
    })
}

fn json_list<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    index: usize,
) -> rusqlite::Result<Vec<T>> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// An entry as read with [`ENTRY_COLUMNS`].
pub(super) fn row_to_entry(row: &Row<'_>) -> rusqlite::Result<MemoryEntry> {
    let kind = crate::parsed(row, 2, MemoryKind::parse, "memory kind")?;
    Ok(MemoryEntry {
        id: row.get(1)?,
        kind,
        content: row.get(3)?,
        category: row.get(4)?,
        scope: Scope {
            agent_id: row.get(5)?,
            user_id: row.get(6)?,
            session_id: row.get(7)?,
        },
        importance: row.get(8)?,
        tags: json_list(row, 9)?,
        issue_refs: json_list(row, 10)?,
        pr_refs: json_list(row, 11)?,
        sources: json_list(row, 12)?,
        subject: row.get(13)?,
        predicate: row.get(14)?,
        valid_from: row.get(15)?,
        valid_to: row.get(16)?,
        recorded_at: row.get(17)?,
        superseded_by: row.get(18)?,
        forgotten_at: row.get(19)?,
    })
}

/// SQL `WHERE` clauses with their parameters, built from a query's filters.
#[derive(Default)]
pub(super) struct Filters {
    pub(super) clauses: Vec<String>,
    pub(super) values: Vec<Value>,
}

impl Filters {
    pub(super) fn push(&mut self, clause: &str, value: Value) {
        self.clauses.push(clause.to_string());
        self.values.push(value);
    }

    /// Scope rules: a set agent or user admits its own entries and those shared at that
    /// level (NULL); a set session admits only that session.
    pub(super) fn scope(&mut self, scope: &Scope) {
        if let Some(agent) = &scope.agent_id {
            self.push(
                "(e.agent_id = ? OR e.agent_id IS NULL)",
                Value::Text(agent.clone()),
            );
        }
        if let Some(user) = &scope.user_id {
            self.push(
                "(e.user_id = ? OR e.user_id IS NULL)",
                Value::Text(user.clone()),
            );
        }
        if let Some(session) = &scope.session_id {
            self.push("e.session_id = ?", Value::Text(session.clone()));
        }
    }

    pub(super) fn kinds(&mut self, kinds: &[MemoryKind]) {
        if !kinds.is_empty() {
            self.any_of(
                "e.kind",
                kinds.iter().map(|k| Value::Text(k.as_str().into())),
            );
        }
    }

    pub(super) fn any_of(&mut self, column: &str, values: impl Iterator<Item = Value>) {
        let values: Vec<Value> = values.collect();
        self.clauses.push(format!(
            "{column} IN ({})",
            vec!["?"; values.len()].join(",")
        ));
        self.values.extend(values);
    }

    pub(super) fn clause(&self) -> String {
        if self.clauses.is_empty() {
            "1".into()
        } else {
            self.clauses.join(" AND ")
        }
    }
}

/// Mend the supersede chain around `purged`, just deleted: what it replaced is replaced by
/// its own successor when it had one (a middle link purged), else holds again (the current
/// one purged). Each entry changed, with its audit action and why.
fn heal_chain(
    conn: &rusqlite::Connection,
    purged: &str,
    successor: Option<&str>,
) -> rusqlite::Result<Vec<(String, &'static str, String)>> {
    let changed: Vec<String> = match successor {
        Some(next) => conn
            .prepare_cached(
                "UPDATE entries SET superseded_by = ?2 WHERE superseded_by = ?1 RETURNING id",
            )?
            .query_map(params![purged, next], |r| r.get(0))?
            .collect::<Result<_, _>>()?,
        None => conn
            .prepare_cached(
                "UPDATE entries SET superseded_by = NULL, valid_to = NULL
                  WHERE superseded_by = ?1 RETURNING id",
            )?
            .query_map(params![purged], |r| r.get(0))?
            .collect::<Result<_, _>>()?,
    };
    Ok(changed
        .into_iter()
        .map(|older| match successor {
            Some(next) => (older, "supersede", next.to_string()),
            None => (
                older,
                "reinstate",
                format!("{purged}, which superseded it, was purged"),
            ),
        })
        .collect())
}
