//! The rows of memory.db: inserting an entry with its supersedes and duplicate checks,
//! audit rows, row mapping, and the scoped WHERE clauses every read shares.

use super::*;

/// Insert a prepared entry in the writer's transaction: an exact duplicate of a live
/// non-episode stores nothing; an explicit `supersedes` target must be live; a fact with
/// the subject and predicate of live facts supersedes them (with an audit row each).
pub(super) fn insert(
    conn: &Connection,
    prepared: &Prepared,
    actor: &str,
) -> rusqlite::Result<Result<StoreOutcome, MemoryError>> {
    let entry = &prepared.entry;
    if entry.kind != MemoryKind::Episode
        && let Some(existing) = live_duplicate(conn, entry)?
    {
        return Ok(Ok(StoreOutcome::Duplicate {
            existing,
            similarity: 1.0,
        }));
    }
    let mut replaced: Vec<String> = Vec::new();
    if let Some(target) = &prepared.supersedes {
        match check_supersede_target(conn, target)? {
            Ok(()) => replaced.push(target.clone()),
            Err(refused) => return Ok(Err(refused)),
        }
    }
    for id in same_predicate_facts(conn, entry)? {
        if !replaced.contains(&id) {
            replaced.push(id);
        }
    }
    insert_row(conn, entry, false)?;
    for old in &replaced {
        conn.execute(
            "UPDATE entries SET valid_to = max(valid_from, ?2), superseded_by = ?3 WHERE id = ?1",
            params![old, entry.valid_from, entry.id],
        )?;
        audit(
            conn,
            old,
            "supersede",
            actor,
            entry.recorded_at,
            Some(&entry.id),
        )?;
    }
    Ok(Ok(StoreOutcome::Stored {
        id: entry.id.clone(),
        superseded: replaced,
    }))
}

/// A live entry with the same content, kind, scope, subject and predicate.
fn live_duplicate(conn: &Connection, entry: &MemoryEntry) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT id FROM entries WHERE content_hash = ?1 AND kind = ?2 AND valid_to IS NULL
           AND forgotten_at IS NULL AND agent_id IS ?3 AND user_id IS ?4 AND session_id IS ?5
           AND subject IS ?6 AND predicate IS ?7",
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

/// Whether `target` may be superseded: it exists, is not forgotten and is still live.
fn check_supersede_target(
    conn: &Connection,
    target: &str,
) -> rusqlite::Result<Result<(), MemoryError>> {
    let live: Option<Option<i64>> = conn
        .query_row(
            "SELECT valid_to FROM entries WHERE id = ?1 AND forgotten_at IS NULL",
            params![target],
            |r| r.get(0),
        )
        .optional()?;
    Ok(match live {
        None => Err(MemoryError::InvalidInput(format!(
            "supersedes: no memory `{target}` to supersede"
        ))),
        Some(Some(_)) => Err(MemoryError::InvalidInput(format!(
            "supersedes: `{target}` was already superseded"
        ))),
        Some(None) => Ok(()),
    })
}

/// The live facts a fact with a subject and predicate replaces (same agent and user).
fn same_predicate_facts(conn: &Connection, entry: &MemoryEntry) -> rusqlite::Result<Vec<String>> {
    let (MemoryKind::Fact, Some(subject), Some(predicate)) =
        (entry.kind, &entry.subject, &entry.predicate)
    else {
        return Ok(Vec::new());
    };
    let mut statement = conn.prepare(
        "SELECT id FROM entries WHERE kind = 'fact' AND subject = ?1 AND predicate = ?2
           AND valid_to IS NULL AND forgotten_at IS NULL AND agent_id IS ?3 AND user_id IS ?4",
    )?;
    statement
        .query_map(
            params![
                subject,
                predicate,
                entry.scope.agent_id,
                entry.scope.user_id
            ],
            |r| r.get(0),
        )?
        .collect()
}

/// Insert a full record; with `ignore_existing`, an existing id is left alone (returns 0).
pub(super) fn insert_row(
    conn: &Connection,
    entry: &MemoryEntry,
    ignore_existing: bool,
) -> rusqlite::Result<usize> {
    conn.execute(
        &format!(
            "INSERT {} INTO entries (id, kind, content, content_hash, category, agent_id, user_id, session_id,
                 importance, tags, issue_refs, pr_refs, sources, subject, predicate, valid_from, valid_to,
                 recorded_at, superseded_by, forgotten_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            if ignore_existing { "OR IGNORE" } else { "" }
        ),
        params![
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
        ],
    )
}

/// A list column as JSON text.
pub(super) fn to_json<T: Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".into())
}

pub(super) fn forget(conn: &Connection, id: &str, actor: &str) -> rusqlite::Result<bool> {
    let now = now_ms();
    let changed = conn.execute(
        "UPDATE entries SET forgotten_at = ?2 WHERE id = ?1 AND forgotten_at IS NULL",
        params![id, now],
    )?;
    if changed > 0 {
        audit(conn, id, "forget", actor, now, None)?;
    }
    Ok(changed > 0)
}

pub(super) fn audit(
    conn: &Connection,
    id: &str,
    action: &str,
    actor: &str,
    at: i64,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO audit (entry_id, action, actor, at, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![id, action, actor, at, detail],
    )?;
    Ok(())
}

pub(super) const AUDIT_COLUMNS: &str = "entry_id, action, actor, at, detail";

pub(super) fn row_to_audit(row: &Row<'_>) -> rusqlite::Result<AuditRow> {
    Ok(AuditRow {
        entry_id: row.get(0)?,
        action: row.get(1)?,
        actor: row.get(2)?,
        at: row.get(3)?,
        detail: row.get(4)?,
    })
}

pub(super) fn json_list<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    index: usize,
) -> rusqlite::Result<Vec<T>> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e))
    })
}

pub(super) fn row_to_entry(row: &Row<'_>) -> rusqlite::Result<MemoryEntry> {
    let kind: String = row.get(2)?;
    Ok(MemoryEntry {
        id: row.get(1)?,
        kind: MemoryKind::parse(&kind).unwrap_or(MemoryKind::Episode),
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
