//! Entry rows on PostgreSQL: inserting with the duplicate and supersede rules, forgetting,
//! re-scoring, purging, the reads that inspect entries, the audit trail, and the scoped
//! `WHERE` clauses reads share.

use cairn_vocab::memory::{AuditRow, ListFilter, MemoryEntry, MemoryKind, MemoryStats, Scope};
use postgres::types::ToSql;
use postgres::{Client, GenericClient, Row, Transaction};
use serde::Serialize;

use super::PgMemory;
use crate::memory::{Insertion, content_hash};
use crate::pg::Param;
use crate::writer::Receipt;
use crate::{StorageError, now_ms};

/// The columns [`row_to_entry`] reads, with `e` the entries table.
pub(super) const ENTRY_COLUMNS: &str = "e.seq, e.id, e.kind, e.content, e.category, e.agent_id, \
    e.user_id, e.session_id, e.importance, e.tags, e.issue_refs, e.pr_refs, e.sources, \
    e.subject, e.predicate, e.valid_from, e.valid_to, e.recorded_at, e.superseded_by, \
    e.forgotten_at";

/// The columns [`row_to_audit`] reads.
pub(super) const AUDIT_COLUMNS: &str = "entry_id, action, actor, at, detail";

impl PgMemory {
    pub(super) fn insert_entry(
        &self,
        entry: MemoryEntry,
        supersedes: Option<String>,
        actor: &str,
    ) -> Receipt<Insertion> {
        let actor = actor.to_string();
        // A fact takes its subject's lock (see `insert`), so it commits on its own.
        let locks = entry.subject.is_some() && entry.predicate.is_some();
        let work =
            move |tx: &mut Transaction<'_>| insert(tx, &entry, supersedes.as_deref(), &actor);
        if locks {
            self.writes.submit_alone(work)
        } else {
            self.writes.submit(work)
        }
    }

    pub(super) fn forget_entry(&self, id: &str, actor: &str) -> Receipt<bool> {
        let (id, actor) = (id.to_string(), actor.to_string());
        self.writes.submit(move |tx| forget(tx, &id, &actor))
    }

    pub(super) fn rescore_entry(&self, id: &str, importance: u8, actor: &str) -> Receipt<bool> {
        let (id, actor) = (id.to_string(), actor.to_string());
        self.writes
            .submit(move |tx| rescore(tx, &id, importance, &actor))
    }

    pub(super) fn purge_entries(&self, ids: Vec<String>, actor: &str) -> Receipt<Vec<i64>> {
        let actor = actor.to_string();
        self.writes.submit(move |tx| {
            let targets: Vec<String> = if ids.is_empty() {
                tx.query(
                    "SELECT id FROM memory_entries WHERE forgotten_at IS NOT NULL",
                    &[],
                )?
            } else {
                tx.query("SELECT id FROM memory_entries WHERE id = ANY($1)", &[&ids])?
            }
            .iter()
            .map(|row| row.get(0))
            .collect();
            let now = now_ms();
            let mut purged = Vec::with_capacity(targets.len());
            for id in &targets {
                // One at a time: purging an earlier one may have changed this one's successor.
                let row = tx.query_one(
                    "DELETE FROM memory_entries WHERE id = $1 RETURNING seq, superseded_by",
                    &[id],
                )?;
                purged.push(row.get(0));
                let successor: Option<String> = row.get(1);
                audit(tx, id, "purge", &actor, now, None)?;
                for (older, action, why) in heal_chain(tx, id, successor.as_deref())? {
                    audit(tx, &older, action, &actor, now, Some(&why))?;
                }
            }
            purged.sort_unstable();
            Ok(purged)
        })
    }

    pub(super) fn get_entry(&self, id: &str) -> Result<Option<MemoryEntry>, StorageError> {
        let id = id.to_string();
        self.reads.read(move |client| {
            client
                .query_opt(
                    &format!("SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE e.id = $1"),
                    &[&id],
                )?
                .map(|row| row_to_entry(&row))
                .transpose()
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
            sql.push("e.category = $", category.clone());
        }
        if !filter.include_superseded {
            sql.clauses.push("e.valid_to IS NULL".into());
        }
        if !filter.include_forgotten {
            sql.clauses.push("e.forgotten_at IS NULL".into());
        }
        let query = format!(
            "SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE {} ORDER BY e.seq DESC LIMIT {}",
            sql.clause(),
            filter.limit.max(1)
        );
        self.reads.read(move |client| {
            client
                .query(&query, &sql.params())?
                .iter()
                .map(row_to_entry)
                .collect()
        })
    }

    pub(super) fn count_entries(&self, scope: &Scope) -> Result<u64, StorageError> {
        let mut sql = Filters::default();
        sql.scope(scope);
        sql.clauses
            .push("e.valid_to IS NULL AND e.forgotten_at IS NULL".into());
        let query = format!(
            "SELECT count(*) FROM memory_entries e WHERE {}",
            sql.clause()
        );
        self.reads.read(move |client| {
            let count: i64 = client.query_one(&query, &sql.params())?.get(0);
            Ok(count as u64)
        })
    }

    pub(super) fn entry_audit_trail(&self, id: &str) -> Result<Vec<AuditRow>, StorageError> {
        let id = id.to_string();
        self.reads.read(move |client| {
            Ok(client
                .query(
                    &format!(
                        "SELECT {AUDIT_COLUMNS} FROM memory_audit WHERE entry_id = $1 ORDER BY seq"
                    ),
                    &[&id],
                )?
                .iter()
                .map(row_to_audit)
                .collect())
        })
    }

    pub(super) fn same_subject(
        &self,
        entry: &MemoryEntry,
    ) -> Result<Vec<(i64, String, String)>, StorageError> {
        let entry = entry.clone();
        self.reads.read(move |client| {
            Ok(client
                .query(
                    "SELECT seq, id, content FROM memory_entries
                     WHERE subject = $1 AND kind = $2 AND valid_to IS NULL AND forgotten_at IS NULL
                       AND agent_id IS NOT DISTINCT FROM $3 AND user_id IS NOT DISTINCT FROM $4
                       AND predicate IS DISTINCT FROM $5
                     ORDER BY seq DESC LIMIT 50",
                    &[
                        &entry.subject,
                        &entry.kind.as_str(),
                        &entry.scope.agent_id,
                        &entry.scope.user_id,
                        &entry.predicate,
                    ],
                )?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
    }

    pub(super) fn entry_stats(
        &self,
        model: Option<(&str, &str)>,
    ) -> Result<MemoryStats, StorageError> {
        let model = model.map(|(p, m)| (p.to_string(), m.to_string()));
        self.reads.read(move |client| {
            let mut stats = read_stats(client)?;
            if let Some((provider, model)) = &model {
                let embedded: i64 = client
                    .query_one(
                        "SELECT count(*) FROM memory_embeddings WHERE provider = $1 AND model = $2",
                        &[provider, model],
                    )?
                    .get(0);
                stats.embedded = embedded as u64;
                stats.embedding_backlog = super::vectors::backlog(client, provider, model)?;
            }
            let bytes: i64 = client
                .query_one(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::BIGINT
                     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.relkind = 'r' AND c.relname LIKE 'memory\\_%'
                       AND n.nspname = current_schema()",
                    &[],
                )?
                .get(0);
            stats.database_bytes = bytes as u64;
            Ok(stats)
        })
    }
}

fn read_stats(client: &mut Client) -> Result<MemoryStats, StorageError> {
    let mut stats = MemoryStats::default();
    let mut count = |sql: &str| -> Result<u64, StorageError> {
        Ok(client.query_one(sql, &[])?.get::<_, i64>(0) as u64)
    };
    stats.superseded = count(
        "SELECT count(*) FROM memory_entries WHERE valid_to IS NOT NULL AND forgotten_at IS NULL",
    )?;
    stats.forgotten = count("SELECT count(*) FROM memory_entries WHERE forgotten_at IS NOT NULL")?;
    stats.embedding_cache = count("SELECT count(*) FROM memory_embedding_cache")?;
    for row in client.query(
        "SELECT kind, category, count(*) FROM memory_entries
         WHERE valid_to IS NULL AND forgotten_at IS NULL GROUP BY kind, category",
        &[],
    )? {
        let n = row.get::<_, i64>(2) as u64;
        *stats.live_by_kind.entry(row.get(0)).or_default() += n;
        *stats.live_by_category.entry(row.get(1)).or_default() += n;
    }
    for row in client.query(
        "SELECT state, count(*) FROM memory_sessions GROUP BY state",
        &[],
    )? {
        stats
            .sessions
            .insert(row.get(0), row.get::<_, i64>(1) as u64);
    }
    stats.hygiene_last_run = last_hygiene(client)?;
    Ok(stats)
}

/// When retention last ran.
pub(super) fn last_hygiene(client: &mut impl GenericClient) -> Result<Option<i64>, StorageError> {
    Ok(client
        .query_opt(
            "SELECT value FROM memory_maintenance WHERE key = 'hygiene_last_run'",
            &[],
        )?
        .and_then(|row| row.get::<_, String>(0).parse().ok()))
}

fn insert(
    tx: &mut Transaction<'_>,
    entry: &MemoryEntry,
    supersedes: Option<&str>,
    actor: &str,
) -> Result<Insertion, StorageError> {
    // Writers of one subject and predicate take turns, so two hosts storing facts about
    // the same thing at once cannot both leave theirs live.
    if let (Some(subject), Some(predicate)) = (&entry.subject, &entry.predicate) {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))",
            &[&format!("{subject}\u{1f}{predicate}")],
        )?;
    }
    let known = tx.query_opt("SELECT 1 FROM memory_entries WHERE id = $1", &[&entry.id])?;
    if known.is_some() {
        // Its caller chose the id (see `NewMemory::id`): this memory is stored already.
        return Ok(Insertion::Duplicate {
            existing: entry.id.clone(),
        });
    }
    if entry.kind != MemoryKind::Episode
        && let Some(existing) = live_duplicate(tx, entry)?
    {
        return Ok(Insertion::Duplicate { existing });
    }
    let mut replaced: Vec<String> = Vec::new();
    if let Some(target) = supersedes {
        if let Some(refusal) = supersede_refusal(tx, target)? {
            return Ok(Insertion::Refused(refusal));
        }
        replaced.push(target.to_string());
    }
    let live = same_predicate_facts(tx, entry)?;
    if supersedes.is_none()
        && let Some((newer, since)) = crate::memory::newer_than(&live, entry.valid_from)
    {
        // Said before the current fact about the same thing (history replayed out of
        // order): it is that fact's past, stored replaced by it, which stays current.
        let mut past = entry.clone();
        (past.valid_to, past.superseded_by) = (Some(since), Some(newer.clone()));
        insert_row(tx, &past, false)?;
        audit(
            tx,
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
    insert_row(tx, entry, false)?;
    for old in &replaced {
        tx.execute(
            "UPDATE memory_entries SET valid_to = greatest(valid_from, $2), superseded_by = $3
             WHERE id = $1",
            &[old, &entry.valid_from, &entry.id],
        )?;
        audit(
            tx,
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

/// A live entry with the same content, kind, scope, subject and predicate.
fn live_duplicate(
    tx: &mut Transaction<'_>,
    entry: &MemoryEntry,
) -> Result<Option<String>, StorageError> {
    Ok(tx
        .query_opt(
            "SELECT id FROM memory_entries WHERE content_hash = $1 AND kind = $2
               AND valid_to IS NULL AND forgotten_at IS NULL
               AND agent_id IS NOT DISTINCT FROM $3 AND user_id IS NOT DISTINCT FROM $4
               AND session_id IS NOT DISTINCT FROM $5 AND subject IS NOT DISTINCT FROM $6
               AND predicate IS NOT DISTINCT FROM $7
             LIMIT 1",
            &[
                &content_hash(&entry.content),
                &entry.kind.as_str(),
                &entry.scope.agent_id,
                &entry.scope.user_id,
                &entry.scope.session_id,
                &entry.subject,
                &entry.predicate,
            ],
        )?
        .map(|row| row.get(0)))
}

/// Why `target` may not be superseded (missing, forgotten or already superseded), if so.
/// The target's row stays locked until the insert commits.
fn supersede_refusal(
    tx: &mut Transaction<'_>,
    target: &str,
) -> Result<Option<String>, StorageError> {
    let live = tx.query_opt(
        "SELECT valid_to FROM memory_entries WHERE id = $1 AND forgotten_at IS NULL FOR UPDATE",
        &[&target],
    )?;
    Ok(match live.map(|row| row.get::<_, Option<i64>>(0)) {
        None => Some(format!("supersedes: no memory `{target}` to supersede")),
        Some(Some(_)) => Some(format!("supersedes: `{target}` was already superseded")),
        Some(None) => None,
    })
}

/// The live facts a fact with a subject and predicate replaces (same agent and user).
fn same_predicate_facts(
    tx: &mut Transaction<'_>,
    entry: &MemoryEntry,
) -> Result<Vec<(String, i64)>, StorageError> {
    let (MemoryKind::Fact, Some(subject), Some(predicate)) =
        (entry.kind, &entry.subject, &entry.predicate)
    else {
        return Ok(Vec::new());
    };
    Ok(tx
        .query(
            "SELECT id, valid_from FROM memory_entries WHERE kind = 'fact' AND subject = $1 AND predicate = $2
               AND valid_to IS NULL AND forgotten_at IS NULL
               AND agent_id IS NOT DISTINCT FROM $3 AND user_id IS NOT DISTINCT FROM $4
             ORDER BY seq",
            &[
                subject,
                predicate,
                &entry.scope.agent_id,
                &entry.scope.user_id,
            ],
        )?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// Insert a full record; with `ignore_existing`, an existing id is left alone (returns 0).
pub(super) fn insert_row(
    tx: &mut Transaction<'_>,
    entry: &MemoryEntry,
    ignore_existing: bool,
) -> Result<u64, StorageError> {
    let sql = format!(
        "INSERT INTO memory_entries (id, kind, content, content_hash, category, agent_id, user_id,
             session_id, importance, tags, issue_refs, pr_refs, sources, subject, predicate,
             valid_from, valid_to, recorded_at, superseded_by, forgotten_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                 $19, $20) {}",
        if ignore_existing {
            "ON CONFLICT (id) DO NOTHING"
        } else {
            ""
        }
    );
    Ok(tx.execute(
        &sql,
        &[
            &entry.id,
            &entry.kind.as_str(),
            &entry.content,
            &content_hash(&entry.content),
            &entry.category,
            &entry.scope.agent_id,
            &entry.scope.user_id,
            &entry.scope.session_id,
            &i16::from(entry.importance),
            &to_json(&entry.tags),
            &to_json(&entry.issue_refs),
            &to_json(&entry.pr_refs),
            &to_json(&entry.sources),
            &entry.subject,
            &entry.predicate,
            &entry.valid_from,
            &entry.valid_to,
            &entry.recorded_at,
            &entry.superseded_by,
            &entry.forgotten_at,
        ],
    )?)
}

/// A list column as JSON text.
fn to_json<T: Serialize>(values: &[T]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".into())
}

/// Soft-delete a live entry with an audit row; whether there was one.
pub(super) fn forget(
    tx: &mut Transaction<'_>,
    id: &str,
    actor: &str,
) -> Result<bool, StorageError> {
    let now = now_ms();
    let changed = tx.execute(
        "UPDATE memory_entries SET forgotten_at = $2 WHERE id = $1 AND forgotten_at IS NULL",
        &[&id, &now],
    )?;
    if changed > 0 {
        audit(tx, id, "forget", actor, now, None)?;
    }
    Ok(changed > 0)
}

/// Set a live entry's importance with an audit row (`old -> new`); whether there was one.
fn rescore(
    tx: &mut Transaction<'_>,
    id: &str,
    importance: u8,
    actor: &str,
) -> Result<bool, StorageError> {
    let old = tx.query_opt(
        "SELECT importance FROM memory_entries WHERE id = $1 AND forgotten_at IS NULL FOR UPDATE",
        &[&id],
    )?;
    let Some(old) = old.map(|row| row.get::<_, i16>(0)) else {
        return Ok(false);
    };
    if old != i16::from(importance) {
        tx.execute(
            "UPDATE memory_entries SET importance = $2 WHERE id = $1",
            &[&id, &i16::from(importance)],
        )?;
        let detail = format!("{old} -> {importance}");
        audit(tx, id, "rescore", actor, now_ms(), Some(&detail))?;
    }
    Ok(true)
}

/// Add a row to an entry's audit trail.
pub(super) fn audit(
    tx: &mut Transaction<'_>,
    id: &str,
    action: &str,
    actor: &str,
    at: i64,
    detail: Option<&str>,
) -> Result<(), StorageError> {
    tx.execute(
        "INSERT INTO memory_audit (entry_id, action, actor, at, detail) VALUES ($1, $2, $3, $4, $5)",
        &[&id, &action, &actor, &at, &detail],
    )?;
    Ok(())
}

/// An audit row as read with [`AUDIT_COLUMNS`].
pub(super) fn row_to_audit(row: &Row) -> AuditRow {
    AuditRow {
        entry_id: row.get(0),
        action: row.get(1),
        actor: row.get(2),
        at: row.get(3),
        detail: row.get(4),
    }
}

/// A JSON list column, or an error naming the column.
fn json_list<T: serde::de::DeserializeOwned>(
    row: &Row,
    index: usize,
) -> Result<Vec<T>, StorageError> {
    let text: String = row.try_get(index)?;
    serde_json::from_str(&text).map_err(|e| {
        StorageError::Postgres(format!(
            "memory_entries.{}: not a JSON list: {e}",
            row.columns()[index].name()
        ))
    })
}

/// An entry as read with [`ENTRY_COLUMNS`].
pub(super) fn row_to_entry(row: &Row) -> Result<MemoryEntry, StorageError> {
    let kind: String = row.try_get(2)?;
    let kind = MemoryKind::parse(&kind)
        .ok_or_else(|| StorageError::Postgres(format!("unknown memory kind `{kind}`")))?;
    let importance: i16 = row.try_get(8)?;
    Ok(MemoryEntry {
        id: row.try_get(1)?,
        kind,
        content: row.try_get(3)?,
        category: row.try_get(4)?,
        scope: Scope {
            agent_id: row.try_get(5)?,
            user_id: row.try_get(6)?,
            session_id: row.try_get(7)?,
        },
        importance: u8::try_from(importance).unwrap_or(1),
        tags: json_list(row, 9)?,
        issue_refs: json_list(row, 10)?,
        pr_refs: json_list(row, 11)?,
        sources: json_list(row, 12)?,
        subject: row.try_get(13)?,
        predicate: row.try_get(14)?,
        valid_from: row.try_get(15)?,
        valid_to: row.try_get(16)?,
        recorded_at: row.try_get(17)?,
        superseded_by: row.try_get(18)?,
        forgotten_at: row.try_get(19)?,
    })
}

/// SQL `WHERE` clauses with their parameters, built from a query's filters. A clause's `$`
/// is numbered as it is pushed, after the statement's own leading parameters.
#[derive(Default)]
pub(super) struct Filters {
    pub(super) clauses: Vec<String>,
    values: Vec<Param>,
    leading: usize,
}

impl Filters {
    /// Filters of a statement whose first `leading` parameters are its own.
    pub(super) fn after(leading: usize) -> Self {
        Self {
            leading,
            ..Self::default()
        }
    }

    /// Add `clause`, its one `$` standing for `value`.
    pub(super) fn push(&mut self, clause: &str, value: impl ToSql + Sync + Send + 'static) {
        self.values.push(Box::new(value));
        let placeholder = format!("${}", self.leading + self.values.len());
        self.clauses.push(clause.replacen('$', &placeholder, 1));
    }

    /// Scope rules: a set agent or user admits its own entries and those shared at that
    /// level (NULL); a set session admits only that session.
    pub(super) fn scope(&mut self, scope: &Scope) {
        if let Some(agent) = &scope.agent_id {
            self.push("(e.agent_id = $ OR e.agent_id IS NULL)", agent.clone());
        }
        if let Some(user) = &scope.user_id {
            self.push("(e.user_id = $ OR e.user_id IS NULL)", user.clone());
        }
        if let Some(session) = &scope.session_id {
            self.push("e.session_id = $", session.clone());
        }
    }

    /// Entries of one of `kinds` (any kind when empty).
    pub(super) fn kinds(&mut self, kinds: &[MemoryKind]) {
        if !kinds.is_empty() {
            let names: Vec<String> = kinds.iter().map(|k| k.as_str().to_string()).collect();
            self.push("e.kind = ANY($)", names);
        }
    }

    /// The clauses joined by `AND` (`TRUE` for none).
    pub(super) fn clause(&self) -> String {
        if self.clauses.is_empty() {
            "TRUE".into()
        } else {
            self.clauses.join(" AND ")
        }
    }

    /// The statement's `leading` parameters followed by the filters', as the client takes
    /// them.
    pub(super) fn params_after<'a>(
        &'a self,
        leading: &[&'a (dyn ToSql + Sync)],
    ) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params = leading.to_vec();
        params.extend(
            self.values
                .iter()
                .map(|value| value.as_ref() as &(dyn ToSql + Sync)),
        );
        params
    }

    /// The filters' parameters, for a statement with none of its own.
    pub(super) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params_after(&[])
    }
}

/// Mend the supersede chain around `purged`, just deleted: what it replaced is replaced by
/// its own successor when it had one (a middle link purged), else holds again (the current
/// one purged). Each entry changed, with its audit action and why.
fn heal_chain(
    tx: &mut Transaction<'_>,
    purged: &str,
    successor: Option<&str>,
) -> Result<Vec<(String, &'static str, String)>, StorageError> {
    let changed = match successor {
        Some(next) => tx.query(
            "UPDATE memory_entries SET superseded_by = $2 WHERE superseded_by = $1 RETURNING id",
            &[&purged, &next],
        )?,
        None => tx.query(
            "UPDATE memory_entries SET superseded_by = NULL, valid_to = NULL
              WHERE superseded_by = $1 RETURNING id",
            &[&purged],
        )?,
    };
    Ok(changed
        .iter()
        .map(|row| {
            let older: String = row.get(0);
            match successor {
                Some(next) => (older, "supersede", next.to_string()),
                None => (
                    older,
                    "reinstate",
                    format!("{purged}, which superseded it, was purged"),
                ),
            }
        })
        .collect())
}
